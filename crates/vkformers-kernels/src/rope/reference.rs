//! f64 CPU reference of RoPE, forward and backward, on `x [batch, seq, heads, head_dim]`
//! row-major with `pos [batch, seq]` and `inv_freq [rotary_dim / 2]`.

use super::{Rope, RopeLayout};

/// Rotates every pair of every row by `sign * theta`, `theta = f32(pos) * inv_freq[i]`
/// rounded to f32 (as the kernel and Hugging Face compute it), then in f64:
/// `(u, v) -> mscale (u cos - v sin, v cos + u sin)`.
fn rotate(p: &Rope, x: &[f64], pos: &[i32], inv_freq: &[f32], sign: f64) -> Vec<f64> {
    let (dh, half) = (p.head_dim as usize, p.rotary_dim as usize / 2);
    let mut out = x.to_vec();
    for (row, xr) in x.chunks(dh).enumerate() {
        let at = pos[row / p.heads as usize];
        for (i, &f) in inv_freq.iter().enumerate().take(half) {
            let theta = f64::from(at as f32 * f);
            let (s, c) = ((sign * theta).sin() * f64::from(p.mscale), theta.cos() * f64::from(p.mscale));
            let (ia, ib) = match p.layout {
                RopeLayout::HalfSplit => (i, i + half),
                RopeLayout::Interleaved => (2 * i, 2 * i + 1),
            };
            out[row * dh + ia] = xr[ia] * c - xr[ib] * s;
            out[row * dh + ib] = xr[ib] * c + xr[ia] * s;
        }
    }
    out
}

/// RoPE forward: `x` rotated by `theta` per pair; dims past `rotary_dim` unchanged.
pub fn rope(p: &Rope, x: &[f64], pos: &[i32], inv_freq: &[f32]) -> Vec<f64> {
    rotate(p, x, pos, inv_freq, 1.0)
}

/// RoPE backward: `dx = rope^T(dy)`, the rotation by `-theta` (same `mscale`).
pub fn rope_backward(p: &Rope, dy: &[f64], pos: &[i32], inv_freq: &[f32]) -> Vec<f64> {
    rotate(p, dy, pos, inv_freq, -1.0)
}

/// The standard inverse frequencies `base^(-2i / R)` for `i < R / 2`, in f32 (as HF does).
pub fn default_inv_freq(rotary_dim: u32, base: f64) -> Vec<f32> {
    (0..rotary_dim / 2).map(|i| (1.0 / base.powf(f64::from(2 * i) / f64::from(rotary_dim))) as f32).collect()
}
