//! The fused rope + store of a decode step reading q, k and v in place from the rows of the
//! packed q/k/v product (`crate::packed`): no split dispatch (and no copy of the q/k/v bytes)
//! between the product and the rope.

use vkformers_kernels::attention::rope_store::NewRows;
use vkformers_kernels::rope::{Rope, RopeLayout};
use vkformers_tensor::{DType, Graph, Tensor};
use vkformers_vk::BufferView;

use super::{LayerPool, StepTables};
use crate::error::Result;

impl LayerPool {
    /// [`LayerPool::rope_store`] of the q, k and v that are the column blocks `[Hq·D | Hkv·D |
    /// Hkv·D]` of `y [B·T, (Hq + 2 Hkv)·D]` f32 (`shape` = B, T, Hq): the kernel reads each
    /// token's row of y at the three column offsets. The rotated q `[B, T, Hq, D]` (dense), or
    /// `None` where the fused kernel does not apply (the caller splits y and runs it on the
    /// parts, or the two steps).
    pub(crate) fn rope_store_packed(
        &mut self,
        g: &Graph<'_>,
        (rows, st): (usize, &StepTables),
        (y, (b, t, hq)): (&Tensor, (usize, usize, usize)),
        (pos, inv_freq): (&Tensor, &Tensor),
        (layout, rotary_dim, mscale): (RopeLayout, usize, f32),
    ) -> Result<Option<Tensor>> {
        let (hkv, d) = (self.kv_heads, self.head_dim);
        let width = (hq + 2 * hkv) * d;
        let tokens = b * t;
        let fits = |x: usize| u32::try_from(x).ok();
        let shaped = y.shape() == [tokens, width] && pos.numel() == tokens && inv_freq.numel() == rotary_dim / 2;
        if y.dtype() != DType::F32 || self.values_are_keys || !shaped || tokens == 0 {
            return Ok(None);
        }
        let (Some(bu), Some(tu), Some(hqu), Some(du), Some(r), Some(w)) =
            (fits(b), fits(t), fits(hq), fits(d), fits(rotary_dim), fits(width))
        else {
            return Ok(None);
        };
        let x = packed_rows(y, tokens, (hq, hkv, d), w);
        let p = Rope { batch: bu, seq: tu, heads: hqu, head_dim: du, rotary_dim: r, layout, mscale, dtype: DType::F32 };
        Ok(Some(self.record_rope_store(g, (rows, st), &p, (&x, y), (pos, inv_freq))?))
    }
}

/// q, k and v as the column blocks `[Hq·D | Hkv·D | Hkv·D]` of the rows of
/// `y [tokens, (Hq + 2 Hkv)·D]` f32 (`w` its width; `tokens` ≥ 1): each part from the first row's
/// first element to the last row's last one, rows `w` elements apart.
pub(crate) fn packed_rows(y: &Tensor, tokens: usize, (hq, hkv, d): (usize, usize, usize), w: u32) -> NewRows<'_> {
    let all = y.view();
    let part = |col: usize, part: usize| BufferView {
        buffer: all.buffer,
        offset: all.offset + 4 * col as u64,
        len: 4 * ((tokens - 1) * w as usize + part) as u64,
    };
    NewRows { q: part(0, hq * d), k: part(hq * d, hkv * d), v: part((hq + hkv) * d, hkv * d), strides: Some((w, w)) }
}
