//! Softmax over the last dim: reference backward against finite differences; GPU forward and
//! backward against the reference on odd shapes, including d = 1 and d = 50000.

use vkformers_kernels::softmax::{self, reference};
use vkformers_kernels::testutil::{assert_close, assert_grad_matches_fd, f64s, Rng, TOL_F32};
use vkformers_vk::testing::on_every_device;
use vkformers_vk::{Context, Result};

#[test]
fn reference_backward_matches_finite_differences() {
    let mut rng = Rng::new(21);
    for (rows, d) in [(1, 1), (3, 7), (2, 30)] {
        let x = f64s(&rng.vec(rows * d, 3.0));
        let w = f64s(&rng.vec(rows * d, 1.0));
        let y = reference::forward(&x, d);
        let analytic = reference::backward(&y, &w, d);
        let loss = |x: &[f64]| reference::forward(x, d).iter().zip(&w).map(|(a, b)| a * b).sum::<f64>();
        assert_grad_matches_fd(&format!("softmax {rows}x{d}"), loss, &x, &analytic);
    }
}

#[test]
fn reference_is_stable_for_large_inputs() {
    let y = reference::forward(&[1000.0, 1000.0, -1000.0], 3);
    assert_eq!(y, [0.5, 0.5, 0.0]);
}

fn check(ctx: &Context, rows: usize, d: usize, scale: f32, rng: &mut Rng) -> Result<()> {
    let n = rows * d;
    let (xv, dyv) = (rng.vec(n, scale), rng.vec(n, 1.0));
    let want = reference::forward(&f64s(&xv), d);
    let x = ctx.buffer_from(&xv, "x")?;
    let dy = ctx.buffer_from(&dyv, "dy")?;
    let y = ctx.buffer((n * 4) as u64, "y")?;
    let dx = ctx.buffer((n * 4) as u64, "dx")?;
    let mut rec = ctx.recorder(false)?;
    softmax::forward(&mut rec, x.view(), y.view(), rows, d)?;
    softmax::backward(&mut rec, y.view(), dy.view(), dx.view(), rows, d)?;
    rec.submit()?;
    let yv: Vec<f32> = ctx.read_vec(y.view())?;
    assert_close(&format!("softmax {rows}x{d}"), &yv, &want, TOL_F32);
    // Backward from the GPU's own y (as in training), against the reference on that y.
    let want_dx = reference::backward(&f64s(&yv), &f64s(&dyv), d);
    assert_close(&format!("softmax backward {rows}x{d}"), &ctx.read_vec::<f32>(dx.view())?, &want_dx, TOL_F32);
    Ok(())
}

#[test]
fn gpu_forward_and_backward_match_reference() {
    on_every_device("softmax", |ctx| {
        let mut rng = Rng::new(23);
        for (rows, d, scale) in
            [(1, 1, 1.0), (5, 1, 1.0), (3, 7, 4.0), (33, 257, 8.0), (2, 1000, 30.0), (7, 999, 2.0), (1, 50_000, 5.0)]
        {
            check(ctx, rows, d, scale, &mut rng)?;
        }
        // Far from 0: max subtraction keeps exp finite.
        let xv: Vec<f32> = (0..21).map(|i| 500.0 + i as f32 * 3.0).collect();
        let x = ctx.buffer_from(&xv, "x")?;
        let y = ctx.buffer(21 * 4, "y")?;
        let mut rec = ctx.recorder(false)?;
        softmax::forward(&mut rec, x.view(), y.view(), 3, 7)?;
        rec.submit()?;
        assert_close(
            "softmax of large x",
            &ctx.read_vec::<f32>(y.view())?,
            &reference::forward(&f64s(&xv), 7),
            TOL_F32,
        );
        Ok(())
    });
}

#[test]
fn wrong_shapes_are_errors_naming_the_kernel() {
    on_every_device("softmax errors", |ctx| {
        let a = ctx.buffer(12 * 4, "a")?;
        let mut rec = ctx.recorder(false)?;
        let e = softmax::forward(&mut rec, a.view(), a.view(), 5, 3).unwrap_err();
        assert!(e.to_string().contains("softmax/forward"), "{e}");
        let e = softmax::backward(&mut rec, a.view(), a.view(), a.view(), 12, 0).unwrap_err();
        assert!(e.to_string().contains("softmax/backward"), "{e}");
        rec.submit()?;
        Ok(())
    });
}
