//! A decode step's rotary embedding, KV store and attention in one dispatch
//! (`vkformers_kernels::attention::rope_store::attend`): the paged decode attention rotates q and
//! the new key itself and stores the new key and value, so `rope_store` does not run before it.

use vkformers_kernels::attention::decode::{self, PagedInputs};
use vkformers_kernels::attention::rope_store::{self, NewRows, NewToken};
use vkformers_kernels::rope::RopeLayout;
use vkformers_tensor::ops::attention::AttnOptions;
use vkformers_tensor::{DType, Graph, Tensor};

use super::{decode_options, f32_sinks, LayerPool, StepTables};
use crate::error::Result;

impl LayerPool {
    /// o `[B, 1, Hq, D]` f32 of the step's one new token a row: q, k, v unrotated f32 in `x`
    /// (dense or the packed product's strided rows; `like`: an f32 tensor the pools take their
    /// type from when first made, `bh` = B, Hq), rotated at `pos [B]` with `inv_freq [R/2]`; the
    /// new keys and values land at the step's slots (pools of `rows` rows), as
    /// [`LayerPool::rope_store`] then [`LayerPool::decode`] do, bit for bit. `None` (nothing done)
    /// where the fused kernel does not apply: a latent pool, or a call the decode policy runs on
    /// 64-key tiles (`VKFORMERS_DECODE_TILE=64`).
    pub(crate) fn rope_attend(
        &mut self,
        g: &Graph<'_>,
        (rows, st, block_size): (usize, &StepTables, usize),
        (x, like, (b, hq)): (&NewRows<'_>, &Tensor, (usize, usize)),
        (pos, inv_freq): (&Tensor, &Tensor),
        (layout, rotary_dim, mscale): (RopeLayout, usize, f32),
        (opts, chunk): (&AttnOptions, u32),
    ) -> Result<Option<Tensor>> {
        let d = self.head_dim;
        let fits = u32::try_from(rotary_dim).is_ok() && u32::try_from(rows).is_ok();
        let one = st.cols == 1 && st.rows == b;
        if self.values_are_keys
            || !fits
            || !one
            || block_size == 0
            || pos.numel() != b
            || inv_freq.numel() != rotary_dim / 2
        {
            return Ok(None);
        }
        if decode::tile_keys(&self.decode_shape((b, 1, hq), rows, st, block_size)) != decode::TILE {
            return Ok(None);
        }
        let (pk, pv) = self.pools(g, rows, like)?;
        self.copy_on_write(g, (&pk, &pv), st)?;
        let dt = pk.dtype();
        let shape = self.decode_shape((b, 1, hq), pk.shape()[0], st, block_size);
        let (splits, work, counters) = self.split_buffers(g, &shape, st)?;
        let mut ko = decode_options(opts, shape.d, chunk, (dt, DType::F32));
        let sinks = f32_sinks(g, opts)?;
        ko.sinks = sinks.as_ref().map(Tensor::view);
        let (o, lse) = (g.empty(&[b, 1, hq, d])?, g.empty(&[b, hq, 1])?);
        let token = NewToken {
            k: x.k,
            v: x.v,
            strides: x.strides,
            pos: pos.view(),
            inv_freq: inv_freq.view(),
            slots: st.slots(),
            layout,
            rotary_dim: rotary_dim as u32,
            mscale,
            pool_rows: rows as u32,
        };
        let paged = PagedInputs { q: x.q, k: pk.view(), v: pv.view(), table: st.table(), lens: st.lens() };
        let o16 = super::o_twin(g, &o, dt)?;
        let out = super::decode_outputs(&o, &lse, (&work, &counters), &o16);
        g.record(|rec| rope_store::attend(rec, &token, &paged, &out, &shape, &ko, splits))?;
        Ok(Some(o))
    }
}
