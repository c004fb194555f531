//! Dropout with a counter-based RNG (Philox4x32-10): element i is kept when
//! `uniform(seed, offset + i) >= p` and scaled by `1/(1-p)`. The backward replays the same
//! mask from `(seed, offset)` instead of storing it.

use vkformers_kernels::dropout as k;
use vkformers_kernels::dtype::DType;

use crate::ops::push_one_kernel_grad;
use crate::{Graph, Result, Tensor};

/// `y = x · mask / (1 - p)`; identity (no kernel) when `p == 0`.
pub fn dropout(g: &Graph<'_>, x: &Tensor, p: f32, seed: u64, offset: u64) -> Result<Tensor> {
    if p == 0.0 {
        return Ok(x.clone());
    }
    let y = g.output(x.shape(), &[x])?;
    g.record(|rec| k::forward(rec, x.view(), y.view(), p, seed, offset, DType::F32))?;
    push_one_kernel_grad(g, &y, x, move |rec, dy, dx| k::backward(rec, dy, dx, p, seed, offset, DType::F32));
    Ok(y)
}

/// Row-keyed dropout of `x [rows, cols]`: row `r`'s mask is a function of `(seed, keys[r])`
/// alone (`keys [rows, 3]` as `g.ints`, bit patterns of u32: a caller's (position, sample lo,
/// sample hi)), so a sample draws the same mask in any batch and on any rank. Identity when
/// `p == 0`. See `vkformers_kernels::dropout::rows`.
pub fn dropout_rows_keyed(g: &Graph<'_>, x: &Tensor, p: f32, seed: u64, keys: &Tensor) -> Result<Tensor> {
    if p == 0.0 {
        return Ok(x.clone());
    }
    let (rows, cols) = (x.rows(), x.shape().last().copied().unwrap_or(1));
    let y = g.output(x.shape(), &[x])?;
    let kv = keys.clone();
    g.record(|rec| k::rows::apply(rec, x.view(), kv.view(), y.view(), (rows, cols), p, seed, DType::F32))?;
    let keys = keys.clone();
    push_one_kernel_grad(g, &y, x, move |rec, dy, dx| {
        k::rows::apply(rec, dy, keys.view(), dx, (rows, cols), p, seed, DType::F32)
    });
    Ok(y)
}

/// The `[rows, 3]` keys of `dropout_rows_keyed` for token rows `[B·T]` of samples `samples [B]`
/// (each a global sample index): row `b·T + t` is keyed `(t, lo(s_b), hi(s_b))`, so a token's
/// mask does not depend on the batch's padded length `T` or on the sample's place in it.
pub fn token_row_keys(samples: &[u64], seq: usize) -> Vec<i32> {
    let mut out = Vec::with_capacity(samples.len() * seq * 3);
    for &s in samples {
        for t in 0..seq {
            out.extend([t as u32 as i32, s as u32 as i32, (s >> 32) as u32 as i32]);
        }
    }
    out
}

/// The keys of one row per sample (a pooled `[B, H]` input, e.g. a classification head's):
/// position `u32::MAX`, apart from every token row of the sample.
pub fn sample_row_keys(samples: &[u64]) -> Vec<i32> {
    samples.iter().flat_map(|&s| [u32::MAX as i32, s as u32 as i32, (s >> 32) as u32 as i32]).collect()
}
