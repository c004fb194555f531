//! Softmax over the last dim, forward and backward: x, y, dy, dx [rows, d] (any d >= 1).

pub mod reference;

use vkformers_vk::{read, write, BufferView, Recorder, Result};

use crate::activation::util::{count, err, expect_len, groups_per_item, params};
use crate::code;

/// `y[r, :] = softmax(x[r, :])`, numerically stable (max subtracted); x, y [rows, d].
pub fn forward(rec: &mut Recorder, x: BufferView<'_>, y: BufferView<'_>, rows: usize, d: usize) -> Result<()> {
    let k = &code::SOFTMAX_FORWARD;
    if d == 0 {
        return Err(err(k, "softmax over an empty dim".into()));
    }
    let n = count(k, &[rows, d])?;
    expect_len(k, "x", &x, n.into())?;
    expect_len(k, "y", &y, n.into())?;
    let p = params(&[rows as u32, d as u32]);
    rec.dispatch(k, &[], &[read(x), write(y)], &p, groups_per_item(rows as u64))
}

/// `dx = y * (dy - sum(dy * y))` per row, from the forward's output y; y, dy, dx [rows, d].
pub fn backward(
    rec: &mut Recorder,
    y: BufferView<'_>,
    dy: BufferView<'_>,
    dx: BufferView<'_>,
    rows: usize,
    d: usize,
) -> Result<()> {
    let k = &code::SOFTMAX_BACKWARD;
    if d == 0 {
        return Err(err(k, "softmax over an empty dim".into()));
    }
    let n = u64::from(count(k, &[rows, d])?);
    expect_len(k, "y", &y, n)?;
    expect_len(k, "dy", &dy, n)?;
    expect_len(k, "dx", &dx, n)?;
    let p = params(&[rows as u32, d as u32]);
    rec.dispatch(k, &[], &[read(y), read(dy), write(dx)], &p, groups_per_item(rows as u64))
}
