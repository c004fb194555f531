//! The parts of the dense attention backward that its tests derive from what the GPU stored
//! (the rounded o of a 16-bit run, the reference's lse): delta and the learned sinks' gradient.

use crate::attention::reference::Shape;

/// `delta[b, h, i] = Σ_x o[b, i, h, x] · do[b, i, h, x]`: rows `[B, Hq, Tq]` of o and do
/// `[B, Tq, Hq, Dv]`. Pass the o the backward reads (the stored one, rounded in 16 bits).
pub fn delta(s: &Shape, o: &[f64], d_o: &[f64]) -> Vec<f64> {
    let mut delta = vec![0.0; s.lse_len()];
    for b in 0..s.batch {
        for i in 0..s.tq {
            for h in 0..s.hq {
                let at = ((b * s.tq + i) * s.hq + h) * s.dv;
                delta[(b * s.hq + h) * s.tq + i] = (0..s.dv).map(|x| o[at + x] * d_o[at + x]).sum();
            }
        }
    }
    delta
}

/// The sinks' gradient `ds[h] = −Σ_{b, i} delta[b, h, i] · e^(sink[h] − lse[b, h, i])` (rows
/// `[B, Hq, Tq]` of delta and lse).
pub fn sinks_grad(s: &Shape, delta: &[f64], lse: &[f64], sinks: &[f64]) -> Vec<f64> {
    let mut ds = vec![0.0; s.hq];
    for (row, (dl, l)) in delta.iter().zip(lse).enumerate() {
        let h = (row / s.tq) % s.hq;
        ds[h] -= dl * (sinks[h] - l).exp();
    }
    ds
}
