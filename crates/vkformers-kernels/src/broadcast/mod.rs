//! Binary ops with numpy-style broadcasting (add, sub, mul, div of two operands of up to 4
//! dims into a contiguous output), `sum_to_shape` (the backward of a broadcast: sums a
//! gradient of the output shape down to an operand's shape), `scale` and `axpy`.
//!
//! Gradients of `out = a (op) b` with upstream gradient `g` [out shape], `S = sum_to_shape`:
//! add: da = S(g), db = S(g); sub: da = S(g), db = -S(g); mul: da = S(g * b), db = S(g * a);
//! div: da = S(g / b), db = -S(g * a / b / b). The products run with [`binary`] itself (`g`
//! has the output shape, so `a` and `b` broadcast against it).
//!
//! Storage types (`DType`, math always f32): `binary` and `scale` read and write one type;
//! `sum_to_shape` reads a gradient of any type and writes that type or f32 (the gradient of an
//! f32 operand such as a bias); `axpy` accumulates x of any type into an f32 y.

pub mod reference;

use vkformers_vk::{read, read_write, write, BufferView, KernelCode, Recorder, Result};

use crate::code;
use crate::code::{BroadcastAxpyPush, BroadcastBinaryPush, BroadcastScalePush};
use crate::dtype::DType;
use crate::launch::{check_storage, count, dispatch, dispatch_elems, elements, err, expect_len, groups_per_item, pick};

/// Most dims an operand or output may have.
pub const MAX_DIMS: usize = 4;

/// An elementwise binary op.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BinaryOp {
    Add,
    Sub,
    Mul,
    Div,
}

impl BinaryOp {
    /// Every op, for tests.
    pub const ALL: [BinaryOp; 4] = [BinaryOp::Add, BinaryOp::Sub, BinaryOp::Mul, BinaryOp::Div];

    /// Kernels, `[f32, f16, bf16]`.
    fn codes(self) -> [&'static KernelCode; 3] {
        use code::*;
        match self {
            BinaryOp::Add => [&BROADCAST_BINARY_ADD, &BROADCAST_BINARY_ADD_F16, &BROADCAST_BINARY_ADD_BF16],
            BinaryOp::Sub => [&BROADCAST_BINARY_SUB, &BROADCAST_BINARY_SUB_F16, &BROADCAST_BINARY_SUB_BF16],
            BinaryOp::Mul => [&BROADCAST_BINARY_MUL, &BROADCAST_BINARY_MUL_F16, &BROADCAST_BINARY_MUL_BF16],
            BinaryOp::Div => [&BROADCAST_BINARY_DIV, &BROADCAST_BINARY_DIV_F16, &BROADCAST_BINARY_DIV_BF16],
        }
    }
}

/// The numpy broadcast of two shapes (right-aligned; each pair of extents equal or one of
/// them 1), or `None` when they do not broadcast.
pub fn broadcast_shape(a: &[usize], b: &[usize]) -> Option<Vec<usize>> {
    let n = a.len().max(b.len());
    let at = |s: &[usize], i: usize| if i + s.len() >= n { s[i + s.len() - n] } else { 1 };
    (0..n)
        .map(|i| match (at(a, i), at(b, i)) {
            (x, y) if x == y => Some(x),
            (1, y) => Some(y),
            (x, 1) => Some(x),
            _ => None,
        })
        .collect()
}

/// `shape` padded with leading 1s to 4 dims. Panics when `shape` has more than 4 dims.
pub fn pad4(shape: &[usize]) -> [usize; MAX_DIMS] {
    let mut out = [1; MAX_DIMS];
    out[MAX_DIMS - shape.len()..].copy_from_slice(shape);
    out
}

/// Element strides of an operand of shape `s` (padded) read at the coordinates of `out`
/// (padded): the contiguous strides, 0 where the operand is broadcast.
fn broadcast_strides(s: &[usize; MAX_DIMS], out: &[usize; MAX_DIMS]) -> [u32; MAX_DIMS] {
    let mut strides = [0u32; MAX_DIMS];
    let mut step = 1usize;
    for d in (0..MAX_DIMS).rev() {
        strides[d] = if s[d] == out[d] { step as u32 } else { 0 };
        step *= s[d];
    }
    strides
}

fn check_dims(k: &KernelCode, what: &str, shape: &[usize]) -> Result<()> {
    if shape.len() > MAX_DIMS {
        return Err(err(k, format!("{what} shape {shape:?} has more than {MAX_DIMS} dims")));
    }
    Ok(())
}

/// `out = a (op) b` with numpy broadcasting; a [a_shape], b [b_shape], out [broadcast shape]
/// contiguous, all of storage type `dt`. Shapes have at most 4 dims.
pub fn binary(
    rec: &mut Recorder,
    op: BinaryOp,
    a: (BufferView<'_>, &[usize]),
    b: (BufferView<'_>, &[usize]),
    out: BufferView<'_>,
    dt: DType,
) -> Result<()> {
    let k = pick(rec, dt, op.codes())?;
    let ((a, a_shape), (b, b_shape)) = (a, b);
    check_dims(k, "a", a_shape)?;
    check_dims(k, "b", b_shape)?;
    let out_shape = broadcast_shape(a_shape, b_shape)
        .ok_or_else(|| err(k, format!("shapes {a_shape:?} and {b_shape:?} do not broadcast")))?;
    expect_len(k, "a", &a, count(k, a_shape)?.into(), dt)?;
    expect_len(k, "b", &b, count(k, b_shape)?.into(), dt)?;
    let n = count(k, &out_shape)?;
    expect_len(k, "out", &out, n.into(), dt)?;
    let o = pad4(&out_shape);
    let sa = broadcast_strides(&pad4(a_shape), &o);
    let sb = broadcast_strides(&pad4(b_shape), &o);
    let ([_, d1, d2, d3], [sa0, sa1, sa2, sa3], [sb0, sb1, sb2, sb3]) = (o.map(|d| d as u32), sa, sb);
    let push = BroadcastBinaryPush { n, d1, d2, d3, sa0, sa1, sa2, sa3, sb0, sb1, sb2, sb3 };
    dispatch_elems(rec, k, &[read(a), read(b), write(out)], &push, n.into())
}

/// `out = sum of g over the dims where `shape` is broadcast to `g_shape``: the gradient of an
/// operand of shape `shape` from the gradient g [g_shape] of a broadcast output. `shape` must
/// broadcast to `g_shape` (right-aligned, each extent 1 or equal); out [shape]. Deterministic:
/// short sums (at most 64 terms) or many outputs (at least 8192) take one thread per output
/// summing in order; otherwise one workgroup per output sums in a fixed tree order.
/// g is of storage type `g_dt`; out of `out_dt`, which is `g_dt` or f32 (sums are f32).
#[allow(clippy::too_many_arguments)]
pub fn sum_to_shape(
    rec: &mut Recorder,
    g: BufferView<'_>,
    g_shape: &[usize],
    out: BufferView<'_>,
    shape: &[usize],
    g_dt: DType,
    out_dt: DType,
) -> Result<()> {
    use code::*;
    // [tree, serial] kernels of each (g_dt, out_dt).
    let [k, serial] = match (g_dt, out_dt) {
        (DType::F32, DType::F32) => [&BROADCAST_SUM_TO_SHAPE_TREE, &BROADCAST_SUM_TO_SHAPE_SERIAL],
        (DType::F16, DType::F16) => [&BROADCAST_SUM_TO_SHAPE_TREE_F16, &BROADCAST_SUM_TO_SHAPE_SERIAL_F16],
        (DType::BF16, DType::BF16) => [&BROADCAST_SUM_TO_SHAPE_TREE_BF16, &BROADCAST_SUM_TO_SHAPE_SERIAL_BF16],
        (DType::F16, DType::F32) => {
            [&BROADCAST_SUM_TO_SHAPE_TREE_F16_TO_F32, &BROADCAST_SUM_TO_SHAPE_SERIAL_F16_TO_F32]
        }
        (DType::BF16, DType::F32) => {
            [&BROADCAST_SUM_TO_SHAPE_TREE_BF16_TO_F32, &BROADCAST_SUM_TO_SHAPE_SERIAL_BF16_TO_F32]
        }
        (a, b) => {
            let k = &BROADCAST_SUM_TO_SHAPE_TREE;
            return Err(err(k, format!("{a:?} gradient into {b:?}: out must be f32 or the gradient's type")));
        }
    };
    check_storage(rec, k, g_dt)?; // g_dt is 16-bit whenever out_dt is
    check_dims(k, "g", g_shape)?;
    check_dims(k, "out", shape)?;
    if shape.len() > g_shape.len() || broadcast_shape(shape, g_shape).as_deref() != Some(g_shape) {
        return Err(err(k, format!("shape {shape:?} does not broadcast to the gradient's {g_shape:?}")));
    }
    expect_len(k, "g", &g, count(k, g_shape)?.into(), g_dt)?;
    let m = count(k, shape)?;
    expect_len(k, "out", &out, m.into(), out_dt)?;
    let (o, t) = (pad4(g_shape), pad4(shape));
    let r: Vec<usize> = (0..MAX_DIMS).map(|d| o[d] / t[d].max(1)).collect();
    let reduced = count(k, &r)?;
    // Dims 1..4 of the gradient's shape (o), the output's (t) and their ratio (r), padded to 4.
    let ([_, o1, o2, o3], [_, t1, t2, t3]) = (o.map(|d| d as u32), t.map(|d| d as u32));
    let [r1, r2, r3] = [r[1] as u32, r[2] as u32, r[3] as u32];
    let push = BroadcastSumToShapePush { m, k: reduced, o1, o2, o3, t1, t2, t3, r1, r2, r3 };
    let args = [read(g), write(out)];
    if reduced <= 64 || m >= 8192 {
        dispatch_elems(rec, serial, &args, &push, m.into())
    } else {
        dispatch(rec, k, &[], &args, &push, groups_per_item(m.into()))
    }
}

/// `out = alpha * x`; x, out [n] of storage type `dt`.
pub fn scale(rec: &mut Recorder, x: BufferView<'_>, out: BufferView<'_>, alpha: f32, dt: DType) -> Result<()> {
    let k = pick(rec, dt, [&code::BROADCAST_SCALE_F32, &code::BROADCAST_SCALE_F16, &code::BROADCAST_SCALE_BF16])?;
    let n = elements(k, "x", &x, dt)?;
    expect_len(k, "out", &out, n, dt)?;
    dispatch_elems(rec, k, &[read(x), write(out)], &BroadcastScalePush { n: n as u32, alpha }, n)
}

/// `y += alpha * x` in place (gradient accumulation); x [n] of storage type `x_dt`, the
/// accumulator y [n] always f32.
pub fn axpy(rec: &mut Recorder, alpha: f32, x: BufferView<'_>, y: BufferView<'_>, x_dt: DType) -> Result<()> {
    let k = pick(rec, x_dt, [&code::BROADCAST_AXPY_F32, &code::BROADCAST_AXPY_F16, &code::BROADCAST_AXPY_BF16])?;
    let n = elements(k, "x", &x, x_dt)?;
    expect_len(k, "y", &y, n, DType::F32)?;
    dispatch_elems(rec, k, &[read(x), read_write(y)], &BroadcastAxpyPush { n: n as u32, alpha }, n)
}
