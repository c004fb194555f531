//! Binary ops with numpy-style broadcasting (add, sub, mul, div of two operands of up to 4
//! dims into a contiguous output), `sum_to_shape` (the backward of a broadcast: sums a
//! gradient of the output shape down to an operand's shape), `scale` and `axpy`.
//!
//! Gradients of `out = a (op) b` with upstream gradient `g` [out shape], `S = sum_to_shape`:
//! add: da = S(g), db = S(g); sub: da = S(g), db = -S(g); mul: da = S(g * b), db = S(g * a);
//! div: da = S(g / b), db = -S(g * a / b / b). The products run with [`binary`] itself (`g`
//! has the output shape, so `a` and `b` broadcast against it).

pub mod reference;

use vkformers_vk::{read, read_write, write, BufferView, KernelCode, Recorder, Result};

use crate::activation::util::{count, elements, err, expect_len, groups_for, groups_per_item, params};
use crate::code;

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

    fn code(self) -> &'static KernelCode {
        match self {
            BinaryOp::Add => &code::BROADCAST_BINARY_ADD,
            BinaryOp::Sub => &code::BROADCAST_BINARY_SUB,
            BinaryOp::Mul => &code::BROADCAST_BINARY_MUL,
            BinaryOp::Div => &code::BROADCAST_BINARY_DIV,
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
/// contiguous. Shapes have at most 4 dims.
pub fn binary(
    rec: &mut Recorder,
    op: BinaryOp,
    a: (BufferView<'_>, &[usize]),
    b: (BufferView<'_>, &[usize]),
    out: BufferView<'_>,
) -> Result<()> {
    let k = op.code();
    let ((a, a_shape), (b, b_shape)) = (a, b);
    check_dims(k, "a", a_shape)?;
    check_dims(k, "b", b_shape)?;
    let out_shape = broadcast_shape(a_shape, b_shape)
        .ok_or_else(|| err(k, format!("shapes {a_shape:?} and {b_shape:?} do not broadcast")))?;
    expect_len(k, "a", &a, count(k, a_shape)?.into())?;
    expect_len(k, "b", &b, count(k, b_shape)?.into())?;
    let n = count(k, &out_shape)?;
    expect_len(k, "out", &out, n.into())?;
    let o = pad4(&out_shape);
    let sa = broadcast_strides(&pad4(a_shape), &o);
    let sb = broadcast_strides(&pad4(b_shape), &o);
    let mut words = vec![n, o[1] as u32, o[2] as u32, o[3] as u32];
    words.extend_from_slice(&sa);
    words.extend_from_slice(&sb);
    rec.dispatch(k, &[], &[read(a), read(b), write(out)], &params(&words), groups_for(n.into()))
}

/// `out = sum of g over the dims where `shape` is broadcast to `g_shape``: the gradient of an
/// operand of shape `shape` from the gradient g [g_shape] of a broadcast output. `shape` must
/// broadcast to `g_shape` (right-aligned, each extent 1 or equal); out [shape]. Deterministic:
/// short sums (at most 64 terms) or many outputs (at least 8192) take one thread per output
/// summing in order; otherwise one workgroup per output sums in a fixed tree order.
pub fn sum_to_shape(
    rec: &mut Recorder,
    g: BufferView<'_>,
    g_shape: &[usize],
    out: BufferView<'_>,
    shape: &[usize],
) -> Result<()> {
    let k = &code::BROADCAST_SUM_TO_SHAPE_TREE;
    check_dims(k, "g", g_shape)?;
    check_dims(k, "out", shape)?;
    if shape.len() > g_shape.len() || broadcast_shape(shape, g_shape).as_deref() != Some(g_shape) {
        return Err(err(k, format!("shape {shape:?} does not broadcast to the gradient's {g_shape:?}")));
    }
    expect_len(k, "g", &g, count(k, g_shape)?.into())?;
    let m = count(k, shape)?;
    expect_len(k, "out", &out, m.into())?;
    let (o, t) = (pad4(g_shape), pad4(shape));
    let r: Vec<usize> = (0..MAX_DIMS).map(|d| o[d] / t[d].max(1)).collect();
    let reduced = count(k, &r)?;
    let mut words = vec![m, reduced];
    words.extend(o[1..].iter().chain(&t[1..]).chain(&r[1..]).map(|&v| v as u32));
    let args = [read(g), write(out)];
    if reduced <= 64 || m >= 8192 {
        rec.dispatch(&code::BROADCAST_SUM_TO_SHAPE_SERIAL, &[], &args, &params(&words), groups_for(m.into()))
    } else {
        rec.dispatch(k, &[], &args, &params(&words), groups_per_item(m.into()))
    }
}

/// `out = alpha * x`; x, out [n].
pub fn scale(rec: &mut Recorder, x: BufferView<'_>, out: BufferView<'_>, alpha: f32) -> Result<()> {
    let k = &code::BROADCAST_SCALE;
    let n = elements(k, "x", &x)?;
    expect_len(k, "out", &out, n)?;
    rec.dispatch(k, &[], &[read(x), write(out)], &params(&[n as u32, alpha.to_bits()]), groups_for(n))
}

/// `y += alpha * x` in place (gradient accumulation); x, y [n].
pub fn axpy(rec: &mut Recorder, alpha: f32, x: BufferView<'_>, y: BufferView<'_>) -> Result<()> {
    let k = &code::BROADCAST_AXPY;
    let n = elements(k, "x", &x)?;
    expect_len(k, "y", &y, n)?;
    rec.dispatch(k, &[], &[read(x), read_write(y)], &params(&[n as u32, alpha.to_bits()]), groups_for(n))
}
