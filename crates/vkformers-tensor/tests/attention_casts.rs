//! The casts around training attention under autocast. A decoder's attention block (q, k, v
//! products of one x, RoPE on q and k, fused attention, o_proj) passes 16-bit tensors between
//! attention and its neighbours: o is the 16-bit output the kernel writes (o_proj reads it), dO
//! comes back in 16 bits from o_proj's backward, and dq / dk / dv go to RoPE's backward and v's
//! product in the 16 bits the backward kernels write. Pinned here: the cast dispatches of one
//! forward and backward of the block, and the gradients, bit for bit those of the same block
//! with an exact scale by 1 between attention and each neighbour (f32 tensors in between: the
//! casts as before this change, the same roundings).

use vkformers_kernels::testutil::Rng;
use vkformers_tensor::ops::attention::{attention_chunked, attention_chunked_for_product, AttnOptions};
use vkformers_tensor::ops::cast::autocast_copy;
use vkformers_tensor::ops::matmul::linear;
use vkformers_tensor::ops::rope::{rope, RopeLayout};
use vkformers_tensor::ops::{broadcast, reduce, shape};
use vkformers_tensor::{DType, Graph, Result, Tensor};
use vkformers_vk::testing::on_every_device;

/// Cast dispatches recorded by `f`, with what it returns.
fn casts_of<R>(g: &Graph<'_>, f: impl FnOnce() -> Result<R>) -> Result<(u64, R)> {
    g.sync()?; // the batch recorded so far was opened without timestamps
    g.set_profiling(true);
    let out = f()?;
    let profile = g.take_profile()?.expect("profiling on");
    g.set_profiling(false);
    Ok((profile.kernels.iter().filter(|(n, _)| n.starts_with("cast/")).map(|(_, k)| k.calls).sum(), out))
}

/// Gradient bits of x and the four weights of `sum(o_proj(attention(rope(x Wqᵀ), rope(x Wkᵀ),
/// x Wvᵀ)) ⊙ c)` (GQA: 4 query heads, 2 key/value heads), and the casts of its forward and of
/// its backward. With `blocked`, a scale by 1 (exact) sits between attention and each of its
/// neighbours.
fn block_grads(g: &Graph<'_>, dt: DType, blocked: bool) -> Result<(Vec<Vec<u32>>, [u64; 2])> {
    let (t, hq, hkv, d) = (37, 4, 2, 8);
    let mut rng = Rng::new(11);
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
    for p in [&x, &wq, &wk, &wv, &wo] {
        autocast_copy(g, p, dt)?; // the parameters' copies, outside the counts
    }
    let block = |y: Tensor| if blocked { broadcast::scale(g, &y, 1.0) } else { Ok(y) };
    let (fwd, loss) = casts_of(g, || {
        let heads = |w: &Tensor, h: usize| shape::reshape(g, &linear(g, &x, w, None)?, &[1, t, h, d]);
        let q = block(rope(g, &heads(&wq, hq)?, &pos, &inv, RopeLayout::HalfSplit, d, 1.0)?)?;
        let k = block(rope(g, &heads(&wk, hkv)?, &pos, &inv, RopeLayout::HalfSplit, d, 1.0)?)?;
        let v = block(heads(&wv, hkv)?)?;
        let opts = AttnOptions::default();
        let o = match blocked {
            true => block(attention_chunked(g, &q, &k, &v, &opts, 0)?)?,
            false => attention_chunked_for_product(g, (&q, &k, &v), &opts, 0)?,
        };
        let y = linear(g, &shape::reshape(g, &o, &[t, hq * d])?, &wo, None)?;
        reduce::sum(g, &broadcast::mul(g, &y, &c)?)
    })?;
    let (bwd, ()) = casts_of(g, || g.backward(&loss))?;
    let mut grads = Vec::new();
    for p in [&x, &wq, &wk, &wv, &wo] {
        grads.push(g.read(&p.grad().expect("gradient"))?.iter().map(|v| v.to_bits()).collect());
    }
    Ok((grads, [fwd, bwd]))
}

#[test]
fn training_attention_passes_16_bit_tensors_to_its_neighbours() {
    on_every_device("attention casts", |ctx| {
        for dt in [DType::BF16, DType::F16] {
            let (direct, casts) = block_grads(&Graph::new(ctx), dt, false)?;
            let (plain, casts_plain) = block_grads(&Graph::new(ctx), dt, true)?;
            // The same values, bit for bit: every 16-bit tensor handed over is exactly the cast
            // it replaces (a widening is exact, and its narrowing gives the 16 bits back).
            assert!(direct == plain, "{dt:?}: gradients differ from the f32 hand-overs");
            // Forward: v's copy (the product writes f32 v). Backward: dy of o_proj (from the
            // f32 loss); dO is o_proj's dA as the GEMM writes it, in 16 bits (the cast after an
            // f32 dA, before the GEMM's 16-bit C: [1, 2]).
            assert_eq!(casts, [1, 1], "{dt:?}: casts (forward, backward) with 16-bit hand-overs");
            // Through f32: q, k, v and o cast for attention and o_proj, o widened; dy, dO
            // narrowed, dq, dk, dv widened, dv narrowed again for v's product (RoPE's backward
            // writes dq's and dk's twins). Today's code without the scales (and this one with
            // `VKFORMERS_ATTN_CASTS=1`) runs [2, 5]: v's copy and o widened; dy and dO narrowed,
            // dq, dk, dv widened.
            assert_eq!(casts_plain, [5, 6], "{dt:?}: casts (forward, backward) with f32 hand-overs");
        }
        Ok(())
    });
}
