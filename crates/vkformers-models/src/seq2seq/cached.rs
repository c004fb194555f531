//! Cached decoding for generation: the encoder runs once; each decoder layer's cross-attention
//! keys and values are projected once from its output and kept; the decoder's self-attention
//! keys and values are appended step by step to per-layer device buffers laid out
//! `[capacity, B, H, D]` (a step's rows are contiguous, so one buffer copy stores them), and
//! each step's queries attend to the filled prefix, gathered into `[B·H, t, D]`. Attention is
//! the explicit product of `attention.rs`, so T5's position bias applies as in training.

use std::cell::Cell;

use vkformers_tensor::ops::{cast, embedding, shape};
use vkformers_tensor::{DType, Graph, Tensor};
use vkformers_vk::BufferView;

use super::attention::{additive_mask, heads_attention, heads_first, relative_bias};
use super::gemma::{self, grouped_heads_first, is_gemma};
use super::{embed, ffn, lm_head, residual_block, seq2seq_of, Encoded};
use crate::decoder::{project, Weights};
use crate::error::{ModelError, Result};
use crate::spec::{layer_name, ModelSpec};

/// One layer's keys and values: cross-attention's `[B·H, S, D]`, self-attention's buffers.
struct LayerKv {
    cross_k: Tensor,
    cross_v: Tensor,
    self_k: Tensor,
    self_v: Tensor,
}

/// The decoder state of a batch being generated.
pub struct Seq2SeqCache {
    batch: usize,
    capacity: usize,
    /// Decoder positions already stored.
    len: Cell<usize>,
    src_len: usize,
    /// `[B, 1, 1, S]`: the source's padding hidden from cross-attention.
    cross_mask: Tensor,
    layers: Vec<LayerKv>,
}

impl Seq2SeqCache {
    /// Projects every decoder layer's cross-attention keys and values from the encoder output
    /// and allocates room for `capacity` decoder positions.
    pub fn new(
        g: &Graph<'_>,
        spec: &ModelSpec,
        w: &Weights,
        enc: &Encoded<'_>,
        batch: usize,
        capacity: usize,
    ) -> Result<Self> {
        let s = seq2seq_of(spec)?;
        let cross_mask = additive_mask(g, enc.mask, (batch, 1, enc.len, 0), false)?;
        let mut layers = Vec::with_capacity(spec.layers.len());
        for (i, layer) in spec.layers.iter().enumerate() {
            let a = &layer.attn;
            // Grouped key heads (T5Gemma) are expanded to the query heads once here.
            let dims = (batch, enc.len, a.heads, a.kv_heads, a.head_dim);
            let kv = |template: &str| -> Result<Tensor> {
                let y = f32_rows(g, &project(g, w, template, i, enc.hidden, a.qkv_bias)?)?;
                grouped_heads_first(g, &y, dims)
            };
            let room = capacity * batch * a.kv_heads * a.head_dim;
            layers.push(LayerKv {
                cross_k: kv(&s.cross.k)?,
                cross_v: kv(&s.cross.v)?,
                self_k: g.empty(&[room])?,
                self_v: g.empty(&[room])?,
            });
        }
        Ok(Seq2SeqCache { batch, capacity, len: Cell::new(0), src_len: enc.len, cross_mask, layers })
    }

    /// Decoder positions stored so far.
    pub fn len(&self) -> usize {
        self.len.get()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Logits `[B, V]` of one new decoder token per row (`ids [B]`), whose keys and values join
    /// the cache.
    pub fn step(&self, g: &Graph<'_>, spec: &ModelSpec, w: &Weights, ids: &[i32]) -> Result<Tensor> {
        let s = seq2seq_of(spec)?;
        let (b, past) = (self.batch, self.len());
        if ids.len() != b {
            return Err(ModelError::Config(format!("{} decoder ids for a cache of {b} rows", ids.len())));
        }
        if past >= self.capacity {
            return Err(ModelError::Config(format!(
                "the decoder cache holds {} positions; raise its capacity (max_new_tokens)",
                self.capacity
            )));
        }
        let mut x = embed(g, spec, w, &s.decoder, ids, (b, 1, past))?;
        let names = &spec.layer_names;
        let shared_bias = self.position_bias(g, spec, w, 0)?;
        for (i, layer) in spec.layers.iter().enumerate() {
            let a = &layer.attn;
            let kv = &self.layers[i];
            let per_layer = s.relative_bias.is_some_and(|r| r.per_layer);
            let bias = if per_layer { self.position_bias(g, spec, w, i)? } else { shared_bias.clone() };
            // RoPE (T5Gemma) rotates this step's q and k at position `past`.
            let at = vec![past as i32; b];
            let self_attn = |h: &Tensor| -> Result<Tensor> {
                let k = f32_rows(g, &project(g, w, &names.k, i, h, a.qkv_bias)?)?;
                let k = gemma::rotate(g, a, &k, a.kv_heads, (b, 1), &at)?;
                let v = f32_rows(g, &project(g, w, &names.v, i, h, a.qkv_bias)?)?;
                self.store(g, (&kv.self_k, &kv.self_v), (&k, &v), past)?;
                let dims = (b, past + 1, a.heads, a.kv_heads, a.head_dim);
                let (ks, vs) = (self.filled(g, &kv.self_k, dims)?, self.filled(g, &kv.self_v, dims)?);
                let q = f32_rows(g, &project(g, w, &names.q, i, h, a.qkv_bias)?)?;
                let q = heads_first(g, &gemma::rotate(g, a, &q, a.heads, (b, 1), &at)?, (b, 1, a.heads, a.head_dim))?;
                let o = if is_gemma(a) {
                    let mask =
                        gemma::mask(g, &vec![1; b * (past + 1)], (b, 1, past + 1, past), true, a.sliding_window)?;
                    gemma::scored(g, (&q, &ks, &vs), &mask, a, (b, 1, past + 1))?
                } else {
                    let dims = (b, 1, past + 1, a.heads, a.head_dim);
                    heads_attention(g, (&q, &ks, &vs), bias.as_ref(), dims, a.scale)?
                };
                project(g, w, &names.o, i, &o, a.out_bias)
            };
            let (attn_post, mlp_post) =
                ((&layer.post_attn_norm, &*names.post_attn_norm), (&layer.post_mlp_norm, &*names.post_mlp_norm));
            x = residual_block(g, s.placement, w, (&layer.attn_norm, &names.attn_norm, i), attn_post, &x, self_attn)?;
            let cross = |h: &Tensor| -> Result<Tensor> {
                let q = f32_rows(g, &project(g, w, &s.cross.q, i, h, a.qkv_bias)?)?;
                let q = heads_first(g, &q, (b, 1, a.heads, a.head_dim))?;
                let (keys, dims) = ((&q, &kv.cross_k, &kv.cross_v), (b, 1, self.src_len, a.heads, a.head_dim));
                let o = if is_gemma(a) {
                    gemma::scored(g, keys, &self.cross_mask, a, (b, 1, self.src_len))?
                } else {
                    heads_attention(g, keys, Some(&self.cross_mask), dims, a.scale)?
                };
                project(g, w, &s.cross.o, i, &o, a.out_bias)
            };
            let cross_post = (&layer.post_attn_norm, &*s.cross.post_norm);
            x = residual_block(g, s.placement, w, (&layer.attn_norm, &s.cross.norm, i), cross_post, &x, cross)?;
            x = residual_block(g, s.placement, w, (&layer.mlp_norm, &names.mlp_norm, i), mlp_post, &x, |h| {
                ffn(g, s, w, (names, &layer.mlp), (true, i), h, b)
            })?;
        }
        if let Some((n, name)) = &s.decoder.final_norm {
            x = crate::decoder::apply_norm(g, n, w, name, &x)?;
        }
        let logits = lm_head(g, spec, s, w, &x)?;
        self.len.set(past + 1);
        Ok(logits)
    }

    /// Beam search: row `r` of the batch continues row `src[r]`'s decoder history (the self-
    /// attention keys and values of every stored position are gathered to the new order; the
    /// cross-attention ones are the same source for every beam and stay).
    pub fn reorder(&self, g: &Graph<'_>, src: &[usize]) -> Result<()> {
        let (b, len) = (self.batch, self.len());
        if src.len() != b || src.iter().any(|&r| r >= b) {
            return Err(ModelError::Config(format!("reorder {src:?} of a {b}-row decoder cache")));
        }
        if len == 0 {
            return Ok(());
        }
        let idx: Vec<i32> = (0..len).flat_map(|t| src.iter().map(move |&r| (t * b + r) as i32)).collect();
        let idx = g.ints(&idx, &[idx.len()])?;
        for kv in &self.layers {
            for buf in [&kv.self_k, &kv.self_v] {
                let width = buf.numel() / (self.capacity * b);
                let rows = g.view_prefix(buf, &[len * b, width])?;
                let moved = embedding::embedding(g, &rows, &idx)?;
                g.record(|rec| {
                    let whole = buf.view();
                    let dst = BufferView { buffer: whole.buffer, offset: whole.offset, len: moved.view().len };
                    rec.copy(moved.view(), dst)
                })?;
            }
        }
        Ok(())
    }

    /// T5's bias `[1, H, 1, past + 1]` of the new query over every stored key (layer `i`'s table).
    fn position_bias(&self, g: &Graph<'_>, spec: &ModelSpec, w: &Weights, i: usize) -> Result<Option<Tensor>> {
        let s = seq2seq_of(spec)?;
        let (Some(rel), Some(template)) = (s.relative_bias, &s.decoder.relative_bias) else { return Ok(None) };
        let table = w.get(&format!("{}.weight", layer_name(template, i)))?;
        let past = self.len();
        Ok(Some(relative_bias(g, table, (1, past + 1, past), false, rel.max_distance)?))
    }

    /// Copies the step's k and v `[B, H·D]` into position `t` of the buffers.
    fn store(&self, g: &Graph<'_>, (bk, bv): (&Tensor, &Tensor), (k, v): (&Tensor, &Tensor), t: usize) -> Result<()> {
        let bytes = k.numel() as u64 * 4;
        g.record(|rec| {
            for (buf, new) in [(bk, k), (bv, v)] {
                let whole = buf.view();
                let dst = BufferView { buffer: whole.buffer, offset: whole.offset + t as u64 * bytes, len: bytes };
                rec.copy(new.view(), dst)?;
            }
            Ok(())
        })?;
        Ok(())
    }

    /// The first `t` positions of a buffer `[t, B, Hkv, D]` as `[B·H, t, D]`, query head `h`
    /// reading key head `h / (H / Hkv)`.
    fn filled(
        &self,
        g: &Graph<'_>,
        buf: &Tensor,
        (b, t, h, hkv, d): (usize, usize, usize, usize, usize),
    ) -> Result<Tensor> {
        let rows = g.view_prefix(buf, &[t * b * hkv, d])?;
        let mut idx = Vec::with_capacity(b * h * t);
        for row in 0..b {
            for head in 0..h {
                for pos in 0..t {
                    idx.push(((pos * b + row) * hkv + head / (h / hkv)) as i32);
                }
            }
        }
        let y = embedding::embedding(g, &rows, &g.ints(&idx, &[idx.len()])?)?;
        Ok(shape::reshape(g, &y, &[b * h, t, d])?)
    }
}

/// `x` in f32 (16-bit weights give 16-bit projections; the buffers and gathers are f32).
fn f32_rows(g: &Graph<'_>, x: &Tensor) -> Result<Tensor> {
    if x.dtype() == DType::F32 {
        return Ok(x.clone());
    }
    Ok(cast::cast(g, x, DType::F32)?)
}
