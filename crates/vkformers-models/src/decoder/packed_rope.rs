//! A decode step's rotary embedding and KV-cache store reading q, k and v in place from the
//! packed q/k/v product's rows `y [B·T, (Hq + 2 Hkv)·D]` (`KvCache::rope_store_packed`), so the
//! split into three contiguous tensors (one dispatch and a copy of the q/k/v bytes a layer) does
//! not run. `VKFORMERS_PACKED_ROPE=0` (or `Packs::set_rope_in_place(false)`) keeps the split.
//!
//! [`rope_attend`] goes further for a decode step of one new token a row: the decode attention
//! rotates q and the new key and stores the new key and value itself (`KvCache::rope_attend`),
//! one dispatch a layer less. `VKFORMERS_ROPE_IN_ATTN=0` (or `Packs::set_rope_in_attention(false)`)
//! keeps the rope + store dispatch before the attention.

use vkformers_kernels::attention::rope_store::NewRows;
use vkformers_tensor::{DType, Graph, Tensor};

use super::self_attention::{attn_options, rope_freq};
use super::{Inputs, Weights};
use crate::error::Result;
use crate::kv_cache::packed_new_rows;
use crate::spec::{AttnSpec, QkNormAt};

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

/// The step's q, k, v before the rope: three tensors `[B, T, H, D]`, or the packed product's rows
/// `y [B·T, (Hq + 2 Hkv)·D]` with its column counts.
pub(super) enum NewQkv<'t> {
    Heads(&'t Tensor, &'t Tensor, &'t Tensor),
    Packed(&'t Tensor, &'t [usize]),
}

/// Layer `i`'s attention o `[B, 1, Hq, D]` of a cached decode step (T = 1) with the rope of q and
/// k and the store of k and v inside the decode attention (`KvCache::rope_attend`), or `None`
/// where the two dispatches keep running: off (`Packs::rope_in_attention`), no cache or no
/// rotary embedding, T > 1, a prefill (the cache says), anything between the rope and the
/// attention (a q/k norm after the rope, Llama 4's position scale of q) or between the packed
/// product and the rope (any q/k norm), ALiBi, 16-bit activations. The packed product's rows are
/// read in place only where `Packs::rope_in_place` is on (else the caller splits them first).
pub(super) fn rope_attend(
    g: &Graph<'_>,
    (a, w): (&AttnSpec, &Weights),
    i: usize,
    x: NewQkv<'_>,
    inp: &Inputs<'_>,
    (b, t): (usize, usize),
) -> Result<Option<Tensor>> {
    let (Some((cache, _)), Some(r)) = (inp.cache, &a.rope) else { return Ok(None) };
    let norm_after = a.qk_norm.is_some() && matches!(a.qk_norm_at, QkNormAt::HeadsAfterRope);
    if !w.packs().rope_in_attention || t != 1 || norm_after || a.q_position_scale.is_some() || a.alibi.is_some() {
        return Ok(None);
    }
    let dims = (a.heads, a.kv_heads, a.head_dim);
    let (rows, like) = match x {
        NewQkv::Heads(q, k, v) => {
            let f32s = [q, k, v].iter().all(|t| t.dtype() == DType::F32);
            let (qs, ks) = ([b, 1, a.heads, a.head_dim], [b, 1, a.kv_heads, a.head_dim]);
            if !f32s || q.shape() != qs || k.shape() != ks || v.shape() != ks {
                return Ok(None);
            }
            (NewRows { q: q.view(), k: k.view(), v: v.view(), strides: None }, k)
        }
        NewQkv::Packed(y, cols) => {
            let (q_cols, kv_cols) = (a.heads * a.head_dim, a.kv_heads * a.head_dim);
            let in_place = w.packs().rope_in_place;
            if !in_place || a.qk_norm.is_some() || cols != [q_cols, kv_cols, kv_cols] || y.shape().first() != Some(&b) {
                return Ok(None);
            }
            let Some(rows) = packed_new_rows(y, dims) else { return Ok(None) };
            (rows, y)
        }
    };
    let freq = rope_freq(g, r, inp)?;
    let opts = attn_options(g, (a, w), i, inp)?;
    let rot = (r.layout, r.rotary_dim, r.mscale);
    let x = (&rows, like, (b, a.heads));
    cache.rope_attend(g, i, x, (&inp.pos, &freq), rot, (opts, a.chunk.unwrap_or(0)))
}
