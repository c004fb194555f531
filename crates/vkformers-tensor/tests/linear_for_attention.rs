//! `linear_for_attention`: the product whose only reader is attention (a decoder's v) writes its
//! output in 16 bits under autocast (the GEMM's 16-bit C) and takes attention's 16-bit dv as
//! written. Pinned on an attention block (q, k, v products of one x, RoPE on q and k, fused
//! attention, o_proj): no cast left in its forward (v's was the last), and the gradients bit for
//! bit those of the block with `linear`'s f32 v. Outside autocast it is `linear`.

mod common;

use vkformers_kernels::testutil::Rng;
use vkformers_tensor::ops::attention::{attention_chunked_for_product, AttnOptions};
use vkformers_tensor::ops::matmul::{linear, linear_for_attention};
use vkformers_tensor::{DType, Graph, Result, Tensor};
use vkformers_vk::testing::on_every_device;

use common::AttnBlock;

/// Gradient bits of x and the four weights of `sum(o_proj(attention(rope(x Wqᵀ), rope(x Wkᵀ),
/// v(x))) ⊙ c)` (GQA: 4 query heads, 2 key/value heads; v by `linear_for_attention` when
/// `half_v`, else `linear`), and the casts of its forward and of its backward.
fn block_grads(g: &Graph<'_>, dt: DType, half_v: bool) -> Result<(Vec<Vec<u32>>, [u64; 2])> {
    let blk = AttnBlock::new(g, dt, 12)?;
    blk.train(g, || {
        let q = blk.roped(g, &blk.wq, blk.hq)?;
        let k = blk.roped(g, &blk.wk, blk.hkv)?;
        let v = match half_v {
            true => linear_for_attention(g, &blk.x, &blk.wv, None)?,
            false => linear(g, &blk.x, &blk.wv, None)?,
        };
        assert_eq!(v.dtype(), if half_v { dt } else { DType::F32 }, "v's type");
        let o = attention_chunked_for_product(g, (&q, &k, &blk.heads(g, &v, blk.hkv)?), &AttnOptions::default(), 0)?;
        blk.loss(g, &o)
    })
}

#[test]
fn a_16_bit_v_from_its_product_trains_the_same_bits_with_no_cast() {
    on_every_device("linear_for_attention", |ctx| {
        for dt in [DType::BF16, DType::F16] {
            let (half, casts) = block_grads(&Graph::new(ctx), dt, true)?;
            let (wide, casts_wide) = block_grads(&Graph::new(ctx), dt, false)?;
            assert!(half == wide, "{dt:?}: gradients differ from the f32 v's");
            // Forward: none (v's cast was the last). Backward: dy of o_proj (the f32 loss's).
            assert_eq!(casts, [0, 1], "{dt:?}: casts (forward, backward) with the 16-bit v");
            assert_eq!(casts_wide, [1, 1], "{dt:?}: casts (forward, backward) with linear's f32 v");
        }
        Ok(())
    });
}

#[test]
fn without_autocast_or_with_a_bias_it_is_linear() {
    on_every_device("linear_for_attention f32", |ctx| {
        let g = Graph::new(ctx);
        let mut rng = Rng::new(3);
        let x = g.parameter(&rng.vec(70 * 24, 1.0), &[70, 24])?;
        let w = g.parameter(&rng.vec(10 * 24, 0.3), &[10, 24])?;
        let b = g.parameter(&rng.vec(10, 0.3), &[10])?;
        for (autocast, bias) in [(None, None), (Some(DType::BF16), Some(&b))] {
            g.set_autocast(autocast);
            let (y, y_ref) = (linear_for_attention(&g, &x, &w, bias)?, linear(&g, &x, &w, bias)?);
            assert_eq!(y.dtype(), DType::F32, "autocast {autocast:?}, bias {}", bias.is_some());
            let bits = |t: &Tensor| -> Result<Vec<u32>> { Ok(g.read(t)?.iter().map(|v| v.to_bits()).collect()) };
            assert_eq!(bits(&y)?, bits(&y_ref)?, "autocast {autocast:?}: values differ from linear's");
        }
        Ok(())
    });
}
