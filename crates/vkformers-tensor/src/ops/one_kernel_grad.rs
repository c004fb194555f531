//! The tape node of an op with one differentiable input whose backward is a single kernel: it
//! reads dy (and whatever the op saved) and writes a new f32 dx of the input's shape.

use vkformers_vk::{BufferView, Recorder};

use crate::{Graph, Result, Tensor};

/// Pushes `out`'s node with `x` its only input; backward records `grad(rec, dy, dx)` into a new
/// f32 `dx` shaped as x (`grad` captures what else the kernel reads: the saved input or output,
/// the row counts).
pub(crate) fn push_one_kernel_grad(
    g: &Graph<'_>,
    out: &Tensor,
    x: &Tensor,
    grad: impl FnOnce(&mut Recorder, BufferView<'_>, BufferView<'_>) -> Result<()> + 'static,
) {
    let shape = x.shape().to_vec();
    g.push_node(
        out,
        vec![x.clone()],
        Box::new(move |g, dy| {
            let dx = g.empty(&shape)?;
            g.record(|rec| grad(rec, dy.view(), dx.view()))?;
            Ok(vec![Some(dx)])
        }),
    );
}
