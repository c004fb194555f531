//! f64 CPU reference of the gated activations (separate gate/up tensors [rows, inner]; for
//! a fused [rows, 2 inner] tensor use [`split`] and [`join`]).

use super::Glu;
use crate::activation::reference::{derivative, value};

/// out = f(gate) * up elementwise.
pub fn forward(kind: Glu, gate: &[f64], up: &[f64]) -> Vec<f64> {
    let act = kind.activation();
    gate.iter().zip(up).map(|(&g, &u)| value(act, g) * u).collect()
}

/// (dgate, dup) = (dout * up * f'(gate), dout * f(gate)) elementwise.
pub fn backward(kind: Glu, gate: &[f64], up: &[f64], dout: &[f64]) -> (Vec<f64>, Vec<f64>) {
    let act = kind.activation();
    let dgate = gate.iter().zip(up).zip(dout).map(|((&g, &u), &d)| d * u * derivative(act, g)).collect();
    let dup = gate.iter().zip(dout).map(|(&g, &d)| d * value(act, g)).collect();
    (dgate, dup)
}

/// Splits a fused [rows, 2 inner] tensor into (gate, up), each [rows, inner].
pub fn split<T: Copy>(fused: &[T], inner: usize) -> (Vec<T>, Vec<T>) {
    let mut gate = Vec::with_capacity(fused.len() / 2);
    let mut up = Vec::with_capacity(fused.len() / 2);
    for row in fused.chunks_exact(2 * inner) {
        gate.extend_from_slice(&row[..inner]);
        up.extend_from_slice(&row[inner..]);
    }
    (gate, up)
}

/// Joins gate and up [rows, inner] into one [rows, 2 inner] tensor.
pub fn join<T: Copy>(gate: &[T], up: &[T], inner: usize) -> Vec<T> {
    gate.chunks_exact(inner.max(1))
        .zip(up.chunks_exact(inner.max(1)))
        .flat_map(|(g, u)| g.iter().chain(u))
        .copied()
        .collect()
}
