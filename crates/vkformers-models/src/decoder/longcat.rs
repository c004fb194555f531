//! LongCat-Flash's layers in the decoder graph. Each transformers layer `L` is two sublayers
//! (`spec.layers[2L]`, `spec.layers[2L + 1]`: attention + dense MLP each, Llama pre-norm) and one
//! shortcut MoE on the first sublayer's MLP input, added after the second:
//!
//! ```text
//! x1 = x  + attn0(n0(x));   h = m0(x1);   s = moe(h);   x2 = x1 + mlp0(h)
//! x3 = x2 + attn1(n1(x2));  x4 = x3 + mlp1(m1(x3)) + s
//! ```
//!
//! The MoE routes over E experts and Z zero-computation experts (identity: the token itself times
//! its weight): `p = softmax(logits [n, E+Z])`, the k largest `p + bias` chosen (the stored
//! `e_score_correction_bias`, a buffer), weights `p` of the chosen, not renormalised, times
//! `routed_scaling_factor`. The grouped expert products run on k slots a token: its chosen
//! routed experts first, then (weight 0, exact: 0 · a finite output adds nothing, and its
//! weight's gradient reaches no score) the lowest unchosen routed ones, so no slot names an
//! identity expert; the identity experts add `(Σ_z w_z) · h`.

use vkformers_tensor::ops::checkpoint::checkpoint;
use vkformers_tensor::ops::{broadcast, embedding, glu, matmul, moe, reduce, shape, softmax};
use vkformers_tensor::{Graph, Tensor, VkError};

use super::{maybe_norm, mlp, residual_add, self_attention, Inputs, LayerCtx, Weights};
use crate::error::{ModelError, Result};
use crate::moe::{MoeNames, MoeSpec, Router};
use crate::spec::{layer_name, JoinEntry, ModelSpec};
use vkformers_kernels::glu::Glu;

/// LongCat-Flash's shortcut MoE of every layer (names with `{i}` = the transformers layer).
#[derive(Clone, Debug, PartialEq)]
pub struct ShortcutMoe {
    /// The block: `experts` = E + Z (the router's width and the stored gate/up stacks,
    /// `gate_up [(E+Z)·2I, H]`, transformers keeps unused ones for the identity experts);
    /// `down [E·H, I]` holds the E routed experts only. `router` is unused (see above).
    pub moe: MoeSpec,
    /// E, the routed experts (the first E of the router's columns).
    pub routed: usize,
    /// The correction bias buffer `[E + Z]`.
    pub bias: String,
}

impl ShortcutMoe {
    /// LongCat-Flash's block of `(E, Z, k, I)` (routed and identity experts, top-k, expert
    /// intermediate size) under its stored names (`model.layers.{i}.mlp.*`).
    pub fn new((e, z, top_k, inter): (usize, usize, usize, usize), glu: Glu, routed_scale: f32) -> Result<Self> {
        let p = "model.layers.{i}.mlp";
        let names = MoeNames {
            router: format!("{p}.router.classifier.weight"),
            gate_up: format!("{p}.experts.gate_up_proj"),
            up: None,
            down: format!("{p}.experts.down_proj"),
            expert_gate: format!("{p}.experts.{{e}}.gate_proj.weight"),
            expert_up: format!("{p}.experts.{{e}}.up_proj.weight"),
            expert_down: format!("{p}.experts.{{e}}.down_proj.weight"),
        };
        // Unused: the shortcut block routes itself (softmax + correction bias, no renormalisation).
        let router = Router::SoftmaxTopK { renormalize: false };
        let moe = MoeSpec { routed_scale, ..MoeSpec::plain(e + z, top_k, inter, glu, router, names) };
        moe.check()?;
        Ok(ShortcutMoe { moe, routed: e, bias: format!("{p}.router.e_score_correction_bias") })
    }

    /// The parameters (internal names, shapes) of layer `i`'s MoE with hidden size `h`; the
    /// last is the buffer.
    pub fn params(&self, i: usize, h: usize) -> Vec<(String, Vec<usize>)> {
        let (m, n) = (&self.moe, &self.moe.names);
        let (all, inter) = (m.experts, m.intermediate);
        vec![
            (layer_name(&n.router, i), vec![all, h]),
            (layer_name(&n.gate_up, i), vec![all * 2 * inter, h]),
            (layer_name(&n.down, i), vec![self.routed * h, inter]),
            (layer_name(&self.bias, i), vec![all]),
        ]
    }

    /// The joins of layer `i`'s per-expert stored tensors: gate and up of all E + Z experts,
    /// down of the E routed ones (what transformers saves).
    pub fn joins(&self, i: usize) -> Vec<JoinEntry> {
        let n = &self.moe.names;
        let expert = |t: &str, e: usize| layer_name(t, i).replace("{e}", &e.to_string());
        let gate_up = (0..self.moe.experts).flat_map(|e| [expert(&n.expert_gate, e), expert(&n.expert_up, e)]);
        vec![
            JoinEntry { internal: layer_name(&n.gate_up, i), parts: gate_up.collect() },
            JoinEntry {
                internal: layer_name(&n.down, i),
                parts: (0..self.routed).map(|e| expert(&n.expert_down, e)).collect(),
            },
        ]
    }
}

/// The layers of `spec` (sublayer pairs) on `x [B·T, H]` (see the module comment); with `owned`
/// (gradient checkpointing) each pair keeps only its input and is recomputed in backward.
#[allow(clippy::too_many_arguments)]
pub(super) fn layer_pairs(
    g: &Graph<'_>,
    spec: &ModelSpec,
    w: &Weights,
    sc: &ShortcutMoe,
    x: &Tensor,
    inp: &Inputs<'_>,
    bt: (usize, usize),
    owned: Option<&LayerCtx>,
) -> Result<Tensor> {
    if !spec.layers.len().is_multiple_of(2) {
        return Err(ModelError::Config(format!("{} sublayers: LongCat-Flash has two a layer", spec.layers.len())));
    }
    let mut x = x.clone();
    for j in (0..spec.layers.len()).step_by(2) {
        x = match owned {
            Some(o) => {
                let o = o.clone();
                checkpoint(g, std::slice::from_ref(&x), move |g, xs| {
                    let (spec, w, inp) = &*o;
                    let kernel = format!("layers {j}, {}", j + 1);
                    let sc = spec.shortcut_moe.as_deref().ok_or_else(|| VkError::Kernel {
                        kernel: kernel.clone(),
                        message: "no shortcut MoE in the recomputed spec".into(),
                    })?;
                    pair(g, (spec, w, sc), j, &xs[0], inp, bt).map_err(|e| match e {
                        ModelError::Device(e) => e,
                        e => VkError::Kernel { kernel, message: e.to_string() },
                    })
                })?
            }
            None => pair(g, (spec, w, sc), j, &x, inp, bt)?,
        };
    }
    Ok(x)
}

/// Sublayers `j` and `j + 1` with their shortcut MoE (one transformers layer).
fn pair(
    g: &Graph<'_>,
    (spec, w, sc): (&ModelSpec, &Weights, &ShortcutMoe),
    j: usize,
    x: &Tensor,
    inp: &Inputs<'_>,
    bt: (usize, usize),
) -> Result<Tensor> {
    let names = &spec.layer_names;
    let (mut x, mut shortcut) = (x.clone(), None);
    for s in [j, j + 1] {
        let layer = &spec.layers[s];
        let h = maybe_norm(g, &layer.attn_norm, w, &names.attn_norm, s, &x)?;
        let a = self_attention(g, spec, w, &layer.attn, s, &h, inp, bt)?;
        x = residual_add(g, layer, &x, &a)?;
        let h = maybe_norm(g, &layer.mlp_norm, w, &names.mlp_norm, s, &x)?;
        if s == j {
            shortcut = Some(shortcut_moe(g, w, sc, j / 2, &h, inp)?);
        }
        x = residual_add(g, layer, &x, &mlp(g, spec, w, &layer.mlp, s, &h)?)?;
    }
    match shortcut {
        Some(y) => Ok(broadcast::add(g, &x, &y)?),
        None => Ok(x),
    }
}

/// A constant row `[1, cols]`: `inside` where column `c < split`, `outside` elsewhere.
fn split_row(
    g: &Graph<'_>,
    inp: &Inputs<'_>,
    (cols, split): (usize, usize),
    (inside, outside): (f32, f32),
) -> Result<Tensor> {
    inp.constant(g, format!("longcat split {cols} {split} {inside} {outside}"), &[1, cols], || {
        (0..cols).map(|c| if c < split { inside } else { outside }).collect()
    })
}

/// `y [n, H]` of layer `i`'s shortcut MoE on `h [n, H]` (see the module comment).
fn shortcut_moe(
    g: &Graph<'_>,
    w: &Weights,
    sc: &ShortcutMoe,
    i: usize,
    h: &Tensor,
    inp: &Inputs<'_>,
) -> Result<Tensor> {
    let m = &sc.moe;
    let (n, hidden, all, k) = (h.rows(), h.last_dim(), m.experts, m.top_k);
    let router = layer_name(&m.names.router, i);
    let logits = crate::lora::linear(g, h, w.get(&router)?, None, w.lora(), &router)?;
    let probs = softmax::softmax(g, &logits)?;
    let choice = moe::topk(g, &broadcast::add(g, &probs, w.get(&layer_name(&sc.bias, i))?)?, k)?;
    // The weights of every expert [n, E+Z]: the chosen p times the scale, zero elsewhere.
    let weights = broadcast::scale(g, &broadcast::mul(g, &probs, &choice.sel)?, m.routed_scale)?;
    let identity = broadcast::mul(g, &weights, &split_row(g, inp, (all, sc.routed), (0.0, 1.0))?)?;
    let identity = shape::reshape(g, &reduce::sum_last(g, &identity)?, &[n, 1])?;
    // k slots on routed experts: chosen ones (1) before unchosen (0), identity ones (−10³⁰) never.
    let slots = broadcast::add(g, &choice.sel, &split_row(g, inp, (all, sc.routed), (0.0, -1e30))?)?;
    let slots = moe::topk(g, &slots, k)?;
    let table = shape::reshape(g, &weights, &[n * all, 1])?;
    let wk = shape::reshape(g, &embedding::embedding(g, &table, &slots.flat)?, &[n, 1, k])?;
    let groups = moe::group(g, &slots.ids, all)?;
    let xs = embedding::embedding(g, h, &groups.token)?;
    let stack = |name: &str| crate::moe::lora::expert_weight(g, w, &layer_name(name, i));
    let act = glu::glu_fused(g, &moe::grouped_linear(g, &xs, &stack(&m.names.gate_up)?, &groups)?, m.glu)?;
    // The down stack holds the E routed experts only: its products group the same slots over E
    // (the sort is stable and every slot is on a routed expert, so the order is the same).
    let routed = moe::group(g, &slots.ids, sc.routed)?;
    let out = moe::grouped_linear(g, &act, &stack(&m.names.down)?, &routed)?;
    let per = shape::reshape(g, &embedding::embedding(g, &out, &groups.slot)?, &[n, k, hidden])?;
    let y = shape::reshape(g, &matmul::matmul(g, &wk, &per)?, &[n, hidden])?;
    Ok(broadcast::add(g, &y, &broadcast::mul(g, &identity, h)?)?)
}
