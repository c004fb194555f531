//! [`KvCache::rope_store`] reading q, k and v in place from the packed q/k/v product's rows, and
//! [`KvCache::rope_attend`]: the rope and store inside the decode attention.

use vkformers_kernels::attention::rope_store::NewRows;
use vkformers_kernels::rope::RopeLayout;
use vkformers_tensor::ops::attention::AttnOptions;
use vkformers_tensor::{Graph, Tensor};

use super::KvCache;
use crate::error::Result;

impl KvCache {
    /// A decode step's rotary embedding and store of layer `i` (as [`KvCache::rope_store`]) with
    /// q, k and v the column blocks `[Hq·D | Hkv·D | Hkv·D]` of the packed product
    /// `y [B·T, (Hq + 2 Hkv)·D]` (`shape` = B, T, Hq): returns the rotated q `[B, T, Hq, D]`;
    /// `None` (nothing done) in a prefill or where the fused kernel does not apply.
    pub(crate) fn rope_store_packed(
        &self,
        g: &Graph<'_>,
        i: usize,
        y: (&Tensor, (usize, usize, usize)),
        rope: (&Tensor, &Tensor),
        rot: (RopeLayout, usize, f32),
    ) -> Result<Option<Tensor>> {
        self.in_decode_layer(g, i, "rope_store", |layer, (step, _, rows)| {
            layer.rope_store_packed(g, (rows, &step.tables[layer.group()]), y, rope, rot)
        })
    }
}

impl KvCache {
    /// A decode step's attention of layer `i` with the rope of q and the new key and the store of
    /// the new key and value inside it (one dispatch for `rope_store` and `attend`): o
    /// `[B, 1, Hq, D]` f32 of the unrotated q, k, v in `x` (`bh` = B, Hq; `like` as
    /// `LayerPool::rope_attend`), `opts` and `chunk` as [`KvCache::attend_chunked`]'s. `None`
    /// (nothing done) in a prefill, with gradients, for more than one new column a row, or where
    /// the fused kernel does not apply (the caller runs the two steps).
    pub(crate) fn rope_attend(
        &self,
        g: &Graph<'_>,
        i: usize,
        (x, like, (b, hq)): (&NewRows<'_>, &Tensor, (usize, usize)),
        rope: (&Tensor, &Tensor),
        rot: (RopeLayout, usize, f32),
        (mut opts, chunk): (AttnOptions, u32),
    ) -> Result<Option<Tensor>> {
        self.in_decode_layer(g, i, "attend", |layer, (step, group, rows)| {
            // One new column a row (positions [B]).
            if step.real.len() != b || rope.0.numel() != b {
                return Ok(None);
            }
            opts.window = group.window.unwrap_or(0) as u32;
            let at = (rows, &step.tables[layer.group()], group.tables.block_size());
            layer.rope_attend(g, at, (x, like, (b, hq)), rope, rot, (&opts, chunk))
        })
    }
}

/// The new rows q, k, v of a step as the column blocks of the packed q/k/v product
/// `y [tokens, (Hq + 2 Hkv)·D]` f32 (`hkv_d` = Hq, Hkv, D), or `None` when y is not that.
pub(crate) fn packed_new_rows(y: &Tensor, (hq, hkv, d): (usize, usize, usize)) -> Option<NewRows<'_>> {
    let width = (hq + 2 * hkv) * d;
    let tokens = y.shape().first().copied().unwrap_or(0);
    let ok = y.dtype() == vkformers_tensor::DType::F32 && y.shape() == [tokens, width] && tokens > 0;
    let w = u32::try_from(width).ok().filter(|_| ok)?;
    Some(super::paged::packed_rows(y, tokens, (hq, hkv, d), w))
}
