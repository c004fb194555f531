//! The casts around training attention under autocast. A decoder's attention block (q, k, v
//! products of one x, RoPE on q and k, fused attention, o_proj) passes 16-bit tensors between
//! attention and its neighbours: o is the 16-bit output the kernel writes (o_proj reads it), dO
//! comes back in 16 bits from o_proj's backward, and dq / dk / dv go to RoPE's backward and v's
//! product in the 16 bits the backward kernels write. Pinned here: the cast dispatches of one
//! forward and backward of the block, and the gradients, bit for bit those of the same block
//! with an exact scale by 1 between attention and each neighbour (f32 tensors in between: the
//! casts as before this change, the same roundings).

mod common;

use vkformers_tensor::ops::attention::{attention_chunked, attention_chunked_for_product, AttnOptions};
use vkformers_tensor::ops::broadcast;
use vkformers_tensor::ops::matmul::linear;
use vkformers_tensor::{DType, Graph, Result, Tensor};
use vkformers_vk::testing::on_every_device;

use common::AttnBlock;

/// Gradient bits of x and the four weights of `sum(o_proj(attention(rope(x Wqᵀ), rope(x Wkᵀ),
/// x Wvᵀ)) ⊙ c)` (GQA: 4 query heads, 2 key/value heads), and the casts of its forward and of
/// its backward. With `blocked`, a scale by 1 (exact) sits between attention and each of its
/// neighbours.
fn block_grads(g: &Graph<'_>, dt: DType, blocked: bool) -> Result<(Vec<Vec<u32>>, [u64; 2])> {
    let blk = AttnBlock::new(g, dt, 11)?;
    let block = |y: Tensor| if blocked { broadcast::scale(g, &y, 1.0) } else { Ok(y) };
    blk.train(g, || {
        let q = block(blk.roped(g, &blk.wq, blk.hq)?)?;
        let k = block(blk.roped(g, &blk.wk, blk.hkv)?)?;
        let v = block(blk.heads(g, &linear(g, &blk.x, &blk.wv, None)?, blk.hkv)?)?;
        let opts = AttnOptions::default();
        let o = match blocked {
            true => block(attention_chunked(g, &q, &k, &v, &opts, 0)?)?,
            false => attention_chunked_for_product(g, (&q, &k, &v), &opts, 0)?,
        };
        blk.loss(g, &o)
    })
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
