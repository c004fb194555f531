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
//! The fused attention kernels take q, k of `Dn + Dr` columns and v, o of `Dv` (training and
//! uncached forwards: the expanded form above). Generation caches the latent `[c | k_rot]`
//! (`L + Dr` values a position, [`absorbed`]); where that row is wider than the paged decode
//! kernel's 256 values, a prefill or a chunk of many new tokens attends in the expanded form and
//! stores the latent ([`expanded_over_cache`]), decode steps run the absorbed form through the
//! wide latent kernel (`crate::kv_cache`). Column splits, joins and pads are products with constant 0/1 matrices (`moved`): each output
//! column is one input column or zero, exact in f32 (and in 16-bit storage, whose attention and
//! projections round the same values anyway), with the backward `dx = dy · Pᵀ` moving the
//! gradient back.

use vkformers_tensor::ops::attention::attention_chunked;
use vkformers_tensor::ops::{activation, broadcast, cast, embedding, matmul, rope, shape};
use vkformers_tensor::{Graph, Tensor};

use super::{apply_norm, attend, attn_options, project, Inputs, Weights};
use crate::error::{ModelError, Result};
use crate::spec::{layer_name, AttnSpec, MlaSpec, ModelSpec};

/// Column moves `(src, dst, len)`: columns `src..src + len` of a row land at `dst..dst + len`.
type Moves<'a> = &'a [(usize, usize, usize)];

/// `y [rows, to] = x [rows, from] · P` with `P [from, to]` the 0/1 matrix of `moves` (uploaded
/// once per forward); columns of y no move writes are zero.
fn moved(g: &Graph<'_>, inp: &Inputs<'_>, x: &Tensor, (from, to): (usize, usize), moves: Moves<'_>) -> Result<Tensor> {
    let p = inp.constant(g, format!("mla move {from}x{to} {moves:?}"), &[from, to], || {
        let mut p = vec![0f32; from * to];
        for &(src, dst, len) in moves {
            for j in 0..len {
                p[(src + j) * to + dst + j] = 1.0;
            }
        }
        p
    })?;
    let x = shape::reshape(g, x, &[x.numel() / from, from])?;
    Ok(matmul::matmul(g, &x, &p)?)
}

/// `(q [B, T, H, Dr], k [B, T, 1, Dr])` rotated by the layer's RoPE (unchanged without one).
fn rotate(g: &Graph<'_>, a: &AttnSpec, inp: &Inputs<'_>, q: Tensor, k: Tensor) -> Result<(Tensor, Tensor)> {
    let Some(r) = &a.rope else { return Ok((q, k)) };
    if r.long.is_some() {
        g.refuse_capture("LongRoPE picks its factors on the host");
    }
    let inv_freq = match &r.long {
        Some((long, original)) if inp.seq_len > *original => long,
        _ => &r.inv_freq,
    };
    let freq = inp.freq(g, inv_freq)?;
    let q = rope::rope(g, &q, &inp.pos, &freq, r.layout, r.rotary_dim, r.mscale)?;
    let k = rope::rope(g, &k, &inp.pos, &freq, r.layout, r.rotary_dim, r.mscale)?;
    Ok((q, k))
}

/// The query projection `[B·T, H·(Dn+Dr)]`: full rank, or low rank through its norm; with a
/// gated query also the gate `[B·T, H·Dv]` of the attention output.
fn query(
    g: &Graph<'_>,
    spec: &ModelSpec,
    w: &Weights,
    m: &MlaSpec,
    i: usize,
    h: &Tensor,
    inp: &Inputs<'_>,
) -> Result<(Tensor, Option<Tensor>)> {
    let n = &m.names;
    let Some(r) = m.q_lora_rank else { return Ok((project(g, w, &spec.layer_names.q, i, h, false)?, None)) };
    let qa = project(g, w, &n.q_a, i, h, m.bias)?;
    let normed = apply_norm(g, &m.norm, w, &layer_name(&n.q_a_norm, i), &qa)?;
    if !m.gated_query {
        return Ok((project(g, w, &n.q_b, i, &normed, false)?, None));
    }
    // A.X-K2: q_b([norm(q_a) | q_a]) [N, H·(Dqk + Dv)], per head [q | gate].
    let both = broadcast::add(
        g,
        &moved(g, inp, &normed, (r, 2 * r), &[(0, 0, r)])?,
        &moved(g, inp, &qa, (r, 2 * r), &[(0, r, r)])?,
    )?;
    let qg = project(g, w, &n.q_b, i, &both, false)?;
    let (dqk, dv, rows) = (m.qk_dim(), m.v_dim, qg.rows());
    let q = moved(g, inp, &qg, (dqk + dv, dqk), &[(0, 0, dqk)])?;
    let gate = moved(g, inp, &qg, (dqk + dv, dv), &[(dqk, 0, dv)])?;
    let gate = shape::reshape(g, &gate, &[rows, gate.numel() / rows])?;
    Ok((shape::reshape(g, &q, &[rows, q.numel() / rows])?, Some(gate)))
}

/// Refuses a forward past the sparse attention indexer's `index_topk` keys (DeepSeek-V3.2's DSA
/// would then attend to the top-k keys of its index scores only; the graph attends to all).
fn check_indexer(g: &Graph<'_>, m: &MlaSpec, inp: &Inputs<'_>) -> Result<()> {
    let keys = inp.host_pos.iter().copied().max().map_or(0, |p| p as usize + 1);
    if m.index_topk.is_some() {
        // The limit is checked on the host each step: a replay would not check it.
        g.refuse_capture("the sparse indexer's key limit is checked on the host");
    }
    match m.index_topk {
        Some(k) if keys > k => Err(ModelError::Unsupported(format!(
            "{keys} positions with DeepSeek sparse attention (its indexer keeps index_topk {k} keys a query): \
             only sequences of up to index_topk tokens, where it keeps every key, are supported"
        ))),
        _ => Ok(()),
    }
}

/// `o [N, H·Dv]` times `sigmoid(gate)` (A.X-K2's output gate), or o itself.
fn gated(g: &Graph<'_>, o: Tensor, gate: Option<Tensor>) -> Result<Tensor> {
    match gate {
        Some(gate) => Ok(broadcast::mul(g, &o, &activation::sigmoid(g, &gate)?)?),
        None => Ok(o),
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
    let (dn, dr, l) = (m.nope_dim, m.rope_dim, m.kv_lora_rank);
    let heads = a.heads;
    let dqk = dn + dr;
    check_indexer(g, m, inp)?;
    let (mut q, gate) = query(g, spec, w, m, i, h, inp)?;
    if let Some((beta, original)) = a.q_position_scale {
        // Llama 4's query scale (Mistral 4), per row of q [B·T, H·(Dn+Dr)] in (b, t) order:
        // `1 + beta · ln(1 + floor(pos / original))`; RoPE is linear, so scaling before it (and
        // before the absorbed products) equals transformers' scaling of the rotated q.
        g.refuse_capture("the query's position scale is made on the host");
        let s: Vec<f32> =
            inp.host_pos.iter().map(|&p| 1.0 + beta * (1.0 + (p as f32 / original as f32).floor()).ln()).collect();
        q = broadcast::mul(g, &q, &g.constant(&s, &[b * t, 1])?)?;
    }
    let ckv = project(g, w, &m.names.kv_a, i, h, m.bias)?;
    let latent = moved(g, inp, &ckv, (l + dr, l), &[(0, 0, l)])?;
    let mut latent = apply_norm(g, &m.norm, w, &layer_name(&m.names.kv_a_norm, i), &latent)?;
    if m.latent_scale != 1.0 {
        latent = broadcast::scale(g, &latent, m.latent_scale)?;
    }
    let q_rot = shape::reshape(g, &moved(g, inp, &q, (dqk, dr), &[(dn, 0, dr)])?, &[b, t, heads, dr])?;
    let k_rot = shape::reshape(g, &moved(g, inp, &ckv, (l + dr, dr), &[(l, 0, dr)])?, &[b, t, 1, dr])?;
    let (q_rot, k_rot) = rotate(g, a, inp, q_rot, k_rot)?;
    let o = match inp.cache {
        None => {
            let (q, k, v) = expanded(g, w, (heads, m), i, (&q, &q_rot), (&latent, &k_rot), inp, (b, t, t))?;
            let o = attend(g, (a, w), i, (&q, &k, &v), inp)?;
            shape::reshape(g, &o, &[b * t, heads * m.v_dim])?
        }
        Some((cache, _)) if !cache.is_latent(i) => {
            return Err(ModelError::Config(format!("layer {i}: multi-head latent attention over full keys and values")))
        }
        // Generation over a latent cache: the absorbed form (the cache holds [c | k_rot]).
        Some((cache, _)) if cache.latent_absorbs(i, t) => {
            absorbed(g, w, (a, m), i, (&q, &q_rot), (&latent, &k_rot), inp, |q, k, v| {
                attend(g, (a, w), i, (q, k, v), inp)
            })?
        }
        Some((cache, _)) => expanded_over_cache(g, w, (a, m), i, (&q, &q_rot), (&latent, &k_rot), inp, (cache, b))?,
    };
    project(g, w, &spec.layer_names.o, i, &gated(g, o, gate)?, a.out_bias)
}

/// The expanded form's heads (see the module comment) from q `[B·T, H·(Dn+Dr)]`, the rotated
/// `q_rot [B, T, H, Dr]`, and `Tk` keys' latents `c [B·Tk, L]` and rotated `k_rot [B, Tk, 1, Dr]`:
/// q `[B, T, H, Dn+Dr]`, k `[B, Tk, H, Dn+Dr]` and v `[B, Tk, H, Dv]`.
#[allow(clippy::too_many_arguments)]
fn expanded(
    g: &Graph<'_>,
    w: &Weights,
    (heads, m): (usize, &MlaSpec),
    i: usize,
    (q, q_rot): (&Tensor, &Tensor),
    (c, k_rot): (&Tensor, &Tensor),
    inp: &Inputs<'_>,
    (b, t, tk): (usize, usize, usize),
) -> Result<(Tensor, Tensor, Tensor)> {
    let (dn, dr, dv) = (m.nope_dim, m.rope_dim, m.v_dim);
    let d = dn + dr;
    let kv = project(g, w, &m.names.kv_b, i, c, false)?;
    // Heads of d columns: [nope | rope] for q and k; v the Dv value columns of each kv_b head.
    let q_nope = moved(g, inp, q, (d, d), &[(0, 0, dn)])?;
    let q = broadcast::add(g, &q_nope, &moved(g, inp, q_rot, (dr, d), &[(0, dn, dr)])?)?;
    let q = shape::reshape(g, &q, &[b, t, heads, d])?;
    let k_nope = shape::reshape(g, &moved(g, inp, &kv, (dn + dv, d), &[(0, 0, dn)])?, &[b, tk, heads, d])?;
    let k_shared = shape::reshape(g, &moved(g, inp, k_rot, (dr, d), &[(0, dn, dr)])?, &[b, tk, 1, d])?;
    let k = broadcast::add(g, &k_nope, &k_shared)?;
    let v = shape::reshape(g, &moved(g, inp, &kv, (dn + dv, dv), &[(dn, 0, dv)])?, &[b, tk, heads, dv])?;
    Ok((q, k, v))
}

/// Attention `o [B·T, H·Dv]` over a latent cache whose rows the paged decode kernel cannot hold,
/// for a prefill or a chunk of many new tokens: stores the new latent rows `[c | k_rot]`, then
/// attends in the expanded form over the new rows (prefill) or over every cached row of the
/// selected rows (`KvCache::latent_history`: decompressed again by kv_b; it says why).
#[allow(clippy::too_many_arguments)]
fn expanded_over_cache(
    g: &Graph<'_>,
    w: &Weights,
    (a, m): (&AttnSpec, &MlaSpec),
    i: usize,
    (q, q_rot): (&Tensor, &Tensor),
    (latent, k_rot): (&Tensor, &Tensor),
    inp: &Inputs<'_>,
    (cache, b): (&crate::kv_cache::KvCache, usize),
) -> Result<Tensor> {
    let (dr, l) = (m.rope_dim, m.kv_lora_rank);
    let d = l + dr;
    let t = q_rot.shape()[1];
    let rows = broadcast::add(
        g,
        &moved(g, inp, latent, (l, d), &[(0, 0, l)])?,
        &moved(g, inp, k_rot, (dr, d), &[(0, l, dr)])?,
    )?;
    cache.store_latent(g, i, &shape::reshape(g, &rows, &[b, t, 1, d])?)?;
    let mut opts = attn_options(g, (a, w), i, inp)?;
    let (c, k_rot, tk) = match cache.latent_history(g, i, t)? {
        None => (latent.clone(), k_rot.clone(), t),
        Some((history, kmask)) => {
            if a.chunk.is_some() || a.sliding_window.is_some() {
                return Err(ModelError::Unsupported(
                    "chunked or sliding-window attention over a wide latent KV cache".into(),
                ));
            }
            // Right-aligned rows [B, W, L + Dr] (W >= T): the fused kernel's causal mask puts
            // query column c at key column W - T + c, each row's own position.
            let tk = history.shape()[1];
            opts.kmask = kmask;
            let history =
                if history.dtype() == latent.dtype() { history } else { cast::cast(g, &history, latent.dtype())? };
            let c = moved(g, inp, &history, (d, l), &[(0, 0, l)])?;
            let k_rot = shape::reshape(g, &moved(g, inp, &history, (d, dr), &[(l, 0, dr)])?, &[b, tk, 1, dr])?;
            (c, k_rot, tk)
        }
    };
    let (q, k, v) = expanded(g, w, (a.heads, m), i, (q, q_rot), (&c, &k_rot), inp, (b, t, tk))?;
    let o = attention_chunked(g, &q, &k, &v, &opts, a.chunk.unwrap_or(0))?;
    Ok(shape::reshape(g, &o, &[b * t, a.heads * m.v_dim])?)
}

/// Rows of `x [a·b, w]` in `(a, b)` order, reordered to `(b, a)`: `[b·a, w]` (a transpose of the
/// two row axes, by a row gather).
fn swap_rows(g: &Graph<'_>, x: &Tensor, (a, b): (usize, usize)) -> Result<Tensor> {
    let x = shape::reshape(g, x, &[a * b, x.numel() / (a * b)])?;
    let ids: Vec<i32> = (0..b).flat_map(|j| (0..a).map(move |i| (i * b + j) as i32)).collect();
    Ok(embedding::embedding(g, &x, &g.ints(&ids, &[a * b])?)?)
}

/// MLA with the absorbed projections, as generation runs it over a cache of latents (N = B·T
/// tokens, per head h the kv_b block `W_h [Dn + Dv, L]` = `[W_UK_h; W_UV_h]`):
///
/// ```text
/// q_nope_h · k_nope_h = q_nope_h · (W_UK_h c) = (q_nope_h W_UK_h) · c     q_lat_h [L]
/// q'_h = [q_lat_h | q_rot_h],  k' = [c | k_rot]   (one key head of L + Dr, shared by all heads)
/// o'_h = softmax(scale · q'_h · k'ᵀ) · k'   ->  o'_h[:L] = Σ p c = o_lat_h,  o_h = W_UV_h o_lat_h
/// ```
///
/// `k'`'s first L columns (c) serve as the values, Dv = L (the paged decode reads them from the key
/// pool; prefill attends with v = c itself), so the cache holds `L + Dr` values a position.
/// `attend(q' [B, T, H, L+Dr], k' [B, T, 1, L+Dr], v = c [B, T, 1, L])` runs the attention (its
/// kernels take Dv != Dqk); the result is `o [N, H·Dv]` for `o_proj`. q_nope meets W_UK_h as `[q_nope | 0]`
/// times the whole block (no slicing of the weight); inference only.
#[allow(clippy::too_many_arguments)]
fn absorbed(
    g: &Graph<'_>,
    w: &Weights,
    (a, m): (&AttnSpec, &MlaSpec),
    i: usize,
    (q, q_rot): (&Tensor, &Tensor),
    (latent, k_rot): (&Tensor, &Tensor),
    inp: &Inputs<'_>,
    attend: impl FnOnce(&Tensor, &Tensor, &Tensor) -> Result<Tensor>,
) -> Result<Tensor> {
    let (heads, n) = (a.heads, latent.rows());
    let (dn, dr, dv, l) = (m.nope_dim, m.rope_dim, m.v_dim, m.kv_lora_rank);
    let (dqk, dkv, d) = (dn + dr, dn + dv, l + dr);
    let kv_b = format!("{}.weight", layer_name(&m.names.kv_b, i));
    if w.lora().get(&kv_b).is_some() {
        return Err(ModelError::Unsupported(
            "generation with a LoRA adapter on kv_b_proj over the latent KV cache; merge the adapter first \
             (vkformers merge-lora)"
                .into(),
        ));
    }
    let wkv = shape::reshape(g, w.get(&kv_b)?, &[heads, dkv, l])?;
    // [N·H, Dn+Dv] rows (token, head) -> [H, N, Dn+Dv] -> q_lat [H, N, L] -> [N·H, L].
    let q_pad = swap_rows(g, &moved(g, inp, q, (dqk, dkv), &[(0, 0, dn)])?, (n, heads))?;
    let q_lat = matmul::matmul(g, &shape::reshape(g, &q_pad, &[heads, n, dkv])?, &wkv)?;
    let q_lat = swap_rows(g, &q_lat, (heads, n))?;
    let q2 = broadcast::add(
        g,
        &moved(g, inp, &q_lat, (l, d), &[(0, 0, l)])?,
        &moved(g, inp, q_rot, (dr, d), &[(0, l, dr)])?,
    )?;
    let k2 = broadcast::add(
        g,
        &moved(g, inp, latent, (l, d), &[(0, 0, l)])?,
        &moved(g, inp, k_rot, (dr, d), &[(0, l, dr)])?,
    )?;
    let t = q_rot.shape()[1];
    let q2 = shape::reshape(g, &q2, &[n / t, t, heads, d])?;
    let k2 = shape::reshape(g, &k2, &[n / t, t, 1, d])?;
    let o = attend(&q2, &k2, &shape::reshape(g, latent, &[n / t, t, 1, l])?)?;
    // o_lat [N·H, L] -> [H, N, L] -> W_h o_lat [H, N, Dn+Dv] -> [N·H, Dn+Dv] -> its Dv value columns.
    let o_lat = shape::reshape(g, &o, &[n * heads, l])?;
    let o_lat = swap_rows(g, &o_lat, (n, heads))?;
    let o_full = matmul::matmul_nt(g, &shape::reshape(g, &o_lat, &[heads, n, l])?, &wkv)?;
    let o_full = swap_rows(g, &o_full, (heads, n))?;
    Ok(shape::reshape(g, &moved(g, inp, &o_full, (dkv, dv), &[(dn, 0, dv)])?, &[n, heads * dv])?)
}
