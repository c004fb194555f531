//! Normalisation over the last dim of `x [.., D]`, with the per-row statistics saved for the
//! backward.
//!
//! - RMSNorm: `y = x · rstd · g`, `rstd = 1 / sqrt(mean(x²) + eps)`, `g` = 1, `w` or (Gemma's
//!   `unit_offset`) `1 + w`; `dw = Σ_rows dy · x · rstd`.
//! - LayerNorm: `y = (x - mean) · rstd · w + b` (biased variance); `dw = Σ_rows dy · x̂`,
//!   `db = Σ_rows dy`.
//!
//! Weight gradients are summed over rows deterministically by the kernels (partial sums in a
//! scratch buffer of `weight_grad_scratch_bytes`).

use vkformers_kernels::dtype::{DType, Twin};
use vkformers_kernels::norm::{self as k, LayerNorm, ParamGrads, RmsNorm};
use vkformers_vk::Buffer;

use crate::{Graph, Result, Tensor, VkError};

fn err(message: String) -> VkError {
    VkError::Kernel { kernel: "norm".into(), message }
}

/// `(rows, dim)` of `x [.., D]` as u32, checking that every parameter is `[D]`.
fn shape(what: &str, x: &Tensor, params: &[Option<&Tensor>]) -> Result<(u32, u32)> {
    let (rows, dim) = (x.rows(), x.last_dim());
    if x.shape().is_empty() || x.numel() == 0 {
        return Err(err(format!("{what}: x {:?} needs a non-empty last dim", x.shape())));
    }
    for p in params.iter().flatten() {
        if p.numel() != dim {
            return Err(err(format!("{what}: parameter {:?} for a last dim of {dim}", p.shape())));
        }
    }
    let to32 = |v: usize| u32::try_from(v).map_err(|_| err(format!("{what}: {v} does not fit in 32 bits")));
    Ok((to32(rows)?, to32(dim)?))
}

/// Scratch for the kernels' per-block partial weight sums.
fn scratch(g: &Graph<'_>, rows: u32, dim: u32) -> Result<Buffer> {
    g.ctx().buffer(k::weight_grad_scratch_bytes(rows, dim), "norm weight-grad scratch")
}

/// Fresh parameter-gradient tensors (shaped like `params`) when any of them needs one.
fn param_grads(g: &Graph<'_>, params: &[Option<Tensor>]) -> Result<Vec<Option<Tensor>>> {
    if !params.iter().flatten().any(Tensor::requires_grad) {
        return Ok(params.iter().map(|_| None).collect());
    }
    params.iter().map(|p| p.as_ref().map(|p| g.empty(p.shape())).transpose()).collect()
}

/// The node's inputs: `x` followed by the parameters that are present.
fn node_inputs(x: &Tensor, params: &[Option<&Tensor>]) -> Vec<Tensor> {
    std::iter::once(x).chain(params.iter().flatten().copied()).cloned().collect()
}

/// RMSNorm over the last dim: `x [.., D]`, optional `w [D]` (scaled as `1 + w` with
/// `unit_offset`) -> `y [.., D]`.
pub fn rms_norm(g: &Graph<'_>, x: &Tensor, w: Option<&Tensor>, eps: f32, unit_offset: bool) -> Result<Tensor> {
    let (rows, dim) = shape("rms_norm", x, &[w])?;
    let p = RmsNorm { rows, dim, eps, unit_offset, dtype: DType::F32 };
    let inputs = node_inputs(x, &[w]);
    let y = g.output(x.shape(), &inputs.iter().collect::<Vec<_>>())?;
    let rstd = g.empty(&[rows as usize])?;
    // Under autocast the 16-bit copy the next products read is written here (no cast).
    let twin = crate::ops::cast::twin(g, &y)?;
    g.record(|rec| match &twin {
        Some(t) => {
            let t = Twin { view: t.view(), dtype: t.dtype() };
            k::rms_norm_forward_twin(rec, &p, (x.view(), w.map(Tensor::view)), y.view(), t, rstd.view())
        }
        // One kernel with or without a tape, so a forward gives the same values in training and
        // in inference (lora_unit's dropout-off check compares the two bit for bit).
        None => k::rms_norm_forward(rec, &p, x.view(), w.map(Tensor::view), y.view(), rstd.view()),
    })?;
    push_rms_node(g, &p, (x, w), rstd, (&y, inputs));
    Ok(y)
}

/// Records the backward of `y = rms_norm(x)` (node inputs `inputs`: x and the weight, if any).
fn push_rms_node(
    g: &Graph<'_>,
    p: &RmsNorm,
    (x, w): (&Tensor, Option<&Tensor>),
    rstd: Tensor,
    (y, inputs): (&Tensor, Vec<Tensor>),
) {
    let (x, w, p) = (x.clone(), w.cloned(), *p);
    let (rows, dim) = (p.rows, p.dim);
    g.push_node(
        y,
        inputs,
        Box::new(move |g, dy| {
            let dx = g.empty(x.shape())?;
            // dx takes in the gradient x already has (the residual branch's): no add after.
            let prev = g.take_gathered_grad(&x);
            // Under autocast the 16-bit copy the backward products reading dx take (o_proj's
            // and down_proj's, through the residual adds).
            let twin = crate::ops::cast::grad_twin(g, &dx)?;
            let dw = param_grads(g, std::slice::from_ref(&w))?.remove(0);
            let scratch = dw.as_ref().map(|_| scratch(g, rows, dim)).transpose()?;
            g.record(|rec| {
                let grads = dw.as_ref().zip(scratch.as_ref()).map(|(dw, s)| ParamGrads {
                    dw: dw.view(),
                    db: None,
                    scratch: s.slice(0, s.size()),
                    accumulate: false,
                });
                let ins = (x.view(), w.as_ref().map(Tensor::view), rstd.view());
                let twin = twin.as_ref().map(|t| Twin { view: t.view(), dtype: t.dtype() });
                let out = k::DxOut { dx: dx.view(), prev: prev.as_ref().map(Tensor::view), twin };
                k::rms_norm_backward_acc(rec, &p, ins, dy.view(), out, grads)
            })?;
            Ok(std::iter::once(Some(dx)).chain(w.as_ref().map(|_| dw)).collect())
        }),
    );
}

/// `h = x + r` and `y = rms_norm(h)` (as [`rms_norm`]) of `x, r [.., D]` in one fused kernel
/// (a decoder's residual add and the norm after it: one dispatch, and h is not read back); in
/// training the tape still records the add and the norm as two ops (the add's gradient passes
/// to x and r, the norm's as [`rms_norm`]'s). Broadcast shapes run the two ops. Returns
/// `(h, y)`; the values are those of the add followed by the norm either way.
pub fn add_rms_norm(
    g: &Graph<'_>,
    (x, r): (&Tensor, &Tensor),
    w: Option<&Tensor>,
    eps: f32,
    unit_offset: bool,
) -> Result<(Tensor, Tensor)> {
    if x.shape() != r.shape() {
        let h = crate::ops::broadcast::add(g, x, r)?;
        let y = rms_norm(g, &h, w, eps, unit_offset)?;
        return Ok((h, y));
    }
    let (rows, dim) = shape("add_rms_norm", x, &[w])?;
    let p = RmsNorm { rows, dim, eps, unit_offset, dtype: DType::F32 };
    let h = g.output(x.shape(), &[x, r])?;
    let inputs = node_inputs(&h, &[w]);
    let y = g.output(x.shape(), &inputs.iter().collect::<Vec<_>>())?;
    let rstd = g.empty(&[rows as usize])?;
    let twin = crate::ops::cast::twin(g, &y)?;
    let (views, wv) = ((x.view(), r.view()), w.map(Tensor::view));
    g.record(|rec| match &twin {
        Some(t) => {
            let t = Twin { view: t.view(), dtype: t.dtype() };
            k::add_rms_norm_forward_twin(rec, &p, views, wv, h.view(), y.view(), t, rstd.view())
        }
        None => k::add_rms_norm_forward(rec, &p, views, wv, h.view(), y.view(), rstd.view()),
    })?;
    // dh reaches x and r unchanged (one tensor for both: the tape never updates it in place).
    g.push_node(&h, vec![x.clone(), r.clone()], Box::new(|_, dh| Ok(vec![Some(dh.clone()), Some(dh.clone())])));
    push_rms_node(g, &p, (&h, w), rstd, (&y, inputs));
    Ok((h, y))
}

/// [`rms_norm`] for products that read y next and nothing else (a decoder's attention or MLP
/// input): in training under autocast (and in inference where products read 16-bit twins) y
/// is the 16-bit tensor they read, and no f32 y is written (4 bytes an element saved; the backward works from x and rstd and takes dy in f32,
/// as [`rms_norm`]'s: the values are the same). Else [`rms_norm`] itself.
pub fn rms_norm_for_product(
    g: &Graph<'_>,
    x: &Tensor,
    w: Option<&Tensor>,
    eps: f32,
    unit_offset: bool,
) -> Result<Tensor> {
    let Some(dt) = half_output(g, &[x]) else {
        return rms_norm(g, x, w, eps, unit_offset);
    };
    let (rows, dim) = shape("rms_norm", x, &[w])?;
    let p = RmsNorm { rows, dim, eps, unit_offset, dtype: DType::F32 };
    let inputs = node_inputs(x, &[w]);
    let y = g.output_as(x.shape(), dt, &inputs.iter().collect::<Vec<_>>())?;
    let rstd = g.empty(&[rows as usize])?;
    let t = Twin { view: y.view(), dtype: dt };
    g.record(|rec| k::rms_norm_forward_twin_only(rec, &p, (x.view(), w.map(Tensor::view)), t, rstd.view()))?;
    if g.grad_enabled() {
        crate::ops::cast::takes_wide_grad(g, &y);
    }
    push_rms_node(g, &p, (x, w), rstd, (&y, inputs));
    Ok(y)
}

/// [`add_rms_norm`] with y for products only, as [`rms_norm_for_product`]: `(h, y)`, y 16-bit
/// in training under autocast (h f32 always).
pub fn add_rms_norm_for_product(
    g: &Graph<'_>,
    (x, r): (&Tensor, &Tensor),
    w: Option<&Tensor>,
    eps: f32,
    unit_offset: bool,
) -> Result<(Tensor, Tensor)> {
    let dt = half_output(g, &[x, r]).filter(|_| x.shape() == r.shape());
    let Some(dt) = dt else {
        return add_rms_norm(g, (x, r), w, eps, unit_offset);
    };
    let (rows, dim) = shape("add_rms_norm", x, &[w])?;
    let p = RmsNorm { rows, dim, eps, unit_offset, dtype: DType::F32 };
    let h = g.output(x.shape(), &[x, r])?;
    let inputs = node_inputs(&h, &[w]);
    let y = g.output_as(x.shape(), dt, &inputs.iter().collect::<Vec<_>>())?;
    let rstd = g.empty(&[rows as usize])?;
    let t = Twin { view: y.view(), dtype: dt };
    let (views, wv) = ((x.view(), r.view()), w.map(Tensor::view));
    g.record(|rec| k::add_rms_norm_forward_twin_only(rec, &p, views, wv, h.view(), t, rstd.view()))?;
    if g.grad_enabled() {
        crate::ops::cast::takes_wide_grad(g, &y);
    }
    // As add_rms_norm: dh reaches x and r unchanged.
    g.push_node(&h, vec![x.clone(), r.clone()], Box::new(|_, dh| Ok(vec![Some(dh.clone()), Some(dh.clone())])));
    push_rms_node(g, &p, (&h, w), rstd, (&y, inputs));
    Ok((h, y))
}

/// The 16-bit type of a `_for_product` norm's y: training under autocast (see
/// `cast::half_output_type`) on f32 inputs that carry gradients, or inference where the
/// products read 16-bit twins (`cast::inference_half_output`: no f32 y either, 4 bytes an
/// element of a prefill's activations saved).
fn half_output(g: &Graph<'_>, xs: &[&Tensor]) -> Option<DType> {
    let f32_in = xs.iter().all(|t| t.dtype() == DType::F32 && !t.shape().is_empty());
    if f32_in && !g.grad_enabled() {
        return crate::ops::cast::inference_half_output(g, xs[0].rows());
    }
    let wide = f32_in && xs.iter().all(|t| t.requires_grad());
    crate::ops::cast::half_output_for_rows(g, xs[0].rows()).filter(|_| wide)
}

/// LayerNorm over the last dim: `x [.., D]`, optional `w [D]` and `b [D]` (a bias needs a
/// weight) -> `y [.., D]`.
pub fn layer_norm(g: &Graph<'_>, x: &Tensor, w: Option<&Tensor>, b: Option<&Tensor>, eps: f32) -> Result<Tensor> {
    let (rows, dim) = shape("layer_norm", x, &[w, b])?;
    if b.is_some() && w.is_none() {
        return Err(err("layer_norm: a bias without a weight is not supported".into()));
    }
    let p = LayerNorm { rows, dim, eps, dtype: DType::F32 };
    let inputs = node_inputs(x, &[w, b]);
    let y = g.output(x.shape(), &inputs.iter().collect::<Vec<_>>())?;
    let mean = g.empty(&[rows as usize])?;
    let rstd = g.empty(&[rows as usize])?;
    g.record(|rec| {
        let (wv, bv) = (w.map(Tensor::view), b.map(Tensor::view));
        k::layer_norm_forward(rec, &p, x.view(), wv, bv, y.view(), mean.view(), rstd.view())
    })?;
    let (x, w, b) = (x.clone(), w.cloned(), b.cloned());
    g.push_node(
        &y,
        inputs,
        Box::new(move |g, dy| {
            let dx = g.empty(x.shape())?;
            let mut pg = param_grads(g, &[w.clone(), b.clone()])?.into_iter();
            let (dw, db) = (pg.next().flatten(), pg.next().flatten());
            let scratch = dw.as_ref().map(|_| scratch(g, rows, dim)).transpose()?;
            g.record(|rec| {
                let grads = dw.as_ref().zip(scratch.as_ref()).map(|(dw, s)| ParamGrads {
                    dw: dw.view(),
                    db: db.as_ref().map(Tensor::view),
                    scratch: s.slice(0, s.size()),
                    accumulate: false,
                });
                let wv = w.as_ref().map(Tensor::view);
                k::layer_norm_backward(rec, &p, x.view(), wv, mean.view(), rstd.view(), dy.view(), dx.view(), grads)
            })?;
            Ok(std::iter::once(Some(dx)).chain(w.as_ref().map(|_| dw)).chain(b.as_ref().map(|_| db)).collect())
        }),
    );
    Ok(y)
}

/// `LayerNorm(x + r)` over the last dim for inference (no tape: post-LN encoders), in one
/// dispatch with the same values as `broadcast::add` then `layer_norm`; the sum is not kept.
/// Inside `Graph::inference` under autocast, on rows a GEMM multiplies (not decoding's f32
/// GEMV), it also writes y's 16-bit copy, kept for the products that read y (no cast). `None`
/// (nothing recorded) while a tape records or when x, r, w, b are not all f32: use the two ops.
pub fn add_layer_norm_inference(
    g: &Graph<'_>,
    (x, r): (&Tensor, &Tensor),
    (w, b): (Option<&Tensor>, Option<&Tensor>),
    eps: f32,
) -> Result<Option<Tensor>> {
    let wide = [Some(x), Some(r), w, b].into_iter().flatten().all(|t| t.dtype() == DType::F32);
    if g.grad_enabled() || !wide || x.shape() != r.shape() || (b.is_some() && w.is_none()) {
        return Ok(None);
    }
    let (rows, dim) = shape("add_layer_norm", x, &[w, b])?;
    let p = LayerNorm { rows, dim, eps, dtype: DType::F32 };
    let y = g.empty(x.shape())?;
    let gemm_rows = !vkformers_kernels::matmul::gemv::gemv_applies(rows, g.ctx().caps());
    let half = g.autocast().filter(|dt| *dt != DType::F32 && gemm_rows && g.keeps_inference_casts());
    let twin = half.map(|dt| g.empty_as(x.shape(), dt)).transpose()?;
    g.record(|rec| {
        let tw = twin.as_ref().map(|t| Twin { view: t.view(), dtype: t.dtype() });
        k::add_layer_norm_forward(
            rec,
            &p,
            (x.view(), r.view()),
            (w.map(Tensor::view), b.map(Tensor::view)),
            y.view(),
            tw,
        )
    })?;
    if let Some(t) = &twin {
        g.keep_cast(&y, t);
    }
    Ok(Some(y))
}
