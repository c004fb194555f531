//! Sum and mean over the last dim ([rows, d] -> [rows]) and over everything ([n] -> [1]),
//! forward and backward. Every reduction is deterministic: fixed per-thread slices combined by
//! a fixed shared-memory tree; reducing everything runs stages of [`CHUNK`]-element rows
//! (n -> ceil(n / CHUNK) -> ... -> 1) through caller-provided scratch memory.

pub mod reference;

use vkformers_vk::{read, write, BufferView, Recorder, Result};

use crate::activation::util::{count, elements, err, expect_len, groups_for, groups_per_item, params};
use crate::code;

/// Elements each workgroup sums per stage when reducing everything.
pub const CHUNK: u64 = 4096;

/// Sums (times `scale`) rows of `d` elements of x [n] (the last row may be short) into out.
fn rows_kernel(
    rec: &mut Recorder,
    x: BufferView<'_>,
    out: BufferView<'_>,
    (rows, d, n): (u64, u64, u64),
    scale: f32,
) -> Result<()> {
    let k = &code::REDUCE_ROWS;
    let p = params(&[rows as u32, d as u32, n as u32, scale.to_bits()]);
    rec.dispatch(k, &[], &[read(x), write(out)], &p, groups_per_item(rows))
}

fn check_rows(x: &BufferView<'_>, out: &BufferView<'_>, rows: usize, d: usize) -> Result<u32> {
    let k = &code::REDUCE_ROWS;
    let n = count(k, &[rows, d])?;
    expect_len(k, "x", x, n.into())?;
    expect_len(k, "out", out, rows as u64)?;
    Ok(n)
}

/// `out[r] = sum_j x[r, j]`; x [rows, d], out [rows].
pub fn sum_rows(rec: &mut Recorder, x: BufferView<'_>, out: BufferView<'_>, rows: usize, d: usize) -> Result<()> {
    let n = check_rows(&x, &out, rows, d)?;
    rows_kernel(rec, x, out, (rows as u64, d as u64, n.into()), 1.0)
}

/// `out[r] = mean_j x[r, j]`; x [rows, d], out [rows]; d >= 1.
pub fn mean_rows(rec: &mut Recorder, x: BufferView<'_>, out: BufferView<'_>, rows: usize, d: usize) -> Result<()> {
    if d == 0 {
        return Err(err(&code::REDUCE_ROWS, "mean over an empty dim".into()));
    }
    let n = check_rows(&x, &out, rows, d)?;
    rows_kernel(rec, x, out, (rows as u64, d as u64, n.into()), 1.0 / d as f32)
}

/// `dx[i] = scale * dy[i / d]`; dy [n / d], dx [n].
fn broadcast_back(rec: &mut Recorder, dy: BufferView<'_>, dx: BufferView<'_>, d: u64, scale: f32) -> Result<()> {
    let k = &code::REDUCE_BACKWARD;
    let n = elements(k, "dx", &dx)?;
    if d == 0 || !n.is_multiple_of(d) {
        return Err(err(k, format!("dx of {n} elements is not made of rows of {d}")));
    }
    expect_len(k, "dy", &dy, n / d)?;
    rec.dispatch(k, &[], &[read(dy), write(dx)], &params(&[n as u32, d as u32, scale.to_bits()]), groups_for(n))
}

/// Backward of [`sum_rows`]: `dx[r, j] = dy[r]`; dy [rows], dx [rows, d].
pub fn sum_rows_backward(
    rec: &mut Recorder,
    dy: BufferView<'_>,
    dx: BufferView<'_>,
    rows: usize,
    d: usize,
) -> Result<()> {
    expect_len(&code::REDUCE_BACKWARD, "dx", &dx, u64::from(count(&code::REDUCE_BACKWARD, &[rows, d])?))?;
    broadcast_back(rec, dy, dx, d as u64, 1.0)
}

/// Backward of [`mean_rows`]: `dx[r, j] = dy[r] / d`; dy [rows], dx [rows, d].
pub fn mean_rows_backward(
    rec: &mut Recorder,
    dy: BufferView<'_>,
    dx: BufferView<'_>,
    rows: usize,
    d: usize,
) -> Result<()> {
    expect_len(&code::REDUCE_BACKWARD, "dx", &dx, u64::from(count(&code::REDUCE_BACKWARD, &[rows, d])?))?;
    broadcast_back(rec, dy, dx, d as u64, 1.0 / d.max(1) as f32)
}

/// Element counts of the stages that reducing `n` elements passes through before the final
/// one (which writes the output): ceil(n / CHUNK), ceil(that / CHUNK), ... while above 1.
fn stages(n: u64) -> Vec<u64> {
    let mut out = Vec::new();
    let mut m = n;
    while m > CHUNK {
        m = m.div_ceil(CHUNK);
        out.push(m);
    }
    out
}

/// Bytes of scratch memory [`sum_all`] and [`mean_all`] need for `n` elements (0 when
/// n <= CHUNK).
pub fn all_scratch_bytes(n: u64) -> u64 {
    stages(n).iter().sum::<u64>() * 4
}

fn reduce_all(
    rec: &mut Recorder,
    x: BufferView<'_>,
    scratch: BufferView<'_>,
    out: BufferView<'_>,
    mean: bool,
) -> Result<()> {
    let k = &code::REDUCE_ROWS;
    let n = elements(k, "x", &x)?;
    expect_len(k, "out", &out, 1)?;
    let need = all_scratch_bytes(n);
    if scratch.len < need {
        return Err(err(k, format!("scratch of {} bytes, reducing {n} elements needs {need}", scratch.len)));
    }
    let mut src = x;
    let mut len = n;
    let mut offset = 0;
    for m in stages(n) {
        let dst = BufferView { buffer: scratch.buffer, offset: scratch.offset + offset, len: m * 4 };
        rows_kernel(rec, src, dst, (m, CHUNK, len), 1.0)?;
        (src, len, offset) = (dst, m, offset + m * 4);
    }
    let scale = if mean { 1.0 / n.max(1) as f32 } else { 1.0 };
    rows_kernel(rec, src, out, (1, len.max(1), len), scale)
}

/// `out[0] = sum_i x[i]`; x [n], out [1], scratch of at least [`all_scratch_bytes`]`(n)`
/// bytes. Deterministic for a given n on every device.
pub fn sum_all(rec: &mut Recorder, x: BufferView<'_>, scratch: BufferView<'_>, out: BufferView<'_>) -> Result<()> {
    reduce_all(rec, x, scratch, out, false)
}

/// `out[0] = mean_i x[i]`; x [n] (n >= 1), out [1], scratch as for [`sum_all`].
pub fn mean_all(rec: &mut Recorder, x: BufferView<'_>, scratch: BufferView<'_>, out: BufferView<'_>) -> Result<()> {
    reduce_all(rec, x, scratch, out, true)
}

/// Backward of [`sum_all`]: `dx[i] = dy[0]`; dy [1], dx [n].
pub fn sum_all_backward(rec: &mut Recorder, dy: BufferView<'_>, dx: BufferView<'_>) -> Result<()> {
    let n = elements(&code::REDUCE_BACKWARD, "dx", &dx)?;
    broadcast_back(rec, dy, dx, n.max(1), 1.0)
}

/// Backward of [`mean_all`]: `dx[i] = dy[0] / n`; dy [1], dx [n].
pub fn mean_all_backward(rec: &mut Recorder, dy: BufferView<'_>, dx: BufferView<'_>) -> Result<()> {
    let n = elements(&code::REDUCE_BACKWARD, "dx", &dx)?;
    broadcast_back(rec, dy, dx, n.max(1), 1.0 / n.max(1) as f32)
}
