//! Gemma-style attention in an encoder-decoder (T5Gemma): RoPE on the self-attention's q and k,
//! grouped key/value heads, scores `softcap(scale · q kᵀ) + mask` with the mask holding the
//! padding, the causal order and the sliding window, as transformers' eager attention. Built
//! explicitly (`attention.rs`'s head gathers and batched products), so the same code serves
//! training and the cached decoder, and every mask shape transformers makes is expressible:
//! the decoder's window keeps keys with `q − k < W`, the encoder's bidirectional one `|q − k| ≤ W`.

use vkformers_tensor::ops::{activation, broadcast, embedding, matmul, rope, shape, softmax};
use vkformers_tensor::{Graph, Tensor};

use super::attention::heads_last;
use crate::error::Result;
use crate::spec::AttnSpec;

/// Whether `a` needs this path (the fused kernel and `biased_attention` cover the rest).
pub(crate) fn is_gemma(a: &AttnSpec) -> bool {
    a.rope.is_some() || a.kv_heads != a.heads || a.softcap != 0.0 || a.sliding_window.is_some()
}

/// The keys' side of an attention: the mask `[B·len]`, causal or not, cross or self.
pub(crate) struct Keys<'a> {
    pub mask: &'a [i32],
    pub len: usize,
    pub causal: bool,
    pub cross: bool,
}

/// `scored` of projected q `[B·Tq, H·D]`, k and v `[B·Tk, Hkv·D]`: self-attention rotates q
/// and k at positions `0..T` and applies the layer's window; cross-attention neither.
pub(crate) fn attend(
    g: &Graph<'_>,
    a: &AttnSpec,
    (q, k, v): (Tensor, Tensor, Tensor),
    kv: &Keys<'_>,
    (b, tq): (usize, usize),
) -> Result<Tensor> {
    let (h, hkv, d, tk) = (a.heads, a.kv_heads, a.head_dim, kv.len);
    let arange = |t: usize| -> Vec<i32> { (0..b * t).map(|j| (j % t) as i32).collect() };
    let (q, k, window) = match kv.cross {
        true => (q, k, None),
        false => {
            (rotate(g, a, &q, h, (b, tq), &arange(tq))?, rotate(g, a, &k, hkv, (b, tk), &arange(tk))?, a.sliding_window)
        }
    };
    let q = grouped_heads_first(g, &q, (b, tq, h, h, d))?;
    let k = grouped_heads_first(g, &k, (b, tk, h, hkv, d))?;
    let v = grouped_heads_first(g, &v, (b, tk, h, hkv, d))?;
    let mask = mask(g, kv.mask, (b, tq, tk, 0), kv.causal, window)?;
    scored(g, (&q, &k, &v), &mask, a, (b, tq, tk))
}

/// `x [B·T, H·D]` rotated at positions `pos [B·T]` (RoPE of `a`; unchanged without one).
pub(crate) fn rotate(
    g: &Graph<'_>,
    a: &AttnSpec,
    x: &Tensor,
    heads: usize,
    (b, t): (usize, usize),
    pos: &[i32],
) -> Result<Tensor> {
    let Some(r) = &a.rope else { return Ok(x.clone()) };
    let x4 = shape::reshape(g, x, &[b, t, heads, a.head_dim])?;
    let (pos, freq) = (g.ints(pos, &[b, t])?, g.constant(&r.inv_freq, &[r.inv_freq.len()])?);
    let y = rope::rope(g, &x4, &pos, &freq, r.layout, r.rotary_dim, r.mscale)?;
    Ok(shape::reshape(g, &y, &[b * t, heads * a.head_dim])?)
}

/// Rows of `x [B·T, Hkv·D]` as `[B·H, T, D]`, query head `h` reading key head `h / (H / Hkv)`
/// (`repeat_kv`; the gather's backward sums each key head's gradient over its group).
pub(crate) fn grouped_heads_first(
    g: &Graph<'_>,
    x: &Tensor,
    (b, t, h, hkv, d): (usize, usize, usize, usize, usize),
) -> Result<Tensor> {
    let group = h / hkv;
    let mut idx = Vec::with_capacity(b * h * t);
    for row in 0..b {
        for head in 0..h {
            for pos in 0..t {
                idx.push(((row * t + pos) * hkv + head / group) as i32);
            }
        }
    }
    let rows = shape::reshape(g, x, &[b * t * hkv, d])?;
    let y = embedding::embedding(g, &rows, &g.ints(&idx, &[idx.len()])?)?;
    Ok(shape::reshape(g, &y, &[b * h, t, d])?)
}

/// The additive mask `[B, 1, Tq, Tk]` of queries at `past..past + Tq` over keys `0..Tk`: hidden
/// where the key is padding, after the query (causal), or outside the window.
pub(crate) fn mask(
    g: &Graph<'_>,
    kmask: &[i32],
    (b, tq, tk, past): (usize, usize, usize, usize),
    causal: bool,
    window: Option<u32>,
) -> Result<Tensor> {
    let mut m = vec![0f32; b * tq * tk];
    for row in 0..b {
        for i in 0..tq {
            let q = (i + past) as i64;
            for k in 0..tk {
                let d = q - k as i64;
                let outside = match (window, causal) {
                    (Some(w), true) => d >= i64::from(w),
                    (Some(w), false) => d.abs() > i64::from(w),
                    (None, _) => false,
                };
                if kmask[row * tk + k] == 0 || (causal && d < 0) || outside {
                    m[(row * tq + i) * tk + k] = -1e30;
                }
            }
        }
    }
    Ok(g.constant(&m, &[b, 1, tq, tk])?)
}

/// `softmax(softcap(scale · q kᵀ) + mask) v` for q `[B·H, Tq, D]`, k and v `[B·H, Tk, D]`;
/// returns `[B·Tq, H·D]`.
pub(crate) fn scored(
    g: &Graph<'_>,
    (q, k, v): (&Tensor, &Tensor, &Tensor),
    mask: &Tensor,
    a: &AttnSpec,
    (b, tq, tk): (usize, usize, usize),
) -> Result<Tensor> {
    let (h, d) = (a.heads, a.head_dim);
    let mut s = broadcast::scale(g, &matmul::matmul_nt(g, q, k)?, a.scale)?;
    if a.softcap != 0.0 {
        s = softcap(g, &s, a.softcap)?;
    }
    let s = broadcast::add(g, &shape::reshape(g, &s, &[b, h, tq, tk])?, mask)?;
    let p = shape::reshape(g, &softmax::softmax(g, &s)?, &[b * h, tq, tk])?;
    heads_last(g, &matmul::matmul(g, &p, v)?, (b, tq, h, d))
}

/// `c·tanh(z/c) = 2c·sigmoid(2z/c) − c` from differentiable ops (the decoder graph's identity).
fn softcap(g: &Graph<'_>, z: &Tensor, c: f32) -> Result<Tensor> {
    let s = activation::sigmoid(g, &broadcast::scale(g, z, 2.0 / c)?)?;
    let y = broadcast::scale(g, &s, 2.0 * c)?;
    Ok(broadcast::sub(g, &y, &g.constant(&[c], &[1])?)?)
}
