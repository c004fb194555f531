//! The generic decoder graph: embeddings -> layers (pre-norm attention and MLP with residuals)
//! -> final norm -> LM head, built from a `ModelSpec` with the differentiable ops, so the same
//! code gives logits, the loss, and (through the tape) every parameter's gradient.

use std::cell::RefCell;
use std::collections::HashMap;
use std::rc::Rc;

use vkformers_tensor::ops::checkpoint::checkpoint;
use vkformers_tensor::ops::{activation, broadcast, cast, embedding, glu, loss, matmul, norm, shape};
use vkformers_tensor::{DType, Graph, Tensor};

use crate::error::{ModelError, Result};
use crate::spec::{layer_name, LayerSpec, MlpSpec, ModelSpec, Norm, PositionIds, Residual};

mod grouped;
mod half_norm;
mod left_aligned;
mod longcat;
mod mla;
mod moa;
mod normed_gemv;
mod packed_rope;
mod self_attention;

use self_attention::{attend, attn_options, self_attention};

pub use longcat::ShortcutMoe;

/// Parameters by Hugging Face name (`model.layers.0.self_attn.q_proj.weight`).
#[derive(Default)]
pub struct Weights {
    map: HashMap<String, Tensor>,
    /// LoRA terms added to projections (empty without an adapter).
    lora: crate::lora::Terms,
    /// q/k/v and gate/up packed into one weight per layer (inference loads; `crate::packed`).
    packs: crate::packed::Packs,
}

impl Weights {
    pub fn insert(&mut self, name: String, t: Tensor) {
        self.map.insert(name, t);
    }

    /// The parameter `name`, or an error naming it.
    pub fn get(&self, name: &str) -> Result<&Tensor> {
        self.map.get(name).ok_or_else(|| ModelError::Weights(format!("missing tensor `{name}`")))
    }

    /// The parameter `name` if present (optional biases and norms).
    pub fn opt(&self, name: &str) -> Option<&Tensor> {
        self.map.get(name)
    }

    /// All parameters, sorted by name.
    pub fn iter(&self) -> impl Iterator<Item = (&String, &Tensor)> {
        let mut v: Vec<_> = self.map.iter().collect();
        v.sort_by(|a, b| a.0.cmp(b.0));
        v.into_iter()
    }

    pub fn len(&self) -> usize {
        self.map.len()
    }

    pub fn is_empty(&self) -> bool {
        self.map.is_empty()
    }

    /// The LoRA terms of an attached adapter.
    pub fn lora(&self) -> &crate::lora::Terms {
        &self.lora
    }

    /// The packed q/k/v and gate/up weights the loader made (see `crate::packed`).
    pub fn set_packs(&mut self, packs: crate::packed::Packs) {
        self.packs = packs;
    }

    /// The packed weights.
    pub fn packs(&self) -> &crate::packed::Packs {
        &self.packs
    }

    /// Runs q/k/v and gate/up as one packed product each where packed (`on`, the default), or
    /// as separate products (the same weights: an A/B on one load).
    pub fn set_packed_products(&mut self, on: bool) {
        self.packs.on = on;
    }

    /// Adds LoRA terms to the projections they name (see `lora::attach`).
    pub fn set_lora(&mut self, terms: crate::lora::Terms) {
        self.lora = terms;
    }
}

/// One batch of token ids `[B, T]` with its attention mask (1 real, 0 padding).
pub struct Batch<'a> {
    pub ids: &'a [i32],
    pub mask: &'a [i32],
    pub batch: usize,
    pub seq: usize,
}

/// The key padding mask `mask [B·T]` as a device tensor `[B, T]`, or None when it keeps every
/// key: the attention kernels then take their plain-tile path (one matrix scale for a wholly
/// visible tile instead of a mask read and test per element). Decoders, encoders and
/// encoder-decoders all build their attention's mask here.
pub(crate) fn key_mask(g: &Graph<'_>, mask: &[i32], (b, t): (usize, usize)) -> Result<Option<Tensor>> {
    if mask.iter().all(|&m| m != 0) {
        return Ok(None);
    }
    Ok(Some(g.ints(mask, &[b, t])?))
}

/// Per-call device inputs shared by all layers.
struct Inputs<'c> {
    ids: Tensor,
    /// The key padding mask `[B, T]`, or None when no key is padded: the attention kernels then
    /// take their plain-tile path (one matrix scale for a wholly visible tile instead of a mask
    /// read and test per element: 3x faster on the H200's cooperative-matrix kernels).
    kmask: Option<Tensor>,
    pos: Tensor,
    /// The same position ids on the host `[B·T]` (position-dependent query scales).
    host_pos: Vec<i32>,
    /// Each token's column in its row, padding included `[B·T]`: transformers' Llama 4
    /// temperature counts these (`arange(T) + past_seen_tokens`), not the position ids.
    host_cols: Vec<i32>,
    /// Without a cache: the padding mask `[B·T]` on the host (chunked attention over left
    /// padding); empty with a cache, which counts each row's positions itself.
    host_mask: Vec<i32>,
    /// The largest position id plus one (LongRoPE picks its factors by it, as transformers).
    seq_len: usize,
    /// With a cache: the new columns' mask `[B·T]`; new keys and values join the cache and
    /// attention reads it.
    cache: Option<(&'c KvCache, &'c [i32])>,
    /// RoPE frequency tables uploaded by this forward, by content: every layer with the same
    /// `inv_freq` (all of them in most models; two tables with sliding/global layers) reads one
    /// upload instead of one per layer (30 a token for SmolLM2).
    freqs: RefCell<Vec<(Vec<f32>, Tensor)>>,
    /// Other constants uploaded once per forward and shared by the layers, by a key naming their
    /// contents (multi-head latent attention's column-move matrices).
    consts: RefCell<HashMap<String, Tensor>>,
    /// MoE layers' router outputs, collected when the load-balancing loss is wanted.
    router: Option<RefCell<Vec<crate::moe::RouterOut>>>,
    /// A decode step's q/k/v products computed with the attention norm (`normed_gemv`), until
    /// the attention takes them.
    prepared: RefCell<Option<normed_gemv::Prepared>>,
}

impl Inputs<'_> {
    /// The device copy of `inv_freq [rotary_dim / 2]`, uploaded on first use in this forward (or
    /// by the first forward through the KV cache).
    fn freq(&self, g: &Graph<'_>, inv_freq: &[f32]) -> Result<Tensor> {
        if let Some((cache, _)) = self.cache {
            // Kept on the device by the cache: no upload in a decode step.
            return cache.constant(g, inv_freq);
        }
        let mut freqs = self.freqs.borrow_mut();
        if let Some((_, t)) = freqs.iter().find(|(f, _)| f.as_slice() == inv_freq) {
            return Ok(t.clone());
        }
        let t = g.constant(inv_freq, &[inv_freq.len()])?;
        freqs.push((inv_freq.to_vec(), t.clone()));
        Ok(t)
    }
}

impl Inputs<'_> {
    /// The constant `key` names, `make()` of `shape` uploaded on its first use in this forward.
    fn constant(&self, g: &Graph<'_>, key: String, shape: &[usize], make: impl FnOnce() -> Vec<f32>) -> Result<Tensor> {
        if let Some(t) = self.consts.borrow().get(&key) {
            return Ok(t.clone());
        }
        let t = g.constant(&make(), shape)?;
        self.consts.borrow_mut().insert(key, t.clone());
        Ok(t)
    }
}

pub use crate::kv_cache::{KvCache, BLOCK_SIZE};

/// The uncached inputs of a batch and its host position ids; `collect_router` keeps each MoE
/// layer's router outputs for the load-balancing loss.
fn batch_inputs<'c>(
    g: &Graph<'_>,
    spec: &ModelSpec,
    batch: &Batch<'_>,
    collect_router: bool,
) -> Result<(Inputs<'c>, Vec<i32>)> {
    let (b, t) = (batch.batch, batch.seq);
    let pos = positions(spec, batch);
    let inputs = Inputs {
        ids: g.ints(batch.ids, &[b, t])?,
        kmask: key_mask(g, batch.mask, (b, t))?,
        pos: g.ints(&pos, &[b, t])?,
        host_pos: pos.clone(),
        host_cols: (0..b * t).map(|i| (i % t) as i32).collect(),
        host_mask: batch.mask.to_vec(),
        seq_len: seq_len(&pos),
        cache: None,
        freqs: RefCell::default(),
        consts: RefCell::default(),
        router: collect_router.then(RefCell::default),
        prepared: RefCell::default(),
    };
    Ok((inputs, pos))
}

/// Logits `[B·T, V]` of a batch.
pub fn forward(g: &Graph<'_>, spec: &ModelSpec, w: &Weights, batch: &Batch<'_>) -> Result<Tensor> {
    let (inputs, pos) = batch_inputs(g, spec, batch, false)?;
    let x = trunk(g, spec, w, &inputs, &pos, (batch.batch, batch.seq), Head::All)?;
    head_logits(g, spec, w, &x)
}

/// Logits `[B·T, V]` of a batch and, when the config asks for router logits
/// (`output_router_logits`), the MoE load-balancing loss `[1]` (unscaled; transformers adds
/// `router_aux_loss_coef` times it to the loss, see `moe::aux_loss_coef`).
pub fn forward_with_aux(
    g: &Graph<'_>,
    spec: &ModelSpec,
    w: &Weights,
    batch: &Batch<'_>,
) -> Result<(Tensor, Option<Tensor>)> {
    let (x, aux) = hidden_with_aux(g, spec, w, batch)?;
    Ok((head_logits(g, spec, w, &x)?, aux))
}

/// The final hidden states `[B·T, H]` of a batch (after the final norm and any output
/// projection: what the LM head multiplies) and the MoE load-balancing loss as
/// [`forward_with_aux`] gives it. The training loss runs the head on these in chunks.
pub(crate) fn hidden_with_aux(
    g: &Graph<'_>,
    spec: &ModelSpec,
    w: &Weights,
    batch: &Batch<'_>,
) -> Result<(Tensor, Option<Tensor>)> {
    let aux = crate::moe::aux_loss_coef(spec).is_some();
    if aux && g.checkpointing() && g.grad_enabled() {
        return Err(ModelError::Unsupported(
            "gradient checkpointing with the MoE load-balancing loss (output_router_logits)".into(),
        ));
    }
    let (inputs, pos) = batch_inputs(g, spec, batch, aux)?;
    let x = trunk(g, spec, w, &inputs, &pos, (batch.batch, batch.seq), Head::All)?;
    if !aux {
        return Ok((x, None));
    }
    let layers = inputs.router.map(RefCell::into_inner).unwrap_or_default();
    Ok((x, Some(crate::moe::aux_loss(g, &layers, batch.mask)?)))
}

/// Which positions the LM head runs on.
#[derive(Clone, Copy, PartialEq)]
enum Head {
    /// Every position `[B·T, V]` (training, eval, uncached references).
    All,
    /// Each row's last column only `[B, V]`: generation reads nothing else, and a prefill of T
    /// columns would otherwise pay T × V × hidden for the head (64 × 49152 × 576 ≈ 2 s on
    /// lavapipe for SmolLM2-135M).
    Last,
}

fn seq_len(pos: &[i32]) -> usize {
    pos.iter().copied().max().map_or(0, |p| p.max(0) as usize + 1)
}

/// Logits `[B·T, V]` of `T` new columns of a batch appended after the cache's positions (left
/// padding: `batch.mask` 0 on padding): only the new tokens run through the layers; their keys and
/// values join the cache. Position ids continue each row's count of real tokens.
pub fn forward_cached(
    g: &Graph<'_>,
    spec: &ModelSpec,
    w: &Weights,
    batch: &Batch<'_>,
    cache: &KvCache,
) -> Result<Tensor> {
    cached(g, spec, w, batch, cache, Head::All, None)
}

/// As [`forward_cached`], with logits `[B, V]` of each row's last column only (what generation
/// chooses from): the head, final norm and softcap run on B rows instead of B·T.
pub fn forward_cached_last(
    g: &Graph<'_>,
    spec: &ModelSpec,
    w: &Weights,
    batch: &Batch<'_>,
    cache: &KvCache,
) -> Result<Tensor> {
    cached(g, spec, w, batch, cache, Head::Last, None)
}

/// The first position id a decoder's learned position table cannot embed (its rows past the
/// offset), or None without one: a replayed decode step skips the host's check of its
/// positions, so replays stop before it.
pub fn position_limit(spec: &ModelSpec, w: &Weights) -> Option<usize> {
    let wpe = spec.position_embedding.as_ref()?;
    let rows = w.get(&format!("{wpe}.weight")).map_or(0, |t| t.shape()[0]);
    Some(rows.saturating_sub(spec.position_offset))
}

/// As [`forward_cached_last`], with the new tokens' ids read from the device tensor `ids [B, T]`
/// (a previous step's chosen ids) instead of `batch.ids`, whose values are then not read (its
/// length and `batch.mask` still describe the batch): the host need not wait for a step's
/// tokens before recording the next.
pub fn forward_cached_last_ids(
    g: &Graph<'_>,
    spec: &ModelSpec,
    w: &Weights,
    batch: &Batch<'_>,
    ids: &Tensor,
    cache: &KvCache,
) -> Result<Tensor> {
    if ids.numel() != batch.batch * batch.seq {
        return Err(ModelError::Config(format!(
            "device ids {:?} for a batch of {}x{}",
            ids.shape(),
            batch.batch,
            batch.seq
        )));
    }
    cached(g, spec, w, batch, cache, Head::Last, Some(ids))
}

fn cached(
    g: &Graph<'_>,
    spec: &ModelSpec,
    w: &Weights,
    batch: &Batch<'_>,
    cache: &KvCache,
    head: Head,
    device_ids: Option<&Tensor>,
) -> Result<Tensor> {
    let (b, t) = (batch.batch, batch.seq);
    if b != cache.batch() || batch.ids.len() != b * t || batch.mask.len() != b * t {
        return Err(ModelError::Config(format!(
            "a batch of {b}x{t} ({} ids, {} mask entries) does not fit a KV cache of {} sequences",
            batch.ids.len(),
            batch.mask.len(),
            cache.batch()
        )));
    }
    cache.begin(g, batch.mask, t)?;
    let pos = cache.positions(batch.mask, t);
    let ids = match device_ids {
        Some(ids) => shape::reshape(g, ids, &[b, t])?,
        None => g.ints(batch.ids, &[b, t])?,
    };
    let inputs = Inputs {
        ids,
        kmask: key_mask(g, batch.mask, (b, t))?,
        // Uploaded with the cache's tables: one upload fewer a step.
        pos: cache.step_positions(g, (b, t))?,
        host_pos: pos.clone(),
        host_cols: cache.columns(t),
        host_mask: Vec::new(),
        seq_len: seq_len(&pos),
        cache: Some((cache, batch.mask)),
        freqs: RefCell::default(),
        consts: RefCell::default(),
        router: None,
        prepared: RefCell::default(),
    };
    // Without a tape (generation), in `Graph::inference`: an activation read by several products
    // (q, k and v; gate and up) is cast to the autocast type once, not once per product; the
    // copies go when the step's forward is recorded.
    let run = || head_logits(g, spec, w, &trunk(g, spec, w, &inputs, &pos, (b, t), head)?);
    let logits = if g.grad_enabled() { run()? } else { g.inference(run)? };
    cache.record_advance(g, batch.mask, t)?;
    cache.commit(batch.mask, t);
    Ok(logits)
}

/// Everything before the LM head: hidden states `[rows, H]` (rows = B·T, or B for `Last`).
fn trunk(
    g: &Graph<'_>,
    spec: &ModelSpec,
    w: &Weights,
    inputs: &Inputs<'_>,
    pos: &[i32],
    (b, t): (usize, usize),
    head_rows: Head,
) -> Result<Tensor> {
    if spec.encoder.is_some() {
        return Err(ModelError::Unsupported(format!(
            "`{}` is an encoder: it runs through `encoder::forward`",
            spec.model_type
        )));
    }
    let embed = w.get(&format!("{}.weight", spec.embed_name))?;
    let embed_dim = embed.shape().get(1).copied().unwrap_or(spec.hidden);
    // `padding_idx`: that row of the table gets no gradient from the lookup, as in transformers.
    let tokens = embedding::embedding_padded(g, embed, &inputs.ids, spec.padding_idx)?;
    let mut x = shape::reshape(g, &tokens, &[b * t, embed_dim])?;
    if spec.embed_scale != 1.0 {
        x = broadcast::scale(g, &x, spec.embed_scale)?;
    }
    if let Some(name) = &spec.project_in {
        x = matmul::linear(g, &x, w.get(&format!("{name}.weight"))?, None)?;
    }
    if let Some(wpe) = &spec.position_embedding {
        let table = w.get(&format!("{wpe}.weight"))?;
        let off = spec.position_offset as i32;
        let idx: Vec<i32> = pos.iter().map(|p| p + off).collect();
        if let Some(bad) = idx.iter().find(|&&p| p < 0 || p as usize >= table.shape()[0]) {
            return Err(ModelError::Weights(format!("position {bad} outside `{wpe}` {:?}", table.shape())));
        }
        // Without an offset the rows are the position ids already on the device (a replayed
        // decode step advances those itself; an upload of its own would be a host input).
        let idx = if off == 0 { inputs.pos.clone() } else { g.ints(&idx, &[b, t])? };
        let p = shape::reshape(g, &embedding::embedding(g, table, &idx)?, &[b * t, spec.hidden])?;
        x = broadcast::add(g, &x, &p)?;
    }
    if let Some(table) = &spec.sinusoidal {
        g.refuse_capture("sinusoidal position rows are made on the host");
        // Fixed rows (no gradient), computed on the host for the batch's positions.
        let p = g.constant(&table.rows(pos, spec.hidden), &[b * t, spec.hidden])?;
        x = broadcast::add(g, &x, &p)?;
    }
    if let Some(n) = &spec.embed_norm {
        x = apply_norm(g, n, w, &spec.embed_norm_name, &x)?;
    }
    // With checkpointing, each layer keeps only its input; backward recomputes it.
    let owned =
        (g.checkpointing() && g.grad_enabled() && inputs.cache.is_none()).then(|| owned_for_layers(spec, w, inputs));
    // The MLP output of the layer before, not yet added to x: the next layer adds it in its
    // fused add + RMSNorm (one dispatch and one barrier fewer per layer), or it is added after
    // the last layer.
    let mut carry: Option<Tensor> = None;
    // LongCat-Flash's sublayer pairs share a shortcut MoE: their own loop.
    if let Some(sc) = &spec.shortcut_moe {
        x = longcat::layer_pairs(g, spec, w, sc, &x, inputs, (b, t), owned.as_ref())?;
    }
    let plain_layers = if spec.shortcut_moe.is_some() { &[][..] } else { &spec.layers[..] };
    for (i, layer) in plain_layers.iter().enumerate() {
        x = match &owned {
            Some(o) => checkpointed_layer(g, o, i, &x, (b, t))?,
            None => {
                let (nx, m) = layer_with_carry(g, spec, w, (layer, i), (&x, carry.take()), inputs, (b, t))?;
                carry = m;
                nx
            }
        };
    }
    let mut x = final_norm(g, spec, w, (x, carry), (b, t), head_rows)?;
    if let Some(name) = &spec.project_out {
        x = matmul::linear(g, &x, w.get(&format!("{name}.weight"))?, None)?;
    }
    Ok(x)
}

/// The final norm of `x + carry` (carry: the last layer's MLP output, not yet added) on the rows
/// the head reads (every row, or each sequence's last column for `Last`). An RMSNorm after the
/// add runs as the layers' fused add + norm kernel: one dispatch and one barrier fewer a step.
fn final_norm(
    g: &Graph<'_>,
    spec: &ModelSpec,
    w: &Weights,
    (x, carry): (Tensor, Option<Tensor>),
    (b, t): (usize, usize),
    head_rows: Head,
) -> Result<Tensor> {
    let last = head_rows == Head::Last && t > 1;
    let pick = |y: &Tensor| if last { last_columns(g, y, b, t) } else { Ok(y.clone()) };
    if let (Some(m), Norm::Rms { eps, unit_offset }) = (&carry, &spec.final_norm) {
        let gain = w.opt(&format!("{}.weight", spec.final_norm_name));
        return Ok(norm::add_rms_norm(g, (&pick(&x)?, &pick(m)?), gain, *eps, *unit_offset)?.1);
    }
    let x = match carry {
        Some(m) => broadcast::add(g, &x, &m)?,
        None => x,
    };
    apply_norm(g, &spec.final_norm, w, &spec.final_norm_name, &pick(&x)?)
}

/// The LM head's weight `[V, H]` (the embedding table when tied) and bias `[V]`.
pub(crate) fn head_weights<'w>(spec: &ModelSpec, w: &'w Weights) -> Result<(&'w Tensor, Option<&'w Tensor>)> {
    let head = w.get(&format!("{}.weight", if spec.tied_head { &spec.embed_name } else { &spec.head_name }))?;
    let head_bias = if spec.head_bias { Some(w.get(&format!("{}.bias", spec.head_name))?) } else { None };
    Ok((head, head_bias))
}

/// Logits `[rows, V]` of hidden states `x [rows, H]`: the head (with its LoRA term, if any),
/// then the logit scale and the final softcap.
fn head_logits(g: &Graph<'_>, spec: &ModelSpec, w: &Weights, x: &Tensor) -> Result<Tensor> {
    let (head, head_bias) = head_weights(spec, w)?;
    let head_name = format!("{}.weight", spec.head_name);
    let logits = crate::lora::linear(g, x, head, head_bias, w.lora(), &head_name)?;
    Ok(scale_and_cap(g, logits, spec.logit_scale, spec.final_softcap)?)
}

/// `softcap(scale · logits)`, each step only where the config asks for it.
pub(crate) fn scale_and_cap(
    g: &Graph<'_>,
    mut logits: Tensor,
    scale: f32,
    cap: Option<f32>,
) -> vkformers_tensor::Result<Tensor> {
    if scale != 1.0 {
        logits = broadcast::scale(g, &logits, scale)?;
    }
    if let Some(c) = cap {
        logits = softcap(g, &logits, c)?;
    }
    Ok(logits)
}

/// Rows `b·T + T − 1` of `x [B·T, hidden]` as `[B, hidden]`, gathered with the (f32) embedding
/// lookup; everything after the last layer is per position, so this commutes with it.
fn last_columns(g: &Graph<'_>, x: &Tensor, b: usize, t: usize) -> Result<Tensor> {
    let x = cast::cast(g, x, DType::F32)?;
    let last: Vec<i32> = (0..b).map(|row| (row * t + t - 1) as i32).collect();
    Ok(embedding::embedding(g, &x, &g.ints(&last, &[b])?)?)
}

/// What a checkpointed layer's recompute reads, owned: the tape outlives this call's borrows.
/// Tensor clones share storage (the parameters are the same tensors, so their gradients
/// accumulate as usual); the LoRA terms are copied with the dropout step of this forward, so
/// the recompute draws the forward's masks. No KV cache (training only).
type LayerCtx = Rc<(ModelSpec, Weights, Inputs<'static>)>;

fn owned_for_layers(spec: &ModelSpec, w: &Weights, inp: &Inputs<'_>) -> LayerCtx {
    // The packs too: trained q/k/v and gate/up run their packed products in the recompute.
    let w = Weights { map: w.map.clone(), lora: w.lora.clone(), packs: w.packs.clone() };
    let inp = Inputs {
        ids: inp.ids.clone(),
        kmask: inp.kmask.clone(),
        pos: inp.pos.clone(),
        host_pos: inp.host_pos.clone(),
        host_cols: inp.host_cols.clone(),
        host_mask: inp.host_mask.clone(),
        seq_len: inp.seq_len,
        cache: None,
        freqs: RefCell::new(inp.freqs.borrow().clone()),
        consts: RefCell::new(inp.consts.borrow().clone()),
        router: None,
        prepared: RefCell::default(),
    };
    Rc::new((spec.clone(), w, inp))
}

/// `decoder_layer` through `ops::checkpoint`: x `[B·T, hidden]` is the layer's only kept tensor.
fn checkpointed_layer(g: &Graph<'_>, o: &LayerCtx, i: usize, x: &Tensor, bt: (usize, usize)) -> Result<Tensor> {
    let o = o.clone();
    let y = checkpoint(g, std::slice::from_ref(x), move |g, xs| {
        let (spec, w, inp) = &*o;
        decoder_layer(g, spec, w, &spec.layers[i], i, &xs[0], inp, bt).map_err(|e| match e {
            ModelError::Device(e) => e,
            e => vkformers_tensor::VkError::Kernel { kernel: format!("layer {i}"), message: e.to_string() },
        })
    })?;
    Ok(y)
}

/// Position ids `[B·T]`: `0..T` per row, or with `PositionIds::FromMask` the count of real tokens
/// so far minus one (−1 on padding), as OPT derives them from the attention mask.
fn positions(spec: &ModelSpec, batch: &Batch<'_>) -> Vec<i32> {
    let t = batch.seq;
    if spec.position_ids == PositionIds::Arange {
        return (0..batch.batch * t).map(|i| (i % t) as i32).collect();
    }
    let mut out = Vec::with_capacity(batch.batch * t);
    for row in batch.mask.chunks(t) {
        let mut seen = 0;
        for &m in row {
            seen += m;
            out.push(seen * m - 1);
        }
    }
    out
}

/// `c·tanh(z/c) = 2c·sigmoid(2z/c) − c`, from differentiable ops.
fn softcap(g: &Graph<'_>, z: &Tensor, c: f32) -> vkformers_tensor::Result<Tensor> {
    let s = activation::sigmoid(g, &broadcast::scale(g, z, 2.0 / c)?)?;
    let y = broadcast::scale(g, &s, 2.0 * c)?;
    broadcast::sub(g, &y, &g.constant(&[c], &[1])?)
}

/// `clamp(x, −c, c) = x − relu(x − c) + relu(−x − c)` from differentiable ops: the gradient is
/// 1 inside and 0 outside, as torch's `clamp` (a value exactly at ±c passes it, relu'(0) = 0).
fn clamp(g: &Graph<'_>, x: &Tensor, c: f32) -> Result<Tensor> {
    let c_t = g.constant(&[c], &[1])?;
    let over = activation::relu(g, &broadcast::sub(g, x, &c_t)?)?;
    let under = activation::relu(g, &broadcast::sub(g, &broadcast::scale(g, x, -1.0)?, &c_t)?)?;
    Ok(broadcast::add(g, &broadcast::sub(g, x, &over)?, &under)?)
}

/// The ALiBi slope of each head: for n heads (n a power of two) `2^(-8(h+1)/n)`; otherwise the
/// closest smaller power of two's slopes, then every other slope of twice that count.
pub fn alibi_slopes(heads: usize) -> Vec<f32> {
    let pow2 = 1usize << (usize::BITS - 1 - heads.leading_zeros());
    let base = |n: usize| -> Vec<f64> { (1..=n).map(|h| 2f64.powf(-8.0 * h as f64 / n as f64)).collect() };
    let mut s = base(pow2);
    if pow2 < heads {
        s.extend(base(2 * pow2).into_iter().step_by(2).take(heads - pow2));
    }
    s.into_iter().map(|v| v as f32).collect()
}

/// The causal-LM loss of transformers: logits at position t predict `labels[t + 1]`; -100 (and
/// the last position) are ignored; mean over counted tokens.
pub fn causal_lm_loss(g: &Graph<'_>, logits: &Tensor, labels: &[i32], batch: usize, seq: usize) -> Result<Tensor> {
    Ok(loss::cross_entropy(g, logits, &shifted_labels(g, labels, batch, seq)?)?)
}

/// `labels[t + 1]` at position t of each row, -100 at the last: int32 `[B·T]` on the device.
pub(crate) fn shifted_labels(g: &Graph<'_>, labels: &[i32], batch: usize, seq: usize) -> Result<Tensor> {
    let shifted: Vec<i32> = (0..batch * seq).map(|i| if i % seq + 1 < seq { labels[i + 1] } else { -100 }).collect();
    Ok(g.ints(&shifted, &[batch * seq])?)
}

fn opt_weight<'w>(w: &'w Weights, template: &str, i: usize, suffix: &str) -> Option<&'w Tensor> {
    w.opt(&format!("{}.{suffix}", layer_name(template, i)))
}

pub(crate) fn apply_norm(g: &Graph<'_>, n: &Norm, w: &Weights, name: &str, x: &Tensor) -> Result<Tensor> {
    Ok(match n {
        Norm::Rms { eps, unit_offset } => norm::rms_norm(g, x, w.opt(&format!("{name}.weight")), *eps, *unit_offset)?,
        Norm::Layer { eps, bias } => {
            let b = if *bias { w.opt(&format!("{name}.bias")) } else { None };
            norm::layer_norm(g, x, w.opt(&format!("{name}.weight")), b, *eps)?
        }
        Norm::LayerPerHead { eps } => {
            // x [B, T, H, D]: normalise each head's D values, then scale by w [H, D].
            let y = norm::layer_norm(g, x, None, None, *eps)?;
            broadcast::mul(g, &y, w.get(&format!("{name}.weight"))?)?
        }
        Norm::LayerPlain { eps } => norm::layer_norm(g, x, None, None, *eps)?,
        Norm::LayerUnitOffset { eps } => {
            // `1 + w` rounded to f32 first, as `F.layer_norm(x, .., self.weight + 1, ..)`.
            let gain = broadcast::add(g, w.get(&format!("{name}.weight"))?, &g.constant(&[1.0], &[1])?)?;
            norm::layer_norm(g, x, Some(&gain), Some(w.get(&format!("{name}.bias"))?), *eps)?
        }
        Norm::RmsPlain { eps } => norm::rms_norm(g, x, None, *eps, false)?,
        Norm::RmsGated { eps, .. } => {
            // x [N, H] -> y = rms(x)·w; y · sigmoid(W_up · silu(W_down · y)) (bottleneck [N, rank]).
            let y = norm::rms_norm(g, x, w.opt(&format!("{name}.norm.weight")), *eps, false)?;
            let down = matmul::linear(g, &y, w.get(&format!("{name}.W_down.weight"))?, None)?;
            let act = activation::activation(g, &down, vkformers_kernels::activation::Activation::Silu)?;
            let gate = matmul::linear(g, &act, w.get(&format!("{name}.W_up.weight"))?, None)?;
            broadcast::mul(g, &y, &activation::sigmoid(g, &gate)?)?
        }
    })
}

fn maybe_norm(g: &Graph<'_>, n: &Option<Norm>, w: &Weights, template: &str, i: usize, x: &Tensor) -> Result<Tensor> {
    match n {
        Some(n) => apply_norm(g, n, w, &layer_name(template, i), x),
        None => Ok(x.clone()),
    }
}

/// `x + s·y` (s = the layer's residual scale).
fn residual_add(g: &Graph<'_>, layer: &LayerSpec, x: &Tensor, y: &Tensor) -> Result<Tensor> {
    let y = if layer.residual_scale != 1.0 { broadcast::scale(g, y, layer.residual_scale)? } else { y.clone() };
    Ok(broadcast::add(g, x, &y)?)
}

/// `x + s·y` and the layer's MLP norm of it. An RMSNorm after an unscaled add runs as one
/// fused kernel in inference (`norm::add_rms_norm`; where gradients flow it is the add and the
/// norm ops): a decode step has one dispatch and one barrier fewer per layer.
fn add_then_norm(
    g: &Graph<'_>,
    layer: &LayerSpec,
    (x, y): (&Tensor, &Tensor),
    w: &Weights,
    template: &str,
    i: usize,
) -> Result<(Tensor, Tensor)> {
    if let (Some(Norm::Rms { eps, unit_offset }), true) = (&layer.mlp_norm, layer.residual_scale == 1.0) {
        let gain = w.opt(&format!("{}.weight", layer_name(template, i)));
        return Ok(norm::add_rms_norm(g, (x, y), gain, *eps, *unit_offset)?);
    }
    let x = residual_add(g, layer, x, y)?;
    let h = maybe_norm(g, &layer.mlp_norm, w, template, i, &x)?;
    Ok((x, h))
}

/// Layer `i` of the inference graph on `x + carry` (carry: the previous layer's MLP output, not
/// yet added). Returns the layer's output, or (a sequential layer with an unscaled residual)
/// its input to the MLP residual and the MLP output to add, left to the next layer.
fn layer_with_carry(
    g: &Graph<'_>,
    spec: &ModelSpec,
    w: &Weights,
    (layer, i): (&LayerSpec, usize),
    (x, carry): (&Tensor, Option<Tensor>),
    inp: &Inputs<'_>,
    bt: (usize, usize),
) -> Result<(Tensor, Option<Tensor>)> {
    let names = &spec.layer_names;
    // Decoding: the norm (and the add) computed by the q/k/v GEMV; `h` is written all the same.
    if let Some((x, h)) = normed_gemv::attention_input(g, spec, w, (layer, i), (x, carry.as_ref()), inp)? {
        return layer_from_attention(g, spec, w, (layer, i), (&x, &h), inp, bt);
    }
    let (x, h) = match (carry, &layer.attn_norm, layer.residual) {
        (Some(m), Some(Norm::Rms { eps, unit_offset }), Residual::Sequential | Residual::Parallel { .. }) => {
            // Training under autocast: y in 16 bits only, for the q/k/v products.
            let (x, h) = match half_norm::attn_input_after_add(g, spec, w, (layer, i), (x, &m))? {
                Some(xh) => xh,
                None => {
                    let gain = w.opt(&format!("{}.weight", layer_name(&names.attn_norm, i)));
                    norm::add_rms_norm(g, (x, &m), gain, *eps, *unit_offset)?
                }
            };
            (x, Some(h))
        }
        (Some(m), ..) => (broadcast::add(g, x, &m)?, None),
        (None, ..) => (x.clone(), None),
    };
    // Inference, and training where the layer's norms write 16-bit outputs only (else a
    // training graph keeps its ops as they were).
    let defer = layer.residual == Residual::Sequential
        && layer.residual_scale == 1.0
        && (!g.grad_enabled() || half_norm::defers_residual(g, spec, w, (layer, i), x.rows()));
    if !defer {
        return Ok((decoder_layer_normed(g, spec, w, layer, i, (&x, h), inp, bt)?, None));
    }
    let h = match h {
        Some(h) => h,
        None => maybe_norm(g, &layer.attn_norm, w, &names.attn_norm, i, &x)?,
    };
    layer_from_attention(g, spec, w, (layer, i), (&x, &h), inp, bt)
}

/// The rest of [`layer_with_carry`]'s deferred layer from its attention input `h` (the norm of
/// x): the attention, the add + MLP norm (in decoding computed by the gate/up GEMV), the MLP.
fn layer_from_attention(
    g: &Graph<'_>,
    spec: &ModelSpec,
    w: &Weights,
    (layer, i): (&LayerSpec, usize),
    (x, h): (&Tensor, &Tensor),
    inp: &Inputs<'_>,
    bt: (usize, usize),
) -> Result<(Tensor, Option<Tensor>)> {
    let names = &spec.layer_names;
    let a = self_attention(g, spec, w, &layer.attn, i, h, inp, bt)?;
    // The attention takes the products the norm's GEMV prepared (else it did the work again).
    let unused = normed_gemv::left_unused(inp);
    debug_assert!(!unused, "layer {i}: q/k/v products of the normed input left unused");
    let a = maybe_norm(g, &layer.post_attn_norm, w, &names.post_attn_norm, i, &a)?;
    let (x, m) = match normed_gemv::add_norm_mlp(g, spec, w, (layer, i), (x, &a), inp)? {
        Some(xm) => xm,
        None => {
            let (x, h) = match half_norm::mlp_input(g, spec, w, (layer, i), (x, &a))? {
                Some(xh) => xh,
                None => add_then_norm(g, layer, (x, &a), w, &names.mlp_norm, i)?,
            };
            (x, layer_mlp(g, spec, w, (&layer.mlp, i), &h, inp)?)
        }
    };
    Ok((x, Some(maybe_norm(g, &layer.post_mlp_norm, w, &names.post_mlp_norm, i, &m)?)))
}

#[allow(clippy::too_many_arguments)]
fn decoder_layer(
    g: &Graph<'_>,
    spec: &ModelSpec,
    w: &Weights,
    layer: &LayerSpec,
    i: usize,
    x: &Tensor,
    inp: &Inputs<'_>,
    bt: (usize, usize),
) -> Result<Tensor> {
    decoder_layer_normed(g, spec, w, layer, i, (x, None), inp, bt)
}

/// [`decoder_layer`] with the attention norm of x given when already computed.
#[allow(clippy::too_many_arguments)]
fn decoder_layer_normed(
    g: &Graph<'_>,
    spec: &ModelSpec,
    w: &Weights,
    layer: &LayerSpec,
    i: usize,
    (x, normed): (&Tensor, Option<Tensor>),
    inp: &Inputs<'_>,
    bt: (usize, usize),
) -> Result<Tensor> {
    let names = &spec.layer_names;
    // Post-LN layers normalise after the adds (below), not before the attention.
    let h = match (normed, layer.residual) {
        (Some(h), _) => h,
        (None, Residual::PostNorm) => x.clone(),
        // Training under autocast: only 16-bit y written where products alone read it.
        (None, _) => match half_norm::attn_input(g, spec, w, (layer, i), x)? {
            Some(h) => h,
            None => maybe_norm(g, &layer.attn_norm, w, &names.attn_norm, i, x)?,
        },
    };
    let a = self_attention(g, spec, w, &layer.attn, i, &h, inp, bt)?;
    let a = maybe_norm(g, &layer.post_attn_norm, w, &names.post_attn_norm, i, &a)?;
    match layer.residual {
        Residual::Sequential => {
            let (x, h) = match half_norm::mlp_input(g, spec, w, (layer, i), (x, &a))? {
                Some(xh) => xh,
                None => add_then_norm(g, layer, (x, &a), w, &names.mlp_norm, i)?,
            };
            let m = layer_mlp(g, spec, w, (&layer.mlp, i), &h, inp)?;
            let m = maybe_norm(g, &layer.post_mlp_norm, w, &names.post_mlp_norm, i, &m)?;
            residual_add(g, layer, &x, &m)
        }
        Residual::Parallel { shared_norm } => {
            let h2 = if shared_norm { h } else { maybe_norm(g, &layer.mlp_norm, w, &names.mlp_norm, i, x)? };
            let m = layer_mlp(g, spec, w, (&layer.mlp, i), &h2, inp)?;
            let m = maybe_norm(g, &layer.post_mlp_norm, w, &names.post_mlp_norm, i, &m)?;
            let x = residual_add(g, layer, x, &a)?;
            residual_add(g, layer, &x, &m)
        }
        Residual::PostNorm => {
            // x = n1(x + attn(x)); x = n2(x + mlp(x)).
            let x = maybe_norm(g, &layer.attn_norm, w, &names.attn_norm, i, &residual_add(g, layer, x, &a)?)?;
            let m = layer_mlp(g, spec, w, (&layer.mlp, i), &x, inp)?;
            let m = maybe_norm(g, &layer.post_mlp_norm, w, &names.post_mlp_norm, i, &m)?;
            maybe_norm(g, &layer.mlp_norm, w, &names.mlp_norm, i, &residual_add(g, layer, &x, &m)?)
        }
    }
}

pub(crate) fn project(g: &Graph<'_>, w: &Weights, template: &str, i: usize, x: &Tensor, bias: bool) -> Result<Tensor> {
    let b = if bias { opt_weight(w, template, i, "bias") } else { None };
    let name = format!("{}.weight", layer_name(template, i));
    Ok(crate::lora::linear(g, x, w.get(&name)?, b, w.lora(), &name)?)
}

/// The layer's feed-forward block in the decoder graph: a routed mixture of experts collects
/// its router outputs in `inp` (load-balancing loss); every other kind is `mlp`.
fn layer_mlp(
    g: &Graph<'_>,
    spec: &ModelSpec,
    w: &Weights,
    (m, i): (&MlpSpec, usize),
    h: &Tensor,
    inp: &Inputs<'_>,
) -> Result<Tensor> {
    match m {
        MlpSpec::Moe(moe) => crate::moe::block(g, w, moe, i, h, inp.router.as_ref()),
        _ => mlp(g, spec, w, m, i, h),
    }
}

/// The down projection of a gated MLP's `f(gate) ⊙ up` (down weight template `down`).
pub(crate) fn gated_down(
    g: &Graph<'_>,
    w: &Weights,
    i: usize,
    (gate, up, kind): (&Tensor, &Tensor, vkformers_kernels::glu::Glu),
    bias: bool,
    down: &str,
) -> Result<Tensor> {
    // Decoding: the GLU folded into the down projection's GEMV (one dispatch less).
    let name = format!("{}.weight", layer_name(down, i));
    if let Some(y) = if bias { None } else { grouped::glu_down(g, w, (gate, up, kind), &name)? } {
        return Ok(y);
    }
    // Training under autocast: down reads the GLU's 16-bit output (no f32 one written);
    // not with a LoRA term on down (its dropout reads f32).
    let y = match w.lora().get(&name) {
        None => glu::glu_for_product(g, gate, up, kind)?,
        Some(_) => glu::glu(g, gate, up, kind)?,
    };
    project(g, w, down, i, &y, bias)
}

/// A dense feed-forward block (the decoder's and the encoder's).
pub(crate) fn mlp(g: &Graph<'_>, spec: &ModelSpec, w: &Weights, m: &MlpSpec, i: usize, h: &Tensor) -> Result<Tensor> {
    let n = &spec.layer_names;
    match m {
        MlpSpec::Gated { glu: kind, bias, .. } => {
            // Decoding: gate and up in one dispatch when there is no bias.
            let names = [&n.gate, &n.up].map(|t| format!("{}.weight", layer_name(t, i)));
            let (gate, up) = match if *bias { None } else { grouped::products(g, w, h, &names)? } {
                Some(ys) => (ys[0].clone(), ys[1].clone()),
                None => {
                    // More rows than the GEMV takes (or biases): one product of the packed
                    // gate/up weight [rows, 2I], the GLU reading its two halves.
                    if let Some((gate_up, cols)) = crate::packed::product(g, w, h, &names)? {
                        if cols.len() == 2 && cols[0] == cols[1] {
                            // Training: the GLU's backward writes dgate_up in the packed layout.
                            let down = format!("{}.weight", layer_name(&n.down, i));
                            let act = match w.lora().get(&down) {
                                None => glu::glu_fused_for_product(g, &gate_up, *kind)?,
                                Some(_) => glu::glu_fused(g, &gate_up, *kind)?,
                            };
                            return project(g, w, &n.down, i, &act, *bias);
                        }
                    }
                    (project(g, w, &n.gate, i, h, *bias)?, project(g, w, &n.up, i, h, *bias)?)
                }
            };
            gated_down(g, w, i, (&gate, &up, *kind), *bias, &n.down)
        }
        MlpSpec::GatedAct { act, bias, sub_norm, .. } => {
            let gate = activation::activation(g, &project(g, w, &n.gate, i, h, *bias)?, *act)?;
            let mut y = broadcast::mul(g, &gate, &project(g, w, &n.up, i, h, *bias)?)?;
            if let Some((norm, template)) = sub_norm {
                y = apply_norm(g, norm, w, &layer_name(template, i), &y)?;
            }
            project(g, w, &n.down, i, &y, *bias)
        }
        MlpSpec::Plain { act, bias, .. } => {
            let up = project(g, w, &n.up, i, h, *bias)?;
            // Inference under autocast: the activation writes down's 16-bit operand directly.
            project(g, w, &n.down, i, &activation::activation_for_product(g, &up, *act)?, *bias)
        }
        MlpSpec::Xielu { bias, act, .. } => {
            let up = project(g, w, &n.up, i, h, *bias)?;
            let a = layer_name(act, i);
            let get = |s: &str| w.get(&format!("{a}.{s}"));
            let (a_p, a_n, beta, eps) = (get("alpha_p")?, get("alpha_n")?, get("beta")?, get("eps")?);
            let s = activation::Xielu { a_p, a_n, beta, eps };
            project(g, w, &n.down, i, &activation::xielu(g, &up, &s)?, *bias)
        }
        MlpSpec::Moe(_) => Err(ModelError::Unsupported("a mixture of experts outside the decoder graph".into())),
    }
}
