//! Softmax over the last dim, forward and backward: x, y, dy, dx [rows, d] (any d >= 1), all of
//! one storage type `DType` (f32, f16 or bf16); max, sums and exp are f32.

pub mod reference;

use vkformers_vk::{read, write, BufferView, Recorder, Result};

use crate::code;
use crate::code::{SoftmaxBackwardPush, SoftmaxForwardPush};
use crate::dtype::DType;
use crate::launch::{count, dispatch, err, expect_len, groups_per_item, pick};

/// `y[r, :] = softmax(x[r, :])`, numerically stable (max subtracted); x, y [rows, d] of storage
/// type `dt`.
pub fn forward(
    rec: &mut Recorder,
    x: BufferView<'_>,
    y: BufferView<'_>,
    rows: usize,
    d: usize,
    dt: DType,
) -> Result<()> {
    let k = pick(rec, dt, [&code::SOFTMAX_FORWARD_F32, &code::SOFTMAX_FORWARD_F16, &code::SOFTMAX_FORWARD_BF16])?;
    if d == 0 {
        return Err(err(k, "softmax over an empty dim".into()));
    }
    let n = count(k, &[rows, d])?;
    expect_len(k, "x", &x, n.into(), dt)?;
    expect_len(k, "y", &y, n.into(), dt)?;
    let p = SoftmaxForwardPush { rows: rows as u32, d: d as u32 };
    dispatch(rec, k, &[], &[read(x), write(y)], &p, groups_per_item(rows as u64))
}

/// `dx = y * (dy - sum(dy * y))` per row, from the forward's output y; y, dy, dx [rows, d] of
/// storage type `dt`.
pub fn backward(
    rec: &mut Recorder,
    y: BufferView<'_>,
    dy: BufferView<'_>,
    dx: BufferView<'_>,
    rows: usize,
    d: usize,
    dt: DType,
) -> Result<()> {
    let k = pick(rec, dt, [&code::SOFTMAX_BACKWARD_F32, &code::SOFTMAX_BACKWARD_F16, &code::SOFTMAX_BACKWARD_BF16])?;
    if d == 0 {
        return Err(err(k, "softmax over an empty dim".into()));
    }
    let n = u64::from(count(k, &[rows, d])?);
    expect_len(k, "y", &y, n, dt)?;
    expect_len(k, "dy", &dy, n, dt)?;
    expect_len(k, "dx", &dx, n, dt)?;
    let p = SoftmaxBackwardPush { rows: rows as u32, d: d as u32 };
    dispatch(rec, k, &[], &[read(y), read(dy), write(dx)], &p, groups_per_item(rows as u64))
}
