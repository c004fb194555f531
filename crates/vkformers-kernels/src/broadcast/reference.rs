//! f64 CPU reference of the broadcasting binary ops, forward and backward, and of
//! `sum_to_shape`, `scale`, `axpy`.

use super::{broadcast_shape, pad4, BinaryOp, MAX_DIMS};

/// Row-major coordinates (padded to 4 dims) of flat index `i` in `shape` (padded).
fn coords(mut i: usize, shape: &[usize; MAX_DIMS]) -> [usize; MAX_DIMS] {
    let mut c = [0; MAX_DIMS];
    for d in (0..MAX_DIMS).rev() {
        c[d] = i % shape[d];
        i /= shape[d];
    }
    c
}

/// Flat index in `shape` (padded) of coordinates `c` of a broadcast output (broadcast dims
/// of `shape` read index 0).
fn index_in(c: &[usize; MAX_DIMS], shape: &[usize; MAX_DIMS]) -> usize {
    (0..MAX_DIMS).fold(0, |acc, d| acc * shape[d] + if shape[d] == 1 { 0 } else { c[d] })
}

/// `x` [shape] broadcast (copied) to `out_shape`, which `shape` must broadcast to.
pub fn expand(x: &[f64], shape: &[usize], out_shape: &[usize]) -> Vec<f64> {
    let (s, o) = (pad4(shape), pad4(out_shape));
    let n: usize = out_shape.iter().product();
    (0..n).map(|i| x[index_in(&coords(i, &o), &s)]).collect()
}

/// Applies `op` to two scalars.
pub fn apply(op: BinaryOp, x: f64, y: f64) -> f64 {
    match op {
        BinaryOp::Add => x + y,
        BinaryOp::Sub => x - y,
        BinaryOp::Mul => x * y,
        BinaryOp::Div => x / y,
    }
}

/// `a (op) b` with broadcasting; returns the output and its shape. Panics when the shapes
/// do not broadcast.
pub fn forward(op: BinaryOp, a: &[f64], a_shape: &[usize], b: &[f64], b_shape: &[usize]) -> (Vec<f64>, Vec<usize>) {
    let out_shape = broadcast_shape(a_shape, b_shape).expect("shapes broadcast");
    let (ea, eb) = (expand(a, a_shape, &out_shape), expand(b, b_shape, &out_shape));
    (ea.iter().zip(&eb).map(|(&x, &y)| apply(op, x, y)).collect(), out_shape)
}

/// Sums g [g_shape] over the dims where `shape` is broadcast; returns [shape].
pub fn sum_to_shape(g: &[f64], g_shape: &[usize], shape: &[usize]) -> Vec<f64> {
    let (o, s) = (pad4(g_shape), pad4(shape));
    let mut out = vec![0.0; shape.iter().product()];
    for (i, v) in g.iter().enumerate() {
        out[index_in(&coords(i, &o), &s)] += v;
    }
    out
}

/// Gradients (da [a_shape], db [b_shape]) of `out = a (op) b` given g [broadcast shape].
pub fn backward(
    op: BinaryOp,
    a: &[f64],
    a_shape: &[usize],
    b: &[f64],
    b_shape: &[usize],
    g: &[f64],
) -> (Vec<f64>, Vec<f64>) {
    let out_shape = broadcast_shape(a_shape, b_shape).expect("shapes broadcast");
    let (ea, eb) = (expand(a, a_shape, &out_shape), expand(b, b_shape, &out_shape));
    let (ga, gb): (Vec<f64>, Vec<f64>) = g
        .iter()
        .zip(ea.iter().zip(&eb))
        .map(|(&g, (&x, &y))| match op {
            BinaryOp::Add => (g, g),
            BinaryOp::Sub => (g, -g),
            BinaryOp::Mul => (g * y, g * x),
            BinaryOp::Div => (g / y, -g * x / (y * y)),
        })
        .unzip();
    (sum_to_shape(&ga, &out_shape, a_shape), sum_to_shape(&gb, &out_shape, b_shape))
}

/// alpha * x.
pub fn scale(x: &[f64], alpha: f64) -> Vec<f64> {
    x.iter().map(|v| alpha * v).collect()
}

/// y + alpha * x.
pub fn axpy(alpha: f64, x: &[f64], y: &[f64]) -> Vec<f64> {
    x.iter().zip(y).map(|(a, b)| b + alpha * a).collect()
}
