//! MPNet's relative position bias: one learned table `[rows, H]` shared by every layer,
//! indexed by T5's bidirectional bucket of `key − query` (MPNet always buckets with 32 buckets
//! and max distance 128, whatever size its table has) and added to every layer's scores with
//! the padding mask. The fused attention kernel has no slot for a `[H, T, T]` bias, so such
//! layers take `seq2seq::attention::biased_attention` (differentiable ops). ModernBERT's local
//! layers take the same path with a bidirectional window mask (`|q − k| ≤ window`).

use vkformers_tensor::ops::{broadcast, embedding, shape};
use vkformers_tensor::{Graph, Tensor};

use super::EncoderBatch;
use crate::decoder::Weights;
use crate::error::{ModelError, Result};
use crate::seq2seq::attention::{additive_mask, relative_bucket};
use crate::spec::ModelSpec;

/// `{table}.weight [rows, heads]`, bucketed with `num_buckets` up to `max_distance`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RelativeBias {
    pub table: String,
    pub rows: usize,
    pub num_buckets: usize,
    pub max_distance: usize,
}

/// What every layer's attention reads of the keys: the padding mask `[B, T]` (int32) for the
/// fused kernel (None when no key is padded: the kernels then scale wholly visible tiles as one
/// matrix instead of testing a mask per element), or, with a relative bias, the bias plus the additive mask `[B, H, T, T]`; and
/// the additive mask `[B, 1, T, T]` of the windowed layers (their `sliding_window`), if any.
pub(super) struct Keys {
    pub kmask: Option<Tensor>,
    pub bias: Option<Tensor>,
    pub window: Option<(u32, Tensor)>,
    /// DeBERTa's pair mask and relative table (see `disentangled`).
    pub disentangled: Option<super::disentangled::Shared>,
}

pub(super) fn keys(g: &Graph<'_>, spec: &ModelSpec, w: &Weights, batch: &EncoderBatch<'_>) -> Result<Keys> {
    let (b, t) = (batch.batch, batch.seq);
    let kmask = crate::decoder::key_mask(g, batch.mask, (b, t))?;
    let window = match spec.layers.iter().find_map(|l| l.attn.sliding_window) {
        Some(win) => Some((win, window_mask(g, batch.mask, (b, t), win)?)),
        None => None,
    };
    let enc = super::encoder_of(spec)?;
    let disentangled = match &enc.disentangled {
        Some(d) => {
            let heads = spec.layers.first().map_or(1, |l| l.attn.heads);
            Some(super::disentangled::shared(g, d, w, batch, heads)?)
        }
        None => None,
    };
    let Some(r) = &enc.relative_bias else { return Ok(Keys { kmask, bias: None, window, disentangled }) };
    let table = w.get(&format!("{}.weight", r.table))?;
    let heads = table.shape()[1];
    let mut idx = Vec::with_capacity(heads * t * t);
    for h in 0..heads {
        for q in 0..t {
            for k in 0..t {
                let bucket = relative_bucket(k as i64 - q as i64, true, r.num_buckets, r.max_distance);
                if bucket >= r.rows {
                    return Err(ModelError::Config(format!(
                        "relative bucket {bucket} outside `{}` of {} rows",
                        r.table, r.rows
                    )));
                }
                idx.push((bucket * heads + h) as i32);
            }
        }
    }
    // Gathered from the table viewed as `[rows·H, 1]`, so each bucket's entry gets its gradient.
    let flat = shape::reshape(g, table, &[r.rows * heads, 1])?;
    let rows = embedding::embedding(g, &flat, &g.ints(&idx, &[idx.len()])?)?;
    let bias = shape::reshape(g, &rows, &[1, heads, t, t])?;
    let mask = additive_mask(g, batch.mask, (b, t, t, 0), false)?;
    Ok(Keys { kmask, bias: Some(broadcast::add(g, &bias, &mask)?), window, disentangled })
}

/// `[B, 1, T, T]`: 0 where key k of row b is real and `|q − k| ≤ window`, else -1e30
/// (transformers' `create_bidirectional_sliding_window_mask`; a query that sees no key then
/// spreads evenly over all of them, as with transformers' `finfo.min`).
fn window_mask(g: &Graph<'_>, mask: &[i32], (b, t): (usize, usize), window: u32) -> Result<Tensor> {
    let mut m = vec![0f32; b * t * t];
    for row in 0..b {
        for q in 0..t {
            for k in 0..t {
                if mask[row * t + k] == 0 || q.abs_diff(k) > window as usize {
                    m[(row * t + q) * t + k] = -1e30;
                }
            }
        }
    }
    Ok(g.constant(&m, &[b, 1, t, t])?)
}
