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
use super::EncoderBatch;
use crate::decoder::{apply_norm, project, Weights};
use crate::error::{ModelError, Result};
use crate::seq2seq::attention::{heads_attention, heads_first};
use crate::spec::{LayerSpec, ModelSpec, Norm};

/// The relative part of DeBERTa's attention (`relative_attention`).
#[derive(Clone, Debug, PartialEq)]
pub struct RelativeTable {
    /// `{table}.weight [2·span, hidden]` (`encoder.rel_embeddings`).
    pub table: String,
    /// `pos_ebd_size`: `position_buckets` when > 0, else `max_relative_positions`.
    pub span: usize,
    /// `(position_buckets, max_relative_positions)` when both are > 0: log buckets.
    pub log_buckets: Option<(usize, usize)>,
    /// `encoder.LayerNorm` on the table (`norm_rel_ebd` has `layer_norm`).
    pub norm: Option<(Norm, String)>,
    pub c2p: bool,
    pub p2c: bool,
    /// The layers' own key / query projections also project the table (`share_att_key`).
    pub share_att_key: bool,
    /// Per-layer templates of `pos_key_proj` / `pos_query_proj` (without `share_att_key`).
    pub pos_key: String,
    pub pos_query: String,
    /// `pos_key` has a bias (DeBERTa v1's `pos_proj` has none).
    pub pos_key_bias: bool,
}

/// DeBERTa's attention: the pair mask always, the relative terms with `relative_attention`.
#[derive(Clone, Debug, PartialEq)]
pub struct Disentangled {
    pub relative: Option<RelativeTable>,
    /// The key projection has a bias (DeBERTa v1: only `q_bias` and `v_bias`).
    pub key_bias: bool,
}

/// What every layer reads: the pair mask `[B, 1, T, T]` and the (normed) table `[2S, hidden]`.
pub(super) struct Shared {
    mask: Tensor,
    table: Option<Tensor>,
}

pub(super) fn shared(g: &Graph<'_>, d: &Disentangled, w: &Weights, batch: &EncoderBatch<'_>) -> Result<Shared> {
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
    let table = match &d.relative {
        None => None,
        Some(r) => {
            let x = w.get(&format!("{}.weight", r.table))?.clone();
            Some(match &r.norm {
                Some((n, name)) => apply_norm(g, n, w, name, &x)?,
                None => x,
            })
        }
    };
    Ok(Shared { mask, table })
}

/// `[B·H, T, 2S]` gathered to `[B, H, T, T]` at column `col(i, j)` of row `(bh, row(i, j))`.
fn gather(
    g: &Graph<'_>,
    full: &Tensor,
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
    let flat = shape::reshape(g, full, &[bh * t * s2, 1])?;
    Ok(embedding::embedding(g, &flat, &g.ints(&idx, &[idx.len()])?)?)
}

/// A projection of the table `[2S, H·D]` as `[B·H, 2S, D]` (each batch row reads the same rows).
fn table_heads(g: &Graph<'_>, p: &Tensor, (b, h, s2, d): (usize, usize, usize, usize)) -> Result<Tensor> {
    let idx: Vec<i32> = (0..b * h * s2).map(|n| ((n % s2) * h + (n / s2) % h) as i32).collect();
    let rows = shape::reshape(g, p, &[s2 * h, d])?;
    let y = embedding::embedding(g, &rows, &g.ints(&idx, &[idx.len()])?)?;
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
    if let (Some(r), Some(table)) = (&d.relative, &sh.table) {
        let s2 = 2 * r.span;
        if table.shape()[0] < s2 {
            return Err(ModelError::Config(format!("`{}` has fewer than {s2} rows", r.table)));
        }
        let pos = |template: &str, bias: bool| -> Result<Tensor> {
            table_heads(g, &project(g, w, template, i, table, bias)?, (b, h, s2, hd))
        };
        let clamp = |v: i64| v.clamp(0, s2 as i64 - 1) as usize;
        let (span, dims) = (r.span as i64, (b * h, t, s2));
        let mut score: Option<Tensor> = None;
        if r.c2p {
            let pk = if r.share_att_key { pos(&n.k, d.key_bias)? } else { pos(&r.pos_key, r.pos_key_bias)? };
            let full = matmul::matmul_nt(g, &q, &pk)?;
            score = Some(gather(g, &full, dims, |i, j| (i, clamp(delta(r, i as i64 - j as i64) + span)))?);
        }
        if r.p2c {
            let pq = pos(if r.share_att_key { &n.q } else { &r.pos_query }, true)?;
            let full = matmul::matmul_nt(g, &k, &pq)?;
            let p2c = gather(g, &full, dims, |i, j| (j, clamp(-delta(r, j as i64 - i as i64) + span)))?;
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
