//! Softmax over the last dim, forward and backward: x, y, dy, dx [rows, d] (any d >= 1), all of
//! one storage type `DType` (f32, f16 or bf16); max, sums and exp are f32.

pub mod reference;

use vkformers_vk::{read, write, Arg, BufferView, KernelCode, Recorder, Result};

use crate::code;
use crate::code::{SoftmaxBackwardPush, SoftmaxForwardPush};
use crate::dtype::DType;
use crate::launch::{count, dispatch, err, expect_lens, groups_per_item, pick, Push};

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
    let codes = [&code::SOFTMAX_FORWARD_F32, &code::SOFTMAX_FORWARD_F16, &code::SOFTMAX_FORWARD_BF16];
    let p = SoftmaxForwardPush { rows: rows as u32, d: d as u32 };
    launch(rec, codes, (&[("x", &x), ("y", &y)], &[read(x), write(y)]), (rows, d, dt), p)
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
    let codes = [&code::SOFTMAX_BACKWARD_F32, &code::SOFTMAX_BACKWARD_F16, &code::SOFTMAX_BACKWARD_BF16];
    let p = SoftmaxBackwardPush { rows: rows as u32, d: d as u32 };
    let views = [("y", &y), ("dy", &dy), ("dx", &dx)];
    launch(rec, codes, (&views, &[read(y), read(dy), write(dx)]), (rows, d, dt), p)
}

/// What both directions check and launch: the variant of `dt` from `codes`, `d >= 1`, every
/// named view `[rows, d]` of `dt`; then one workgroup per row.
fn launch<P: Push>(
    rec: &mut Recorder,
    codes: [&'static KernelCode; 3],
    (views, args): (&[(&str, &BufferView<'_>)], &[Arg<'_>]),
    (rows, d, dt): (usize, usize, DType),
    push: P,
) -> Result<()> {
    let k = pick(rec, dt, codes)?;
    if d == 0 {
        return Err(err(k, "softmax over an empty dim".into()));
    }
    expect_lens(k, views, u64::from(count(k, &[rows, d])?), dt)?;
    dispatch(rec, k, &[], args, &push, groups_per_item(rows as u64))
}
