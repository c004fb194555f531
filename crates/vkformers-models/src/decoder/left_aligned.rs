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
    use vkformers_kernels::testutil::{assert_close, f64s, Rng, TOL_F32};
    use vkformers_tensor::ops::attention::{attention_chunked, AttnOptions};
    use vkformers_tensor::ops::{broadcast, reduce};
    use vkformers_tensor::{Graph, Tensor};
    use vkformers_vk::testing::on_every_device;

    use super::{attend_left_aligned, left_pads, rotation};

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

    const T: usize = 7;
    const W: usize = 2 * 4; // heads · head dim
    const CHUNK: u32 = 3;

    /// `o` of `attention_chunked` (chunks from column 0) on q, k, v `[1, n, 2, 4]` and the gradients
    /// of `Σ o·c` to q, k, v.
    fn unpadded(ctx: &vkformers_vk::Context, qkv: [&[f32]; 3], c: &[f32]) -> vkformers_vk::Result<Vec<Vec<f32>>> {
        let g = Graph::new(ctx);
        let n = c.len() / W;
        let p: Vec<Tensor> = qkv.iter().map(|x| g.parameter(x, &[1, n, 2, 4])).collect::<Result<_, _>>()?;
        let o = attention_chunked(&g, &p[0], &p[1], &p[2], &AttnOptions::default(), CHUNK)?;
        g.backward(&reduce::sum(&g, &broadcast::mul(&g, &o, &g.constant(c, &[1, n, 2, 4])?)?)?)?;
        let mut out = vec![g.read(&o)?];
        for t in &p {
            out.push(g.read(&t.grad().expect("a gradient"))?);
        }
        Ok(out)
    }

    /// A row left-padded by 2 (not a multiple of the chunk of 3) attends, forward and backward,
    /// as the same tokens unpadded; its pad columns get no key gradient.
    #[test]
    fn left_padded_rows_attend_as_the_same_rows_unpadded() {
        on_every_device("left-aligned chunked attention", |ctx| {
            let mask: Vec<i32> = [[0, 0, 1, 1, 1, 1, 1], [1; T]].concat();
            let mut rng = Rng::new(5);
            let qkv: Vec<Vec<f32>> = (0..3).map(|_| rng.vec(2 * T * W, 1.0)).collect();
            // The upstream gradient is zero on pad rows (no label reads them).
            let c: Vec<f32> = rng
                .vec(2 * T * W, 1.0)
                .iter()
                .zip(mask.iter().flat_map(|&m| [m; W]))
                .map(|(x, m)| x * m as f32)
                .collect();
            let g = Graph::new(ctx);
            let p: Vec<Tensor> = qkv.iter().map(|x| g.parameter(x, &[2, T, 2, 4])).collect::<Result<_, _>>()?;
            let o = attend_left_aligned(&g, (&p[0], &p[1], &p[2]), &AttnOptions::default(), CHUNK, &mask)
                .map_err(|e| vkformers_vk::VkError::Kernel { kernel: "left-aligned".into(), message: e.to_string() })?;
            g.backward(&reduce::sum(&g, &broadcast::mul(&g, &o, &g.constant(&c, &[2, T, 2, 4])?)?)?)?;
            let mut got = vec![g.read(&o)?];
            for t in &p {
                got.push(g.read(&t.grad().expect("a gradient"))?);
            }
            for (row, pad) in [(0, 2), (1, 0)] {
                let real = (row * T + pad) * W..(row + 1) * T * W;
                let part = |x: &Vec<f32>| x[real.clone()].to_vec();
                let want = unpadded(ctx, [&part(&qkv[0]), &part(&qkv[1]), &part(&qkv[2])], &part(&c))?;
                for (name, (got, want)) in ["o", "dq", "dk", "dv"].iter().zip(got.iter().zip(&want)) {
                    assert_close(&format!("row {row} {name}"), &part(got), &f64s(want), TOL_F32);
                }
                let pads = (row * T * W)..(row * T + pad) * W;
                for name in [2, 3] {
                    assert!(got[name][pads.clone()].iter().all(|&x| x == 0.0), "row {row}: pad key gradient");
                }
            }
            Ok(())
        });
    }
}
