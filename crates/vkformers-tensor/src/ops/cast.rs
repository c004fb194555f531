//! Casts between f32 and the 16-bit storage types, as a tape op (`cast`: the gradient is cast
//! back to the input's type) and as the autocast helper the products use (`autocast_copy`: a
//! 16-bit copy of an f32 operand, kept for reuse, with no tape node of its own — the op that
//! reads it differentiates with respect to the f32 tensor).

use vkformers_kernels::dtype::cast as cast_kernel;

use crate::{DType, Graph, Result, Tensor, VkError};

/// `x` in `dtype` (round to nearest even for bf16, IEEE rounding for f16; a no-op clone when
/// already of that type). One side must be f32. Gradients flow back cast to `x`'s type.
pub fn cast(g: &Graph<'_>, x: &Tensor, dtype: DType) -> Result<Tensor> {
    if x.dtype() == dtype {
        return Ok(x.clone());
    }
    check_pair(x.dtype(), dtype)?;
    let y = g.output_as(x.shape(), dtype, &[x])?;
    g.record(|rec| cast_kernel(rec, x.view(), x.dtype(), y.view(), dtype))?;
    let from = x.dtype();
    g.push_node(&y, vec![x.clone()], Box::new(move |g, dy| Ok(vec![Some(cast(g, dy, from)?)])));
    Ok(y)
}

fn check_pair(from: DType, to: DType) -> Result<()> {
    if from != DType::F32 && to != DType::F32 {
        return Err(VkError::Kernel {
            kernel: "cast".into(),
            message: format!("{from:?} -> {to:?}: one side must be f32 (cast through f32)"),
        });
    }
    Ok(())
}

/// The `dtype` copy of `x` for a 16-bit product: `x` itself when already of that type, the
/// kept copy when `x` was cast before (a weight since the last optimizer step, or an
/// activation read by several products of one forward), else a fresh cast that is kept.
pub fn autocast_copy(g: &Graph<'_>, x: &Tensor, dtype: DType) -> Result<Tensor> {
    if x.dtype() == dtype {
        return Ok(x.clone());
    }
    if let Some(t) = g.cached_cast(x, dtype) {
        return Ok(t);
    }
    check_pair(x.dtype(), dtype)?;
    let y = g.empty_as(x.shape(), dtype)?;
    g.record(|rec| cast_kernel(rec, x.view(), x.dtype(), y.view(), dtype))?;
    g.keep_cast(x, &y);
    Ok(y)
}

/// A 16-bit copy of a gradient for one op's backward products: the twin the op that computed
/// the gradient wrote (`grad_twin`), else a fresh cast (not kept).
pub fn narrow(g: &Graph<'_>, x: &Tensor, dtype: DType) -> Result<Tensor> {
    if x.dtype() == dtype {
        return Ok(x.clone());
    }
    if let Some(t) = g.take_grad_cast(x, dtype) {
        return Ok(t);
    }
    check_pair(x.dtype(), dtype)?;
    let y = g.empty_as(x.shape(), dtype)?;
    g.record(|rec| cast_kernel(rec, x.view(), x.dtype(), y.view(), dtype))?;
    Ok(y)
}

/// The 16-bit twin an op producing the f32 activation `y` writes too, under autocast in
/// training, or inside `Graph::inference` for rows a GEMM multiplies (a prefill, or a decode
/// step of more rows than the GEMV takes): the products and attention that read `y` then find
/// it as `y`'s kept copy and run no cast; its values are `y` rounded exactly as the cast
/// kernels round. `None` when no product reads 16-bit copies (autocast off; plain `no_grad`,
/// where nothing would keep it; decoding's GEMV rows, which read f32).
pub(crate) fn twin(g: &Graph<'_>, y: &Tensor) -> Result<Option<Tensor>> {
    twin_for_rows(g, y, y.rows())
}

/// [`twin`] for a kernel outside this crate that can write the 16-bit copy of its f32 output
/// `y` itself (the paged decode attention's o), where a product of `rows` rows reads `y` next
/// (o `[B, T, Hq, Dv]` is o_proj's `[B·T, Hq·Dv]`): the copy to write, kept as `y`'s, or None
/// where none is wanted.
pub fn twin_for_rows(g: &Graph<'_>, y: &Tensor, rows: usize) -> Result<Option<Tensor>> {
    let wanted = g.grad_enabled() || inference_twin(g, rows);
    let Some(dt) = g.autocast().filter(|_| twins_on() && wanted && y.dtype() == DType::F32) else {
        return Ok(None);
    };
    let copy = g.empty_as(y.shape(), dt)?;
    g.keep_cast(y, &copy);
    Ok(Some(copy))
}

/// Whether an op writing `rows` rows inside `Graph::inference` writes its 16-bit twin too: on rows a
/// GEMM multiplies (decoding's GEMV reads the f32 rows, so a twin there would be written for
/// nothing). `Graph::set_inference_twins(false)` (or `VKFORMERS_INFERENCE_TWINS=0`) turns it
/// off: a cast dispatch before each product again, the same values.
fn inference_twin(g: &Graph<'_>, rows: usize) -> bool {
    g.inference_twins() && g.keeps_inference_casts() && gemm_rows(g, rows)
}

/// The 16-bit type an op writes instead of an f32 output that only products read, in
/// inference: where it would write a twin (`Graph::inference` under autocast, rows a GEMM
/// multiplies), the twin alone. None elsewhere.
pub(crate) fn inference_half_output(g: &Graph<'_>, rows: usize) -> Option<DType> {
    g.autocast().filter(|_| twins_on() && !g.grad_enabled() && inference_twin(g, rows))
}

/// Whether products of `rows` rows run on the GEMM (on 16-bit copies), not the GEMV (f32 rows).
fn gemm_rows(g: &Graph<'_>, rows: usize) -> bool {
    let caps = g.ctx().caps();
    u32::try_from(rows).is_ok_and(|m| !vkformers_kernels::matmul::gemv::gemv_applies(m, caps))
}

/// The 16-bit twin a backward kernel writing the f32 gradient `dx` writes too, under autocast:
/// the backward products that read `dx` (`narrow`) then run no cast. Kept until the backward
/// ends (or `dx` is dropped).
pub(crate) fn grad_twin(g: &Graph<'_>, dx: &Tensor) -> Result<Option<Tensor>> {
    let Some(dt) = g.autocast().filter(|_| twins_on() && dx.dtype() == DType::F32) else {
        return Ok(None);
    };
    let copy = g.empty_as(dx.shape(), dt)?;
    g.keep_grad_cast(dx, &copy);
    Ok(Some(copy))
}

/// Marks `y` (an op's f32 output) as taking its gradient in the autocast type too, in training
/// under autocast: its backward reads a 16-bit gradient directly (RoPE's, a product's), so the op
/// that computes that gradient in 16 bits (attention's backward) hands it over as is, with no
/// widening cast (the tape widens it where it must add it to another). Off with the twins, or
/// with `VKFORMERS_ATTN_CASTS=1` (attention's casts as before, for an A/B).
pub(crate) fn takes_half_grad(g: &Graph<'_>, y: &Tensor) {
    if half_grads_on(g) && y.dtype() == DType::F32 {
        g.set_takes_half_grad(y);
    }
}

/// Whether 16-bit activations and gradients pass between training attention and its
/// neighbours (see [`takes_half_grad`]).
pub(crate) fn half_grads_on(g: &Graph<'_>) -> bool {
    static ON: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    let on = *ON.get_or_init(|| std::env::var_os("VKFORMERS_ATTN_CASTS").is_none());
    on && twins_on() && g.autocast().is_some() && g.grad_enabled()
}

/// The 16-bit type an op hands its only reader, a product, instead of an f32 output and its
/// twin (`glu_for_product`): in training under autocast with the twins on (the f32 output
/// would be written and never read). None otherwise, or with `VKFORMERS_WIDE_OUTPUTS=1` (the
/// f32 outputs written as before, for an A/B; the values are the same either way).
pub(crate) fn half_output_type(g: &Graph<'_>) -> Option<DType> {
    let training = g.grad_enabled() && !g.discarding_nodes();
    g.autocast().filter(|_| half_outputs_on() && training)
}

/// [`half_output_type`] for an output of `rows` rows that products read: only where those
/// products run the GEMM on 16-bit copies (a few rows take the GEMV, which reads f32 rows: the
/// f32 output stays then, so the values never depend on this choice).
pub(crate) fn half_output_for_rows(g: &Graph<'_>, rows: usize) -> Option<DType> {
    half_output_type(g).filter(|_| gemm_rows(g, rows))
}

/// Whether the `_for_product` ops (norms, GLU) hand products 16-bit outputs of `rows` rows
/// in this graph's current mode (training under autocast, rows the GEMM multiplies): a model
/// may arrange its graph for them (a decoder defers its residual add into the next norm).
pub fn half_outputs_for(g: &Graph<'_>, rows: usize) -> bool {
    half_output_for_rows(g, rows).is_some()
}

/// Whether ops may write 16-bit outputs and gradients in place of f32 ones nothing reads
/// (see [`half_output_type`]; a backward runs with grad mode off, so it asks this).
pub(crate) fn half_outputs_on() -> bool {
    static ON: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *ON.get_or_init(|| std::env::var_os("VKFORMERS_WIDE_OUTPUTS").is_none()) && twins_on()
}

/// Marks the 16-bit output `y` of an op whose backward takes its gradient in f32 (the op
/// stands for an f32 op whose output only a product reads, see [`half_output_type`]): the
/// product hands dA over in f32, unrounded, as it would for the f32 output. (The tape's mark
/// `takes_half_grad` means, on a 16-bit tensor, "its gradient comes in the other width": f32.)
pub(crate) fn takes_wide_grad(g: &Graph<'_>, y: &Tensor) {
    if y.dtype() != DType::F32 {
        g.set_takes_half_grad(y);
    }
}

/// Whether the 16-bit `x` takes an f32 gradient ([`takes_wide_grad`]).
pub(crate) fn wants_wide_grad(g: &Graph<'_>, x: &Tensor) -> bool {
    x.dtype() != DType::F32 && g.takes_half_grad(x)
}

/// `VKFORMERS_NO_TWINS=1` turns the twins off (a cast dispatch per copy again, as before
/// them): for comparing the two on one binary; the values are the same either way.
fn twins_on() -> bool {
    static ON: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *ON.get_or_init(|| std::env::var_os("VKFORMERS_NO_TWINS").is_none())
}
