//! Chunked attention (Llama 4) over a left-padded batch without a KV cache.
//!
//! transformers counts a row's chunks from its first real token (`masking_utils.chunked_overlay`:
//! key j and query p share a chunk when ⌊(j − pad_b)/C⌋ = ⌊(p − pad_b)/C⌋, pad_b the row's leading
//! padding columns), while the fused kernel counts from column 0. So each row of q, k, v
//! `[B, T, H, D]` is rotated left by its padding (its real tokens start at column 0; the pads move
//! to the end, still masked as keys), attended, and the output rotated back: row gathers, exact,
//! whose backward scatters the gradients back. Causal order among real tokens is unchanged. Pad
//! queries now see the row's real keys instead of none; their outputs reach only pad positions,
//! which no label and no later key reads.

use vkformers_tensor::ops::attention::{attention_chunked, AttnOptions};
use vkformers_tensor::ops::{embedding, shape};
use vkformers_tensor::{Graph, Tensor};

use crate::error::Result;

/// Leading padding columns of each row of `mask [B·T]` (all columns for an empty row).
pub(super) fn left_pads(mask: &[i32], t: usize) -> Vec<usize> {
    mask.chunks(t.max(1)).map(|row| row.iter().take_while(|&&m| m == 0).count()).collect()
}

/// Row indices into `[B·T, ..]` that rotate each row `b` left by `pads[b]` (`left`: destination
/// column c reads column (c + pad) mod T) or back (c reads (c − pad) mod T).
fn rotation(pads: &[usize], t: usize, left: bool) -> Vec<i32> {
    let mut idx = Vec::with_capacity(pads.len() * t);
    for (b, &p) in pads.iter().enumerate() {
        let shift = if left { p % t } else { (t - p % t) % t };
        idx.extend((0..t).map(|c| (b * t + (c + shift) % t) as i32));
    }
    idx
}

/// `x [B, T, H, D]` with its rows' columns gathered by `idx [B·T]`.
fn gather_columns(g: &Graph<'_>, x: &Tensor, idx: &Tensor) -> Result<Tensor> {
    let s = x.shape().to_vec();
    let flat = shape::reshape(g, x, &[s[0] * s[1], s[2..].iter().product()])?;
    Ok(shape::reshape(g, &embedding::embedding(g, &flat, idx)?, &s)?)
}

/// `o [B, T, Hq, Dv]` of chunked attention (`chunk` > 0) with each row's chunks counted from its
/// first real token; `mask [B·T]` is the batch's padding mask (`opts.kmask` on the host).
pub(super) fn attend_left_aligned(
    g: &Graph<'_>,
    (q, k, v): (&Tensor, &Tensor, &Tensor),
    opts: &AttnOptions,
    chunk: u32,
    mask: &[i32],
) -> Result<Tensor> {
    let (b, t) = (q.shape()[0], q.shape()[1]);
    let pads = left_pads(mask, t);
    let left = rotation(&pads, t, true);
    let idx = g.ints(&left, &[b * t])?;
    let (q, k, v) = (gather_columns(g, q, &idx)?, gather_columns(g, k, &idx)?, gather_columns(g, v, &idx)?);
    let rotated: Vec<i32> = left.iter().map(|&i| mask[i as usize]).collect();
    let opts = AttnOptions { kmask: Some(g.ints(&rotated, &[b, t])?), ..opts.clone() };
    let o = attention_chunked(g, &q, &k, &v, &opts, chunk)?;
    gather_columns(g, &o, &g.ints(&rotation(&pads, t, false), &[b * t])?)
}

#[cfg(test)]
mod tests {
    use super::{left_pads, rotation};

    #[test]
    fn rotations_move_real_tokens_to_column_zero_and_back() {
        let mask = [0, 0, 1, 1, 1, 1, 1, 1, 1, 1];
        let pads = left_pads(&mask, 5);
        assert_eq!(pads, [2, 0]);
        let (there, back) = (rotation(&pads, 5, true), rotation(&pads, 5, false));
        assert_eq!(there, [2, 3, 4, 0, 1, 5, 6, 7, 8, 9]);
        for (dst, &src) in back.iter().enumerate() {
            assert_eq!(there[src as usize] as usize, dst);
        }
    }
}
