//! MPNet's relative position bias: one learned table `[rows, H]` shared by every layer,
//! indexed by T5's bidirectional bucket of `key − query` (MPNet always buckets with 32 buckets
//! and max distance 128, whatever size its table has) and added to every layer's scores with
//! the padding mask. The fused attention kernel has no slot for a `[H, T, T]` bias, so such
//! layers take `seq2seq::attention::biased_attention` (differentiable ops).

use vkformers_tensor::ops::{broadcast, embedding, shape};
use vkformers_tensor::{Graph, Tensor};

use super::{EncoderBatch, EncoderSpec};
use crate::decoder::Weights;
use crate::error::{ModelError, Result};
use crate::seq2seq::attention::{additive_mask, relative_bucket};

/// `{table}.weight [rows, heads]`, bucketed with `num_buckets` up to `max_distance`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RelativeBias {
    pub table: String,
    pub rows: usize,
    pub num_buckets: usize,
    pub max_distance: usize,
}

/// What every layer's attention reads of the keys: the padding mask `[B, T]` (int32) for the
/// fused kernel, or, with a relative bias, the bias plus the additive mask `[B, H, T, T]`.
pub(super) struct Keys {
    pub kmask: Tensor,
    pub bias: Option<Tensor>,
}

pub(super) fn keys(g: &Graph<'_>, enc: &EncoderSpec, w: &Weights, batch: &EncoderBatch<'_>) -> Result<Keys> {
    let (b, t) = (batch.batch, batch.seq);
    let kmask = g.ints(batch.mask, &[b, t])?;
    let Some(r) = &enc.relative_bias else { return Ok(Keys { kmask, bias: None }) };
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
    Ok(Keys { kmask, bias: Some(broadcast::add(g, &bias, &mask)?) })
}
