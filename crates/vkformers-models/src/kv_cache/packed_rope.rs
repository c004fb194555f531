//! [`KvCache::rope_store`] reading q, k and v in place from the packed q/k/v product's rows.

use vkformers_kernels::rope::RopeLayout;
use vkformers_tensor::{Graph, Tensor};

use super::KvCache;
use crate::error::{ModelError, Result};

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
        let mut step = self.step.borrow_mut();
        let step = step.as_mut().ok_or_else(|| ModelError::Config("KV cache rope_store outside a forward".into()))?;
        if step.prefill || g.grad_enabled() {
            return Ok(None);
        }
        let mut layers = self.layers.borrow_mut();
        let layer = &mut layers[i];
        let groups = self.groups.borrow();
        let rows = groups[layer.group()].tables.num_blocks() * self.block_size;
        let q = layer.rope_store_packed(g, (rows, &step.tables[layer.group()]), y, rope, rot)?;
        step.stored[i] = q.is_some();
        Ok(q)
    }
}
