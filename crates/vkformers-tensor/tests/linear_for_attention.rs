//! `linear_for_attention`: the product whose only reader is attention (a decoder's v) writes its
//! output in 16 bits under autocast (the GEMM's 16-bit C) and takes attention's 16-bit dv as
//! written. Pinned on an attention block (q, k, v products of one x, RoPE on q and k, fused
//! attention, o_proj): no cast left in its forward (v's was the last), and the gradients bit for
//! bit those of the block with `linear`'s f32 v. Outside autocast it is `linear`.

use vkformers_kernels::testutil::Rng;
use vkformers_tensor::ops::attention::{attention_chunked_for_product, AttnOptions};
use vkformers_tensor::ops::cast::autocast_copy;
use vkformers_tensor::ops::matmul::{linear, linear_for_attention};
use vkformers_tensor::ops::rope::{rope, RopeLayout};
use vkformers_tensor::ops::{broadcast, reduce, shape};
use vkformers_tensor::{DType, Graph, Result, Tensor};
use vkformers_vk::testing::on_every_device;

/// Cast dispatches recorded by `f`, with what it returns.
fn casts_of<R>(g: &Graph<'_>, f: impl FnOnce() -> Result<R>) -> Result<(u64, R)> {
    g.sync()?;
    g.set_profiling(true);
    let out = f()?;
    let profile = g.take_profile()?.expect("profiling on");
    g.set_profiling(false);
    Ok((profile.kernels.iter().filter(|(n, _)| n.starts_with("cast/")).map(|(_, k)| k.calls).sum(), out))
}

/// Gradient bits of x and the four weights of `sum(o_proj(attention(rope(x Wqᵀ), rope(x Wkᵀ),
/// v(x))) ⊙ c)` (GQA: 4 query heads, 2 key/value heads; v by `linear_for_attention` when
/// `half_v`, else `linear`), and the casts of its forward and of its backward.
fn block_grads(g: &Graph<'_>, dt: DType, half_v: bool) -> Result<(Vec<Vec<u32>>, [u64; 2])> {
    let (t, hq, hkv, d) = (37, 4, 2, 8);
    let mut rng = Rng::new(12);
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
    let (fwd, loss) = casts_of(g, || {
        let heads = |y: Tensor, h: usize| shape::reshape(g, &y, &[1, t, h, d]);
        let q = rope(g, &heads(linear(g, &x, &wq, None)?, hq)?, &pos, &inv, RopeLayout::HalfSplit, d, 1.0)?;
        let k = rope(g, &heads(linear(g, &x, &wk, None)?, hkv)?, &pos, &inv, RopeLayout::HalfSplit, d, 1.0)?;
        let v = match half_v {
            true => linear_for_attention(g, &x, &wv, None)?,
            false => linear(g, &x, &wv, None)?,
        };
        assert_eq!(v.dtype(), if half_v { dt } else { DType::F32 }, "v's type");
        let o = attention_chunked_for_product(g, (&q, &k, &heads(v, hkv)?), &AttnOptions::default(), 0)?;
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
