//! Multi-head latent attention's side of the cache where its latent rows `[c | k_rot]` are wider
//! than the paged decode kernel's 256 values (DeepSeek-V3's 512 + 64): a forward of few new
//! tokens over a non-empty cache attends in the absorbed form through the wide latent kernel;
//! a prefill, or a chunk of more new tokens, stores the new latent rows and attends in the
//! expanded form (`kv_b` decompresses the latents into per-head keys and values), over the new
//! rows alone (prefill) or over every cached row gathered back from the pool (see
//! [`KvCache::latent_history`]).

use vkformers_tensor::ops::{cast, embedding, shape};
use vkformers_tensor::{DType, Graph, Tensor};

use super::KvCache;
use crate::error::{ModelError, Result};

/// New tokens a row may bring to a non-empty wide latent cache and still attend in the absorbed
/// form (decode steps, speculative and lookahead steps): each of the kernel's workgroups holds 16
/// query rows of Hq heads and reads every key, so its cost grows with the new tokens, where the
/// expanded form's grows with the cache alone.
pub(crate) const ABSORBED_MAX_NEW: usize = 8;

impl KvCache {
    /// Whether layer `i`'s multi-head latent attention over `t` new columns runs in the absorbed
    /// form over the latent cache: always for rows the paged decode kernel holds (the prefill's
    /// fused kernel takes them too), else only for a few new tokens over a non-empty cache.
    pub(crate) fn latent_absorbs(&self, i: usize, t: usize) -> bool {
        let wide = self.layers.borrow().get(i).is_some_and(|l| l.is_wide_latent());
        let prefill = self.step.borrow().as_ref().is_none_or(|s| s.prefill);
        !wide || (!prefill && t <= ABSORBED_MAX_NEW)
    }

    /// Stores layer `i`'s new latent rows `[B, T, 1, D]` at the step's slots (padding columns are
    /// not stored); the layer's attention then stores nothing.
    pub(crate) fn store_latent(&self, g: &Graph<'_>, i: usize, latent: &Tensor) -> Result<()> {
        let mut step = self.step.borrow_mut();
        let step = step.as_mut().ok_or_else(|| ModelError::Config("KV cache store outside a forward".into()))?;
        let mut layers = self.layers.borrow_mut();
        let layer = &mut layers[i];
        let groups = self.groups.borrow();
        let rows = groups[layer.group()].tables.num_blocks() * self.block_size;
        layer.store(g, rows, (latent, latent), &step.tables[layer.group()])?;
        step.stored[i] = true;
        Ok(())
    }

    /// Layer `i`'s cached latent rows of the selected rows after this forward's store, positions
    /// `[0, len)` of each row right-aligned in `[B, W, D]` f32 (`W` = the longest row, at least
    /// the forward's `t` columns, so query column c of a row sits at key column `W − t + c` as
    /// the fused kernel's causal mask puts it), with the key mask `[B, W]` of the left padding
    /// (None where no row is padded). None in a prefill: the new rows are the whole history.
    ///
    /// A chunk of new tokens over a non-empty cache (chat's next turn, a row joining a running
    /// batch) decompresses every cached latent again with kv_b instead of a second kernel that
    /// attends in the expanded form over the pool: such chunks are rare next to decode steps, and
    /// the expanded attention over gathered rows is the uncached path's, so it is exact as that.
    pub(crate) fn latent_history(&self, g: &Graph<'_>, i: usize, t: usize) -> Result<Option<(Tensor, Option<Tensor>)>> {
        let step = self.step.borrow();
        let step = step.as_ref().ok_or_else(|| ModelError::Config("KV cache read outside a forward".into()))?;
        if step.prefill {
            return Ok(None);
        }
        let layers = self.layers.borrow();
        let layer = &layers[i];
        let pool = layer.key_pool().ok_or_else(|| ModelError::Config("latent history before a store".into()))?;
        let groups = self.groups.borrow();
        let group = &groups[layer.group()];
        if group.window.is_some() {
            return Err(ModelError::Unsupported("a sliding window over a wide latent KV cache".into()));
        }
        let lens = self.lens.borrow();
        let after: Vec<usize> = step.rows.iter().zip(&step.real).map(|(&r, n)| lens[r] + n).collect();
        let w = after.iter().copied().max().unwrap_or(0).max(t);
        let (mut ids, mut mask) = (Vec::with_capacity(after.len() * w), Vec::with_capacity(after.len() * w));
        for (&r, &len) in step.rows.iter().zip(&after) {
            for c in 0..w {
                let slot = match c.checked_sub(w - len) {
                    Some(p) => Some(group.tables.slot(r, p).ok_or_else(|| {
                        ModelError::Config(format!("row {r}: position {p} of {len} not in the KV cache"))
                    })?),
                    None => None,
                };
                ids.push(slot);
                mask.push(i32::from(slot.is_some()));
            }
        }
        // Padding columns read any stored row (masked out, but never uninitialised memory that
        // could hold a NaN for the masked product to spread).
        let fill = ids.iter().flatten().copied().next().unwrap_or(0);
        let ids: Vec<i32> = ids.into_iter().map(|s| s.unwrap_or(fill)).collect();
        let width = layer.width();
        let table = shape::reshape(g, pool, &[pool.numel() / width, width])?;
        let table = if table.dtype() == DType::F32 { table } else { cast::cast(g, &table, DType::F32)? };
        let rows = embedding::embedding(g, &table, &g.ints(&ids, &[after.len(), w])?)?;
        let kmask = if mask.iter().all(|&m| m != 0) { None } else { Some(g.ints(&mask, &[after.len(), w])?) };
        Ok(Some((rows, kmask)))
    }
}
