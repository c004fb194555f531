//! Helpers shared by the tensor crate's integration tests. Each test binary compiles this
//! module and uses a part of it, hence `dead_code` allowed.
#![allow(dead_code)]

use vkformers_kernels::testutil::Rng;
use vkformers_tensor::ops::cast::autocast_copy;
use vkformers_tensor::ops::matmul::linear;
use vkformers_tensor::ops::rope::{rope, RopeLayout};
use vkformers_tensor::ops::{broadcast, reduce, shape};
use vkformers_tensor::{DType, Graph, Result, Tensor};

/// Cast dispatches recorded by `f` (to 16 bits or back), with what it returns.
pub fn casts_of<R>(g: &Graph<'_>, f: impl FnOnce() -> Result<R>) -> Result<(u64, R)> {
    let (profile, out) = g.profiled(f)?;
    Ok((profile.calls_of("cast/"), out))
}

/// The tensors of a small GQA attention block trained under autocast: x `[t, hq·d]`, the q, k,
/// v and o projections (`hq` = 4 query heads, `hkv` = 2 key/value heads of `d` = 8), the
/// loss's weights c `[t, hq·d]` (`sum(o_proj(...) ⊙ c)`), positions `[1, t]` and RoPE's inverse
/// frequencies `[d / 2]` (base 10⁴).
pub struct AttnBlock {
    pub t: usize,
    pub hq: usize,
    pub hkv: usize,
    pub d: usize,
    pub x: Tensor,
    pub wq: Tensor,
    pub wk: Tensor,
    pub wv: Tensor,
    pub wo: Tensor,
    pub c: Tensor,
    pub pos: Tensor,
    pub inv: Tensor,
}

impl AttnBlock {
    /// Draws the block from `seed`, turns autocast to `dt` on and makes the parameters' 16-bit
    /// copies (so that they stay outside the casts a test counts).
    pub fn new(g: &Graph<'_>, dt: DType, seed: u64) -> Result<Self> {
        let (t, hq, hkv, d) = (37, 4, 2, 8);
        let mut rng = Rng::new(seed);
        g.set_autocast(Some(dt));
        let x = g.parameter(&rng.vec(t * hq * d, 1.0), &[t, hq * d])?;
        let wq = g.parameter(&rng.vec(hq * d * hq * d, 0.3), &[hq * d, hq * d])?;
        let wk = g.parameter(&rng.vec(hkv * d * hq * d, 0.3), &[hkv * d, hq * d])?;
        let wv = g.parameter(&rng.vec(hkv * d * hq * d, 0.3), &[hkv * d, hq * d])?;
        let wo = g.parameter(&rng.vec(hq * d * hq * d, 0.3), &[hq * d, hq * d])?;
        let c = g.constant(&rng.vec(t * hq * d, 1.0), &[t, hq * d])?;
        let pos = g.ints(&(0..t as i32).collect::<Vec<_>>(), &[1, t])?;
        let inv: Vec<f32> = (0..d / 2).map(|j| 10_000f32.powf(-2.0 * j as f32 / d as f32)).collect();
        let inv = g.constant(&inv, &[d / 2])?;
        let block = AttnBlock { t, hq, hkv, d, x, wq, wk, wv, wo, c, pos, inv };
        for p in block.params() {
            autocast_copy(g, p, dt)?;
        }
        Ok(block)
    }

    /// `y` `[t, h·d]` as `[1, t, h, d]` (one sequence of `h` heads).
    pub fn heads(&self, g: &Graph<'_>, y: &Tensor, h: usize) -> Result<Tensor> {
        shape::reshape(g, y, &[1, self.t, h, self.d])
    }

    /// RoPE (half-split, every dimension) of the `h` heads of `x Wᵀ`: q or k.
    pub fn roped(&self, g: &Graph<'_>, w: &Tensor, h: usize) -> Result<Tensor> {
        let y = self.heads(g, &linear(g, &self.x, w, None)?, h)?;
        rope(g, &y, &self.pos, &self.inv, RopeLayout::HalfSplit, self.d, 1.0)
    }

    /// The loss `sum(o_proj(o) ⊙ c)` of attention's output o `[1, t, hq, d]`.
    pub fn loss(&self, g: &Graph<'_>, o: &Tensor) -> Result<Tensor> {
        let y = linear(g, &shape::reshape(g, o, &[self.t, self.hq * self.d])?, &self.wo, None)?;
        reduce::sum(g, &broadcast::mul(g, &y, &self.c)?)
    }

    /// Runs `forward` (which returns the loss) and its backward: the gradients' bits and the
    /// casts of the forward and of the backward.
    pub fn train(&self, g: &Graph<'_>, forward: impl FnOnce() -> Result<Tensor>) -> Result<(Vec<Vec<u32>>, [u64; 2])> {
        let (fwd, loss) = casts_of(g, forward)?;
        let (bwd, ()) = casts_of(g, || g.backward(&loss))?;
        Ok((self.grad_bits(g)?, [fwd, bwd]))
    }

    /// x and the four weights.
    pub fn params(&self) -> [&Tensor; 5] {
        [&self.x, &self.wq, &self.wk, &self.wv, &self.wo]
    }

    /// The bits of the gradients of `params`.
    pub fn grad_bits(&self, g: &Graph<'_>) -> Result<Vec<Vec<u32>>> {
        let bits = |p: &Tensor| -> Result<Vec<u32>> {
            Ok(g.read(&p.grad().expect("gradient"))?.iter().map(|v| v.to_bits()).collect())
        };
        self.params().into_iter().map(bits).collect()
    }
}
