//! gpt-oss's clamped SwiGLU on a fused `gate_up [rows, 2·inner]` (f32), forward and backward
//! (see `shaders/moe/clamped_swiglu.glsl`):
//!
//! ```text
//! gc = min(g, limit);  uc = clamp(u, −limit, limit);  out = (uc + 1) · gc · sigmoid(alpha · gc)
//! ```
//!
//! with (g, u) of column j at (2j, 2j + 1) when `interleaved` (gpt-oss's packed experts), else at
//! (j, inner + j).

use vkformers_vk::{read, write, BufferView, Recorder, Result};

use super::expect_words;
use crate::code;
use crate::code::MoeClampedSwigluPush;
use crate::launch::{count, dispatch_elems};

/// The SwiGLU's constants (`swiglu_alpha`, `swiglu_limit`; gpt-oss: 1.702 and 7.0) and layout.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct ClampedSwiGlu {
    pub alpha: f32,
    pub limit: f32,
    pub interleaved: bool,
}

impl ClampedSwiGlu {
    /// The push scalars of both kernels (the backward declares the forward's block).
    fn push(&self, rows: usize, inner: usize) -> MoeClampedSwigluPush {
        let interleaved = u32::from(self.interleaved);
        MoeClampedSwigluPush {
            rows: rows as u32,
            inner: inner as u32,
            interleaved,
            alpha: self.alpha,
            limit: self.limit,
        }
    }
}

/// `out [rows, inner]` from `gate_up [rows, 2·inner]`.
pub fn forward(
    rec: &mut Recorder,
    act: ClampedSwiGlu,
    gate_up: BufferView<'_>,
    out: BufferView<'_>,
    (rows, inner): (usize, usize),
) -> Result<()> {
    let kc = &code::MOE_CLAMPED_SWIGLU;
    let n = count(kc, &[rows, 2, inner])?;
    expect_words(kc, "gate_up", &gate_up, n.into())?;
    expect_words(kc, "out", &out, u64::from(n) / 2)?;
    let p = act.push(rows, inner);
    dispatch_elems(rec, kc, &[read(gate_up), write(out)], &p, (rows * inner) as u64)
}

/// `dgate_up [rows, 2·inner]` from `gate_up` and `dout [rows, inner]`.
pub fn backward(
    rec: &mut Recorder,
    act: ClampedSwiGlu,
    (gate_up, dout): (BufferView<'_>, BufferView<'_>),
    dgate_up: BufferView<'_>,
    (rows, inner): (usize, usize),
) -> Result<()> {
    let kc = &code::MOE_CLAMPED_SWIGLU_BACKWARD;
    let n = count(kc, &[rows, 2, inner])?;
    expect_words(kc, "gate_up", &gate_up, n.into())?;
    expect_words(kc, "dgate_up", &dgate_up, n.into())?;
    expect_words(kc, "dout", &dout, u64::from(n) / 2)?;
    let p = act.push(rows, inner);
    let bufs = [read(gate_up), read(dout), write(dgate_up)];
    dispatch_elems(rec, kc, &bufs, &p, (rows * inner) as u64)
}

/// f64 reference forward: `out [rows, inner]`.
pub fn reference(act: ClampedSwiGlu, gate_up: &[f64], inner: usize) -> Vec<f64> {
    let (alpha, limit) = (f64::from(act.alpha), f64::from(act.limit));
    let rows = gate_up.len() / (2 * inner);
    let mut out = Vec::with_capacity(rows * inner);
    for r in 0..rows {
        for j in 0..inner {
            let (g, u) = pair(act, gate_up, r, j, inner);
            let (g, u) = (g.min(limit), u.clamp(-limit, limit));
            out.push((u + 1.0) * g / (1.0 + (-alpha * g).exp()));
        }
    }
    out
}

/// f64 reference backward: `dgate_up [rows, 2·inner]` (torch's clamp gradient: 1 inside the
/// closed range, 0 outside).
pub fn reference_backward(act: ClampedSwiGlu, gate_up: &[f64], dout: &[f64], inner: usize) -> Vec<f64> {
    let (alpha, limit) = (f64::from(act.alpha), f64::from(act.limit));
    let mut dx = vec![0.0; gate_up.len()];
    for (i, &d) in dout.iter().enumerate() {
        let (r, j) = (i / inner, i % inner);
        let (g, u) = pair(act, gate_up, r, j, inner);
        let (gc, uc) = (g.min(limit), u.clamp(-limit, limit));
        let s = 1.0 / (1.0 + (-alpha * gc).exp());
        let (gi, ui) = index(act, r, j, inner);
        dx[gi] = if g <= limit { d * (uc + 1.0) * (s + alpha * gc * s * (1.0 - s)) } else { 0.0 };
        dx[ui] = if u.abs() <= limit { d * gc * s } else { 0.0 };
    }
    dx
}

fn index(act: ClampedSwiGlu, r: usize, j: usize, inner: usize) -> (usize, usize) {
    let row = r * 2 * inner;
    if act.interleaved {
        (row + 2 * j, row + 2 * j + 1)
    } else {
        (row + j, row + inner + j)
    }
}

fn pair(act: ClampedSwiGlu, x: &[f64], r: usize, j: usize, inner: usize) -> (f64, f64) {
    let (gi, ui) = index(act, r, j, inner);
    (x[gi], x[ui])
}
