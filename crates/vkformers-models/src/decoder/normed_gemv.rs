//! Inference: a decode step's input RMSNorms (before the attention and before the MLP, with the
//! residual add before them) computed by the grouped GEMV that reads them
//! (`matmul::gemv::gemv_group_normed`: every workgroup sums its rows' squares over the hidden dim
//! while it loads x), so the norm needs no dispatch of its own: two launches and two dependent
//! barriers fewer a layer, the norm kernels being pure latency at batch 1 (one reduction over
//! the hidden dim). Taken only in KV-cached forwards whose few f32 rows run the q/k/v and
//! gate/up products through the grouped GEMV anyway (no biases, no LoRA term), for plain
//! pre-norm layers (RMSNorm, unscaled residual, no post-norms, no q/k norm, no MLA or mixture of
//! attention), without gradients. `VKFORMERS_NORM_GEMV=0` keeps the norm kernels, `1` forces the
//! fusion where it applies; by default it runs where `norm_fusion_pays` (not on CPU devices with
//! one-subgroup workgroups, as the GLU fusion). The values are the norm kernels' within f32
//! rounding (the sum of squares runs in another order).

use vkformers_kernels::matmul::gemv::{gemv_applies, gemv_group_normed, norm_fusion_pays, GemvDesc, NormedInput};
use vkformers_tensor::{DType, Graph, Tensor};

use super::{gated_down, grouped, Inputs, Weights};
use crate::error::Result;
use crate::spec::{layer_name, LayerSpec, MlpSpec, ModelSpec, Norm};

/// Products of a normed input recorded ahead of the code that asks for them (the attention's
/// q/k/v): the normed tensor they read (by id), the weights' names and the products.
pub(super) struct Prepared {
    normed: u64,
    names: Vec<String>,
    ys: Vec<Tensor>,
}

/// Whether to fold the input norms into the GEMV: `VKFORMERS_NORM_GEMV=0` or `1` forces it off
/// or on, otherwise where it pays (`norm_fusion_pays`).
fn enabled(g: &Graph<'_>) -> bool {
    match std::env::var("VKFORMERS_NORM_GEMV").as_deref() {
        Ok("0") => false,
        Ok("1") => true,
        _ => norm_fusion_pays(g.ctx().caps()),
    }
}

/// The RMSNorm parameters `(eps, unit_offset, gain)` of the norm `norm` named `name` where the
/// fusion takes it: an RMSNorm whose weight (if any) is f32 `[k]`.
fn rms_of<'w>(norm: &Option<Norm>, w: &'w Weights, name: &str, k: usize) -> Option<(f32, bool, Option<&'w Tensor>)> {
    let Some(Norm::Rms { eps, unit_offset }) = norm else { return None };
    let gain = w.opt(&format!("{name}.weight"));
    match gain {
        Some(t) if t.dtype() != DType::F32 || t.shape() != [k] => None,
        _ => Some((*eps, *unit_offset, gain)),
    }
}

/// The layer is a plain pre-norm layer of a KV-cached forward (decode steps; a forward without
/// a cache keeps the norm kernels, so its values stay those of the training graph bit for bit)
/// that this module may change: inference, sequential unscaled residuals, no post-norms, the
/// switch on.
fn plain_layer(g: &Graph<'_>, layer: &LayerSpec, inp: &Inputs<'_>) -> bool {
    !g.grad_enabled()
        && inp.cache.is_some()
        && layer.residual == crate::spec::Residual::Sequential
        && layer.residual_scale == 1.0
        && layer.post_attn_norm.is_none()
        && layer.post_mlp_norm.is_none()
        && enabled(g)
}

/// The outputs of one normed group: the sum `x + r` (with a residual), x̂ (when asked for) and
/// the products.
struct Normed {
    sum: Option<Tensor>,
    normed: Option<Tensor>,
    ys: Vec<Tensor>,
}

/// Records `y_p = rmsnorm(x (+ r)) · W_pᵀ` for the weights `names` (each `[n_p, k]`, no bias) in
/// one dispatch, or `None` where it does not apply: x (and r) not f32 `[m, k]` with m in the
/// GEMV's range, a weight missing, of another dtype or depth, or adapted by LoRA.
fn normed_products(
    g: &Graph<'_>,
    w: &Weights,
    (x, r): (&Tensor, Option<&Tensor>),
    (eps, unit_offset, gain): (f32, bool, Option<&Tensor>),
    names: &[String],
    write_normed: bool,
) -> Result<Option<Normed>> {
    let xs = x.shape();
    if x.dtype() != DType::F32 || xs.len() != 2 || r.is_some_and(|r| r.dtype() != DType::F32 || r.shape() != xs) {
        return Ok(None);
    }
    let (m, k) = (xs[0], xs[1]);
    let fits = |v: usize| u32::try_from(v).ok().filter(|&v| v > 0);
    let (Some(m32), Some(k32)) = (fits(m), fits(k)) else { return Ok(None) };
    if !gemv_applies(m32, g.ctx().caps()) {
        return Ok(None);
    }
    let Some(ws) = grouped::gemv_weights(w, names, k) else { return Ok(None) };
    let dtype = ws[0].dtype();
    let ys: Vec<Tensor> = ws.iter().map(|t| g.empty(&[m, t.shape()[0]])).collect::<std::result::Result<_, _>>()?;
    let sum = r.map(|_| g.empty(xs)).transpose()?;
    let normed = if write_normed { Some(g.empty(xs)?) } else { None };
    let parts: Vec<_> = ws.iter().zip(&ys).map(|(t, y)| (t.shape()[0] as u32, t.view(), y.view())).collect();
    let desc = GemvDesc::packed(m32, parts[0].0, k32, dtype);
    let norm = NormedInput {
        gain: gain.map(Tensor::view),
        unit_offset,
        eps,
        residual: r.zip(sum.as_ref()).map(|(r, s)| (r.view(), s.view())),
        normed: normed.as_ref().map(Tensor::view),
    };
    g.record(|rec| gemv_group_normed(rec, &desc, x.view(), &norm, &parts))?;
    Ok(Some(Normed { sum, normed, ys }))
}

/// Layer `i`'s attention input of a decode step: `(x + carry, h = rmsnorm(x + carry))` with the
/// q, k and v products of h recorded in the same dispatch and left in `inp` for the attention
/// (see [`products`]), or `None` where this does not apply (the norm then runs on its own).
/// h is written too (by one workgroup), so a reader of h other than the products reads it.
pub(super) fn attention_input(
    g: &Graph<'_>,
    spec: &ModelSpec,
    w: &Weights,
    (layer, i): (&LayerSpec, usize),
    (x, carry): (&Tensor, Option<&Tensor>),
    inp: &Inputs<'_>,
) -> Result<Option<(Tensor, Tensor)>> {
    let a = &layer.attn;
    if !plain_layer(g, layer, inp) || a.mla.is_some() || a.moa.is_some() || a.qkv_bias || a.qk_norm.is_some() {
        return Ok(None);
    }
    let n = &spec.layer_names;
    let Some(rms) = rms_of(&layer.attn_norm, w, &layer_name(&n.attn_norm, i), x.last_dim()) else { return Ok(None) };
    let names: Vec<String> = [&n.q, &n.k, &n.v].iter().map(|t| format!("{}.weight", layer_name(t, i))).collect();
    let Some(out) = normed_products(g, w, (x, carry), rms, &names, true)? else { return Ok(None) };
    let h = out.normed.expect("x̂ was asked for");
    *inp.prepared.borrow_mut() = Some(Prepared { normed: h.id(), names, ys: out.ys });
    Ok(Some((out.sum.unwrap_or_else(|| x.clone()), h)))
}

/// `[x · W_pᵀ]` for the weights `names`: the products [`attention_input`] prepared for this x and
/// these weights, else `grouped::products`.
pub(super) fn products(
    g: &Graph<'_>,
    w: &Weights,
    x: &Tensor,
    names: &[String],
    inp: &Inputs<'_>,
) -> Result<Option<Vec<Tensor>>> {
    let mut prepared = inp.prepared.borrow_mut();
    if prepared.as_ref().is_some_and(|p| p.normed == x.id() && p.names == names) {
        return Ok(prepared.take().map(|p| p.ys));
    }
    drop(prepared);
    grouped::products(g, w, x, names)
}

/// Whether products [`attention_input`] prepared were not taken (a path it did not foresee read
/// its h another way: the values are right, the work was done twice). Clears them.
pub(super) fn left_unused(inp: &Inputs<'_>) -> bool {
    inp.prepared.borrow_mut().take().is_some()
}

/// Layer `i`'s residual add after the attention, MLP norm and gated MLP of a decode step:
/// `(x + a, mlp(rmsnorm(x + a)))` with the norm and the add computed by the gate/up GEMV, or
/// `None` where this does not apply (a gated MLP without bias whose products run on the GEMV).
pub(super) fn add_norm_mlp(
    g: &Graph<'_>,
    spec: &ModelSpec,
    w: &Weights,
    (layer, i): (&LayerSpec, usize),
    (x, a): (&Tensor, &Tensor),
    inp: &Inputs<'_>,
) -> Result<Option<(Tensor, Tensor)>> {
    let MlpSpec::Gated { glu: kind, bias: false, .. } = layer.mlp else { return Ok(None) };
    if !plain_layer(g, layer, inp) {
        return Ok(None);
    }
    let n = &spec.layer_names;
    let Some(rms) = rms_of(&layer.mlp_norm, w, &layer_name(&n.mlp_norm, i), x.last_dim()) else { return Ok(None) };
    let names: Vec<String> = [&n.gate, &n.up].iter().map(|t| format!("{}.weight", layer_name(t, i))).collect();
    let Some(out) = normed_products(g, w, (x, Some(a)), rms, &names, false)? else { return Ok(None) };
    let (gate, up): (&Tensor, &Tensor) = (&out.ys[0], &out.ys[1]);
    let m = gated_down(g, w, i, (gate, up, kind), false, &n.down)?;
    Ok(Some((out.sum.expect("a residual was given"), m)))
}
