//! Tape gradient of `rope` against the f64 reference. The loss is sum(y * w) for a fixed
//! random w (so dL/dy = w), formed from `broadcast::mul` and `reduce::sum`.

use vkformers_kernels::dtype::DType;
use vkformers_kernels::rope::reference;
use vkformers_kernels::rope::Rope;
use vkformers_kernels::testutil::{assert_close, f64s, Rng, TOL_F32};
use vkformers_tensor::ops::rope::{rope, RopeLayout};
use vkformers_tensor::ops::{broadcast, reduce, shape};
use vkformers_tensor::{Graph, Result, Tensor};
use vkformers_vk::testing::on_every_device;
use vkformers_vk::Context;

/// `loss [1] = sum(out * w)` from the library's own ops (so dL/dout = w); `w` holds as many
/// elements as `out`, in any shape.
fn dot_loss(g: &Graph<'_>, out: &Tensor, w: &Tensor) -> Result<Tensor> {
    reduce::sum(g, &broadcast::mul(g, out, &shape::reshape(g, w, out.shape())?)?)
}

const B: usize = 2;
const T: usize = 5;
const H: usize = 3;
const D: usize = 10;

/// Runs rope with `rotary_dim` of `D` and compares y and dx with the reference.
fn rope_case(ctx: &Context, layout: RopeLayout, rotary_dim: usize, mscale: f32, seed: u64) -> Result<()> {
    let mut rng = Rng::new(seed);
    let n = B * T * H * D;
    let (xv, lv) = (rng.vec(n, 1.0), rng.vec(n, 1.0));
    let posv: Vec<i32> = (0..B * T).map(|i| (i % T) as i32 * 7 + (i / T) as i32).collect();
    let inv = reference::default_inv_freq(rotary_dim as u32, 10_000.0);
    let g = Graph::new(ctx);
    let x = g.parameter(&xv, &[B, T, H, D])?;
    let pos = g.ints(&posv, &[B, T])?;
    let inv_freq = g.constant(&inv, &[inv.len()])?;
    let l = g.constant(&lv, &[n])?;
    let y = rope(&g, &x, &pos, &inv_freq, layout, rotary_dim, mscale)?;
    g.backward(&dot_loss(&g, &y, &l)?)?;
    let p = Rope {
        batch: B as u32,
        seq: T as u32,
        heads: H as u32,
        head_dim: D as u32,
        rotary_dim: rotary_dim as u32,
        layout,
        mscale,
        dtype: DType::F32,
    };
    assert_close("y", &g.read(&y)?, &reference::rope(&p, &f64s(&xv), &posv, &inv), TOL_F32);
    let want_dx = reference::rope_backward(&p, &f64s(&lv), &posv, &inv);
    assert_close("dx", &g.read(&x.grad().expect("dx"))?, &want_dx, TOL_F32);
    Ok(())
}

#[test]
fn rope_matches_reference() {
    on_every_device("tensor rope", |ctx| {
        rope_case(ctx, RopeLayout::HalfSplit, D, 1.0, 1)?;
        rope_case(ctx, RopeLayout::Interleaved, D, 1.0, 2)?;
        rope_case(ctx, RopeLayout::HalfSplit, 6, 1.25, 3)?;
        rope_case(ctx, RopeLayout::Interleaved, 4, 0.8, 4)
    });
}

/// Two forward + backward passes give exactly twice the gradient of one.
#[test]
fn rope_gradient_accumulates() {
    on_every_device("tensor rope accumulate", |ctx| {
        let mut rng = Rng::new(9);
        let n = B * T * H * D;
        let (xv, lv) = (rng.vec(n, 1.0), rng.vec(n, 1.0));
        let posv: Vec<i32> = (0..B * T).map(|i| i as i32).collect();
        let inv = reference::default_inv_freq(D as u32, 10_000.0);
        let g = Graph::new(ctx);
        let x = g.parameter(&xv, &[B, T, H, D])?;
        let pos = g.ints(&posv, &[B, T])?;
        let inv_freq = g.constant(&inv, &[inv.len()])?;
        let l = g.constant(&lv, &[n])?;
        let mut passes = Vec::new();
        for _ in 0..2 {
            let y = rope(&g, &x, &pos, &inv_freq, RopeLayout::HalfSplit, D, 1.0)?;
            g.backward(&dot_loss(&g, &y, &l)?)?;
            passes.push(g.read(&x.grad().expect("dx"))?);
        }
        let doubled: Vec<f32> = passes[0].iter().map(|v| 2.0 * v).collect();
        assert_eq!(passes[1], doubled);
        Ok(())
    });
}
