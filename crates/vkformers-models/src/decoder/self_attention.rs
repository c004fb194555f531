//! The decoder layer's self-attention: the q/k/v projections (packed into one product where the
//! load packed them), q/k norms, the rotary embedding (with the KV cache's store where the
//! forward has one), the fused attention and the output projection.

use vkformers_tensor::ops::attention::{attention_chunked, attention_chunked_for_product, AttnOptions};
use vkformers_tensor::ops::packed_qkv::{qkv_for_attention, QkvHeads};
use vkformers_tensor::ops::{broadcast, rope, shape};
use vkformers_tensor::{Graph, Tensor};

use super::{apply_norm, clamp, grouped, left_aligned, mla, moa, packed_rope, project, Inputs, Weights};
use crate::error::Result;
use crate::spec::{layer_name, AttnSpec, ModelSpec, QkNormAt};
use packed_rope::NewQkv;

#[allow(clippy::too_many_arguments)]
pub(super) fn self_attention(
    g: &Graph<'_>,
    spec: &ModelSpec,
    w: &Weights,
    a: &AttnSpec,
    i: usize,
    h: &Tensor,
    inp: &Inputs<'_>,
    (b, t): (usize, usize),
) -> Result<Tensor> {
    if let Some(m) = &a.mla {
        return mla::attention(g, spec, w, (a, m), i, h, inp, (b, t));
    }
    if let Some(m) = &a.moa {
        return moa::attention(g, spec, w, (a, m), i, h, inp, (b, t));
    }
    let n = &spec.layer_names;
    let heads = |y: Tensor, count: usize| shape::reshape(g, &y, &[b, t, count, a.head_dim]);
    let proj = |template: &str| -> Result<Tensor> {
        let y = project(g, w, template, i, h, a.qkv_bias)?;
        match a.clip_qkv {
            Some(c) => clamp(g, &y, c),
            None => Ok(y),
        }
    };
    // Decoding: the three products in one dispatch (no bias; clipped as `proj` clips).
    let names = [&n.q, &n.k, &n.v].map(|t| format!("{}.weight", layer_name(t, i)));
    let together = if a.qkv_bias { None } else { super::normed_gemv::products(g, w, h, &names, inp)? };
    // Else (more rows than the GEMV takes, or biases): one product of the packed q/k/v weight.
    let packed = if together.is_none() { crate::packed::product(g, w, h, &names)? } else { None };
    let clip = |y: &Tensor| -> Result<Tensor> {
        match a.clip_qkv {
            Some(c) => clamp(g, y, c),
            None => Ok(y.clone()),
        }
    };
    let (mut q, mut k, v) = match (together, packed) {
        (Some(ys), _) => (clip(&ys[0])?, clip(&ys[1])?, clip(&ys[2])?),
        (None, Some((y, cols))) => {
            let y = clip(&y)?;
            if let Some(o) = packed_rope::rope_attend(g, (a, w), i, NewQkv::Packed(&y, &cols), inp, (b, t))? {
                return output_projection(g, spec, w, (a, i), o, (b, t));
            }
            // A decode step: the rope + KV store reads q, k, v in y's rows (k, v stored then).
            if let Some(q) = packed_rope::rope_store(g, (a, w), i, (&y, &cols), inp, (b, t))? {
                return attend_project(g, spec, w, (a, i), (q, &y, &y), inp, (b, t));
            }
            // Training under autocast: q, k rotated and v rounded in place from y's columns.
            if let Some([q, k, v]) = rope_in_place_for_training(g, spec, (a, w), i, (&y, &cols), inp, (b, t))? {
                return attend_project(g, spec, w, (a, i), (q, &k, &v), inp, (b, t));
            }
            // Else split into contiguous q, k and v (one dispatch).
            crate::packed::split_qkv(g, &y, &cols)?
        }
        (None, None) => (proj(&n.q)?, proj(&n.k)?, proj(&n.v)?),
    };
    if let (Some(qk), QkNormAt::Projection) = (&a.qk_norm, a.qk_norm_at) {
        q = apply_norm(g, qk, w, &layer_name(&n.q_norm, i), &q)?;
        k = apply_norm(g, qk, w, &layer_name(&n.k_norm, i), &k)?;
    }
    let mut q = heads(q, a.heads)?;
    let mut k = heads(k, a.kv_heads)?;
    let v = heads(v, a.kv_heads)?;
    if let (Some(qk), QkNormAt::HeadsBeforeRope) = (&a.qk_norm, a.qk_norm_at) {
        q = apply_norm(g, qk, w, &layer_name(&n.q_norm, i), &q)?;
        k = apply_norm(g, qk, w, &layer_name(&n.k_norm, i), &k)?;
    }
    if let Some(o) = packed_rope::rope_attend(g, (a, w), i, NewQkv::Heads(&q, &k, &v), inp, (b, t))? {
        return output_projection(g, spec, w, (a, i), o, (b, t));
    }
    if let Some(r) = &a.rope {
        let freq = rope_freq(g, r, inp)?;
        let rot = (r.layout, r.rotary_dim, r.mscale);
        // Cached decoding: q and k rotated and k, v stored in the cache in one dispatch (not when
        // a norm changes k after the rotation); else q and k rotated in one dispatch.
        let norm_after = a.qk_norm.is_some() && matches!(a.qk_norm_at, QkNormAt::HeadsAfterRope);
        let fused = match inp.cache {
            Some((cache, _)) if !norm_after => cache.rope_store(g, i, (&q, &k, &v), (&inp.pos, &freq), rot)?,
            _ => None,
        };
        let both = match (&fused, inp.cache) {
            (None, Some(_)) => grouped::rope_qk(g, (&q, &k), (&inp.pos, &freq), rot)?,
            _ => None,
        };
        (q, k) = match (fused, both) {
            // k is stored already; attention reads the cache, not k.
            (Some(qo), _) => (qo, k),
            (None, Some(qk)) => qk,
            // Training under autocast: 16-bit q and k only, where attention alone reads them.
            (None, None) if attention_reads_rope((a, w), &layer_name(&n.o, i), inp) => (
                rope::rope_for_attention(g, &q, (&inp.pos, &freq), rot)?,
                rope::rope_for_attention(g, &k, (&inp.pos, &freq), rot)?,
            ),
            (None, None) => (
                rope::rope(g, &q, &inp.pos, &freq, r.layout, r.rotary_dim, r.mscale)?,
                rope::rope(g, &k, &inp.pos, &freq, r.layout, r.rotary_dim, r.mscale)?,
            ),
        };
    }
    attend_project(g, spec, w, (a, i), (q, &k, &v), inp, (b, t))
}

/// The training forward's 16-bit `[rope(q), rope(k), v]` read in place from the packed q/k/v
/// product's output `y` (`ops::packed_qkv`: no split, and their gradients land in y's packed
/// gradient with no concat), or `None` where it does not apply: no rope, a q/k norm, columns
/// other than q, k, v heads, attention not the rotated q and k's only reader, or (decided by
/// the op) not training under autocast with 16-bit gradients around attention.
fn rope_in_place_for_training(
    g: &Graph<'_>,
    spec: &ModelSpec,
    (a, w): (&AttnSpec, &Weights),
    i: usize,
    (y, cols): (&Tensor, &[usize]),
    inp: &Inputs<'_>,
    (b, t): (usize, usize),
) -> Result<Option<[Tensor; 3]>> {
    let Some(r) = &a.rope else { return Ok(None) };
    let heads = [a.heads, a.kv_heads, a.kv_heads].map(|h| h * a.head_dim);
    let o_name = layer_name(&spec.layer_names.o, i);
    if !g.grad_enabled() || a.qk_norm.is_some() || cols != heads || !attention_reads_rope((a, w), &o_name, inp) {
        return Ok(None);
    }
    let s = QkvHeads { batch: b, seq: t, heads: a.heads, kv_heads: a.kv_heads, head_dim: a.head_dim };
    let freq = rope_freq(g, r, inp)?;
    Ok(qkv_for_attention(g, y, s, (&inp.pos, &freq), (r.layout, r.rotary_dim, r.mscale))?)
}

/// Whether attention is the only reader of the rotated q and k, and hands o to o_proj as
/// `attend_for_o_proj` does (16-bit q and k make a 16-bit o): no position scale or norm
/// applied to q and k after the rotation, and none of the cases `attend` keeps (a cache, a
/// chunked mask, a norm or a LoRA term on o_proj).
fn attention_reads_rope((a, w): (&AttnSpec, &Weights), o_name: &str, inp: &Inputs<'_>) -> bool {
    let norm_after = a.qk_norm.is_some() && matches!(a.qk_norm_at, QkNormAt::HeadsAfterRope);
    let lora = w.lora().get(&format!("{o_name}.weight")).is_some();
    let plain_o = inp.cache.is_none() && a.out_norm.is_none() && a.chunk.unwrap_or(0) == 0 && !lora;
    plain_o && a.q_position_scale.is_none() && !norm_after
}

/// The frequencies `[R/2]` of the layer's rotary embedding at this forward's length (LongRoPE:
/// the long factors past the original context).
pub(super) fn rope_freq(g: &Graph<'_>, r: &crate::spec::RopeSpec, inp: &Inputs<'_>) -> Result<Tensor> {
    if r.long.is_some() {
        // The factors follow the host's length: a replay would keep the recorded ones.
        g.refuse_capture("LongRoPE picks its factors on the host");
    }
    let inv_freq = match &r.long {
        Some((long, original)) if inp.seq_len > *original => long,
        _ => &r.inv_freq,
    };
    inp.freq(g, inv_freq)
}

/// The rest of the layer's self-attention after the rotary embedding: q's position scale and
/// norms after the rope, the attention of q `[B, T, Hq, D]` (over k, v `[B, T, Hkv, D]`, or over
/// the cache when the rope stored them), the output norm and projection.
fn attend_project(
    g: &Graph<'_>,
    spec: &ModelSpec,
    w: &Weights,
    (a, i): (&AttnSpec, usize),
    (mut q, k, v): (Tensor, &Tensor, &Tensor),
    inp: &Inputs<'_>,
    (b, t): (usize, usize),
) -> Result<Tensor> {
    let n = &spec.layer_names;
    let mut k = k.clone();
    if let Some((beta, original)) = a.q_position_scale {
        // [B, T, 1, 1] in f32 as `1 + beta * torch.log(1 + torch.floor(pos / original))`.
        let shift = a.q_position_shift;
        // Scales of this step's positions, made on the host: a replay would keep them.
        g.refuse_capture("the query's position scale is made on the host");
        let pos = if a.q_position_by_column { &inp.host_cols } else { &inp.host_pos };
        let s: Vec<f32> =
            pos.iter().map(|&p| 1.0 + beta * (1.0 + ((p + shift) as f32 / original as f32).floor()).ln()).collect();
        q = broadcast::mul(g, &q, &g.constant(&s, &[b, t, 1, 1])?)?;
    }
    if let (Some(qk), QkNormAt::HeadsAfterRope) = (&a.qk_norm, a.qk_norm_at) {
        q = apply_norm(g, qk, w, &layer_name(&n.q_norm, i), &q)?;
        k = apply_norm(g, qk, w, &layer_name(&n.k_norm, i), &k)?;
    }
    let o = attend_for_o_proj(g, (a, w), (i, &layer_name(&n.o, i)), (&q, &k, v), inp)?;
    output_projection(g, spec, w, (a, i), o, (b, t))
}

/// The layer's output norm and projection of the attention's o `[B, T, Hq, D]`.
fn output_projection(
    g: &Graph<'_>,
    spec: &ModelSpec,
    w: &Weights,
    (a, i): (&AttnSpec, usize),
    o: Tensor,
    (b, t): (usize, usize),
) -> Result<Tensor> {
    let mut o = shape::reshape(g, &o, &[b * t, a.heads * a.head_dim])?;
    if let Some((norm, template)) = &a.out_norm {
        o = apply_norm(g, norm, w, &layer_name(template, i), &o)?;
    }
    project(g, w, &spec.layer_names.o, i, &o, a.out_bias)
}

/// `o [B, T, Hq, D]` of the layer's fused attention of q `[B, T, Hq, D]`, k and v
/// `[B, T, Hkv, D]` (through the KV cache when the forward has one); `w` holds the sinks.
pub(super) fn attend(
    g: &Graph<'_>,
    (a, w): (&AttnSpec, &Weights),
    i: usize,
    (q, k, v): (&Tensor, &Tensor, &Tensor),
    inp: &Inputs<'_>,
) -> Result<Tensor> {
    let opts = attn_options(g, (a, w), i, inp)?;
    let chunk = a.chunk.unwrap_or(0);
    let left_padded = chunk > 0 && left_aligned::left_pads(&inp.host_mask, q.shape()[1]).iter().any(|&p| p > 0);
    Ok(match inp.cache {
        Some((cache, _)) => cache.attend_chunked(g, i, (q, k, v), opts, chunk)?,
        None if left_padded => left_aligned::attend_left_aligned(g, (q, k, v), &opts, chunk, &inp.host_mask)?,
        None => attention_chunked(g, q, k, v, &opts, chunk)?,
    })
}

/// [`attend`] when o_proj (`o_name`, no LoRA term) reads o next with no norm between, without a
/// cache or a chunked mask: o may come in 16 bits under autocast (no widening cast, and dO comes
/// back in 16 bits: see `attention_chunked_for_product`).
fn attend_for_o_proj(
    g: &Graph<'_>,
    (a, w): (&AttnSpec, &Weights),
    (i, o_name): (usize, &str),
    (q, k, v): (&Tensor, &Tensor, &Tensor),
    inp: &Inputs<'_>,
) -> Result<Tensor> {
    let lora = w.lora().get(&format!("{o_name}.weight")).is_some();
    if inp.cache.is_some() || a.out_norm.is_some() || a.chunk.unwrap_or(0) != 0 || lora {
        return attend(g, (a, w), i, (q, k, v), inp);
    }
    let opts = attn_options(g, (a, w), i, inp)?;
    Ok(attention_chunked_for_product(g, (q, k, v), &opts, 0)?)
}

/// Layer `i`'s attention options: scale, causal, window, softcap, the new columns' key mask,
/// ALiBi slopes, sinks.
pub(super) fn attn_options(
    g: &Graph<'_>,
    (a, w): (&AttnSpec, &Weights),
    i: usize,
    inp: &Inputs<'_>,
) -> Result<AttnOptions> {
    Ok(AttnOptions {
        scale: Some(a.scale),
        causal: true,
        window: a.sliding_window.unwrap_or(0),
        softcap: a.softcap,
        kmask: inp.kmask.clone(),
        alibi: match &a.alibi {
            Some(slopes) => Some(g.constant(slopes, &[a.heads])?),
            None => None,
        },
        sinks: a.sinks.as_ref().map(|t| w.get(&layer_name(t, i)).cloned()).transpose()?,
    })
}
