//! Dropout: Philox4x32-10 known answers, GPU stream bit-identical to the Rust reference, keep
//! fraction, forward/backward vs the reference on every device with validation on, in f32, f16
//! and bf16 storage (16-bit inputs are rounded on the host, the reference runs on the rounded
//! values).

use vkformers_kernels::dropout::{self, reference};
use vkformers_kernels::dtype::DType;
use vkformers_kernels::testutil::storage::{download, on_halves, round, tol, upload};
use vkformers_kernels::testutil::{assert_close, assert_grad_matches_fd, f64s, Rng};
use vkformers_vk::testing::on_every_device;
use vkformers_vk::{Context, Result, VkError};

#[test]
fn philox_matches_random123_known_answers() {
    let cases = [
        ([0, 0, 0, 0], [0, 0], [0x6627_e8d5, 0xe169_c58d, 0xbc57_ac4c, 0x9b00_dbd8]),
        ([u32::MAX; 4], [u32::MAX; 2], [0x408f_276d, 0x41c8_3b0e, 0xa20b_c7c6, 0x6d54_51fd]),
        (
            [0x243f_6a88, 0x85a3_08d3, 0x1319_8a2e, 0x0370_7344],
            [0xa409_3822, 0x299f_31d0],
            [0xd16c_fe09, 0x94fd_cceb, 0x5001_e420, 0x2412_6ea1],
        ),
    ];
    for (ctr, key, want) in cases {
        assert_eq!(reference::philox4x32_10(ctr, key), want, "ctr {ctr:x?} key {key:x?}");
    }
}

fn gpu_bits(ctx: &Context, n: usize, seed: u64, offset: u64) -> Result<Vec<u32>> {
    let out = ctx.buffer((n * 4) as u64, "bits")?;
    let mut rec = ctx.recorder(false)?;
    dropout::random_bits(&mut rec, out.view(), seed, offset)?;
    rec.submit()?;
    ctx.read_vec(out.view())
}

#[test]
fn gpu_stream_equals_reference_bit_for_bit() {
    on_every_device("philox stream", |ctx| {
        let cases = [
            (1, 0u64, 0u64),
            (7, 0x1234_5678_9abc_def0, 1),
            (1001, u64::MAX, 3),
            (4099, 42, (1 << 32) + 2),
            (257, 7, (1 << 34) - 1),
            (70_001, 0xdead_beef, 12_345),
        ];
        for (n, seed, offset) in cases {
            let got = gpu_bits(ctx, n, seed, offset)?;
            let want: Vec<u32> = (0..n as u64).map(|i| reference::random_u32(seed, offset + i)).collect();
            assert_eq!(got, want, "n {n} seed {seed:#x} offset {offset:#x}");
        }
        Ok(())
    });
}

/// Runs forward on `xs` and backward on `dys` in one batch, in f32.
fn run(ctx: &Context, xs: &[f32], dys: &[f32], p: f32, seed: u64, offset: u64) -> Result<(Vec<f32>, Vec<f32>)> {
    run_dt(ctx, DType::F32, xs, dys, p, seed, offset)
}

/// Runs forward on `xs` and backward on `dys` (both rounded to `dt`) in one batch, stored as
/// `dt`; returns y and dx widened.
fn run_dt(
    ctx: &Context,
    dt: DType,
    xs: &[f32],
    dys: &[f32],
    p: f32,
    seed: u64,
    offset: u64,
) -> Result<(Vec<f32>, Vec<f32>)> {
    let bytes = xs.len() as u64 * dt.bytes();
    let (x, dy) = (upload(ctx, dt, xs, "x")?, upload(ctx, dt, dys, "dy")?);
    let (y, dx) = (ctx.buffer(bytes, "y")?, ctx.buffer(bytes, "dx")?);
    let (y, dx) = (y.slice(0, bytes), dx.slice(0, bytes));
    let mut rec = ctx.recorder(false)?;
    dropout::forward(&mut rec, x.view(), y, p, seed, offset, dt)?;
    dropout::backward(&mut rec, dy.view(), dx, p, seed, offset, dt)?;
    rec.submit()?;
    Ok((download(ctx, dt, y)?, download(ctx, dt, dx)?))
}

#[test]
fn keep_fraction_is_one_minus_p() {
    on_every_device("dropout keep fraction", |ctx| {
        let n = 100_003;
        let ones = vec![1.0f32; n];
        for (p, seed) in [(0.1f32, 1u64), (0.5, 2), (0.9, 3), (0.37, u64::MAX - 5)] {
            let (y, _) = run(ctx, &ones, &ones, p, seed, 77)?;
            let kept = y.iter().filter(|&&v| v != 0.0).count() as f64 / n as f64;
            let sigma = (f64::from(p) * (1.0 - f64::from(p)) / n as f64).sqrt();
            let want = 1.0 - f64::from(p);
            assert!((kept - want).abs() < 5.0 * sigma, "p {p}: kept {kept}, want {want} ± {}", 5.0 * sigma);
            // The mean of y estimates E[x] = 1 (inverted dropout).
            let mean = y.iter().map(|&v| f64::from(v)).sum::<f64>() / n as f64;
            assert!((mean - 1.0).abs() < 5.0 * sigma / want, "p {p}: mean {mean}");
        }
        Ok(())
    });
}

#[test]
fn reference_uniforms_are_uniform() {
    // Mean 1/2 and variance 1/12 over 10^5 draws, each within 5 standard errors.
    let n = 100_000u64;
    let u: Vec<f64> = (0..n).map(|i| reference::uniform(99, i)).collect();
    let mean = u.iter().sum::<f64>() / n as f64;
    let var = u.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / n as f64;
    assert!((mean - 0.5).abs() < 5.0 * (1.0 / 12.0 / n as f64).sqrt(), "mean {mean}");
    assert!((var - 1.0 / 12.0).abs() < 5.0 * (1.0 / 180.0 / n as f64).sqrt(), "var {var}");
}

#[test]
fn reference_backward_matches_finite_differences() {
    let mut rng = Rng::new(2);
    for (n, p, offset) in [(1, 0.0f32, 0u64), (9, 0.3, 5), (31, 0.5, 2)] {
        let x = f64s(&rng.vec(n, 2.0));
        let w = f64s(&rng.vec(n, 1.0));
        let f = |x: &[f64]| reference::forward(x, p, 11, offset).iter().zip(&w).map(|(a, b)| a * b).sum::<f64>();
        assert_grad_matches_fd(&format!("dropout n {n} p {p}"), f, &x, &reference::backward(&w, p, 11, offset));
    }
}

/// Forward and backward against the reference (and the mask) on odd sizes, offsets and p.
fn check(ctx: &Context, dt: DType, rng: &mut Rng) -> Result<()> {
    for (n, p, seed, offset) in [
        (1, 0.5f32, 3u64, 0u64),
        (1, 0.5, 3, 3),
        (7, 0.1, 0x0123_4567_89ab_cdef, 1),
        (255, 0.0, 9, 2),
        (257, 1.0, 9, 2),
        (1001, 0.25, 17, (5 << 32) + 3),
        (70_001, 0.6, 23, 1_000_001),
    ] {
        let (xs, dys) = (round(dt, &rng.vec(n, 3.0)), round(dt, &rng.vec(n, 1.0)));
        let (y, dx) = run_dt(ctx, dt, &xs, &dys, p, seed, offset)?;
        let what = format!("{dt:?} n {n} p {p} seed {seed:#x} offset {offset:#x}");
        assert_close(&format!("{what}: y"), &y, &reference::forward(&f64s(&xs), p, seed, offset), tol(dt));
        assert_close(&format!("{what}: dx"), &dx, &reference::backward(&f64s(&dys), p, seed, offset), tol(dt));
        let mask = reference::mask(n, p, seed, offset);
        for i in 0..n {
            // (A 16-bit input may round to 0; then the kept value is 0 too.)
            if xs[i] != 0.0 {
                assert_eq!(y[i] != 0.0, mask[i], "{what}: forward mask at {i}");
            }
            if dys[i] != 0.0 {
                assert_eq!(dx[i] != 0.0, mask[i], "{what}: backward replays the mask at {i}");
            }
        }
        if p == 0.0 {
            assert_eq!(y, xs, "{what}: p = 0 is the identity");
        }
    }
    Ok(())
}

#[test]
fn gpu_forward_and_backward_match_reference() {
    on_every_device("dropout", |ctx| check(ctx, DType::F32, &mut Rng::new(5)));
}

#[test]
fn gpu_forward_and_backward_in_16_bits_match_reference() {
    on_halves("dropout f16/bf16", 6, |ctx, rng, dt| check(ctx, dt, rng));
}

#[test]
fn split_ranges_replay_the_same_stream() {
    on_every_device("dropout split", |ctx| {
        // One call over [10, 10 + 1000) equals two calls over [10, 343) and [343, 1010).
        let xs = Rng::new(8).vec(1000, 1.0);
        let (whole, _) = run(ctx, &xs, &xs, 0.4, 1234, 10)?;
        let (a, _) = run(ctx, &xs[..333], &xs[..333], 0.4, 1234, 10)?;
        let (b, _) = run(ctx, &xs[333..], &xs[333..], 0.4, 1234, 343)?;
        assert_eq!(whole, [a, b].concat());
        Ok(())
    });
}

#[test]
fn wrong_arguments_are_errors_naming_the_kernel() {
    on_every_device("dropout errors", |ctx| {
        let a = ctx.buffer(40, "a")?;
        let b = ctx.buffer(36, "b")?;
        let mut rec = ctx.recorder(false)?;
        let e = dropout::forward(&mut rec, a.view(), b.view(), 0.5, 1, 0, DType::F32).unwrap_err();
        assert!(matches!(&e, VkError::Kernel { kernel, .. } if kernel == "dropout/dropout:f32"), "{e}");
        let e = dropout::backward(&mut rec, a.view(), a.view(), 1.5, 1, 0, DType::F32).unwrap_err();
        assert!(e.to_string().contains("outside [0, 1]"), "{e}");
        let e = dropout::random_bits(&mut rec, a.slice(0, 2), 1, 0).unwrap_err();
        assert!(matches!(&e, VkError::Kernel { kernel, .. } if kernel == "dropout/random_bits"), "{e}");
        if ctx.caps().fp16 {
            // 20 bf16 into 18, and an odd byte count.
            let e = dropout::forward(&mut rec, a.view(), b.view(), 0.5, 1, 0, DType::BF16).unwrap_err();
            assert!(matches!(&e, VkError::Kernel { kernel, .. } if kernel == "dropout/dropout:bf16"), "{e}");
            let e = dropout::backward(&mut rec, a.slice(0, 3), a.slice(0, 3), 0.5, 1, 0, DType::F16).unwrap_err();
            assert!(matches!(&e, VkError::Kernel { kernel, .. } if kernel == "dropout/dropout:f16"), "{e}");
        }
        rec.submit()?;
        Ok(())
    });
}
