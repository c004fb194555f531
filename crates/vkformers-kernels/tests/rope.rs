//! RoPE: the f64 reference backward against finite differences, then the GPU forward and
//! backward (in place and out of place, both pair layouts, partial rotary, mscale) against the
//! reference on odd shapes, on every device with validation on; x, y, dy, dx in f32, f16 and
//! bf16 (inputs rounded on the host, the reference computed on the rounded values).

use vkformers_kernels::dtype::DType;
use vkformers_kernels::rope::{self, reference, Rope, RopeLayout};
use vkformers_kernels::testutil::storage::{alloc, read, round, supported, tol, upload};
use vkformers_kernels::testutil::{assert_close, assert_grad_matches_fd, f64s, Rng};
use vkformers_vk::testing::on_every_device;
use vkformers_vk::{Context, Result, VkError};

const LAYOUTS: [RopeLayout; 2] = [RopeLayout::HalfSplit, RopeLayout::Interleaved];

fn shape(b: u32, t: u32, h: u32, dh: u32, r: u32, layout: RopeLayout, mscale: f32) -> Rope {
    Rope { batch: b, seq: t, heads: h, head_dim: dh, rotary_dim: r, layout, mscale, dtype: DType::F32 }
}

fn positions(rng: &mut Rng, n: usize) -> Vec<i32> {
    (0..n).map(|_| rng.below(4096) as i32).collect()
}

#[test]
fn reference_backward_matches_finite_differences() {
    let mut rng = Rng::new(10);
    for layout in LAYOUTS {
        for (dh, r, mscale) in [(6, 6, 1.0), (7, 4, 1.3)] {
            let p = shape(2, 3, 2, dh, r, layout, mscale);
            let n = p.rows() as usize * dh as usize;
            let x = f64s(&rng.vec(n, 1.0));
            let g = f64s(&rng.vec(n, 1.0));
            let pos = positions(&mut rng, 6);
            let inv = reference::default_inv_freq(r, 10_000.0);
            let dx = reference::rope_backward(&p, &g, &pos, &inv);
            let f = |xs: &[f64]| reference::rope(&p, xs, &pos, &inv).iter().zip(&g).map(|(a, b)| a * b).sum();
            assert_grad_matches_fd(&format!("rope {layout:?} dh {dh} r {r}"), f, &x, &dx);
        }
    }
}

/// Runs forward and backward, both out of place and in place, and compares with the reference;
/// x, y, dy, dx are stored in `p.dtype`.
fn check(ctx: &Context, rng: &mut Rng, p: &Rope, base: f64) -> Result<()> {
    let dt = p.dtype;
    let n = p.rows() as usize * p.head_dim as usize;
    let xs = round(dt, &rng.vec(n, 2.0));
    let gs = round(dt, &rng.vec(n, 2.0));
    let pos_v = positions(rng, (p.batch * p.seq) as usize);
    let inv_v = reference::default_inv_freq(p.rotary_dim, base);
    let x = upload(ctx, dt, &xs, "x")?;
    let g = upload(ctx, dt, &gs, "dy")?;
    let x_in = upload(ctx, dt, &xs, "x in place")?;
    let g_in = upload(ctx, dt, &gs, "dy in place")?;
    let pos = ctx.buffer_from(&pos_v, "pos")?;
    let inv = ctx.buffer_from(&inv_v, "inv_freq")?;
    let y = alloc(ctx, dt, n, "y")?;
    let dx = alloc(ctx, dt, n, "dx")?;
    let mut rec = ctx.recorder(false)?;
    rope::rope_forward(&mut rec, p, x.view(), pos.view(), inv.view(), y.view())?;
    rope::rope_backward(&mut rec, p, g.view(), pos.view(), inv.view(), dx.view())?;
    rope::rope_forward_in_place(&mut rec, p, x_in.view(), pos.view(), inv.view())?;
    rope::rope_backward_in_place(&mut rec, p, g_in.view(), pos.view(), inv.view())?;
    rec.submit()?;
    let y_ref = reference::rope(p, &f64s(&xs), &pos_v, &inv_v);
    let dx_ref = reference::rope_backward(p, &f64s(&gs), &pos_v, &inv_v);
    let what = format!("{p:?}");
    assert_close(&format!("{what}: y"), &read(ctx, dt, &y)?, &y_ref, tol(dt));
    assert_close(&format!("{what}: dx"), &read(ctx, dt, &dx)?, &dx_ref, tol(dt));
    assert_close(&format!("{what}: y in place"), &read(ctx, dt, &x_in)?, &y_ref, tol(dt));
    assert_close(&format!("{what}: dx in place"), &read(ctx, dt, &g_in)?, &dx_ref, tol(dt));
    Ok(())
}

fn odd_shapes_in(dt: DType, seed: u64) {
    on_every_device(&format!("rope {dt:?}"), |ctx| {
        if !supported(ctx, dt, "rope") {
            return Ok(());
        }
        let shape = |b, t, h, dh, r, layout, mscale| Rope { dtype: dt, ..shape(b, t, h, dh, r, layout, mscale) };
        let mut rng = Rng::new(seed);
        // (batch, seq, heads, head_dim, rotary_dim)
        let shapes = [(1, 1, 1, 2, 2), (1, 1, 1, 3, 2), (2, 5, 3, 64, 64), (1, 7, 2, 80, 32), (3, 11, 5, 66, 66)];
        for (b, t, h, dh, r) in shapes {
            for layout in LAYOUTS {
                for mscale in [1.0, 1.2] {
                    check(ctx, &mut rng, &shape(b, t, h, dh, r, layout, mscale), 10_000.0)?;
                }
            }
        }
        // Larger: 2 x 37 x 7 rows of 96, rotary 64, a large base (long-context models).
        check(ctx, &mut rng, &shape(2, 37, 7, 96, 64, RopeLayout::HalfSplit, 1.0), 500_000.0)?;
        Ok(())
    });
}

#[test]
fn gpu_matches_reference_on_odd_shapes() {
    odd_shapes_in(DType::F32, 11);
}

#[test]
fn gpu_f16_matches_reference_on_odd_shapes() {
    odd_shapes_in(DType::F16, 21);
}

#[test]
fn gpu_bf16_matches_reference_on_odd_shapes() {
    odd_shapes_in(DType::BF16, 31);
}

#[test]
fn wrong_shapes_are_errors_naming_the_kernel() {
    on_every_device("rope errors", |ctx| {
        let x = ctx.buffer(4 * 2 * 3 * 8, "x")?;
        let pos = ctx.buffer(4 * 2, "pos")?;
        let inv = ctx.buffer(4 * 2, "inv")?;
        let mut rec = ctx.recorder(false)?;
        // rotary dim 5 is odd; then inv_freq of the wrong length for rotary 6.
        for r in [5, 6] {
            let p = shape(1, 2, 3, 8, r, RopeLayout::HalfSplit, 1.0);
            let e = rope::rope_forward_in_place(&mut rec, &p, x.view(), pos.view(), inv.view()).unwrap_err();
            assert!(matches!(&e, VkError::Kernel { kernel, .. } if kernel == "rope/rope"), "{e}");
        }
        // 48 f32 are 96 f16: too many for an f16 [1, 2, 3, 8].
        let p = Rope { dtype: DType::F16, ..shape(1, 2, 3, 8, 4, RopeLayout::HalfSplit, 1.0) };
        let e = rope::rope_forward_in_place(&mut rec, &p, x.view(), pos.view(), inv.view()).unwrap_err();
        assert!(
            matches!(&e, VkError::Kernel { kernel, message } if kernel == "rope/rope:f16" && message.contains("x:")),
            "{e}"
        );
        rec.submit()?;
        Ok(())
    });
}
