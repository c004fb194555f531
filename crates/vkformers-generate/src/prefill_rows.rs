//! A batch's prefill in groups of rows: `generate` on many prompts runs their first forward
//! (every row empty, the flash-attention prefill) on at most [`max_tokens`] columns at a time,
//! a group of rows per forward, instead of all `B · T` at once. A forward's activations live
//! only while it runs (on the 1.1B Llama ~220 KB a column: 7 GB for 64 prompts of 512 tokens
//! in one forward), so the device's peak stays near the weights and the KV cache whatever the
//! batch. Each row's numbers are the same either way where the products take the same kernel
//! (a GEMM's sums over K do not depend on the other rows; a group of a few rows could take the
//! GEMV instead): every other op of a prefill is row-wise, and a row's flash attention reads only
//! its own keys, at the same width T and padding.

use vkformers_models::decoder::{forward_cached_last, Batch, KvCache};
use vkformers_models::model::Model;
use vkformers_tensor::{Graph, Tensor};

use crate::decode::DecodeError;

/// Columns a grouped prefill forward runs at most (one row alone may be longer), unless
/// `VKFORMERS_MAX_PREFILL_TOKENS` says otherwise (0: one forward for every row, as before).
pub const MAX_TOKENS: usize = 2048;

/// [`MAX_TOKENS`], or `VKFORMERS_MAX_PREFILL_TOKENS` (read once).
pub fn max_tokens() -> usize {
    static SET: std::sync::OnceLock<usize> = std::sync::OnceLock::new();
    *SET.get_or_init(|| {
        std::env::var("VKFORMERS_MAX_PREFILL_TOKENS").ok().and_then(|v| v.parse().ok()).unwrap_or(MAX_TOKENS)
    })
}

/// Rows of `T` columns a grouped prefill forward takes (at least one), or None when the batch's
/// `b` rows go in one forward anyway.
pub fn rows_per_forward(b: usize, t: usize, cap: usize) -> Option<usize> {
    let per = (cap / t.max(1)).max(1);
    (cap > 0 && b > per).then_some(per)
}

/// The logits `[B, V]` of each row's last column after running `ids`, `mask` (`[B, T]` row by
/// row) through an empty cache in groups of rows, or None when the batch goes in one forward
/// (the cache holds columns already, or the batch is within the cap).
pub(crate) fn in_groups(
    g: &Graph<'_>,
    model: &Model,
    cache: &KvCache,
    (ids, mask): (&[i32], &[i32]),
    (b, t): (usize, usize),
) -> Result<Option<Tensor>, DecodeError> {
    in_groups_of(g, model, cache, (ids, mask), (b, t), max_tokens())
}

/// [`in_groups`] with at most `cap` columns a forward.
pub fn in_groups_of(
    g: &Graph<'_>,
    model: &Model,
    cache: &KvCache,
    (ids, mask): (&[i32], &[i32]),
    (b, t): (usize, usize),
    cap: usize,
) -> Result<Option<Tensor>, DecodeError> {
    let Some(per) = rows_per_forward(b, t, cap).filter(|_| cache.is_empty()) else {
        return Ok(None);
    };
    let mut all: Option<Tensor> = None;
    for start in (0..b).step_by(per) {
        let end = (start + per).min(b);
        cache.select(&(start..end).collect::<Vec<_>>())?;
        let cols = start * t..end * t;
        let batch = Batch { ids: &ids[cols.clone()], mask: &mask[cols], batch: end - start, seq: t };
        let part = forward_cached_last(g, &model.spec, &model.weights, &batch, cache)?;
        let v = part.shape()[1];
        let whole = match &all {
            Some(a) => a.clone(),
            None => all.insert(g.empty(&[b, v])?).clone(),
        };
        let row_bytes = (v * 4) as u64;
        let dst = whole.view().buffer.slice(whole.view().offset + start as u64 * row_bytes, part.view().len);
        g.record(|rec| rec.copy(part.view(), dst))?;
    }
    cache.select(&(0..b).collect::<Vec<_>>())?;
    Ok(all)
}
