//! Shape changes of contiguous tensors that move no data.

use vkformers_vk::VkError;

use crate::{Graph, Result, Tensor};

/// The same elements under `shape` (same count), sharing storage; the gradient is reshaped
/// back. E.g. a linear output `[B*T, H*D]` viewed as `[B, T, H, D]` for attention.
pub fn reshape(g: &Graph<'_>, x: &Tensor, shape: &[usize]) -> Result<Tensor> {
    let n: usize = shape.iter().product();
    if n != x.numel() {
        return Err(VkError::Kernel { kernel: "reshape".into(), message: format!("{:?} to {shape:?}", x.shape()) });
    }
    let y = g.alias(x, shape);
    let in_shape = x.shape().to_vec();
    g.push_node(&y, vec![x.clone()], Box::new(move |g, dy| Ok(vec![Some(g.alias(dy, &in_shape))])));
    Ok(y)
}
