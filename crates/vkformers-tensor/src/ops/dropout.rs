//! Dropout with a counter-based RNG (Philox4x32-10): element i is kept when
//! `uniform(seed, offset + i) >= p` and scaled by `1/(1-p)`. The backward replays the same
//! mask from `(seed, offset)` instead of storing it.

use vkformers_kernels::dropout as k;
use vkformers_kernels::dtype::DType;

use crate::{Graph, Result, Tensor};

/// `y = x · mask / (1 - p)`; identity (no kernel) when `p == 0`.
pub fn dropout(g: &Graph<'_>, x: &Tensor, p: f32, seed: u64, offset: u64) -> Result<Tensor> {
    if p == 0.0 {
        return Ok(x.clone());
    }
    let y = g.output(x.shape(), &[x])?;
    g.record(|rec| k::forward(rec, x.view(), y.view(), p, seed, offset, DType::F32))?;
    g.push_node(
        &y,
        vec![x.clone()],
        Box::new(move |g, dy| {
            let dx = g.empty(dy.shape())?;
            g.record(|rec| k::backward(rec, dy.view(), dx.view(), p, seed, offset, DType::F32))?;
            Ok(vec![Some(dx)])
        }),
    );
    Ok(y)
}
