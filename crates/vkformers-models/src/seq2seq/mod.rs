//! The generic encoder-decoder graph (T5, BART families): the encoder stack once over the source
//! `[B, S]`, then the decoder stack over `[B, T]` with causal self-attention and cross-attention
//! to the encoder's last hidden state, then the LM head. Built from the differentiable ops, so the
//! tape gives every parameter's gradient (the shared relative position bias's included).

pub mod attention;
mod cached;
mod gemma;
mod plan;
mod router_loss;
mod spec;
pub mod switch;

pub use cached::Seq2SeqCache;
pub(crate) use plan::plan;
pub use spec::{CrossNames, RelativeBias, Seq2SeqSpec, Shift, StackEnds, StackPositions};

use vkformers_tensor::ops::attention::{attention as fused_attention, AttnOptions};
use vkformers_tensor::ops::{activation, broadcast, embedding, glu, loss, shape};
use vkformers_tensor::{Graph, Tensor};

use crate::decoder::{apply_norm, project, Weights};
use crate::encoder::NormPlacement;
use crate::error::{ModelError, Result};
use crate::spec::{layer_name, AttnSpec, LayerNames, LayerSpec, MlpSpec, ModelSpec};

/// One training batch: the source `[B, S]` with its mask and the labels `[B, T]` (-100 ignored).
pub struct Seq2SeqBatch<'a> {
    pub ids: &'a [i32],
    pub mask: &'a [i32],
    pub batch: usize,
    pub src_len: usize,
    pub labels: &'a [i32],
    pub tgt_len: usize,
    /// transformers' train mode (`model.train()`, as a trainer's steps run) rather than eval
    /// mode (evaluation, the fixtures' references): see `Seq2SeqSpec::pad_keys_in_training`.
    pub train: bool,
}

pub(crate) fn seq2seq_of(spec: &ModelSpec) -> Result<&Seq2SeqSpec> {
    spec.seq2seq
        .as_deref()
        .ok_or_else(|| ModelError::Unsupported(format!("`{}` is not an encoder-decoder", spec.model_type)))
}

/// A stored tensor that is a buffer, not a parameter (`Seq2SeqSpec::final_logits_bias`,
/// `stored_tables`).
pub(crate) fn is_buffer(spec: &ModelSpec, name: &str) -> bool {
    spec.seq2seq.as_ref().is_some_and(|s| {
        s.final_logits_bias.as_deref() == Some(name)
            || s.stored_tables.iter().any(|(t, _)| format!("{t}.weight") == name)
    })
}

/// The decoder inputs transformers makes from labels `[B, T]` (`shift_tokens_right`).
pub fn shift_labels(s: &Seq2SeqSpec, labels: &[i32], t: usize) -> Vec<i32> {
    let unmasked: Vec<i32> = labels.iter().map(|&l| if l == -100 { s.pad_token_id } else { l }).collect();
    let mut out = Vec::with_capacity(labels.len());
    for row in unmasked.chunks(t) {
        let first = match s.shift {
            Shift::Start => s.decoder_start_token_id,
            // The last token that is not pad (`(ids != pad).sum(1) - 1`).
            Shift::WrapLastToken => {
                let n = row.iter().filter(|&&x| x != s.pad_token_id).count();
                row[n.saturating_sub(1)]
            }
        };
        out.push(first);
        out.extend_from_slice(&row[..t - 1]);
    }
    out
}

/// Logits `[B·T, V]` and the mean cross-entropy over labels != -100, as
/// `AutoModelForSeq2SeqLM(input_ids, attention_mask, labels=labels)` (plus Switch Transformers'
/// router losses when its spec asks for them, see `router_loss`).
pub fn forward_loss(
    g: &Graph<'_>,
    spec: &ModelSpec,
    w: &Weights,
    batch: &Seq2SeqBatch<'_>,
) -> Result<(Tensor, Tensor)> {
    let losses = seq2seq_of(spec)?.switch.as_ref().and_then(|sw| sw.losses.map(|c| (c, sw.loss_stacks)));
    let Some((coefs, stacks)) = losses else {
        let logits = forward_logits(g, spec, w, batch)?;
        let loss = loss::cross_entropy(g, &logits, &g.ints(batch.labels, &[batch.batch * batch.tgt_len])?)?;
        return Ok((logits, loss));
    };
    // Switch Transformers with `output_router_logits`: plus the routers' z and balancing losses.
    let (logits, records) = router_loss::collect(|| forward_logits(g, spec, w, batch))?;
    let mut loss = loss::cross_entropy(g, &logits, &g.ints(batch.labels, &[batch.batch * batch.tgt_len])?)?;
    for decoder in [false, true] {
        let recs: Vec<_> = records.iter().filter(|r| r.decoder == decoder).collect();
        if let (true, Some(extra)) = (stacks[usize::from(decoder)], router_loss::stack_loss(g, &recs, coefs)?) {
            loss = broadcast::add(g, &loss, &extra)?;
        }
    }
    Ok((logits, loss))
}

/// The decoder's logits `[B·T, V]` for labels `[B, T]`: the encoder over the source, then the
/// decoder over the labels shifted right (`decoder_input_ids` made from `labels`, every decoder
/// position attended, as transformers does when only `labels` are given; in train mode T5Gemma's
/// decoder hides its pad-id inputs, see `Seq2SeqSpec::pad_keys_in_training`).
pub fn forward_logits(g: &Graph<'_>, spec: &ModelSpec, w: &Weights, batch: &Seq2SeqBatch<'_>) -> Result<Tensor> {
    let s = seq2seq_of(spec)?;
    let (b, t) = (batch.batch, batch.tgt_len);
    if batch.labels.len() != b * t || batch.ids.len() != b * batch.src_len || batch.mask.len() != batch.ids.len() {
        return Err(ModelError::Config(format!(
            "a batch of {b} rows of {} source and {t} label tokens with {} ids, {} mask entries, {} labels",
            batch.src_len,
            batch.ids.len(),
            batch.mask.len(),
            batch.labels.len()
        )));
    }
    if let Some(bad) = batch.labels.iter().find(|&&l| l != -100 && (l < 0 || l as usize >= spec.vocab)) {
        return Err(ModelError::Config(format!(
            "label {bad} is outside the vocabulary of {} ids (use -100 for positions without a target)",
            spec.vocab
        )));
    }
    let enc = encode(g, spec, w, batch.ids, batch.mask, (b, batch.src_len))?;
    let dec_ids = shift_labels(s, batch.labels, t);
    let dec_mask: Vec<i32> = if batch.train && s.pad_keys_in_training {
        dec_ids.iter().map(|&x| i32::from(x != s.pad_token_id)).collect()
    } else {
        vec![1; b * t]
    };
    let ctx = Encoded { hidden: &enc, mask: batch.mask, len: batch.src_len };
    decode(g, spec, w, &ctx, (&dec_ids, &dec_mask), (b, t))
}

/// The encoder's output as the decoder reads it.
pub struct Encoded<'a> {
    /// `[B·S, hidden]`.
    pub hidden: &'a Tensor,
    /// The source mask `[B·S]`.
    pub mask: &'a [i32],
    pub len: usize,
}

/// Token embeddings (scaled) plus learned positions `past..past + T`, then the stack's
/// embedding norm: `[B·T, hidden]`.
fn embed(
    g: &Graph<'_>,
    spec: &ModelSpec,
    w: &Weights,
    ends: &StackEnds,
    ids: &[i32],
    (b, t, past): (usize, usize, usize),
) -> Result<Tensor> {
    let s = seq2seq_of(spec)?;
    let table = w.get(&format!("{}.weight", ends.embed.as_deref().unwrap_or(&spec.embed_name)))?;
    let tokens = embedding::embedding_padded(g, table, &g.ints(ids, &[b, t])?, spec.padding_idx)?;
    let mut x = shape::reshape(g, &tokens, &[b * t, spec.hidden])?;
    if spec.embed_scale != 1.0 {
        x = broadcast::scale(g, &x, spec.embed_scale)?;
    }
    let norm = |x: &Tensor| match &ends.embed_norm {
        Some((n, name)) => apply_norm(g, n, w, name, x),
        None => Ok(x.clone()),
    };
    if ends.norm_before_positions {
        x = norm(&x)?;
    }
    if let Some(positions) = &ends.positions {
        let p = position_rows(g, spec, s, w, positions, ids, (b, t, past))?;
        x = broadcast::add(g, &x, &p)?;
    }
    if !ends.norm_before_positions {
        x = norm(&x)?;
    }
    Ok(x)
}

/// The position rows `[B·T, hidden]` added to the embeddings of ids `[B, T]` after `past`.
fn position_rows(
    g: &Graph<'_>,
    spec: &ModelSpec,
    s: &Seq2SeqSpec,
    w: &Weights,
    positions: &StackPositions,
    ids: &[i32],
    (b, t, past): (usize, usize, usize),
) -> Result<Tensor> {
    let arange = |offset: usize| -> Vec<usize> { (0..b * t).map(|i| i % t + past + offset).collect() };
    match positions {
        StackPositions::Learned(name) => {
            let table = w.get(&format!("{name}.weight"))?;
            let idx = arange(s.position_offset);
            if idx.iter().any(|&p| p >= table.shape()[0]) {
                return Err(ModelError::Config(format!(
                    "{} positions do not fit `{name}` {:?} (the sequence is longer than max_position_embeddings)",
                    t + past,
                    table.shape()
                )));
            }
            let idx: Vec<i32> = idx.iter().map(|&p| p as i32).collect();
            Ok(embedding::embedding(g, table, &g.ints(&idx, &[b * t])?)?)
        }
        StackPositions::Sinusoidal => {
            Ok(g.constant(&attention::sinusoid_rows(&arange(0), spec.hidden), &[b * t, spec.hidden])?)
        }
        StackPositions::FairseqFromIds { padding_idx } => {
            let pos = attention::fairseq_positions(ids, t, *padding_idx, past);
            let rows = attention::fairseq_rows(&pos, spec.hidden, *padding_idx);
            Ok(g.constant(&rows, &[b * t, spec.hidden])?)
        }
    }
}

/// The encoder's last hidden state `[B·S, hidden]` of ids `[B, S]` under `mask`.
pub fn encode(
    g: &Graph<'_>,
    spec: &ModelSpec,
    w: &Weights,
    ids: &[i32],
    mask: &[i32],
    bs: (usize, usize),
) -> Result<Tensor> {
    let s = seq2seq_of(spec)?;
    let (b, len) = bs;
    if ids.len() != b * len || mask.len() != ids.len() {
        return Err(ModelError::Config(format!(
            "a source of {b}x{len} with {} ids and {} mask entries",
            ids.len(),
            mask.len()
        )));
    }
    if let Some(bad) = ids.iter().find(|&&id| id < 0 || id as usize >= spec.vocab) {
        return Err(ModelError::Config(format!("token id {bad} is outside the vocabulary of {} ids", spec.vocab)));
    }
    let mut x = embed(g, spec, w, &s.encoder, ids, (b, len, 0))?;
    let scores = ScoreBias::new(g, s, &s.encoder, w, mask, (b, len, len, 0), false)?;
    for (i, layer) in s.encoder_layers.iter().enumerate() {
        let names = &s.encoder_names;
        let self_attn = |h: &Tensor| {
            let kv = KeysValues { x: h, mask, len, causal: false, cross: false };
            attend(g, w, (&layer.attn, names, i), h, &kv, scores.layer(g, w, i)?.as_ref(), b)
        };
        let (attn_post, mlp_post) =
            ((&layer.post_attn_norm, &*names.post_attn_norm), (&layer.post_mlp_norm, &*names.post_mlp_norm));
        x = residual_block(g, s.placement, w, (&layer.attn_norm, &names.attn_norm, i), attn_post, &x, self_attn)?;
        x = residual_block(g, s.placement, w, (&layer.mlp_norm, &names.mlp_norm, i), mlp_post, &x, |h| {
            ffn(g, s, w, (names, &layer.mlp), (false, i), h, b)
        })?;
    }
    if let Some((n, name)) = &s.encoder.final_norm {
        x = apply_norm(g, n, w, name, &x)?;
    }
    Ok(x)
}

/// Decoder logits `[B·T, V]` of decoder ids `[B, T]` (with their mask) over the encoder output.
pub fn decode(
    g: &Graph<'_>,
    spec: &ModelSpec,
    w: &Weights,
    enc: &Encoded<'_>,
    (ids, mask): (&[i32], &[i32]),
    (b, t): (usize, usize),
) -> Result<Tensor> {
    let s = seq2seq_of(spec)?;
    let mut x = embed(g, spec, w, &s.decoder, ids, (b, t, 0))?;
    let scores = ScoreBias::new(g, s, &s.decoder, w, mask, (b, t, t, 0), true)?;
    let names = &spec.layer_names;
    for (i, layer) in spec.layers.iter().enumerate() {
        let self_attn = |h: &Tensor| {
            let kv = KeysValues { x: h, mask, len: t, causal: true, cross: false };
            attend(g, w, (&layer.attn, names, i), h, &kv, scores.layer(g, w, i)?.as_ref(), b)
        };
        let (attn_post, mlp_post) =
            ((&layer.post_attn_norm, &*names.post_attn_norm), (&layer.post_mlp_norm, &*names.post_mlp_norm));
        x = residual_block(g, s.placement, w, (&layer.attn_norm, &names.attn_norm, i), attn_post, &x, self_attn)?;
        x = cross_block(g, s, w, layer, i, &x, enc, b)?;
        x = residual_block(g, s.placement, w, (&layer.mlp_norm, &names.mlp_norm, i), mlp_post, &x, |h| {
            ffn(g, s, w, (names, &layer.mlp), (true, i), h, b)
        })?;
    }
    if let Some((n, name)) = &s.decoder.final_norm {
        x = apply_norm(g, n, w, name, &x)?;
    }
    lm_head(g, spec, s, w, &x)
}

/// `head(x · head_scale)` (+ the stored logits bias), soft-capped where the spec says
/// (T5Gemma's `final_logit_softcapping`).
fn lm_head(g: &Graph<'_>, spec: &ModelSpec, s: &Seq2SeqSpec, w: &Weights, x: &Tensor) -> Result<Tensor> {
    let x = if s.head_scale != 1.0 { broadcast::scale(g, x, s.head_scale)? } else { x.clone() };
    let head_name = format!("{}.weight", spec.head_name);
    let head = if spec.tied_head { w.get(&format!("{}.weight", spec.embed_name))? } else { w.get(&head_name)? };
    let mut logits = crate::lora::linear(g, &x, head, None, w.lora(), &head_name)?;
    if let Some(name) = &s.final_logits_bias {
        logits = broadcast::add(g, &logits, w.get(name)?)?;
    }
    Ok(crate::decoder::scale_and_cap(g, logits, 1.0, spec.final_softcap)?)
}

/// The cross-attention sublayer of decoder layer `i`: queries from the decoder, keys and values
/// from the encoder output, every real source token visible.
#[allow(clippy::too_many_arguments)]
fn cross_block(
    g: &Graph<'_>,
    s: &Seq2SeqSpec,
    w: &Weights,
    layer: &LayerSpec,
    i: usize,
    x: &Tensor,
    enc: &Encoded<'_>,
    b: usize,
) -> Result<Tensor> {
    let c = &s.cross;
    // Only q, k, v and o are read from these names.
    let names =
        LayerNames { q: c.q.clone(), k: c.k.clone(), v: c.v.clone(), o: c.o.clone(), ..LayerNames::plain("", [""; 8]) };
    // The cross-attention norm is of the self-attention norm's kind.
    let norm = &layer.attn_norm;
    let f = |h: &Tensor| {
        let kv = KeysValues { x: enc.hidden, mask: enc.mask, len: enc.len, causal: false, cross: true };
        attend(g, w, (&layer.attn, &names, i), h, &kv, None, b)
    };
    residual_block(g, s.placement, w, (norm, &c.norm, i), (&layer.post_attn_norm, &c.post_norm), x, f)
}

/// `x + post(f(norm(x)))` (pre-LN; `post` is Gemma's sandwich norm, absent elsewhere) or
/// `norm(x + f(x))` (post-LN).
fn residual_block(
    g: &Graph<'_>,
    placement: NormPlacement,
    w: &Weights,
    (norm, template, i): (&Option<crate::spec::Norm>, &str, usize),
    (post, post_template): (&Option<crate::spec::Norm>, &str),
    x: &Tensor,
    f: impl FnOnce(&Tensor) -> Result<Tensor>,
) -> Result<Tensor> {
    let normed = |norm: &Option<crate::spec::Norm>, template: &str, y: &Tensor| match norm {
        Some(n) => apply_norm(g, n, w, &layer_name(template, i), y),
        None => Ok(y.clone()),
    };
    let n = |y: &Tensor| normed(norm, template, y);
    match placement {
        NormPlacement::Pre => Ok(broadcast::add(g, x, &normed(post, post_template, &f(&n(x)?)?)?)?),
        NormPlacement::Post => n(&broadcast::add(g, x, &f(x)?)?),
    }
}

/// Where an attention's keys and values come from: `x [B·len, hidden]` under `mask [B·len]`.
struct KeysValues<'a> {
    x: &'a Tensor,
    mask: &'a [i32],
    len: usize,
    causal: bool,
    /// Cross-attention: no RoPE, no window (T5Gemma's cross-attention has neither).
    cross: bool,
}

/// Multi-head attention of queries from `h [B·Tq, hidden]` over `kv`: the fused kernel, or, with
/// a score bias (T5's positions plus the masks, `[B, H, Tq, Tk]`), the explicit product.
fn attend(
    g: &Graph<'_>,
    w: &Weights,
    (a, names, i): (&AttnSpec, &LayerNames, usize),
    h: &Tensor,
    kv: &KeysValues<'_>,
    bias: Option<&Tensor>,
    b: usize,
) -> Result<Tensor> {
    let tq = h.shape()[0] / b;
    let q = project(g, w, &names.q, i, h, a.qkv_bias)?;
    let k = project(g, w, &names.k, i, kv.x, a.qkv_bias)?;
    let v = project(g, w, &names.v, i, kv.x, a.qkv_bias)?;
    if gemma::is_gemma(a) {
        let keys = gemma::Keys { mask: kv.mask, len: kv.len, causal: kv.causal, cross: kv.cross };
        let o = gemma::attend(g, a, (q, k, v), &keys, (b, tq))?;
        return project(g, w, &names.o, i, &o, a.out_bias);
    }
    let o = match bias {
        Some(bias) => {
            attention::biased_attention(g, (&q, &k, &v), bias, (b, tq, kv.len, a.heads, a.head_dim), a.scale)?
        }
        None => {
            let heads = |y: &Tensor, t: usize| shape::reshape(g, y, &[b, t, a.heads, a.head_dim]);
            let opts = AttnOptions {
                scale: Some(a.scale),
                causal: kv.causal,
                kmask: crate::decoder::key_mask(g, kv.mask, (b, kv.len))?,
                ..AttnOptions::default()
            };
            let o = fused_attention(g, &heads(&q, tq)?, &heads(&k, kv.len)?, &heads(&v, kv.len)?, &opts)?;
            shape::reshape(g, &o, &[b * tq, a.heads * a.head_dim])?
        }
    };
    project(g, w, &names.o, i, &o, a.out_bias)
}

/// A stack's self-attention score bias: T5's relative positions plus the masks, computed once
/// (from layer 0's table, shared) or per layer (UMT5); none for the other families.
struct ScoreBias {
    mask: Option<Tensor>,
    shared: Option<Tensor>,
    per_layer: Option<PerLayerBias>,
}

/// What a UMT5 layer needs to build its own bias.
struct PerLayerBias {
    template: String,
    bidirectional: bool,
    max_distance: usize,
    /// `(Tq, Tk, past)`.
    dims: (usize, usize, usize),
}

impl ScoreBias {
    fn new(
        g: &Graph<'_>,
        s: &Seq2SeqSpec,
        ends: &StackEnds,
        w: &Weights,
        kmask: &[i32],
        (b, tq, tk, past): (usize, usize, usize, usize),
        causal: bool,
    ) -> Result<ScoreBias> {
        let (Some(rel), Some(template)) = (s.relative_bias, &ends.relative_bias) else {
            return Ok(ScoreBias { mask: None, shared: None, per_layer: None });
        };
        let mask = attention::additive_mask(g, kmask, (b, tq, tk, past), causal)?;
        let dims = (tq, tk, past);
        if rel.per_layer {
            return Ok(ScoreBias {
                mask: Some(mask),
                shared: None,
                per_layer: Some(PerLayerBias {
                    template: template.clone(),
                    bidirectional: !causal,
                    max_distance: rel.max_distance,
                    dims,
                }),
            });
        }
        let table = w.get(&format!("{}.weight", layer_name(template, 0)))?;
        let pos = attention::relative_bias(g, table, dims, !causal, rel.max_distance)?;
        Ok(ScoreBias { shared: Some(broadcast::add(g, &pos, &mask)?), mask: Some(mask), per_layer: None })
    }

    /// The bias layer `i` adds to its scores.
    fn layer(&self, g: &Graph<'_>, w: &Weights, i: usize) -> Result<Option<Tensor>> {
        match (&self.shared, &self.per_layer, &self.mask) {
            (Some(b), _, _) => Ok(Some(b.clone())),
            (None, Some(p), Some(mask)) => {
                let table = w.get(&format!("{}.weight", layer_name(&p.template, i)))?;
                let pos = attention::relative_bias(g, table, p.dims, p.bidirectional, p.max_distance)?;
                Ok(Some(broadcast::add(g, &pos, mask)?))
            }
            _ => Ok(None),
        }
    }
}

/// Layer `i`'s feed-forward in stack `decoder`: Switch Transformers' sparse block where the spec
/// makes the layer sparse, the dense one otherwise; `h` holds `b` sequences.
#[allow(clippy::too_many_arguments)]
fn ffn(
    g: &Graph<'_>,
    s: &Seq2SeqSpec,
    w: &Weights,
    (n, m): (&LayerNames, &MlpSpec),
    (decoder, i): (bool, usize),
    h: &Tensor,
    b: usize,
) -> Result<Tensor> {
    match &s.switch {
        Some(sw) if sw.is_sparse(decoder, i) => switch::forward(g, w, sw, (decoder, i), h, b),
        _ => feed_forward(g, w, n, m, i, h),
    }
}

/// A dense feed-forward block under `names`: `down(act(up(h)))` or `down(glu(gate(h), up(h)))`.
fn feed_forward(g: &Graph<'_>, w: &Weights, n: &LayerNames, m: &MlpSpec, i: usize, h: &Tensor) -> Result<Tensor> {
    match m {
        MlpSpec::Plain { act, bias, .. } => {
            let up = project(g, w, &n.up, i, h, *bias)?;
            project(g, w, &n.down, i, &activation::activation(g, &up, *act)?, *bias)
        }
        MlpSpec::Gated { glu: kind, bias, .. } => {
            let gate = project(g, w, &n.gate, i, h, *bias)?;
            let up = project(g, w, &n.up, i, h, *bias)?;
            project(g, w, &n.down, i, &glu::glu(g, &gate, &up, *kind)?, *bias)
        }
        _ => Err(ModelError::Unsupported("a mixture-of-experts or sub-normed MLP in an encoder-decoder".into())),
    }
}
