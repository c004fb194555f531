//! Activations: reference erf against known values, reference backward against finite
//! differences, GPU forward/backward against the reference on every device, in f32, f16 and
//! bf16 storage (16-bit inputs are rounded on the host, the reference runs on the rounded values).

use vkformers_kernels::activation::{self, reference, Activation};
use vkformers_kernels::dtype::DType;
use vkformers_kernels::testutil::storage::{download, on_halves, round, tol, upload};
use vkformers_kernels::testutil::{assert_close, assert_grad_matches_fd, f64s, Rng};
use vkformers_vk::testing::on_every_device;
use vkformers_vk::{Context, Result};

#[test]
fn reference_erf_matches_known_values() {
    // erf at a few points, to 16 digits (values of the C library's erf).
    let known = [
        (0.0, 0.0),
        (1e-3, 0.001_128_378_790_969_4),
        (0.5, 0.520_499_877_813_046_5),
        (1.0, 0.842_700_792_949_714_9),
        (2.0, 0.995_322_265_018_952_7),
        (2.999, 0.999_977_769_831_400_2),
        (3.0, 0.999_977_909_503_001_4),
        (4.0, 0.999_999_984_582_742_1),
        (6.0, 0.999_999_999_999_999_98),
        (10.0, 1.0),
    ];
    for (x, want) in known {
        for s in [1.0, -1.0] {
            let got = reference::erf(s * x);
            assert!((got - s * want).abs() < 1e-14, "erf({}) = {got}, want {}", s * x, s * want);
        }
    }
    // Continuity at the switch from series to continued fraction.
    let (a, b) = (reference::erf(3.0 - 1e-12), reference::erf(3.0));
    assert!((a - b).abs() < 1e-14, "{a} {b}");
}

fn fd_points(act: Activation, rng: &mut Rng, n: usize) -> Vec<f64> {
    // Keep away from ReLU's kink so central differences are valid.
    let mut x = f64s(&rng.vec(n, 4.0));
    if matches!(act, Activation::Relu | Activation::Relu2) {
        for v in &mut x {
            if v.abs() < 1e-3 {
                *v += 0.01;
            }
        }
    }
    x
}

#[test]
fn reference_backward_matches_finite_differences() {
    let mut rng = Rng::new(1);
    for act in Activation::ALL {
        let n = 37;
        let x = fd_points(act, &mut rng, n);
        let w = f64s(&rng.vec(n, 1.0));
        // L(x) = sum_i w_i f(x_i); dL/dx = backward(x, w).
        let loss = |x: &[f64]| reference::forward(act, x).iter().zip(&w).map(|(y, w)| y * w).sum::<f64>();
        let analytic = reference::backward(act, &x, &w);
        assert_grad_matches_fd(&format!("{act:?}"), loss, &x, &analytic);
    }
}

#[test]
fn gpu_erf_is_accurate_to_2e_7() {
    on_every_device("erf", |ctx| {
        let n = 20_001;
        let xs: Vec<f32> = (0..n).map(|i| (i as f32 - 10_000.0) * 6e-4).collect();
        let x = ctx.buffer_from(&xs, "x")?;
        let y = ctx.buffer((n * 4) as u64, "y")?;
        let mut rec = ctx.recorder(false)?;
        activation::erf(&mut rec, x.view(), y.view())?;
        rec.submit()?;
        let got: Vec<f32> = ctx.read_vec(y.view())?;
        let worst = xs
            .iter()
            .zip(&got)
            .map(|(&x, &g)| (f64::from(g) - reference::erf(f64::from(x))).abs())
            .fold(0.0f64, f64::max);
        eprintln!("max |erf_f32 - erf| = {worst:e}");
        assert!(worst < 2e-7, "max |erf_f32 - erf| = {worst:e}");
        Ok(())
    });
}

fn check_gpu(ctx: &Context, act: Activation, dt: DType, n: usize, rng: &mut Rng) -> Result<()> {
    let mut xs = rng.vec(n, 6.0);
    // A few extreme values: exp overflow paths must stay finite.
    for (i, v) in [-100.0f32, -30.0, 0.0, 30.0, 100.0].iter().enumerate() {
        if i < n {
            xs[i * (n / 5).max(1) % n] = *v;
        }
    }
    let (xs, dys) = (round(dt, &xs), round(dt, &rng.vec(n, 1.0)));
    let x = upload(ctx, dt, &xs, "x")?;
    let dy = upload(ctx, dt, &dys, "dy")?;
    let bytes = n as u64 * dt.bytes();
    let y = ctx.buffer(bytes, "y")?;
    let dx = ctx.buffer(bytes, "dx")?;
    let mut rec = ctx.recorder(false)?;
    activation::forward(&mut rec, act, x.view(), y.slice(0, bytes), dt)?;
    activation::backward(&mut rec, act, x.view(), dy.view(), dx.slice(0, bytes), dt)?;
    rec.submit()?;
    let (x64, dy64) = (f64s(&xs), f64s(&dys));
    assert_close(
        &format!("{act:?} {dt:?} forward n={n}"),
        &download(ctx, dt, y.slice(0, bytes))?,
        &reference::forward(act, &x64),
        tol(dt),
    );
    assert_close(
        &format!("{act:?} {dt:?} backward n={n}"),
        &download(ctx, dt, dx.slice(0, bytes))?,
        &reference::backward(act, &x64, &dy64),
        tol(dt),
    );
    Ok(())
}

#[test]
fn gpu_forward_and_backward_match_reference() {
    on_every_device("activations", |ctx| {
        let mut rng = Rng::new(7);
        for act in Activation::ALL {
            for n in [1, 5, 257, 3001, 70_001] {
                check_gpu(ctx, act, DType::F32, n, &mut rng)?;
            }
        }
        Ok(())
    });
}

#[test]
fn gpu_forward_and_backward_in_16_bits_match_reference() {
    on_halves("activations f16/bf16", 8, |ctx, rng, dt| {
        for act in Activation::ALL {
            for n in [1, 5, 257, 3001, 20_001] {
                check_gpu(ctx, act, dt, n, rng)?;
            }
        }
        Ok(())
    });
}

/// `forward_narrow` (f32 x, 16-bit y in one pass) against the f64 reference of the f32 input
/// (y rounded once, to the 16-bit type), and bit for bit against the f32 forward followed by
/// the cast kernel it replaces, on odd lengths.
fn check_narrow(ctx: &Context, act: Activation, dt: DType, n: usize, rng: &mut Rng) -> Result<()> {
    let mut xs = rng.vec(n, 6.0);
    for (i, v) in [-100.0f32, -30.0, 0.0, 30.0, 100.0].iter().enumerate() {
        if i < n {
            xs[i * (n / 5).max(1) % n] = *v;
        }
    }
    let x = upload(ctx, DType::F32, &xs, "x")?;
    let (wide, bytes) = (n as u64 * 4, n as u64 * dt.bytes());
    let (y_f32, y_cast, y) = (ctx.buffer(wide, "y_f32")?, ctx.buffer(bytes, "y_cast")?, ctx.buffer(bytes, "y")?);
    let mut rec = ctx.recorder(false)?;
    activation::forward(&mut rec, act, x.view(), y_f32.slice(0, wide), DType::F32)?;
    vkformers_kernels::dtype::cast(&mut rec, y_f32.slice(0, wide), DType::F32, y_cast.slice(0, bytes), dt)?;
    activation::forward_narrow(&mut rec, act, x.view(), y.slice(0, bytes), dt)?;
    rec.submit()?;
    let got = download(ctx, dt, y.slice(0, bytes))?;
    let what = format!("{act:?} f32 -> {dt:?} n={n}");
    assert_close(&what, &got, &reference::forward(act, &f64s(&xs)), tol(dt));
    let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
    assert_eq!(bits(&got), bits(&download(ctx, dt, y_cast.slice(0, bytes))?), "{what}: forward + cast");
    Ok(())
}

#[test]
fn gpu_forward_narrowing_to_16_bits_matches_reference_and_forward_then_cast() {
    on_halves("activations f32 -> f16/bf16", 9, |ctx, rng, dt| {
        for act in Activation::ALL {
            for n in [1, 5, 257, 3001] {
                check_narrow(ctx, act, dt, n, rng)?;
            }
        }
        Ok(())
    });
}

#[test]
fn wrong_lengths_are_errors_naming_the_kernel() {
    on_every_device("activation errors", |ctx| {
        let x = ctx.buffer(64, "x")?;
        let y = ctx.buffer(60, "y")?;
        let mut rec = ctx.recorder(false)?;
        let e = activation::forward(&mut rec, Activation::Gelu, x.view(), y.view(), DType::F32).unwrap_err();
        assert!(e.to_string().contains("activation/forward:gelu"), "{e}");
        let e = activation::backward(&mut rec, Activation::Silu, x.view(), y.view(), x.view(), DType::F32).unwrap_err();
        assert!(e.to_string().contains("activation/backward:silu"), "{e}");
        if ctx.caps().fp16 {
            // 32 f16 into 30, and an odd byte count.
            let e = activation::forward(&mut rec, Activation::Relu, x.view(), y.view(), DType::F16).unwrap_err();
            assert!(e.to_string().contains("activation/forward:relu_f16"), "{e}");
            let e = activation::forward(&mut rec, Activation::Relu, x.slice(0, 63), x.slice(0, 63), DType::BF16)
                .unwrap_err();
            assert!(e.to_string().contains("activation/forward:relu_bf16"), "{e}");
        }
        rec.submit()?;
        Ok(())
    });
}
