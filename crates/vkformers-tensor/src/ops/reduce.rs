//! Sums and means, deterministic on every device.
//!
//! `sum(x) = sum_i x[i]` and `mean(x) = sum(x) / n` over all n elements ([..] -> [1]);
//! `sum_last(x)[r] = sum_j x[r, j]` and `mean_last(x)[r] = sum_last(x)[r] / D` over the last
//! dim ([.., D] -> [..]). Backward broadcasts: `dx[i] = dy[0]` (over all) or `dx[r, j] = dy[r]`
//! (over the last dim), each divided by the count for means.

use vkformers_kernels::dtype::DType;
use vkformers_kernels::reduce as k;
use vkformers_vk::BufferView;

use crate::ops::push_one_kernel_grad;
use crate::{Graph, Result, Tensor, VkError};

/// `sum_i x[i]`; x [..], out [1].
pub fn sum(g: &Graph<'_>, x: &Tensor) -> Result<Tensor> {
    reduce_all(g, x, false)
}

/// `mean_i x[i]`; x [..] (at least one element), out [1].
pub fn mean(g: &Graph<'_>, x: &Tensor) -> Result<Tensor> {
    reduce_all(g, x, true)
}

/// `out[r] = sum_j x[r, j]`; x [.., D], out [..] (`[1]` when x is 1-D).
pub fn sum_last(g: &Graph<'_>, x: &Tensor) -> Result<Tensor> {
    reduce_last(g, x, false)
}

/// `out[r] = mean_j x[r, j]`; x [.., D] (D >= 1), out [..] (`[1]` when x is 1-D).
pub fn mean_last(g: &Graph<'_>, x: &Tensor) -> Result<Tensor> {
    reduce_last(g, x, true)
}

fn reduce_all(g: &Graph<'_>, x: &Tensor, mean: bool) -> Result<Tensor> {
    let n = x.numel() as u64;
    if mean && n == 0 {
        return Err(empty_error("mean"));
    }
    let out = g.output(&[1], &[x])?;
    let need = k::all_scratch_bytes(n);
    let scratch = if need > 0 { Some(g.ctx().buffer(need, "reduce scratch")?) } else { None };
    g.record(|rec| {
        // With nothing to stage the kernel never touches the scratch: an empty view will do.
        let s = match &scratch {
            Some(b) => b.slice(0, need),
            None => BufferView { buffer: out.view().buffer, offset: 0, len: 0 },
        };
        if mean {
            k::mean_all(rec, x.view(), s, out.view(), DType::F32)
        } else {
            k::sum_all(rec, x.view(), s, out.view(), DType::F32)
        }
    })?;
    push_one_kernel_grad(g, &out, x, move |rec, dy, dx| {
        if mean {
            k::mean_all_backward(rec, dy, dx, DType::F32)
        } else {
            k::sum_all_backward(rec, dy, dx, DType::F32)
        }
    });
    Ok(out)
}

fn reduce_last(g: &Graph<'_>, x: &Tensor, mean: bool) -> Result<Tensor> {
    let (rows, d) = (x.rows(), x.last_dim());
    if x.shape().is_empty() || d == 0 {
        return Err(empty_error(if mean { "mean_last" } else { "sum_last" }));
    }
    let dims = x.shape().len();
    let out_shape = if dims == 1 { vec![1] } else { x.shape()[..dims - 1].to_vec() };
    let out = g.output(&out_shape, &[x])?;
    g.record(|rec| {
        if mean {
            k::mean_rows(rec, x.view(), out.view(), rows, d, DType::F32)
        } else {
            k::sum_rows(rec, x.view(), out.view(), rows, d, DType::F32)
        }
    })?;
    push_one_kernel_grad(g, &out, x, move |rec, dy, dx| {
        if mean {
            k::mean_rows_backward(rec, dy, dx, rows, d, DType::F32)
        } else {
            k::sum_rows_backward(rec, dy, dx, rows, d, DType::F32)
        }
    });
    Ok(out)
}

fn empty_error(op: &str) -> VkError {
    VkError::Kernel { kernel: format!("tensor {op}"), message: "reduction over an empty dim".into() }
}
