//! The decoder layer's two RMSNorms when products alone read their outputs: in training under
//! autocast the norm then writes only the 16-bit copy those products read (no f32 output:
//! `norm::rms_norm_for_product`). Only where that holds: a pre-norm (sequential) layer whose
//! attention is the plain q/k/v projections and whose MLP is gated, without LoRA terms on those
//! projections (their dropout reads f32). `None` elsewhere: the caller's usual norm.

use vkformers_tensor::ops::{cast, norm};
use vkformers_tensor::{Graph, Tensor};

use super::Weights;
use crate::error::Result;
use crate::spec::{layer_name, LayerSpec, MlpSpec, ModelSpec, Norm, Residual};

/// Whether layer `i` of a training graph defers its MLP's residual add into the next norm's
/// fused add + RMSNorm (as inference does): where both its norms write 16-bit outputs only
/// (so f32 training keeps its graph as it was). Saves the add's dispatch and one f32 read of
/// the sum per layer.
pub(super) fn defers_residual(
    g: &Graph<'_>,
    spec: &ModelSpec,
    w: &Weights,
    (layer, i): (&LayerSpec, usize),
    rows: usize,
) -> bool {
    let n = &spec.layer_names;
    let rms = |norm: &Option<Norm>| matches!(norm, Some(Norm::Rms { .. }));
    let shape = rms(&layer.attn_norm) && rms(&layer.mlp_norm) && layer.residual == Residual::Sequential;
    let plain = layer.attn.mla.is_none() && layer.attn.moa.is_none() && matches!(layer.mlp, MlpSpec::Gated { .. });
    let no_post = layer.post_attn_norm.is_none() && layer.post_mlp_norm.is_none() && layer.residual_scale == 1.0;
    let lora_free = no_lora(w, [&n.q, &n.k, &n.v], i) && no_lora(w, [&n.gate, &n.up], i);
    g.grad_enabled() && shape && plain && no_post && lora_free && cast::half_outputs_for(g, rows)
}

/// `(x + m, norm(x + m))` of layer `i`'s attention input (m: the layer before's MLP output,
/// deferred), the norm for the q/k/v products only.
pub(super) fn attn_input_after_add(
    g: &Graph<'_>,
    spec: &ModelSpec,
    w: &Weights,
    (layer, i): (&LayerSpec, usize),
    (x, m): (&Tensor, &Tensor),
) -> Result<Option<(Tensor, Tensor)>> {
    let Some((gain, eps, unit_offset)) = attn_rms(spec, w, (layer, i)) else { return Ok(None) };
    Ok(Some(norm::add_rms_norm_for_product(g, (x, m), gain, eps, unit_offset)?))
}

/// The attention input `norm(x)` of layer `i` for the q/k/v products only.
pub(super) fn attn_input(
    g: &Graph<'_>,
    spec: &ModelSpec,
    w: &Weights,
    (layer, i): (&LayerSpec, usize),
    x: &Tensor,
) -> Result<Option<Tensor>> {
    let Some((gain, eps, unit_offset)) = attn_rms(spec, w, (layer, i)) else { return Ok(None) };
    Ok(Some(norm::rms_norm_for_product(g, x, gain, eps, unit_offset)?))
}

/// Layer `i`'s attention RMSNorm (gain, eps, unit offset) where its output may be 16-bit only:
/// a pre-norm layer whose plain q/k/v projections carry no LoRA term. None elsewhere.
fn attn_rms<'w>(
    spec: &ModelSpec,
    w: &'w Weights,
    (layer, i): (&LayerSpec, usize),
) -> Option<(Option<&'w Tensor>, f32, bool)> {
    let n = &spec.layer_names;
    let (Some(Norm::Rms { eps, unit_offset }), Residual::Sequential) = (&layer.attn_norm, layer.residual) else {
        return None;
    };
    let plain = layer.attn.mla.is_none() && layer.attn.moa.is_none();
    if !plain || !no_lora(w, [&n.q, &n.k, &n.v], i) {
        return None;
    }
    Some((w.opt(&format!("{}.weight", layer_name(&n.attn_norm, i))), *eps, *unit_offset))
}

/// `(x + a, norm(x + a))` of layer `i`, the norm for the gate and up products only.
pub(super) fn mlp_input(
    g: &Graph<'_>,
    spec: &ModelSpec,
    w: &Weights,
    (layer, i): (&LayerSpec, usize),
    (x, a): (&Tensor, &Tensor),
) -> Result<Option<(Tensor, Tensor)>> {
    let n = &spec.layer_names;
    let (Some(Norm::Rms { eps, unit_offset }), Residual::Sequential) = (&layer.mlp_norm, layer.residual) else {
        return Ok(None);
    };
    let gated = matches!(layer.mlp, MlpSpec::Gated { .. });
    if !gated || layer.residual_scale != 1.0 || !no_lora(w, [&n.gate, &n.up], i) {
        return Ok(None);
    }
    let gain = w.opt(&format!("{}.weight", layer_name(&n.mlp_norm, i)));
    Ok(Some(norm::add_rms_norm_for_product(g, (x, a), gain, *eps, *unit_offset)?))
}

/// Whether none of layer `i`'s projections `templates` has a LoRA term.
fn no_lora<const N: usize>(w: &Weights, templates: [&String; N], i: usize) -> bool {
    templates.iter().all(|t| w.lora().get(&format!("{}.weight", layer_name(t, i))).is_none())
}
