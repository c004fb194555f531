//! Attention with an additive score bias (T5's relative positions), from the differentiable ops:
//! the fused kernel has no slot for a learned `[H, Tq, Tk]` bias, so q, k, v are permuted to
//! `[B·H, T, D]` by row gathers (the embedding op: its backward scatters the gradient back),
//! scores are a batched product, and the bias and masks are added before the softmax.

use vkformers_tensor::ops::{broadcast, embedding, matmul, shape, softmax};
use vkformers_tensor::{Graph, Tensor};

use crate::error::Result;

/// transformers' `T5Attention._relative_position_bucket` of `relative = key − query`, in the same
/// f32 arithmetic: bidirectional (encoder) buckets split by sign; unidirectional (decoder) ones
/// see only the past. Half of the (remaining) buckets are exact distances, the rest logarithmic
/// bins up to `max_distance`.
pub fn relative_bucket(relative: i64, bidirectional: bool, num_buckets: usize, max_distance: usize) -> usize {
    let mut nb = num_buckets as i64;
    let mut bucket = 0i64;
    let r = if bidirectional {
        nb /= 2;
        if relative > 0 {
            bucket += nb;
        }
        relative.abs()
    } else {
        -relative.min(0)
    };
    let max_exact = nb / 2;
    if r < max_exact {
        return (bucket + r) as usize;
    }
    // `(log(r / max_exact) / log(max_distance / max_exact) * (nb - max_exact)).long()` in f32;
    // the divisor is a Python float rounded to f32 by the tensor op.
    let ratio = (r as f32 / max_exact as f32).ln();
    let denom = (max_distance as f64 / max_exact as f64).ln() as f32;
    let large = max_exact + (ratio / denom * (nb - max_exact) as f32) as i64;
    (bucket + large.min(nb - 1)) as usize
}

/// The bias `[1, H, Tq, Tk]` of queries at positions `past..past + tq` over keys `0..tk`:
/// `table[bucket(k − q), h]` for a table `[num_buckets, H]`, gathered from the table viewed as
/// `[num_buckets·H, 1]` so that the gradient reaches each bucket's entries.
pub fn relative_bias(
    g: &Graph<'_>,
    table: &Tensor,
    (tq, tk, past): (usize, usize, usize),
    bidirectional: bool,
    max_distance: usize,
) -> Result<Tensor> {
    let (nb, heads) = (table.shape()[0], table.shape()[1]);
    let mut idx = Vec::with_capacity(heads * tq * tk);
    for h in 0..heads {
        for q in 0..tq {
            for k in 0..tk {
                let b = relative_bucket(k as i64 - (q + past) as i64, bidirectional, nb, max_distance);
                idx.push((b * heads + h) as i32);
            }
        }
    }
    let flat = shape::reshape(g, table, &[nb * heads, 1])?;
    let rows = embedding::embedding(g, &flat, &g.ints(&idx, &[idx.len()])?)?;
    Ok(shape::reshape(g, &rows, &[1, heads, tq, tk])?)
}

/// An additive mask `[B, 1, Tq, Tk]`: 0 where query i of row b may see key j (the key is real
/// and, when causal, not after the query's position `past + i`), a large negative otherwise
/// (transformers adds `finfo.min`; either makes the probability exactly 0).
pub fn additive_mask(
    g: &Graph<'_>,
    kmask: &[i32],
    (b, tq, tk, past): (usize, usize, usize, usize),
    causal: bool,
) -> Result<Tensor> {
    let mut m = vec![0f32; b * tq * tk];
    for row in 0..b {
        for q in 0..tq {
            for k in 0..tk {
                let hidden = kmask[row * tk + k] == 0 || (causal && k > q + past);
                if hidden {
                    m[(row * tq + q) * tk + k] = -1e30;
                }
            }
        }
    }
    Ok(g.constant(&m, &[b, 1, tq, tk])?)
}

/// Marian's / Pegasus' sinusoidal rows `[positions, d]`: `pos / 10000^(2i/d)` in f64, sines in
/// the first `ceil(d/2)` columns, cosines after, rounded to f32 (their `create_weight`).
pub fn sinusoid_rows(positions: &[usize], d: usize) -> Vec<f32> {
    let half = d.div_ceil(2);
    let mut out = vec![0f32; positions.len() * d];
    for (row, &p) in out.chunks_mut(d).zip(positions) {
        for j in 0..d {
            // Column j of `position_enc` uses exponent 2·(j // 2) / d; even columns feed the
            // sines, odd ones the cosines.
            let angle = p as f64 / 10000f64.powf((2 * (j / 2)) as f64 / d as f64);
            if j % 2 == 0 {
                row[j / 2] = angle.sin() as f32;
            } else {
                row[half + j / 2] = angle.cos() as f32;
            }
        }
    }
    out
}

/// fairseq position ids of ids `[B, T]` (see `StackPositions::FairseqFromIds`).
pub fn fairseq_positions(ids: &[i32], t: usize, padding_idx: usize, past: usize) -> Vec<usize> {
    let mut out = Vec::with_capacity(ids.len());
    for row in ids.chunks(t) {
        let mut seen = 0;
        for &id in row {
            let real = usize::from(id != padding_idx as i32);
            seen += real;
            out.push((seen + past) * real + padding_idx);
        }
    }
    out
}

/// fairseq's sinusoidal rows (M2M-100's `get_embedding`) for `positions`, in f32 as torch makes
/// them: `f_i = exp(i·−(ln(10000)/(h − 1)))`, angle `p·f_i`, `[sin | cos]`, zero-padded to odd
/// `d`, row `padding_idx` zero.
pub fn fairseq_rows(positions: &[usize], d: usize, padding_idx: usize) -> Vec<f32> {
    let half = d / 2;
    let step = (10000f64.ln() / (half as f64 - 1.0)) as f32;
    let freqs: Vec<f32> = (0..half).map(|i| (i as f32 * -step).exp()).collect();
    let mut out = vec![0f32; positions.len() * d];
    for (row, &p) in out.chunks_mut(d).zip(positions) {
        if p == padding_idx {
            continue;
        }
        for (i, f) in freqs.iter().enumerate() {
            let a = p as f32 * f;
            row[i] = a.sin();
            row[half + i] = a.cos();
        }
    }
    out
}

/// Rows of `x [B·T, H·D]` permuted to `[B·H, T, D]` (head-major per row).
pub(crate) fn heads_first(g: &Graph<'_>, x: &Tensor, (b, t, h, d): (usize, usize, usize, usize)) -> Result<Tensor> {
    // Output row (row, head, pos) is input row (row, pos, head) of D values.
    let idx = (0..b).flat_map(|row| (0..h).flat_map(move |head| (0..t).map(move |pos| (row * t + pos) * h + head)));
    gather_rows(g, x, idx, d, &[b * h, t, d])
}

/// The inverse of `heads_first`: `[B·H, T, D]` back to `[B·T, H·D]`.
pub(crate) fn heads_last(g: &Graph<'_>, x: &Tensor, (b, t, h, d): (usize, usize, usize, usize)) -> Result<Tensor> {
    // Output row (row, pos, head) is input row (row, head, pos).
    let idx = (0..b).flat_map(|row| (0..t).flat_map(move |pos| (0..h).map(move |head| (row * h + head) * t + pos)));
    gather_rows(g, x, idx, d, &[b * t, h * d])
}

/// The rows `idx` of `x` seen as rows of `d` values, reshaped to `out`.
fn gather_rows(g: &Graph<'_>, x: &Tensor, idx: impl Iterator<Item = usize>, d: usize, out: &[usize]) -> Result<Tensor> {
    let idx: Vec<i32> = idx.map(|i| i as i32).collect();
    let rows = shape::reshape(g, x, &[idx.len(), d])?;
    let y = embedding::embedding(g, &rows, &g.ints(&idx, &[idx.len()])?)?;
    Ok(shape::reshape(g, &y, out)?)
}

/// `softmax(scale·q kᵀ + bias) v` for q `[B·Tq, H·D]`, k and v `[B·Tk, H·D]` and a bias that
/// broadcasts to `[B, H, Tq, Tk]` (position bias plus mask); returns `[B·Tq, H·D]`.
pub fn biased_attention(
    g: &Graph<'_>,
    (q, k, v): (&Tensor, &Tensor, &Tensor),
    bias: &Tensor,
    (b, tq, tk, h, d): (usize, usize, usize, usize, usize),
    scale: f32,
) -> Result<Tensor> {
    let q = heads_first(g, q, (b, tq, h, d))?;
    let k = heads_first(g, k, (b, tk, h, d))?;
    let v = heads_first(g, v, (b, tk, h, d))?;
    heads_attention(g, (&q, &k, &v), Some(bias), (b, tq, tk, h, d), scale)
}

/// The product of `biased_attention` on q `[B·H, Tq, D]`, k and v `[B·H, Tk, D]` already
/// permuted (the cached decoder keeps its keys so); `bias` optional.
pub(crate) fn heads_attention(
    g: &Graph<'_>,
    (q, k, v): (&Tensor, &Tensor, &Tensor),
    bias: Option<&Tensor>,
    (b, tq, tk, h, d): (usize, usize, usize, usize, usize),
    scale: f32,
) -> Result<Tensor> {
    let mut s = matmul::matmul_nt(g, q, k)?;
    if scale != 1.0 {
        s = broadcast::scale(g, &s, scale)?;
    }
    let mut s = shape::reshape(g, &s, &[b, h, tq, tk])?;
    if let Some(bias) = bias {
        s = broadcast::add(g, &s, bias)?;
    }
    let p = shape::reshape(g, &softmax::softmax(g, &s)?, &[b * h, tq, tk])?;
    heads_last(g, &matmul::matmul(g, &p, v)?, (b, tq, h, d))
}

#[cfg(test)]
mod tests {
    use super::relative_bucket;

    #[test]
    fn t5_buckets_match_transformers() {
        // Printed by transformers' `T5Attention._relative_position_bucket` with 8 buckets,
        // max_distance 12, relative positions -12..=12 (bidirectional) and 0..=-12 (causal).
        let bi: Vec<usize> = (-12..=12).map(|r| relative_bucket(r, true, 8, 12)).collect();
        assert_eq!(bi, vec![3, 3, 3, 3, 3, 3, 3, 3, 2, 2, 2, 1, 0, 5, 6, 6, 6, 7, 7, 7, 7, 7, 7, 7, 7]);
        let uni: Vec<usize> = (0..=12).map(|r| relative_bucket(-r, false, 8, 12)).collect();
        assert_eq!(uni, vec![0, 1, 2, 3, 4, 4, 5, 6, 6, 6, 7, 7, 7]);
        // T5's defaults (32 buckets, max_distance 128), relative -40..=40.
        let big: Vec<usize> = (-40..=40).map(|r| relative_bucket(r, true, 32, 128)).collect();
        let want = [
            12, 12, 12, 12, 12, 12, 12, 12, 12, 11, 11, 11, 11, 11, 11, 11, 11, 11, 10, 10, 10, 10, 10, 10, 10, 9, 9,
            9, 9, 8, 8, 8, 8, 7, 6, 5, 4, 3, 2, 1, 0, 17, 18, 19, 20, 21, 22, 23, 24, 24, 24, 24, 25, 25, 25, 25, 26,
            26, 26, 26, 26, 26, 26, 27, 27, 27, 27, 27, 27, 27, 27, 27, 28, 28, 28, 28, 28, 28, 28, 28, 28,
        ];
        assert_eq!(big, want);
        assert_eq!(relative_bucket(5, false, 8, 12), 0, "the decoder never sees the future");
    }
}
