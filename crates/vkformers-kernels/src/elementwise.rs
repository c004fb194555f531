//! Elementwise f32 kernels: fill, copy, add, mul, and the column split of a packed product.
//! Views are byte ranges holding f32 values.

use vkformers_vk::{read, write, BufferView, Recorder, Result};

use crate::code::{
    self, ElementwiseBinaryPush, ElementwiseCastColsPush, ElementwiseCopyColsPush, ElementwiseCopyPush,
    ElementwiseFillPush, ElementwiseSplitColsPush,
};
use crate::launch::{dispatch_elems, err, err_named};

fn elements(kernel: &str, v: &BufferView<'_>) -> Result<u32> {
    let n = v.len / 4;
    if !v.len.is_multiple_of(4) || n > u64::from(u32::MAX) {
        return Err(err_named(kernel, format!("view of {} bytes is not a whole number of f32 below 2^32", v.len)));
    }
    Ok(n as u32)
}

fn same_len(kernel: &str, a: &BufferView<'_>, b: &BufferView<'_>) -> Result<()> {
    if a.len != b.len {
        return Err(err_named(kernel, format!("operands of {} and {} bytes", a.len, b.len)));
    }
    Ok(())
}

/// `out[i] = value`.
pub fn fill(rec: &mut Recorder, out: BufferView<'_>, value: f32) -> Result<()> {
    let n = elements(code::ELEMENTWISE_FILL.name, &out)?;
    let push = ElementwiseFillPush { n, value };
    dispatch_elems(rec, &code::ELEMENTWISE_FILL, &[write(out)], &push, n.into())
}

/// `out[i] = x[i]`.
pub fn copy(rec: &mut Recorder, x: BufferView<'_>, out: BufferView<'_>) -> Result<()> {
    let k = &code::ELEMENTWISE_COPY;
    same_len(k.name, &x, &out)?;
    let n = elements(k.name, &out)?;
    dispatch_elems(rec, k, &[read(x), write(out)], &ElementwiseCopyPush { n }, n.into())
}

fn binary(
    k: &vkformers_vk::KernelCode,
    rec: &mut Recorder,
    x: BufferView<'_>,
    y: BufferView<'_>,
    out: BufferView<'_>,
) -> Result<()> {
    same_len(k.name, &x, &out)?;
    same_len(k.name, &y, &out)?;
    let n = elements(k.name, &out)?;
    dispatch_elems(rec, k, &[read(x), read(y), write(out)], &ElementwiseBinaryPush { n }, n.into())
}

/// `out[i] = x[i] + y[i]`.
pub fn add(rec: &mut Recorder, x: BufferView<'_>, y: BufferView<'_>, out: BufferView<'_>) -> Result<()> {
    binary(&code::ELEMENTWISE_BINARY_ADD, rec, x, y, out)
}

/// `out[i] = x[i] * y[i]`.
pub fn mul(rec: &mut Recorder, x: BufferView<'_>, y: BufferView<'_>, out: BufferView<'_>) -> Result<()> {
    binary(&code::ELEMENTWISE_BINARY_MUL, rec, x, y, out)
}

/// Splits `x [rows, Σ n_p]` by columns into `outs[p] [rows, n_p]` (two or three parts, f32):
/// the q, k and v of one packed q/k/v product as three contiguous tensors, in one dispatch.
pub fn split_cols(rec: &mut Recorder, x: BufferView<'_>, outs: &[BufferView<'_>], rows: u32) -> Result<()> {
    let k = &code::ELEMENTWISE_SPLIT_COLS;
    let fail = |message: String| Err(err(k, message));
    if !(2..=3).contains(&outs.len()) || rows == 0 {
        return fail(format!("{} parts of {rows} rows (need 2 or 3 parts, rows > 0)", outs.len()));
    }
    let mut n = [0u32; 3];
    for (p, o) in outs.iter().enumerate() {
        let e = elements(k.name, o)?;
        if e % rows != 0 {
            return fail(format!("part {p} of {e} values is not {rows} rows"));
        }
        n[p] = e / rows;
    }
    let total = elements(k.name, &x)?;
    if u64::from(total) != u64::from(rows) * n.iter().map(|&v| u64::from(v)).sum::<u64>() {
        return fail(format!("x of {total} values for {rows} rows of {n:?} columns"));
    }
    // Two parts: the third pointer is never written (n2 = 0); the second fills its place.
    let third = outs.get(2).copied().unwrap_or(outs[1]);
    let args = [read(x), write(outs[0]), write(outs[1]), write(third)];
    let [n0, n1, n2] = n;
    dispatch_elems(rec, k, &args, &ElementwiseSplitColsPush { rows, n0, n1, n2 }, u64::from(total))
}

/// Copies `x [rows, n]` into columns `[col0, col0 + n)` of `out [rows, stride]`, elements of
/// `elem_bytes` (4: f32; 2: bf16 or f16) copied bit for bit: one part's gradient written into
/// its place in a packed product's gradient (q, k or v of one packed q/k/v product).
pub fn copy_cols(
    rec: &mut Recorder,
    (x, out): (BufferView<'_>, BufferView<'_>),
    (rows, n): (u32, u32),
    (stride, col0): (u32, u32),
    elem_bytes: u64,
) -> Result<()> {
    let k = match elem_bytes {
        4 => &code::ELEMENTWISE_COPY_COLS_W32,
        _ => &code::ELEMENTWISE_COPY_COLS_W16,
    };
    let fail = |message: String| Err(err(k, message));
    let (r, n64, s) = (u64::from(rows), u64::from(n), u64::from(stride));
    if !matches!(elem_bytes, 2 | 4) || u64::from(col0) + n64 > s || r * n64 > u64::from(u32::MAX) {
        return fail(format!("{rows} x {n} of {elem_bytes} bytes into columns {col0}.. of {stride}"));
    }
    if x.len < r * n64 * elem_bytes || out.len < r * s * elem_bytes {
        return fail(format!("views of {} and {} bytes for {rows} x {n} into {rows} x {stride}", x.len, out.len));
    }
    let push = ElementwiseCopyColsPush { rows, n, stride, col0 };
    dispatch_elems(rec, k, &[read(x), write(out)], &push, r * n64)
}

/// `out [rows, n]` (16 bits, `out.dtype`) = the first `n` columns of the f32 `x [rows, x_stride]`
/// (the view from the part's first column), rounded as `dtype::cast` rounds: v in 16 bits read
/// straight from the packed q/k/v product's output, for attention.
pub fn cast_cols(
    rec: &mut Recorder,
    x: BufferView<'_>,
    (rows, n, x_stride): (u32, u32, u32),
    out: crate::dtype::Twin<'_>,
) -> Result<()> {
    let k = &code::ELEMENTWISE_CAST_COLS;
    let (r, n64, s) = (u64::from(rows), u64::from(n), u64::from(x_stride));
    let fail = |message: String| Err(err(k, message));
    if n > x_stride || r * n64 > u64::from(u32::MAX) || r == 0 {
        return fail(format!("{rows} x {n} out of rows of {x_stride}"));
    }
    if x.len < ((r - 1) * s + n64) * 4 {
        return fail(format!("x of {} bytes for {rows} rows of stride {x_stride}", x.len));
    }
    let half = out.code(k.name, r * n64)?;
    let push = ElementwiseCastColsPush { rows, n, x_stride, twin: half };
    dispatch_elems(rec, k, &[read(x), write(out.view)], &push, r * n64)
}
