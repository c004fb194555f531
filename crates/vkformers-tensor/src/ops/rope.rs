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
    let (pos, inv_freq) = (pos.clone(), inv_freq.clone());
    g.push_node(
        &y,
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
    Ok(y)
}
