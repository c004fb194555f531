//! AdamW and gradient-norm clipping on every device vs the f64 reference, with validation on.

use vkformers_kernels::dtype::DType;
use vkformers_kernels::optim::{self, reference, reference::AdamWState, AdamW, AdamWBuffers};
use vkformers_kernels::testutil::{assert_close, f64s, storage, Rng, TOL_F32};
use vkformers_vk::testing::on_every_device;
use vkformers_vk::{Buffer, Context, Result, VkError};

/// max |got − want| ≤ 1e-6 · max |want| over the tensor (and elementwise TOL_F32).
fn assert_adam_close(what: &str, got: &[f32], want: &[f64]) {
    assert_close(what, got, want, TOL_F32);
    let scale = want.iter().fold(0.0f64, |a, w| a.max(w.abs()));
    let worst = got.iter().zip(want).map(|(g, w)| (f64::from(*g) - w).abs()).fold(0.0, f64::max);
    assert!(worst <= 1e-6 * scale, "{what}: max |Δ| {worst:e} > 1e-6 × max |want| {scale:e}");
}

struct Gpu {
    p: Buffer,
    m: Buffer,
    v: Buffer,
}

impl Gpu {
    fn new(ctx: &Context, p: &[f32]) -> Result<Self> {
        let zeros = vec![0f32; p.len()];
        Ok(Gpu { p: ctx.buffer_from(p, "p")?, m: ctx.buffer_from(&zeros, "m")?, v: ctx.buffer_from(&zeros, "v")? })
    }

    fn check(&self, ctx: &Context, what: &str, want: &AdamWState) -> Result<()> {
        assert_adam_close(&format!("{what}: param"), &ctx.read_vec::<f32>(self.p.view())?, &want.param);
        assert_adam_close(&format!("{what}: exp_avg"), &ctx.read_vec::<f32>(self.m.view())?, &want.exp_avg);
        assert_adam_close(&format!("{what}: exp_avg_sq"), &ctx.read_vec::<f32>(self.v.view())?, &want.exp_avg_sq);
        Ok(())
    }
}

fn two_steps(ctx: &Context, rng: &mut Rng, n: usize, hp: &AdamW) -> Result<()> {
    let p0 = rng.vec(n, 1.0);
    let grads = [rng.vec(n, 0.5), rng.vec(n, 2.0)];
    let gpu = Gpu::new(ctx, &p0)?;
    let mut want = AdamWState::new(f64s(&p0));
    for (k, g) in grads.iter().enumerate() {
        let gb = ctx.buffer_from(g, "g")?;
        let bufs = AdamWBuffers {
            param: gpu.p.view(),
            grad: gb.view(),
            exp_avg: gpu.m.view(),
            exp_avg_sq: gpu.v.view(),
            grad_scale: None,
        };
        let mut rec = ctx.recorder(false)?;
        optim::adamw_step(&mut rec, &bufs, hp, k as u64 + 1)?;
        rec.submit()?;
        want.step(&f64s(g), 1.0, hp, k as u64 + 1);
        gpu.check(ctx, &format!("n {n} {hp:?} step {}", k + 1), &want)?;
    }
    Ok(())
}

#[test]
fn adamw_two_steps_match_reference() {
    on_every_device("adamw", |ctx| {
        let mut rng = Rng::new(3);
        let hp = AdamW { lr: 1e-2, beta1: 0.9, beta2: 0.999, eps: 1e-8, weight_decay: 0.1 };
        for n in [1, 7, 255, 257, 1001, 70_001] {
            two_steps(ctx, &mut rng, n, &hp)?;
        }
        // 1 - beta1 >= 0.5 takes torch's other lerp branch; no weight decay; PyTorch defaults.
        two_steps(ctx, &mut rng, 999, &AdamW { lr: 3e-3, beta1: 0.3, beta2: 0.95, eps: 1e-6, weight_decay: 0.0 })?;
        two_steps(ctx, &mut rng, 513, &AdamW::default())?;
        Ok(())
    });
}

#[test]
fn reference_adamw_first_step_is_sign_descent() {
    // Step 1 with m = v = 0: m̂ / sqrt(v̂) = sign(g), so p1 = p0 (1 − lr wd) − lr sign(g) (eps ≈ 0).
    let hp = AdamW { lr: 0.1, beta1: 0.8, beta2: 0.99, eps: 0.0, weight_decay: 0.5 };
    let mut s = AdamWState::new(vec![1.0, -2.0, 0.5]);
    s.step(&[3.0, -0.25, 1e-3], 2.0, &hp, 1);
    for (got, want) in s.param.iter().zip([1.0 * 0.95 - 0.1, -2.0 * 0.95 + 0.1, 0.5 * 0.95 - 0.1]) {
        assert!((got - want).abs() < 1e-12, "{got} vs {want}");
    }
}

/// Gradient buffers of odd sizes; clip to `max_norm` on the device, then one scaled AdamW step.
fn clip_then_step(ctx: &Context, rng: &mut Rng, sizes: &[usize], max_norm: f32) -> Result<()> {
    let grads: Vec<Vec<f32>> = sizes.iter().map(|&n| rng.vec(n, 1.0)).collect();
    let params: Vec<Vec<f32>> = sizes.iter().map(|&n| rng.vec(n, 1.0)).collect();
    let gbufs: Vec<Buffer> = grads.iter().map(|g| ctx.buffer_from(g, "g")).collect::<Result<_>>()?;
    let states: Vec<Gpu> = params.iter().map(|p| Gpu::new(ctx, p)).collect::<Result<_>>()?;
    let views: Vec<_> = gbufs.iter().map(Buffer::view).collect();
    let partials = ctx.buffer(optim::partials_len(&views) * 4, "partials")?;
    let (norm, coef) = (ctx.buffer(4, "norm")?, ctx.buffer(4, "coef")?);
    let hp = AdamW::default();
    let mut rec = ctx.recorder(false)?;
    optim::grad_norm(&mut rec, &views, partials.view(), max_norm, norm.view(), coef.view())?;
    for (s, g) in states.iter().zip(&gbufs) {
        let bufs = AdamWBuffers {
            param: s.p.view(),
            grad: g.view(),
            exp_avg: s.m.view(),
            exp_avg_sq: s.v.view(),
            grad_scale: Some(coef.view()),
        };
        optim::adamw_step(&mut rec, &bufs, &hp, 1)?;
    }
    rec.submit()?;
    let g64: Vec<Vec<f64>> = grads.iter().map(|g| f64s(g)).collect();
    let want_norm = reference::global_norm(&g64.iter().map(Vec::as_slice).collect::<Vec<_>>());
    let want_coef = reference::clip_coef(want_norm, f64::from(max_norm));
    let got_norm = ctx.read_vec::<f32>(norm.view())?;
    let got_coef = ctx.read_vec::<f32>(coef.view())?;
    assert_close(&format!("norm {sizes:?}"), &got_norm, &[want_norm], TOL_F32);
    assert_close(&format!("coef {sizes:?}"), &got_coef, &[want_coef], TOL_F32);
    if want_coef == 1.0 {
        assert_eq!(got_coef[0], 1.0, "no clipping below max_norm");
    }
    for ((s, p), g) in states.iter().zip(&params).zip(&g64) {
        let mut want = AdamWState::new(f64s(p));
        want.step(g, want_coef, &hp, 1);
        s.check(ctx, &format!("clipped step {sizes:?} max_norm {max_norm}"), &want)?;
    }
    Ok(())
}

#[test]
fn grad_norm_clip_and_scaled_step_match_reference() {
    on_every_device("clip_grad_norm", |ctx| {
        let mut rng = Rng::new(9);
        clip_then_step(ctx, &mut rng, &[1], 0.1)?;
        clip_then_step(ctx, &mut rng, &[7, 1, 16_385, 1001], 1.0)?;
        clip_then_step(ctx, &mut rng, &[70_001, 3], 1e4)?; // below max_norm: coef exactly 1
                                                           // More than 1024 x 4096 elements: the first buffer's workgroups are capped and loop;
                                                           // over 1024 first-stage partials in all: the second stage has two chunks (518 + 517).
        clip_then_step(ctx, &mut rng, &[4_194_311, 40_001, 5], 1.0)?;
        Ok(())
    });
}

#[test]
fn grad_norm_is_deterministic() {
    on_every_device("grad norm determinism", |ctx| {
        let mut rng = Rng::new(4);
        let g = ctx.buffer_from(&rng.vec(100_003, 1.0), "g")?;
        let partials = ctx.buffer(optim::partials_len(&[g.view(), g.view()]) * 4, "partials")?;
        let mut bits = Vec::new();
        for _ in 0..3 {
            let (norm, coef) = (ctx.buffer(4, "norm")?, ctx.buffer(4, "coef")?);
            let mut rec = ctx.recorder(false)?;
            optim::grad_norm(&mut rec, &[g.view(), g.view()], partials.view(), 1.0, norm.view(), coef.view())?;
            let report = rec.submit()?;
            // Stage 1 of both buffers together, then stage 2, then the norm.
            assert_eq!(report.barriers, 2, "sums of different buffers run without barriers");
            bits.push(ctx.read_vec::<u32>(norm.view())?[0]);
        }
        assert!(bits.windows(2).all(|w| w[0] == w[1]), "{bits:?}");
        Ok(())
    });
}

#[test]
fn wrong_arguments_are_errors_naming_the_kernel() {
    on_every_device("optim errors", |ctx| {
        let a = ctx.buffer(40, "a")?;
        let b = ctx.buffer(36, "b")?;
        let mut rec = ctx.recorder(false)?;
        let bufs =
            AdamWBuffers { param: a.view(), grad: a.view(), exp_avg: a.view(), exp_avg_sq: b.view(), grad_scale: None };
        let e = optim::adamw_step(&mut rec, &bufs, &AdamW::default(), 1).unwrap_err();
        assert!(
            matches!(&e, VkError::Kernel { kernel, message } if kernel == "optim/adamw:plain" && message.contains("exp_avg_sq")),
            "{e}"
        );
        let bufs = AdamWBuffers { exp_avg_sq: a.view(), grad_scale: Some(a.view()), ..bufs };
        let e = optim::adamw_step(&mut rec, &bufs, &AdamW::default(), 1).unwrap_err();
        assert!(matches!(&e, VkError::Kernel { kernel, .. } if kernel == "optim/adamw:scaled"), "{e}");
        let e = optim::adamw_step(&mut rec, &AdamWBuffers { grad_scale: None, ..bufs }, &AdamW::default(), 0);
        assert!(e.is_err());
        let e = optim::sum_squares(&mut rec, a.view(), a.view()).unwrap_err();
        assert!(matches!(&e, VkError::Kernel { kernel, .. } if kernel == "optim/sum_squares"), "{e}");
        rec.submit()?;
        Ok(())
    });
}

/// One step of the `*_copy_*` variant: the f32 state as `adamw_step`'s reference, and the 16-bit
/// copy exactly the updated parameter rounded to nearest even (what `dtype::cast` stores).
fn step_with_copy(ctx: &Context, rng: &mut Rng, n: usize, dt: DType, scale: Option<f32>) -> Result<()> {
    let (p0, g) = (rng.vec(n, 1.0), rng.vec(n, 0.5));
    let gpu = Gpu::new(ctx, &p0)?;
    let gb = ctx.buffer_from(&g, "g")?;
    let copy = storage::upload(ctx, dt, &vec![7.0; n], "copy")?;
    let coef = ctx.buffer_from(&[scale.unwrap_or(1.0)], "coef")?;
    let hp = AdamW { lr: 1e-2, beta1: 0.9, beta2: 0.999, eps: 1e-8, weight_decay: 0.1 };
    let bufs = AdamWBuffers {
        param: gpu.p.view(),
        grad: gb.view(),
        exp_avg: gpu.m.view(),
        exp_avg_sq: gpu.v.view(),
        grad_scale: scale.map(|_| coef.view()),
    };
    let mut rec = ctx.recorder(false)?;
    optim::adamw_step_copy(&mut rec, &bufs, Some((copy.view(), dt)), &hp, 1)?;
    rec.submit()?;
    let what = format!("adamw copy {dt:?} n {n} scale {scale:?}");
    let got_copy = storage::read(ctx, dt, &copy)?;
    if scale.is_some_and(|s| s < 0.0) {
        // Skipped step (overflow): nothing written, the old copy stays.
        assert!(got_copy.iter().all(|&c| c == 7.0), "{what}: skipped step wrote the copy");
        assert_eq!(ctx.read_vec::<f32>(gpu.p.view())?, p0, "{what}: skipped step changed p");
        return Ok(());
    }
    let mut want = AdamWState::new(f64s(&p0));
    want.step(&f64s(&g), f64::from(scale.unwrap_or(1.0)), &hp, 1);
    gpu.check(ctx, &what, &want)?;
    let p = ctx.read_vec::<f32>(gpu.p.view())?;
    let rounded = storage::round(dt, &p);
    let same = got_copy.iter().zip(&rounded).all(|(a, b)| a.to_bits() == b.to_bits());
    assert!(same, "{what}: copy is not the rounded parameter");
    Ok(())
}

#[test]
fn adamw_writes_the_16_bit_weight_copy() {
    on_every_device("adamw copy", |ctx| {
        let mut rng = Rng::new(11);
        for dt in [DType::BF16, DType::F16] {
            if storage::unsupported(ctx, dt, "adamw copy") {
                continue;
            }
            for n in [1, 7, 257, 1001, 70_001] {
                step_with_copy(ctx, &mut rng, n, dt, None)?;
                step_with_copy(ctx, &mut rng, n, dt, Some(0.37))?;
            }
            step_with_copy(ctx, &mut rng, 513, dt, Some(-1.0))?;
        }
        let a = ctx.buffer(28, "a")?;
        let bufs =
            AdamWBuffers { param: a.view(), grad: a.view(), exp_avg: a.view(), exp_avg_sq: a.view(), grad_scale: None };
        let mut rec = ctx.recorder(false)?;
        let e = optim::adamw_step_copy(&mut rec, &bufs, Some((a.view(), DType::F32)), &AdamW::default(), 1);
        assert!(e.is_err(), "an f32 copy is refused");
        let e = optim::adamw_step_copy(&mut rec, &bufs, Some((a.slice(0, 4), DType::BF16)), &AdamW::default(), 1);
        assert!(e.is_err(), "a short copy is refused");
        Ok(())
    });
}
