//! Softmax over the last dim: reference backward against finite differences; GPU forward and
//! backward against the reference on odd shapes, including d = 1 and d = 50000, in f32, f16 and
//! bf16 storage (16-bit inputs are rounded on the host, the reference runs on the rounded values).

use vkformers_kernels::dtype::DType;
use vkformers_kernels::softmax::{self, reference};
use vkformers_kernels::testutil::storage::{download, on_halves, round, tol, upload};
use vkformers_kernels::testutil::{assert_close, assert_grad_matches_fd, f64s, Rng};
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

fn check(ctx: &Context, dt: DType, rows: usize, d: usize, scale: f32, rng: &mut Rng) -> Result<()> {
    let n = rows * d;
    let (xv, dyv) = (round(dt, &rng.vec(n, scale)), round(dt, &rng.vec(n, 1.0)));
    let want = reference::forward(&f64s(&xv), d);
    let x = upload(ctx, dt, &xv, "x")?;
    let dy = upload(ctx, dt, &dyv, "dy")?;
    let bytes = n as u64 * dt.bytes();
    let y = ctx.buffer(bytes, "y")?;
    let dx = ctx.buffer(bytes, "dx")?;
    let (y, dx) = (y.slice(0, bytes), dx.slice(0, bytes));
    let mut rec = ctx.recorder(false)?;
    softmax::forward(&mut rec, x.view(), y, rows, d, dt)?;
    softmax::backward(&mut rec, y, dy.view(), dx, rows, d, dt)?;
    rec.submit()?;
    let yv = download(ctx, dt, y)?;
    assert_close(&format!("softmax {dt:?} {rows}x{d}"), &yv, &want, tol(dt));
    // Backward from the GPU's own y (as in training), against the reference on that y.
    let want_dx = reference::backward(&f64s(&yv), &f64s(&dyv), d);
    assert_close(&format!("softmax {dt:?} backward {rows}x{d}"), &download(ctx, dt, dx)?, &want_dx, tol(dt));
    Ok(())
}

/// Odd shapes and scales, then x far from 0 (max subtraction keeps exp finite).
fn check_all(ctx: &Context, dt: DType, rng: &mut Rng) -> Result<()> {
    for (rows, d, scale) in
        [(1, 1, 1.0), (5, 1, 1.0), (3, 7, 4.0), (33, 257, 8.0), (2, 1000, 30.0), (7, 999, 2.0), (1, 50_000, 5.0)]
    {
        check(ctx, dt, rows, d, scale, rng)?;
    }
    let xv: Vec<f32> = round(dt, &(0..21).map(|i| 500.0 + i as f32 * 3.0).collect::<Vec<_>>());
    let x = upload(ctx, dt, &xv, "x")?;
    let y = ctx.buffer(21 * dt.bytes(), "y")?;
    let mut rec = ctx.recorder(false)?;
    softmax::forward(&mut rec, x.view(), y.slice(0, 21 * dt.bytes()), 3, 7, dt)?;
    rec.submit()?;
    assert_close(
        &format!("softmax {dt:?} of large x"),
        &download(ctx, dt, y.slice(0, 21 * dt.bytes()))?,
        &reference::forward(&f64s(&xv), 7),
        tol(dt),
    );
    Ok(())
}

#[test]
fn gpu_forward_and_backward_match_reference() {
    on_every_device("softmax", |ctx| check_all(ctx, DType::F32, &mut Rng::new(23)));
}

#[test]
fn gpu_forward_and_backward_in_16_bits_match_reference() {
    on_halves("softmax f16/bf16", 24, |ctx, rng, dt| check_all(ctx, dt, rng));
}

#[test]
fn wrong_shapes_are_errors_naming_the_kernel() {
    on_every_device("softmax errors", |ctx| {
        let a = ctx.buffer(12 * 4, "a")?;
        let mut rec = ctx.recorder(false)?;
        let e = softmax::forward(&mut rec, a.view(), a.view(), 5, 3, DType::F32).unwrap_err();
        assert!(e.to_string().contains("softmax/forward"), "{e}");
        let e = softmax::backward(&mut rec, a.view(), a.view(), a.view(), 12, 0, DType::F32).unwrap_err();
        assert!(e.to_string().contains("softmax/backward"), "{e}");
        if ctx.caps().fp16 {
            // 24 f16 are no [5, 3].
            let e = softmax::forward(&mut rec, a.view(), a.view(), 5, 3, DType::F16).unwrap_err();
            assert!(e.to_string().contains("softmax/forward:f16"), "{e}");
        }
        rec.submit()?;
        Ok(())
    });
}
