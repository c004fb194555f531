//! Sum and mean over the last dim ([rows, d] -> [rows]) and over everything ([n] -> [1]),
//! forward and backward. Every reduction is deterministic: fixed per-thread slices combined by
//! a fixed shared-memory tree; reducing everything runs stages of [`CHUNK`]-element rows
//! (n -> ceil(n / CHUNK) -> ... -> 1) through caller-provided scratch memory.
//!
//! Storage types (`DType`; sums always f32): the row reductions read and write one type; the
//! full reductions read any type, but their scratch and output [1] stay f32 (they feed losses
//! and norms), and their backward reads that f32 gradient and writes dx in the input's type.

pub mod reference;

use vkformers_vk::{read, write, BufferView, KernelCode, Recorder, Result};

use crate::code;
use crate::code::{ReduceBackwardPush, ReduceRowsPush};
use crate::dtype::DType;
use crate::launch::{count, dispatch, dispatch_elems, elements, err, expect_len, groups_per_item, pick};

/// Elements each workgroup sums per stage when reducing everything.
pub const CHUNK: u64 = 4096;

/// Row-sum kernel reading `x_dt`: into `x_dt` (`to_f32` false) or into f32 (`to_f32` true).
fn rows_code(rec: &Recorder, x_dt: DType, to_f32: bool) -> Result<&'static KernelCode> {
    use code::*;
    let same = [&REDUCE_ROWS_F32, &REDUCE_ROWS_F16, &REDUCE_ROWS_BF16];
    let wide = [&REDUCE_ROWS_F32, &REDUCE_ROWS_F16_TO_F32, &REDUCE_ROWS_BF16_TO_F32];
    pick(rec, x_dt, if to_f32 { wide } else { same })
}

/// Backward kernel writing dx of `dx_dt`, from dy of `dx_dt` (`from_f32` false) or of f32.
fn backward_code(rec: &Recorder, dx_dt: DType, from_f32: bool) -> Result<&'static KernelCode> {
    use code::*;
    let same = [&REDUCE_BACKWARD_F32, &REDUCE_BACKWARD_F16, &REDUCE_BACKWARD_BF16];
    let wide = [&REDUCE_BACKWARD_F32, &REDUCE_BACKWARD_F32_TO_F16, &REDUCE_BACKWARD_F32_TO_BF16];
    pick(rec, dx_dt, if from_f32 { wide } else { same })
}

/// Sums (times `scale`) rows of `d` elements of x [n] (the last row may be short) into out,
/// with kernel `k` (a variant of reduce/rows).
fn rows_kernel(
    rec: &mut Recorder,
    k: &KernelCode,
    x: BufferView<'_>,
    out: BufferView<'_>,
    (rows, d, n): (u64, u64, u64),
    scale: f32,
) -> Result<()> {
    let p = ReduceRowsPush { rows: rows as u32, d: d as u32, n: n as u32, scale };
    dispatch(rec, k, &[], &[read(x), write(out)], &p, groups_per_item(rows))
}

fn check_rows(
    k: &KernelCode,
    x: &BufferView<'_>,
    out: &BufferView<'_>,
    rows: usize,
    d: usize,
    dt: DType,
) -> Result<u32> {
    let n = count(k, &[rows, d])?;
    expect_len(k, "x", x, n.into(), dt)?;
    expect_len(k, "out", out, rows as u64, dt)?;
    Ok(n)
}

/// [`sum_rows`], or with `mean` [`mean_rows`] (the sum scaled by `1 / d`, d >= 1).
fn reduce_rows(
    rec: &mut Recorder,
    (x, out): (BufferView<'_>, BufferView<'_>),
    (rows, d): (usize, usize),
    dt: DType,
    mean: bool,
) -> Result<()> {
    let k = rows_code(rec, dt, false)?;
    if mean && d == 0 {
        return Err(err(k, "mean over an empty dim".into()));
    }
    let n = check_rows(k, &x, &out, rows, d, dt)?;
    let scale = if mean { 1.0 / d as f32 } else { 1.0 };
    rows_kernel(rec, k, x, out, (rows as u64, d as u64, n.into()), scale)
}

/// `out[r] = sum_j x[r, j]`; x [rows, d], out [rows], both of storage type `dt`.
pub fn sum_rows(
    rec: &mut Recorder,
    x: BufferView<'_>,
    out: BufferView<'_>,
    rows: usize,
    d: usize,
    dt: DType,
) -> Result<()> {
    reduce_rows(rec, (x, out), (rows, d), dt, false)
}

/// `out[r] = mean_j x[r, j]`; x [rows, d], out [rows], both of storage type `dt`; d >= 1.
pub fn mean_rows(
    rec: &mut Recorder,
    x: BufferView<'_>,
    out: BufferView<'_>,
    rows: usize,
    d: usize,
    dt: DType,
) -> Result<()> {
    reduce_rows(rec, (x, out), (rows, d), dt, true)
}

/// `dx[i] = scale * dy[i / d]`; dy [n / d] of `dy_dt`, dx [n] of `dx_dt` (`dy_dt` is `dx_dt`
/// or f32).
fn broadcast_back(
    rec: &mut Recorder,
    dy: BufferView<'_>,
    dx: BufferView<'_>,
    d: u64,
    scale: f32,
    (dy_dt, dx_dt): (DType, DType),
) -> Result<()> {
    let k = backward_code(rec, dx_dt, dy_dt != dx_dt)?;
    let n = elements(k, "dx", &dx, dx_dt)?;
    if d == 0 || !n.is_multiple_of(d) {
        return Err(err(k, format!("dx of {n} elements is not made of rows of {d}")));
    }
    expect_len(k, "dy", &dy, n / d, dy_dt)?;
    let p = ReduceBackwardPush { n: n as u32, d: d as u32, scale };
    dispatch_elems(rec, k, &[read(dy), write(dx)], &p, n)
}

/// Backward of [`sum_rows`] (`scale` 1) or [`mean_rows`] (`scale` 1 / d): `dx[r, j] = scale *
/// dy[r]` after checking dx is [rows, d].
fn rows_backward(
    rec: &mut Recorder,
    (dy, dx): (BufferView<'_>, BufferView<'_>),
    (rows, d): (usize, usize),
    dt: DType,
    scale: f32,
) -> Result<()> {
    let k = backward_code(rec, dt, false)?;
    expect_len(k, "dx", &dx, u64::from(count(k, &[rows, d])?), dt)?;
    broadcast_back(rec, dy, dx, d as u64, scale, (dt, dt))
}

/// Backward of [`sum_rows`]: `dx[r, j] = dy[r]`; dy [rows], dx [rows, d], both of storage type
/// `dt`.
pub fn sum_rows_backward(
    rec: &mut Recorder,
    dy: BufferView<'_>,
    dx: BufferView<'_>,
    rows: usize,
    d: usize,
    dt: DType,
) -> Result<()> {
    rows_backward(rec, (dy, dx), (rows, d), dt, 1.0)
}

/// Backward of [`mean_rows`]: `dx[r, j] = dy[r] / d`; dy [rows], dx [rows, d], both of storage
/// type `dt`.
pub fn mean_rows_backward(
    rec: &mut Recorder,
    dy: BufferView<'_>,
    dx: BufferView<'_>,
    rows: usize,
    d: usize,
    dt: DType,
) -> Result<()> {
    rows_backward(rec, (dy, dx), (rows, d), dt, 1.0 / d.max(1) as f32)
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

/// Reduces x [n] of storage type `dt` to out [1] f32: the first stage reads `dt` and writes
/// f32, later stages are f32.
fn reduce_all(
    rec: &mut Recorder,
    x: BufferView<'_>,
    scratch: BufferView<'_>,
    out: BufferView<'_>,
    mean: bool,
    dt: DType,
) -> Result<()> {
    let first = rows_code(rec, dt, true)?;
    let k = &code::REDUCE_ROWS_F32;
    let n = elements(first, "x", &x, dt)?;
    expect_len(first, "out", &out, 1, DType::F32)?;
    let need = all_scratch_bytes(n);
    if scratch.len < need {
        return Err(err(first, format!("scratch of {} bytes, reducing {n} elements needs {need}", scratch.len)));
    }
    let mut src = x;
    let mut len = n;
    let mut offset = 0;
    // The kernel of the next stage: `first` reads x, then f32 scratch.
    let mut kernel = first;
    for m in stages(n) {
        let dst = BufferView { buffer: scratch.buffer, offset: scratch.offset + offset, len: m * 4 };
        rows_kernel(rec, kernel, src, dst, (m, CHUNK, len), 1.0)?;
        (src, len, offset, kernel) = (dst, m, offset + m * 4, k);
    }
    let scale = if mean { 1.0 / n.max(1) as f32 } else { 1.0 };
    rows_kernel(rec, kernel, src, out, (1, len.max(1), len), scale)
}

/// `out[0] = sum_i x[i]`; x [n] of storage type `dt`, out [1] f32, scratch (f32) of at least
/// [`all_scratch_bytes`]`(n)` bytes. Deterministic for a given n on every device.
pub fn sum_all(
    rec: &mut Recorder,
    x: BufferView<'_>,
    scratch: BufferView<'_>,
    out: BufferView<'_>,
    dt: DType,
) -> Result<()> {
    reduce_all(rec, x, scratch, out, false, dt)
}

/// `out[0] = mean_i x[i]`; x [n] (n >= 1) of storage type `dt`, out [1] f32, scratch as for
/// [`sum_all`].
pub fn mean_all(
    rec: &mut Recorder,
    x: BufferView<'_>,
    scratch: BufferView<'_>,
    out: BufferView<'_>,
    dt: DType,
) -> Result<()> {
    reduce_all(rec, x, scratch, out, true, dt)
}

/// Backward of [`sum_all`] or, with `mean`, [`mean_all`]: `dx[i] = dy[0]` (`/ n` with `mean`).
fn all_backward(rec: &mut Recorder, (dy, dx): (BufferView<'_>, BufferView<'_>), dt: DType, mean: bool) -> Result<()> {
    let n = elements(backward_code(rec, dt, true)?, "dx", &dx, dt)?;
    let scale = if mean { 1.0 / n.max(1) as f32 } else { 1.0 };
    broadcast_back(rec, dy, dx, n.max(1), scale, (DType::F32, dt))
}

/// Backward of [`sum_all`]: `dx[i] = dy[0]`; dy [1] f32, dx [n] of storage type `dt`.
pub fn sum_all_backward(rec: &mut Recorder, dy: BufferView<'_>, dx: BufferView<'_>, dt: DType) -> Result<()> {
    all_backward(rec, (dy, dx), dt, false)
}

/// Backward of [`mean_all`]: `dx[i] = dy[0] / n`; dy [1] f32, dx [n] of storage type `dt`.
pub fn mean_all_backward(rec: &mut Recorder, dy: BufferView<'_>, dx: BufferView<'_>, dt: DType) -> Result<()> {
    all_backward(rec, (dy, dx), dt, true)
}
