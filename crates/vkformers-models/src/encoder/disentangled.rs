//! DeBERTa's disentangled self-attention. Scores of head h, query i, key j (q, k `[T, D]` the
//! content projections, `R [2S, hidden]` the shared relative table, optionally LayerNormed):
//!   s[i,j] = (q_i·k_j + q_i·Pk[c(i,j)] + k_j·Pq[p(i,j)]) / sqrt(D · (1 + |{c2p, p2c}|))
//! with `Pk = pos_key_proj(R)`, `Pq = pos_query_proj(R)` (or the layer's key / query projections
//! under `share_att_key`), `c(i,j) = clamp(δ(i − j) + S, 0, 2S − 1)` and
//! `p(i,j) = clamp(−δ(j − i) + S, 0, 2S − 1)`, δ the identity or the log bucket. The
//! `[B·H, T, 2S]` products are gathered to `[B, H, T, T]` (embedding gathers, so the gradient
//! scatters back) and enter `heads_attention` as a bias with the pair mask: a pair is hidden
//! when its query or its key is padding (a padded query then spreads evenly over all keys, as
//! transformers' `masked_fill(finfo.min)`).

use vkformers_tensor::ops::{broadcast, embedding, matmul, shape};
use vkformers_tensor::{Graph, Tensor};

use super::log_bucket::delta;
use super::Disentangled;
use super::EncoderBatch;
use crate::decoder::{apply_norm, project, Weights};
use crate::error::{ModelError, Result};
use crate::seq2seq::attention::{heads_attention, heads_first};
use crate::spec::{LayerSpec, ModelSpec};

/// What every layer reads: the pair mask `[B, 1, T, T]` and, with the relative terms, the
/// (normed) table `[2S, hidden]` and the gathers' index lists (the same in every layer, so
/// built and uploaded once a forward).
pub(super) struct Shared {
    mask: Tensor,
    rel: Option<RelShared>,
}

struct RelShared {
    table: Tensor,
    /// `[B·H·2S]`: row `(s, h)` of a projection `[2S·H, D]` for each `(b, h, s)`.
    table_idx: Tensor,
    /// `[B·H·T·T]` into the flat `[B·H, T, 2S]` products (see `gather_index`).
    c2p: Option<Tensor>,
    p2c: Option<Tensor>,
}

pub(super) fn shared(
    g: &Graph<'_>,
    d: &Disentangled,
    w: &Weights,
    batch: &EncoderBatch<'_>,
    heads: usize,
) -> Result<Shared> {
    let (b, t) = (batch.batch, batch.seq);
    let mut m = vec![0f32; b * t * t];
    for row in 0..b {
        for q in 0..t {
            for k in 0..t {
                if batch.mask[row * t + q] == 0 || batch.mask[row * t + k] == 0 {
                    m[(row * t + q) * t + k] = -1e30;
                }
            }
        }
    }
    let mask = g.constant(&m, &[b, 1, t, t])?;
    let Some(r) = &d.relative else { return Ok(Shared { mask, rel: None }) };
    let s2 = 2 * r.span;
    let mut table = w.get(&format!("{}.weight", r.table))?.clone();
    if table.shape()[0] < s2 {
        return Err(ModelError::Config(format!("`{}` has fewer than {s2} rows", r.table)));
    }
    if let Some((n, name)) = &r.norm {
        table = apply_norm(g, n, w, name, &table)?;
    }
    let idx: Vec<i32> = (0..b * heads * s2).map(|n| ((n % s2) * heads + (n / s2) % heads) as i32).collect();
    let clamp = |v: i64| v.clamp(0, s2 as i64 - 1) as usize;
    let (span, dims) = (r.span as i64, (b * heads, t, s2));
    // c2p[i, j] reads query i's column δ(i − j) + S; p2c[i, j] key j's column −δ(j − i) + S.
    let c2p = r.c2p.then(|| gather_index(g, dims, |i, j| (i, clamp(delta(r, i as i64 - j as i64) + span))));
    let p2c = r.p2c.then(|| gather_index(g, dims, |i, j| (j, clamp(-delta(r, j as i64 - i as i64) + span))));
    let rel = RelShared { table, table_idx: g.ints(&idx, &[idx.len()])?, c2p: c2p.transpose()?, p2c: p2c.transpose()? };
    Ok(Shared { mask, rel: Some(rel) })
}

/// Indices `[B·H·T·T]` into a flat `[B·H, T, 2S]` product: for each `(bh, i, j)` row
/// `(bh, row(i, j))`, column `col(i, j)`.
fn gather_index(
    g: &Graph<'_>,
    (bh, t, s2): (usize, usize, usize),
    pick: impl Fn(usize, usize) -> (usize, usize),
) -> Result<Tensor> {
    let mut idx = Vec::with_capacity(bh * t * t);
    for n in 0..bh {
        for i in 0..t {
            for j in 0..t {
                let (row, col) = pick(i, j);
                idx.push(((n * t + row) * s2 + col) as i32);
            }
        }
    }
    Ok(g.ints(&idx, &[idx.len()])?)
}

/// `[B·H, T, 2S]` gathered at `idx` (the embedding lookup: its backward scatters into `full`).
fn gather(g: &Graph<'_>, full: &Tensor, idx: &Tensor) -> Result<Tensor> {
    let flat = shape::reshape(g, full, &[full.numel(), 1])?;
    Ok(embedding::embedding(g, &flat, idx)?)
}

/// A projection of the table `[2S, H·D]` as `[B·H, 2S, D]` (each batch row reads the same rows).
fn table_heads(g: &Graph<'_>, p: &Tensor, idx: &Tensor, (b, h, s2, d): (usize, usize, usize, usize)) -> Result<Tensor> {
    let rows = shape::reshape(g, p, &[s2 * h, d])?;
    let y = embedding::embedding(g, &rows, idx)?;
    Ok(shape::reshape(g, &y, &[b * h, s2, d])?)
}

/// One layer's attention output `[B·T, hidden]` (before `attention.output.dense`).
#[allow(clippy::too_many_arguments)]
pub(super) fn attention(
    g: &Graph<'_>,
    spec: &ModelSpec,
    d: &Disentangled,
    w: &Weights,
    layer: &LayerSpec,
    i: usize,
    x: &Tensor,
    sh: &Shared,
    (b, t): (usize, usize),
) -> Result<Tensor> {
    let (n, a) = (&spec.layer_names, &layer.attn);
    let (h, hd) = (a.heads, a.head_dim);
    let split = |template: &str, y: &Tensor, bias: bool| -> Result<Tensor> {
        heads_first(g, &project(g, w, template, i, y, bias)?, (b, t, h, hd))
    };
    let qkv_bias = a.qkv_bias;
    let (q, k, v) = (split(&n.q, x, qkv_bias)?, split(&n.k, x, qkv_bias && d.key_bias)?, split(&n.v, x, qkv_bias)?);
    let mut bias = sh.mask.clone();
    if let (Some(r), Some(rel)) = (&d.relative, &sh.rel) {
        let s2 = 2 * r.span;
        let pos = |template: &str, bias: bool| -> Result<Tensor> {
            table_heads(g, &project(g, w, template, i, &rel.table, bias)?, &rel.table_idx, (b, h, s2, hd))
        };
        let mut score: Option<Tensor> = None;
        if let Some(idx) = &rel.c2p {
            let pk = if r.share_att_key { pos(&n.k, d.key_bias)? } else { pos(&r.pos_key, r.pos_key_bias)? };
            score = Some(gather(g, &matmul::matmul_nt(g, &q, &pk)?, idx)?);
        }
        if let Some(idx) = &rel.p2c {
            let pq = pos(if r.share_att_key { &n.q } else { &r.pos_query }, true)?;
            let p2c = gather(g, &matmul::matmul_nt(g, &k, &pq)?, idx)?;
            score = Some(match score {
                Some(s) => broadcast::add(g, &s, &p2c)?,
                None => p2c,
            });
        }
        if let Some(s) = score {
            let s = broadcast::scale(g, &shape::reshape(g, &s, &[b, h, t, t])?, a.scale)?;
            bias = broadcast::add(g, &s, &bias)?;
        }
    }
    heads_attention(g, (&q, &k, &v), Some(&bias), (b, t, t, h, hd), a.scale)
}
