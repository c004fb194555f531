//! Multi-head latent attention (DeepSeek-V2/V3, MiniCPM3) in the decoder graph, on the tokens
//! `h [B·T, hidden]` of one layer (H heads; per head `Dn` nope, `Dr` rotary and `Dv` value
//! columns; latent rank L):
//!
//! ```text
//! q   [B·T, H·(Dn+Dr)] = q(h)  or  q_b(norm(q_a(h)))
//! ckv [B·T, L+Dr]      = kv_a(h);  c = norm(ckv[:, :L]);  k_rot = ckv[:, L:]  (one key, all heads)
//! kv  [B·T, H·(Dn+Dv)] = kv_b(c)
//! q_h = [q_nope | rope(q_rot)],  k_h = [k_nope | rope(k_rot)],  v_h = kv[.., Dn:]
//! o_h = softmax(scale · q_h·k_hᵀ + mask) · v_h;   out = o_proj(o [B·T, H·Dv])
//! ```
//!
//! The fused attention kernels take one head size D for q, k and v; MLA runs them on
//! `D = max(Dn + Dr, Dv)` with the shorter side zero-padded: zero columns add nothing to a score
//! or to an output, and the padded output columns are dropped, so values and gradients are exact.
//! Column splits, joins and pads are products with constant 0/1 matrices (`moved`): each output
//! column is one input column or zero, exact in f32 (and in 16-bit storage, whose attention and
//! projections round the same values anyway), with the backward `dx = dy · Pᵀ` moving the
//! gradient back.

use vkformers_tensor::ops::{broadcast, matmul, rope, shape};
use vkformers_tensor::{Graph, Tensor};

use super::{apply_norm, attend, project, Inputs, Weights};
use crate::error::Result;
use crate::spec::{layer_name, AttnSpec, MlaSpec, ModelSpec};

/// Column moves `(src, dst, len)`: columns `src..src + len` of a row land at `dst..dst + len`.
type Moves<'a> = &'a [(usize, usize, usize)];

/// `y [rows, to] = x [rows, from] · P` with `P [from, to]` the 0/1 matrix of `moves`; columns
/// of y no move writes are zero.
fn moved(g: &Graph<'_>, x: &Tensor, (from, to): (usize, usize), moves: Moves<'_>) -> Result<Tensor> {
    let mut p = vec![0f32; from * to];
    for &(src, dst, len) in moves {
        for j in 0..len {
            p[(src + j) * to + dst + j] = 1.0;
        }
    }
    let x = shape::reshape(g, x, &[x.numel() / from, from])?;
    Ok(matmul::matmul(g, &x, &g.constant(&p, &[from, to])?)?)
}

/// `(q [B, T, H, Dr], k [B, T, 1, Dr])` rotated by the layer's RoPE (unchanged without one).
fn rotate(g: &Graph<'_>, a: &AttnSpec, inp: &Inputs<'_>, q: Tensor, k: Tensor) -> Result<(Tensor, Tensor)> {
    let Some(r) = &a.rope else { return Ok((q, k)) };
    let inv_freq = match &r.long {
        Some((long, original)) if inp.seq_len > *original => long,
        _ => &r.inv_freq,
    };
    let freq = inp.freq(g, inv_freq)?;
    let q = rope::rope(g, &q, &inp.pos, &freq, r.layout, r.rotary_dim, r.mscale)?;
    let k = rope::rope(g, &k, &inp.pos, &freq, r.layout, r.rotary_dim, r.mscale)?;
    Ok((q, k))
}

/// The query projection `[B·T, H·(Dn+Dr)]`: full rank, or low rank through its norm.
fn query(g: &Graph<'_>, spec: &ModelSpec, w: &Weights, m: &MlaSpec, i: usize, h: &Tensor) -> Result<Tensor> {
    let n = &m.names;
    match m.q_lora_rank {
        None => project(g, w, &spec.layer_names.q, i, h, false),
        Some(_) => {
            let qa = project(g, w, &n.q_a, i, h, m.bias)?;
            let qa = apply_norm(g, &m.norm, w, &layer_name(&n.q_a_norm, i), &qa)?;
            project(g, w, &n.q_b, i, &qa, false)
        }
    }
}

/// The attention sublayer's output `[B·T, hidden]` of layer `i` (see the module comment).
#[allow(clippy::too_many_arguments)]
pub(super) fn attention(
    g: &Graph<'_>,
    spec: &ModelSpec,
    w: &Weights,
    (a, m): (&AttnSpec, &MlaSpec),
    i: usize,
    h: &Tensor,
    inp: &Inputs<'_>,
    (b, t): (usize, usize),
) -> Result<Tensor> {
    let (heads, d) = (a.heads, a.head_dim);
    let (dn, dr, dv, l) = (m.nope_dim, m.rope_dim, m.v_dim, m.kv_lora_rank);
    let dqk = dn + dr;
    let q = query(g, spec, w, m, i, h)?;
    let ckv = project(g, w, &m.names.kv_a, i, h, m.bias)?;
    let latent = moved(g, &ckv, (l + dr, l), &[(0, 0, l)])?;
    let latent = apply_norm(g, &m.norm, w, &layer_name(&m.names.kv_a_norm, i), &latent)?;
    let kv = project(g, w, &m.names.kv_b, i, &latent, false)?;
    let q_rot = shape::reshape(g, &moved(g, &q, (dqk, dr), &[(dn, 0, dr)])?, &[b, t, heads, dr])?;
    let k_rot = shape::reshape(g, &moved(g, &ckv, (l + dr, dr), &[(l, 0, dr)])?, &[b, t, 1, dr])?;
    let (q_rot, k_rot) = rotate(g, a, inp, q_rot, k_rot)?;
    // Heads of D columns: [nope | rope | zeros] for q and k, [v | zeros] for v.
    let q_nope = moved(g, &q, (dqk, d), &[(0, 0, dn)])?;
    let q = broadcast::add(g, &q_nope, &moved(g, &q_rot, (dr, d), &[(0, dn, dr)])?)?;
    let q = shape::reshape(g, &q, &[b, t, heads, d])?;
    let k_nope = shape::reshape(g, &moved(g, &kv, (dn + dv, d), &[(0, 0, dn)])?, &[b, t, heads, d])?;
    let k_shared = shape::reshape(g, &moved(g, &k_rot, (dr, d), &[(0, dn, dr)])?, &[b, t, 1, d])?;
    let k = broadcast::add(g, &k_nope, &k_shared)?;
    let v = shape::reshape(g, &moved(g, &kv, (dn + dv, d), &[(dn, 0, dv)])?, &[b, t, heads, d])?;
    let o = attend(g, a, i, (&q, &k, &v), inp)?;
    let o = shape::reshape(g, &moved(g, &o, (d, dv), &[(0, 0, dv)])?, &[b * t, heads * dv])?;
    project(g, w, &spec.layer_names.o, i, &o, a.out_bias)
}
