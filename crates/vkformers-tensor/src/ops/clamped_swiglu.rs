//! gpt-oss's clamped SwiGLU on a fused `gate_up [.., 2I]` -> `[.., I]` (f32) and its backward
//! (see `vkformers_kernels::moe::clamped_swiglu`): `(clamp(u, −L, L) + 1) · g' · sigmoid(α g')`
//! with `g' = min(g, L)`; the gradient stops where a clamp is active, as torch's does.

use vkformers_kernels::moe::clamped_swiglu::{self as k, ClampedSwiGlu};

use crate::ops::push_one_kernel_grad;
use crate::{Graph, Result, Tensor, VkError};

/// `out [.., I]` of `gate_up [.., 2I]`.
pub fn clamped_swiglu(g: &Graph<'_>, gate_up: &Tensor, act: ClampedSwiGlu) -> Result<Tensor> {
    let two_inner = gate_up.last_dim();
    if gate_up.shape().is_empty() || !two_inner.is_multiple_of(2) {
        return Err(VkError::Kernel {
            kernel: "tensor clamped_swiglu".into(),
            message: format!("gate_up {:?} needs an even last dim", gate_up.shape()),
        });
    }
    let (rows, inner) = (gate_up.rows(), two_inner / 2);
    let mut shape = gate_up.shape().to_vec();
    if let Some(last) = shape.last_mut() {
        *last = inner;
    }
    let out = g.output(&shape, &[gate_up])?;
    g.record(|rec| k::forward(rec, act, gate_up.view(), out.view(), (rows, inner)))?;
    let saved = gate_up.clone();
    push_one_kernel_grad(g, &out, gate_up, move |rec, dout, dgate_up| {
        k::backward(rec, act, (saved.view(), dout), dgate_up, (rows, inner))
    });
    Ok(out)
}
