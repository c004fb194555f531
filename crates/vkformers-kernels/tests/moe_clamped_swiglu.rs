//! gpt-oss's clamped SwiGLU kernels against their f64 references, forward and backward, in both
//! layouts (interleaved gate/up columns and gate-then-up halves), on odd shapes with values on
//! both sides of the limits; and the reference backward against finite differences.

use vkformers_kernels::moe::clamped_swiglu::{backward, forward, reference, reference_backward, ClampedSwiGlu};
use vkformers_kernels::testutil::{assert_close, assert_grad_matches_fd, f64s, Rng, TOL_F32};
use vkformers_vk::testing::on_every_device;
use vkformers_vk::{Context, Result};

/// Uniform in ±2.5 with nothing within 0.01 of ±limit (finite differences straddle no kink).
fn inputs(rng: &mut Rng, n: usize, limit: f32) -> Vec<f32> {
    rng.vec(n, 2.5).into_iter().map(|v| if (v.abs() - limit).abs() < 0.01 { v * 0.9 } else { v }).collect()
}

fn check(ctx: &Context, rng: &mut Rng, rows: usize, inner: usize, act: ClampedSwiGlu) -> Result<()> {
    let what = format!("clamped swiglu rows {rows} inner {inner} {act:?}");
    let x = inputs(rng, rows * 2 * inner, act.limit);
    let d = rng.vec(rows * inner, 1.0);
    assert!(x.iter().any(|v| v.abs() > act.limit) && x.iter().any(|v| v.abs() < act.limit), "{what}: both sides");
    let (xb, db) = (ctx.buffer_from(&x, "gate_up")?, ctx.buffer_from(&d, "dout")?);
    let (ob, dxb) = (ctx.buffer((rows * inner * 4) as u64, "out")?, ctx.buffer((x.len() * 4) as u64, "dgate_up")?);
    let mut rec = ctx.recorder(false)?;
    forward(&mut rec, act, xb.view(), ob.view(), (rows, inner))?;
    backward(&mut rec, act, (xb.view(), db.view()), dxb.view(), (rows, inner))?;
    rec.submit()?;
    let want = reference(act, &f64s(&x), inner);
    assert_close(&format!("{what}: out"), &ctx.read_vec::<f32>(ob.view())?, &want, TOL_F32);
    let want = reference_backward(act, &f64s(&x), &f64s(&d), inner);
    assert_close(&format!("{what}: dgate_up"), &ctx.read_vec::<f32>(dxb.view())?, &want, TOL_F32);
    Ok(())
}

#[test]
fn clamped_swiglu_matches_reference_in_both_layouts() {
    on_every_device("moe clamped swiglu", |ctx| {
        let mut rng = Rng::new(11);
        for interleaved in [true, false] {
            let act = ClampedSwiGlu { alpha: 1.702, limit: 0.9, interleaved };
            check(ctx, &mut rng, 7, 5, act)?;
            check(ctx, &mut rng, 1, 13, act)?;
            check(ctx, &mut rng, 33, 3, ClampedSwiGlu { alpha: 0.5, limit: 1.7, interleaved })?;
        }
        Ok(())
    });
}

#[test]
fn reference_backward_matches_finite_differences() {
    let mut rng = Rng::new(3);
    for interleaved in [true, false] {
        let act = ClampedSwiGlu { alpha: 1.702, limit: 0.9, interleaved };
        let (rows, inner) = (3, 4);
        let x = f64s(&inputs(&mut rng, rows * 2 * inner, act.limit));
        let d = f64s(&rng.vec(rows * inner, 1.0));
        let f = |x: &[f64]| reference(act, x, inner).iter().zip(&d).map(|(a, b)| a * b).sum::<f64>();
        assert_grad_matches_fd("clamped swiglu", f, &x, &reference_backward(act, &x, &d, inner));
    }
}
