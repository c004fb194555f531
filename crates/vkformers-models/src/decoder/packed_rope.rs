//! A decode step's rotary embedding and KV-cache store reading q, k and v in place from the
//! packed q/k/v product's rows `y [B·T, (Hq + 2 Hkv)·D]` (`KvCache::rope_store_packed`), so the
//! split into three contiguous tensors (one dispatch and a copy of the q/k/v bytes a layer) does
//! not run. `VKFORMERS_PACKED_ROPE=0` (or `Packs::set_rope_in_place(false)`) keeps the split.

use vkformers_tensor::{Graph, Tensor};

use super::self_attention::rope_freq;
use super::{Inputs, Weights};
use crate::error::Result;
use crate::spec::AttnSpec;

/// The rotated q `[B, T, Hq, D]` of layer `i` with its k and v stored in the cache, read from
/// the packed product `y` (columns `cols` = q, k, v), or `None` where this does not apply: no
/// cache (or a prefill: the cache says), no rotary embedding, a q/k norm (it changes q and k
/// between the product and the rope, or k after it), parts not `Hq·D, Hkv·D, Hkv·D`, or off
/// (`Packs::rope_in_place`).
pub(super) fn rope_store(
    g: &Graph<'_>,
    (a, w): (&AttnSpec, &Weights),
    i: usize,
    (y, cols): (&Tensor, &[usize]),
    inp: &Inputs<'_>,
    (b, t): (usize, usize),
) -> Result<Option<Tensor>> {
    let (Some((cache, _)), Some(r)) = (inp.cache, &a.rope) else { return Ok(None) };
    let (q_cols, kv_cols) = (a.heads * a.head_dim, a.kv_heads * a.head_dim);
    if a.qk_norm.is_some() || cols != [q_cols, kv_cols, kv_cols] || !w.packs().rope_in_place {
        return Ok(None);
    }
    let freq = rope_freq(g, r, inp)?;
    cache.rope_store_packed(g, i, (y, (b, t, a.heads)), (&inp.pos, &freq), (r.layout, r.rotary_dim, r.mscale))
}
