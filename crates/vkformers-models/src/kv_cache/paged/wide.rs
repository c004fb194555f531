//! Paged attention of a latent pool wider than the paged decode kernel's rows (multi-head latent
//! attention's `[c | k_rot]` of `kv_lora_rank + qk_rope_head_dim` > 256 values, DeepSeek-V3's
//! 576): `vkformers_kernels::attention::decode_latent`, which reads each latent row once for 16
//! query heads.

use vkformers_kernels::attention::decode::MAX_DECODE_HEAD_DIM;
use vkformers_kernels::attention::decode_latent::{self, LatentInputs, LatentOutputs, LatentShape};
use vkformers_tensor::ops::attention::AttnOptions;
use vkformers_tensor::{Graph, Tensor};

use super::{decode_options, in_type, LayerPool, StepTables};
use crate::error::{ModelError, Result};

impl LayerPool {
    /// Whether [`LayerPool::decode`] runs the wide latent kernel: a latent pool whose rows the
    /// paged decode kernel cannot hold.
    pub(crate) fn is_wide_latent(&self) -> bool {
        self.values_are_keys && self.head_dim > MAX_DECODE_HEAD_DIM as usize
    }

    /// [`LayerPool::decode`] of a wide latent pool: o `[B, T, Hq, Dv]` (Dv = `value_dim`) of q
    /// `[B, T, Hq, D]`, in q's type.
    pub(super) fn decode_wide(
        &self,
        g: &Graph<'_>,
        q: &Tensor,
        st: &StepTables,
        opts: &AttnOptions,
        (block_size, chunk): (usize, u32),
    ) -> Result<Tensor> {
        let (pool, _) =
            self.pools.as_ref().ok_or_else(|| ModelError::Config("paged attention before a store".into()))?;
        if opts.sinks.is_some() {
            return Err(ModelError::Unsupported("learned attention sinks over a latent KV cache".into()));
        }
        let dt = pool.dtype();
        let qs = q.shape();
        let shape = LatentShape {
            batch: qs[0] as u32,
            tq: qs[1] as u32,
            hq: qs[2] as u32,
            d: self.head_dim as u32,
            dv: self.value_dim as u32,
            block_size: block_size as u32,
            num_blocks: (pool.shape()[0] / block_size) as u32,
            max_blocks: st.max_blocks as u32,
        };
        let (act, q16, o, lse) = self.decode_io(g, q, dt)?;
        let splits = decode_latent::splits(&shape, st.max_len as u32);
        let work =
            if splits > 1 { Some(g.empty(&[decode_latent::work_floats(&shape, splits) as usize])?) } else { None };
        let ko = decode_options(opts, shape.d, chunk, (dt, act));
        let x = LatentInputs { q: q16.view(), pool: pool.view(), table: st.table(), lens: st.lens() };
        let out = LatentOutputs { o: o.view(), lse: lse.view(), work: work.as_ref().map(Tensor::view) };
        g.record(|rec| decode_latent::forward(rec, &x, &out, &shape, &ko, splits))?;
        in_type(g, &o, q.dtype())
    }
}
