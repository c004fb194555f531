//! Elementwise binary ops with numpy broadcasting (`out = a (op) b`, operands of up to 4
//! dims, out of the broadcast shape) and `scale` (`out = alpha * x`).
//!
//! Backward, with `S = sum_to_shape` (sums the output-shaped gradient over the dims where an
//! operand is broadcast) and upstream gradient `g`:
//! add: da = S(g), db = S(g); sub: da = S(g), db = -S(g); mul: da = S(g * b), db = S(g * a);
//! div: da = S(g / b), db = -S(g / b * a / b); scale: dx = alpha * g.

use vkformers_kernels::broadcast::{self as k, BinaryOp};
use vkformers_kernels::dtype::DType;

use crate::ops::push_one_kernel_grad;
use crate::{Graph, Result, Tensor, VkError};

/// `a + b` with broadcasting; a [a_shape], b [b_shape], out [broadcast shape].
pub fn add(g: &Graph<'_>, a: &Tensor, b: &Tensor) -> Result<Tensor> {
    binary(g, BinaryOp::Add, a, b)
}

/// `a - b` with broadcasting; a [a_shape], b [b_shape], out [broadcast shape].
pub fn sub(g: &Graph<'_>, a: &Tensor, b: &Tensor) -> Result<Tensor> {
    binary(g, BinaryOp::Sub, a, b)
}

/// `a * b` with broadcasting; a [a_shape], b [b_shape], out [broadcast shape].
pub fn mul(g: &Graph<'_>, a: &Tensor, b: &Tensor) -> Result<Tensor> {
    binary(g, BinaryOp::Mul, a, b)
}

/// `a / b` with broadcasting; a [a_shape], b [b_shape], out [broadcast shape].
pub fn div(g: &Graph<'_>, a: &Tensor, b: &Tensor) -> Result<Tensor> {
    binary(g, BinaryOp::Div, a, b)
}

/// `out = alpha * x`; x, out [..].
pub fn scale(g: &Graph<'_>, x: &Tensor, alpha: f32) -> Result<Tensor> {
    let out = g.output(x.shape(), &[x])?;
    g.record(|rec| k::scale(rec, x.view(), out.view(), alpha, DType::F32))?;
    push_one_kernel_grad(g, &out, x, move |rec, dout, dx| k::scale(rec, dout, dx, alpha, DType::F32));
    Ok(out)
}

/// `a (op) b` with broadcasting, and its backward node.
fn binary(g: &Graph<'_>, op: BinaryOp, a: &Tensor, b: &Tensor) -> Result<Tensor> {
    let shape = k::broadcast_shape(a.shape(), b.shape()).ok_or_else(|| VkError::Kernel {
        kernel: "tensor broadcast".into(),
        message: format!("shapes {:?} and {:?} do not broadcast", a.shape(), b.shape()),
    })?;
    let out = g.output(&shape, &[a, b])?;
    g.record(|rec| k::binary(rec, op, (a.view(), a.shape()), (b.view(), b.shape()), out.view(), DType::F32))?;
    let (sa, sb) = (a.clone(), b.clone());
    g.push_node(
        &out,
        vec![a.clone(), b.clone()],
        Box::new(move |g, dout| {
            let (da, db) = binary_backward(g, op, &sa, &sb, dout)?;
            Ok(vec![da, db])
        }),
    );
    Ok(out)
}

/// Gradients (da [a_shape], db [b_shape]) of `a (op) b` from dout [broadcast shape]; only
/// for the operands that require them.
fn binary_backward(
    g: &Graph<'_>,
    op: BinaryOp,
    a: &Tensor,
    b: &Tensor,
    dout: &Tensor,
) -> Result<(Option<Tensor>, Option<Tensor>)> {
    let (need_a, need_b) = (a.requires_grad(), b.requires_grad());
    let da = |t: &Tensor| if need_a { reduced(g, t, a.shape()).map(Some) } else { Ok(None) };
    match op {
        BinaryOp::Add => Ok((da(dout)?, grad_if(need_b, || reduced(g, dout, b.shape()))?)),
        BinaryOp::Sub => Ok((da(dout)?, grad_if(need_b, || negated_sum(g, dout, b.shape()))?)),
        BinaryOp::Mul => {
            let da = grad_if(need_a, || product_sum(g, BinaryOp::Mul, dout, b, a.shape()))?;
            let db = grad_if(need_b, || product_sum(g, BinaryOp::Mul, dout, a, b.shape()))?;
            Ok((da, db))
        }
        BinaryOp::Div => {
            // q = g / b serves both: da = S(q), db = -S(q * a / b).
            let q = apply(g, BinaryOp::Div, dout, b)?;
            let db = grad_if(need_b, || {
                let qa = apply(g, BinaryOp::Mul, &q, a)?;
                negated_sum(g, &apply(g, BinaryOp::Div, &qa, b)?, b.shape())
            })?;
            Ok((da(&q)?, db))
        }
    }
}

/// `S(x)` down to `shape`, or `x` itself (shared, no dispatch) when nothing is broadcast: the
/// residual and LoRA adds `[N, out] + [N, out]` would otherwise copy every gradient (a serial
/// kernel, ~10-17 ms for `[1024, 704]` on lavapipe). The tape never updates a gradient in place,
/// so both operands may hold the same tensor.
fn reduced(g: &Graph<'_>, x: &Tensor, shape: &[usize]) -> Result<Tensor> {
    if x.shape() == shape {
        return Ok(x.clone());
    }
    sum_to_shape(g, x, shape)
}

/// `Some(f())` when `need`, else `None`.
fn grad_if(need: bool, f: impl FnOnce() -> Result<Tensor>) -> Result<Option<Tensor>> {
    if need {
        f().map(Some)
    } else {
        Ok(None)
    }
}

/// A new tensor `x (op) y` (broadcasting; no tape node, for backward passes).
fn apply(g: &Graph<'_>, op: BinaryOp, x: &Tensor, y: &Tensor) -> Result<Tensor> {
    let shape = k::broadcast_shape(x.shape(), y.shape()).unwrap_or_else(|| x.shape().to_vec());
    let out = g.empty(&shape)?;
    g.record(|rec| k::binary(rec, op, (x.view(), x.shape()), (y.view(), y.shape()), out.view(), DType::F32))?;
    Ok(out)
}

/// `S(x (op) y)` down to `shape`; writes the product straight into the result when no
/// reduction is needed.
fn product_sum(g: &Graph<'_>, op: BinaryOp, x: &Tensor, y: &Tensor, shape: &[usize]) -> Result<Tensor> {
    let p = apply(g, op, x, y)?;
    if p.shape() == shape {
        return Ok(p);
    }
    sum_to_shape(g, &p, shape)
}

/// `-S(x)` down to `shape`.
fn negated_sum(g: &Graph<'_>, x: &Tensor, shape: &[usize]) -> Result<Tensor> {
    let s = sum_to_shape(g, x, shape)?;
    let out = g.empty(shape)?;
    g.record(|rec| k::scale(rec, s.view(), out.view(), -1.0, DType::F32))?;
    Ok(out)
}

/// A new tensor [shape]: x [x_shape] summed over the dims where `shape` is broadcast to
/// `x_shape` (a copy when nothing is broadcast).
pub(crate) fn sum_to_shape(g: &Graph<'_>, x: &Tensor, shape: &[usize]) -> Result<Tensor> {
    let out = g.empty(shape)?;
    g.record(|rec| k::sum_to_shape(rec, x.view(), x.shape(), out.view(), shape, DType::F32, DType::F32))?;
    Ok(out)
}
