//! Softmax over the last dim: `y = exp(x - max) / sum(exp(x - max))`, x and y `[.., D]`.
//! Backward: `dx = y * (dy - sum(dy * y))`, from the saved output.

use vkformers_kernels::dtype::DType;
use vkformers_kernels::softmax as k;

use crate::{Graph, Result, Tensor};

/// Softmax over the last dimension.
pub fn softmax(g: &Graph<'_>, x: &Tensor) -> Result<Tensor> {
    let (rows, d) = (x.rows(), x.last_dim());
    let y = g.output(x.shape(), &[x])?;
    g.record(|rec| k::forward(rec, x.view(), y.view(), rows, d, DType::F32))?;
    let saved = y.clone();
    g.push_node(
        &y,
        vec![x.clone()],
        Box::new(move |g, dy| {
            let dx = g.empty(saved.shape())?;
            g.record(|rec| k::backward(rec, saved.view(), dy.view(), dx.view(), rows, d, DType::F32))?;
            Ok(vec![Some(dx)])
        }),
    );
    Ok(y)
}
