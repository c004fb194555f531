//! Softmax over the last dim: `y = exp(x - max) / sum(exp(x - max))`, x and y `[.., D]`.
//! Backward: `dx = y * (dy - sum(dy * y))`, from the saved output.

use vkformers_kernels::dtype::DType;
use vkformers_kernels::softmax as k;

use crate::ops::push_one_kernel_grad;
use crate::{Graph, Result, Tensor};

/// Softmax over the last dimension.
pub fn softmax(g: &Graph<'_>, x: &Tensor) -> Result<Tensor> {
    let (rows, d) = (x.rows(), x.last_dim());
    let y = g.output(x.shape(), &[x])?;
    g.record(|rec| k::forward(rec, x.view(), y.view(), rows, d, DType::F32))?;
    let saved = y.clone();
    push_one_kernel_grad(g, &y, x, move |rec, dy, dx| k::backward(rec, saved.view(), dy, dx, rows, d, DType::F32));
    Ok(y)
}
