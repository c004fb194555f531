//! Inference: a layer's q, k and v weights (and its gate and up weights) as row blocks of one
//! packed weight `[n_q + n_k + n_v, in]`, so the forward runs them as one product.
//!
//! At a decode step of more rows than the GEMV takes (a batch of 64 on the H200) each product is
//! its own GEMM, and the narrow ones (k and v: a few hundred columns; gate and up: under one
//! 64 x 64 tile per SM) are split along K with a column-sum pass after: one packed product gives
//! the GEMM the whole grid. The loader allocates the packed weight and uploads every part into
//! its rows; the separate weights are views of those rows (`Graph::view_rows`), so LoRA,
//! `grouped`'s GEMV and any reader of the separate names work unchanged and the device holds
//! each weight once. Biases (Qwen2's q/k/v) are packed the same way. `VKFORMERS_FUSED_PROJ=0`
//! turns the packing (and so the packed products) off.
//!
//! Training packs trained parameters the same way (`crate::packed_train`; off with
//! `VKFORMERS_TRAIN_PACKED=0`): the parts are parameters of their own on the pack's rows.

use std::collections::HashMap;

use vkformers_tensor::{DType, Graph, Tensor};

use crate::error::Result;
use crate::spec::{layer_name, MlpSpec, ModelSpec};

/// Row blocks of packed weights must start on this many bytes (wide loads of the products).
const PART_ALIGN: u64 = 64;

/// One packed weight `[Σ rows, in]` and its packed bias `[Σ rows]` (when the parts have biases).
#[derive(Clone)]
pub(crate) struct Pack {
    pub(crate) weight: Tensor,
    pub(crate) bias: Option<Tensor>,
    /// Output columns of each part, in order (q, k, v or gate, up).
    pub(crate) cols: Vec<usize>,
    /// Ids of the part weights (views of `weight`'s rows) the loader made: a part replaced since
    /// (another tensor under its name) leaves the pack unused rather than stale.
    pub(crate) part_ids: Vec<u64>,
    /// Training: the parts are parameters (`Graph::parameter_rows` of `weight`, and of `bias`),
    /// read by the differentiable packed product (`crate::packed_train`).
    pub(crate) params: Option<(Vec<Tensor>, Option<Vec<Tensor>>)>,
}

/// The packed weights of a model, by the weight name of their first part
/// (`model.layers.0.self_attn.q_proj.weight`, `model.layers.0.mlp.gate_proj.weight`).
/// Clones share the packed tensors (a served model sharing its base's weights shares these).
#[derive(Clone)]
pub struct Packs {
    by_first: HashMap<String, Pack>,
    /// Whether the forward runs the packed products (tests compare both paths on one load).
    pub(crate) on: bool,
    /// Whether a decode step's rope + KV store reads q, k, v in place from the packed q/k/v
    /// product's rows (`decoder::packed_rope`) instead of after a split into three tensors.
    pub(crate) rope_in_place: bool,
    /// Whether a decode step's rope + KV store runs inside the decode attention
    /// (`decoder::packed_rope::rope_attend`) instead of in a dispatch of its own.
    pub(crate) rope_in_attention: bool,
}

impl Default for Packs {
    fn default() -> Self {
        Packs {
            by_first: HashMap::new(),
            on: true,
            rope_in_place: rope_in_place_enabled(),
            rope_in_attention: std::env::var("VKFORMERS_ROPE_IN_ATTN").map_or(true, |v| v != "0"),
        }
    }
}

/// Whether a decode step's rope reads the packed product in place: on unless
/// `VKFORMERS_PACKED_ROPE=0` (the A/B switch: the split dispatch runs again).
fn rope_in_place_enabled() -> bool {
    std::env::var("VKFORMERS_PACKED_ROPE").map_or(true, |v| v != "0")
}

impl Packs {
    /// The packed weight whose parts are exactly the weights `names`, when the forward should use
    /// it: packed products on, no LoRA term on any part.
    pub(crate) fn get(&self, w: &crate::decoder::Weights, names: &[String]) -> Option<&Pack> {
        if !self.on || names.iter().any(|n| w.lora().get(n).is_some()) {
            return None;
        }
        let p = self.by_first.get(names.first()?)?;
        let current = names.iter().zip(&p.part_ids).all(|(n, &id)| w.opt(n).is_some_and(|t| t.id() == id));
        (p.cols.len() == names.len() && current).then_some(p)
    }

    /// Number of packed weights.
    pub fn len(&self) -> usize {
        self.by_first.len()
    }

    pub fn is_empty(&self) -> bool {
        self.by_first.is_empty()
    }

    /// Reads q, k and v of a decode step's rope + KV store in place from the packed product
    /// (`on`, the default unless `VKFORMERS_PACKED_ROPE=0`), or from the split's three tensors
    /// (an A/B on one load: `weights.set_packs` with the changed clone).
    pub fn set_rope_in_place(&mut self, on: bool) {
        self.rope_in_place = on;
    }

    /// Runs a decode step's rope + KV store inside the decode attention (`on`, the default
    /// unless `VKFORMERS_ROPE_IN_ATTN=0`), or in a dispatch of its own before it (an A/B on one
    /// load: `weights.set_packs` with the changed clone).
    pub fn set_rope_in_attention(&mut self, on: bool) {
        self.rope_in_attention = on;
    }
}

/// `data` in the storage type `dtype` as little-endian bytes (16-bit: rounded to nearest even,
/// exact for values read from a file of that type).
fn stored_bytes(data: &[f32], dtype: DType) -> Vec<u8> {
    match dtype {
        DType::F32 => data.iter().flat_map(|x| x.to_le_bytes()).collect(),
        DType::F16 => data.iter().flat_map(|&x| half::f16::from_f32(x).to_bits().to_le_bytes()).collect(),
        DType::BF16 => data.iter().flat_map(|&x| half::bf16::from_f32(x).to_bits().to_le_bytes()).collect(),
    }
}

/// Whether the loader packs: on unless `VKFORMERS_FUSED_PROJ=0` (the A/B switch).
fn packing_enabled() -> bool {
    std::env::var("VKFORMERS_FUSED_PROJ").map_or(true, |v| v != "0")
}

/// The groups of weight names (and their bias names, when present) the forward may run as one
/// product: per layer q/k/v of the standard attention and gate/up of a gated (GLU) MLP.
fn groups(spec: &ModelSpec) -> Vec<(Vec<String>, Option<Vec<String>>)> {
    let n = &spec.layer_names;
    let named = |ts: &[&String], i: usize, s: &str| ts.iter().map(|t| format!("{}.{s}", layer_name(t, i))).collect();
    let mut out = Vec::new();
    for (i, layer) in spec.layers.iter().enumerate() {
        let a = &layer.attn;
        if a.mla.is_none() && a.moa.is_none() {
            let qkv = [&n.q, &n.k, &n.v];
            out.push((named(&qkv, i, "weight"), a.qkv_bias.then(|| named(&qkv, i, "bias"))));
        }
        if let MlpSpec::Gated { bias, .. } = &layer.mlp {
            let gu = [&n.gate, &n.up];
            out.push((named(&gu, i, "weight"), bias.then(|| named(&gu, i, "bias"))));
        }
    }
    out
}

/// Where the loader puts each packed part: the pack and the part's first row.
#[derive(Default)]
pub(crate) struct Packer {
    places: HashMap<String, (usize, usize)>,
    /// Each pack's tensor and the names of its parts (weights, then biases as their own pack).
    packs: Vec<(Tensor, Vec<String>)>,
    /// Weight packs: index of the weight pack, of its bias pack, and each part's rows.
    layers: Vec<(usize, Option<usize>, Vec<usize>)>,
    /// Names of the parts placed as parameters (row views that take gradients).
    trained: std::collections::HashSet<String>,
}

impl Packer {
    /// Plans and allocates the packs of the parameters `found` (internal name -> shape) whose
    /// parts are all frozen (`trainable` rejects them) or all trained (f32, placed as parameters:
    /// `crate::packed_train`), 2-D of one input width and one storage type (`narrow` names those
    /// kept in `dtype`), biases 1-D f32, every block aligned.
    pub(crate) fn plan(
        g: &Graph<'_>,
        spec: &ModelSpec,
        found: &HashMap<String, Vec<usize>>,
        trainable: &dyn Fn(&str) -> bool,
        (narrow, dtype): (&std::collections::HashSet<String>, DType),
    ) -> Result<Packer> {
        let mut p = Packer::default();
        if !packing_enabled() {
            return Ok(p);
        }
        let joined: std::collections::HashSet<&str> = spec.joins.iter().map(|j| j.internal.as_str()).collect();
        for (weights, biases) in groups(spec) {
            let all: Vec<&String> = weights.iter().chain(biases.iter().flatten()).collect();
            // Training packs parameters only where every part is one (never frozen and trained
            // parts in one pack), and `VKFORMERS_TRAIN_PACKED` is not 0.
            let train = all.iter().all(|n| trainable(n));
            let mixed = !train && all.iter().any(|n| trainable(n));
            if mixed || (train && !crate::packed_train::enabled()) {
                continue;
            }
            if all.iter().any(|n| joined.contains(n.as_str()) || !found.contains_key(*n)) {
                continue;
            }
            let shapes: Vec<&Vec<usize>> = weights.iter().map(|n| &found[n]).collect();
            let k = shapes[0].get(1).copied().unwrap_or(0);
            let narrowed = !train && narrow.contains(&weights[0]);
            let dt = if narrowed { dtype } else { DType::F32 };
            let rows: Vec<usize> = shapes.iter().map(|s| s[0]).collect();
            let aligned = rows.iter().scan(0u64, |at, r| {
                let ok = at.is_multiple_of(PART_ALIGN);
                *at += (r * k) as u64 * dt.bytes();
                Some(ok)
            });
            let same = shapes.iter().all(|s| s.len() == 2 && s[1] == k) && k > 0;
            let one_type = weights.iter().all(|n| narrow.contains(n) == narrowed);
            let bias_ok = biases.iter().flatten().zip(&rows).all(|(b, &r)| found[b] == [r]);
            if !same || !one_type || !bias_ok || !aligned.collect::<Vec<_>>().iter().all(|&a| a) {
                continue;
            }
            let total: usize = rows.iter().sum();
            let w = p.add(g.constant_uninit(&[total, k], dt)?, &weights, &rows);
            let b = match &biases {
                Some(names) => Some(p.add(g.constant_uninit(&[total], DType::F32)?, names, &rows)),
                None => None,
            };
            p.layers.push((w, b, rows));
            if train {
                p.trained.extend(all.iter().map(|n| (*n).clone()));
            }
        }
        Ok(p)
    }

    fn add(&mut self, t: Tensor, names: &[String], rows: &[usize]) -> usize {
        let at = self.packs.len();
        let mut row0 = 0;
        for (name, r) in names.iter().zip(rows) {
            self.places.insert(name.clone(), (at, row0));
            row0 += r;
        }
        self.packs.push((t, names.to_vec()));
        at
    }

    /// The parameter `name` as a view of its pack's rows, filled with `data` (converted to the
    /// pack's storage type, as the separate weight would have been), or `None` when `name` is
    /// not packed.
    pub(crate) fn place(
        &self,
        g: &Graph<'_>,
        name: &str,
        data: &[f32],
        shape: &[usize],
    ) -> Option<vkformers_tensor::Result<Tensor>> {
        let &(at, row0) = self.places.get(name)?;
        let pack = &self.packs[at].0;
        let trained = self.trained.contains(name);
        Some((|| {
            let rows = shape.first().copied().unwrap_or(1);
            let view = if trained { g.parameter_rows(pack, row0, rows)? } else { g.view_rows(pack, row0, rows)? };
            if view.shape() != shape {
                return Err(vkformers_tensor::VkError::Kernel {
                    kernel: "load".into(),
                    message: format!("`{name}` {shape:?} does not fit its packed rows {:?}", view.shape()),
                });
            }
            g.upload_into(&view, &stored_bytes(data, pack.dtype()))?;
            Ok(view)
        })())
    }

    /// The packs, by the weight name of their first part; `weights` holds the parts the loader
    /// placed (a pack with a part missing there is dropped).
    pub(crate) fn finish(self, weights: &crate::decoder::Weights) -> Packs {
        let mut by_first = HashMap::new();
        for (w, b, rows) in &self.layers {
            let (weight, names) = &self.packs[*w];
            let Some(part_ids) = names.iter().map(|n| weights.opt(n).map(Tensor::id)).collect() else { continue };
            let bias = b.map(|b| self.packs[b].0.clone());
            let params = self.trained.contains(&names[0]).then(|| self.part_params(weights, names, *b)).flatten();
            let pack = Pack { weight: weight.clone(), bias, cols: rows.clone(), part_ids, params };
            by_first.insert(names[0].clone(), pack);
        }
        Packs { by_first, ..Packs::default() }
    }

    /// The parameters placed as the parts of the weight pack `names` (and of its bias pack `b`).
    fn part_params(&self, weights: &crate::decoder::Weights, names: &[String], b: Option<usize>) -> Option<PartParams> {
        let get = |ns: &[String]| -> Option<Vec<Tensor>> { ns.iter().map(|n| weights.opt(n).cloned()).collect() };
        let bias = match b {
            Some(b) => Some(get(&self.packs[b].1)?),
            None => None,
        };
        Some((get(names)?, bias))
    }
}

/// The parameters of a trained pack's parts: weights, and biases when packed.
type PartParams = (Vec<Tensor>, Option<Vec<Tensor>>);

/// `x · W_packedᵀ (+ b) [rows, Σ n_p]` of the packed weight whose parts are the weights
/// `names`, with each part's output columns, or `None` where it does not apply: gradients on
/// with frozen parts, no such pack, packed products off, or a LoRA term on a part. Trained
/// parts run the differentiable product (`crate::packed_train`). One product where the separate
/// weights were as many (the values of each part's columns are those of its own product: the
/// same sums over `in`, unless the product's split along K changes with its width).
pub(crate) fn product(
    g: &Graph<'_>,
    w: &crate::decoder::Weights,
    x: &Tensor,
    names: &[String],
) -> Result<Option<(Tensor, Vec<usize>)>> {
    let Some(p) = w.packs().get(w, names) else { return Ok(None) };
    if let Some(params) = &p.params {
        // Trained parts: the differentiable product (also without gradients, as it keeps the
        // parts' 16-bit copies the row blocks of the packed one the optimizer rewrites).
        return Ok(Some((crate::packed_train::product(g, p, params, x)?, p.cols.clone())));
    }
    if g.grad_enabled() {
        return Ok(None);
    }
    let y = vkformers_tensor::ops::matmul::linear(g, x, &p.weight, p.bias.as_ref())?;
    Ok(Some((y, p.cols.clone())))
}

/// q, k and v `[rows, n_p]` of the packed product's output `y` (one split dispatch).
pub(crate) fn split_qkv(g: &Graph<'_>, y: &Tensor, cols: &[usize]) -> Result<(Tensor, Tensor, Tensor)> {
    // In training the split's backward gathers dq, dk, dv into one packed gradient of y.
    let mut parts = vkformers_tensor::ops::packed_split::split_cols_packed(g, y, cols)?.into_iter();
    match (parts.next(), parts.next(), parts.next()) {
        (Some(q), Some(k), Some(v)) => Ok((q, k, v)),
        _ => Err(crate::error::ModelError::Weights(format!("a packed q/k/v of {} parts", cols.len()))),
    }
}
