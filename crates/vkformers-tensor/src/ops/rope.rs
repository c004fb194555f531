//! Rotary position embeddings on `x [B, T, H, D]` with int32 positions `pos [B, T]` and
//! `inv_freq [R / 2]` (f32): pair `i` of each head rotates by `theta = pos · inv_freq[i]`,
//! scaled by `mscale`; dims `R..D` pass through. Backward: the transposed rotation (by
//! `-theta`, same scale) of `dy`.

pub use vkformers_kernels::rope::RopeLayout;

use vkformers_kernels::dtype::{DType, Twin};
use vkformers_kernels::rope::{self as k, Rope};

use crate::{Graph, Result, Tensor, VkError};

fn err(message: String) -> VkError {
    VkError::Kernel { kernel: "rope".into(), message }
}

/// The kernel's shape description, checking `x [B, T, H, D]`, `pos [B, T]`, `inv_freq [R/2]`.
fn describe(
    x: &Tensor,
    pos: &Tensor,
    inv_freq: &Tensor,
    layout: RopeLayout,
    rotary_dim: usize,
    mscale: f32,
) -> Result<Rope> {
    let [b, t, h, d] = *x.shape() else {
        return Err(err(format!("x {:?} is not [B, T, H, D]", x.shape())));
    };
    if pos.numel() != b * t || inv_freq.numel() != rotary_dim / 2 {
        return Err(err(format!(
            "x {:?}: pos {:?} (need [{b}, {t}]) and inv_freq {:?} (need [{}])",
            x.shape(),
            pos.shape(),
            inv_freq.shape(),
            rotary_dim / 2
        )));
    }
    let to32 = |v: usize| u32::try_from(v).map_err(|_| err(format!("{v} does not fit in 32 bits")));
    Ok(Rope {
        batch: to32(b)?,
        seq: to32(t)?,
        heads: to32(h)?,
        head_dim: to32(d)?,
        rotary_dim: to32(rotary_dim)?,
        layout,
        mscale,
        dtype: DType::F32,
    })
}

/// `y [B, T, H, D] = rope(x)`: the first `rotary_dim` dims of every head rotated pairwise
/// (`layout`) by `pos [B, T] · inv_freq [rotary_dim / 2]` and scaled by `mscale`, the rest
/// copied.
pub fn rope(
    g: &Graph<'_>,
    x: &Tensor,
    pos: &Tensor,
    inv_freq: &Tensor,
    layout: RopeLayout,
    rotary_dim: usize,
    mscale: f32,
) -> Result<Tensor> {
    let p = describe(x, pos, inv_freq, layout, rotary_dim, mscale)?;
    let y = g.output(x.shape(), &[x])?;
    // Under autocast the 16-bit copy attention reads is written here (no cast).
    let twin = crate::ops::cast::twin(g, &y)?;
    g.record(|rec| match &twin {
        Some(t) => {
            let t = Twin { view: t.view(), dtype: t.dtype() };
            k::rope_forward_twin(rec, &p, (x.view(), pos.view(), inv_freq.view()), y.view(), t)
        }
        None => k::rope_forward(rec, &p, x.view(), pos.view(), inv_freq.view(), y.view()),
    })?;
    // Attention's backward may hand dy over in 16 bits (read here, widened exactly).
    crate::ops::cast::takes_half_grad(g, &y);
    push_node(g, p, (x, &y), (pos, inv_freq));
    Ok(y)
}

/// [`rope`] for 16-bit attention reading the output next and nothing else, and handing its o
/// to a product (a decoder's q and k, `attention_chunked_for_product`): in training under autocast, with attention's 16-bit gradients on, y is the 16-bit tensor
/// attention reads and no f32 y is written (4 bytes an element saved); attention's backward
/// hands dy over in 16 bits as it does to [`rope`]'s, so the values are the same. Else [`rope`].
pub fn rope_for_attention(
    g: &Graph<'_>,
    x: &Tensor,
    (pos, inv_freq): (&Tensor, &Tensor),
    (layout, rotary_dim, mscale): (RopeLayout, usize, f32),
) -> Result<Tensor> {
    // Only where attention would hand o_proj a 16-bit o anyway (rows the GEMM multiplies):
    // 16-bit q and k make o 16-bit.
    let rows = x.shape().iter().take(2).product();
    let half = crate::ops::cast::half_output_for_rows(g, rows).filter(|_| crate::ops::cast::half_grads_on(g));
    let Some(dt) = half.filter(|_| x.dtype() == DType::F32 && x.requires_grad()) else {
        return rope(g, x, pos, inv_freq, layout, rotary_dim, mscale);
    };
    let p = describe(x, pos, inv_freq, layout, rotary_dim, mscale)?;
    let y = g.output_as(x.shape(), dt, &[x])?;
    let t = Twin { view: y.view(), dtype: dt };
    g.record(|rec| k::rope_forward_twin_only(rec, &p, (x.view(), pos.view(), inv_freq.view()), t))?;
    if g.takes_half_grad(x) {
        // x is a product's output (q or k, reshaped) that takes its gradient in 16 bits: dx is
        // written in 16 bits only (the values of the f32 backward's twin).
        push_half_node(g, p, (x, &y), (pos, inv_freq));
    } else {
        push_node(g, p, (x, &y), (pos, inv_freq));
    }
    Ok(y)
}

/// The backward of [`rope_for_attention`]'s 16-bit `y` into a 16-bit dx only, from attention's
/// 16-bit dy.
fn push_half_node(g: &Graph<'_>, p: Rope, (x, y): (&Tensor, &Tensor), (pos, inv_freq): (&Tensor, &Tensor)) {
    let (pos, inv_freq, dt) = (pos.clone(), inv_freq.clone(), y.dtype());
    g.push_node(
        y,
        vec![x.clone()],
        Box::new(move |g, dy| {
            // dy comes in y's type from attention (widened to f32 by the tape only if summed).
            let dy = if dy.dtype() != dt { &crate::ops::cast::cast(g, dy, dt)? } else { dy };
            let dx = g.empty_as(dy.shape(), dt)?;
            let t = Twin { view: dx.view(), dtype: dt };
            g.record(|rec| k::rope_backward_in16_twin_only(rec, &p, (dy.view(), pos.view(), inv_freq.view()), t))?;
            Ok(vec![Some(dx)])
        }),
    );
}

/// The backward of `y = rope(x)`: dx f32 (and its 16-bit twin under autocast) from dy in f32
/// or, from attention, in the autocast type.
fn push_node(g: &Graph<'_>, p: Rope, (x, y): (&Tensor, &Tensor), (pos, inv_freq): (&Tensor, &Tensor)) {
    let (pos, inv_freq) = (pos.clone(), inv_freq.clone());
    g.push_node(
        y,
        vec![x.clone()],
        Box::new(move |g, dy| {
            let dx = g.empty(dy.shape())?;
            // Under autocast the 16-bit copy the q / k projection's backward reads is written here.
            let twin = crate::ops::cast::grad_twin(g, &dx)?;
            // A 16-bit dy with no twin to write (autocast turned off since the forward): widened.
            let dy = if twin.is_none() { &crate::ops::cast::cast(g, dy, DType::F32)? } else { dy };
            g.record(|rec| match &twin {
                Some(t) if dy.dtype() != DType::F32 => {
                    let t = Twin { view: t.view(), dtype: t.dtype() };
                    k::rope_backward_twin_in16(rec, &p, (dy.view(), pos.view(), inv_freq.view()), dx.view(), t)
                }
                Some(t) => {
                    let t = Twin { view: t.view(), dtype: t.dtype() };
                    k::rope_backward_twin(rec, &p, (dy.view(), pos.view(), inv_freq.view()), dx.view(), t)
                }
                None => k::rope_backward(rec, &p, dy.view(), pos.view(), inv_freq.view(), dx.view()),
            })?;
            Ok(vec![Some(dx)])
        }),
    );
}
