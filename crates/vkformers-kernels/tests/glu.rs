//! Gated activations (SwiGLU, GeGLU): reference backward against finite differences, GPU
//! forward/backward (separate and fused gate_up layouts) against the reference, in f32, f16 and
//! bf16 storage (16-bit inputs are rounded on the host, the reference runs on the rounded values).

use vkformers_kernels::dtype::DType;
use vkformers_kernels::glu::{self, reference, Glu};
use vkformers_kernels::testutil::storage::{download, on_halves, round, tol, upload};
use vkformers_kernels::testutil::{assert_close, assert_grad_matches_fd, f64s, Rng};
use vkformers_vk::testing::on_every_device;
use vkformers_vk::{Context, Result};

#[test]
fn reference_backward_matches_finite_differences() {
    let mut rng = Rng::new(3);
    for kind in Glu::ALL {
        let n = 23;
        let gate = f64s(&rng.vec(n, 4.0));
        let up = f64s(&rng.vec(n, 2.0));
        let w = f64s(&rng.vec(n, 1.0));
        let (dgate, dup) = reference::backward(kind, &gate, &up, &w);
        let dot = |y: Vec<f64>| y.iter().zip(&w).map(|(a, b)| a * b).sum::<f64>();
        assert_grad_matches_fd(&format!("{kind:?} dgate"), |g| dot(reference::forward(kind, g, &up)), &gate, &dgate);
        assert_grad_matches_fd(&format!("{kind:?} dup"), |u| dot(reference::forward(kind, &gate, u)), &up, &dup);
    }
}

#[test]
fn split_and_join_are_inverse() {
    let fused: Vec<u32> = (0..12).collect();
    let (g, u) = reference::split(&fused, 3);
    assert_eq!(g, [0, 1, 2, 6, 7, 8]);
    assert_eq!(u, [3, 4, 5, 9, 10, 11]);
    assert_eq!(reference::join(&g, &u, 3), fused);
}

fn check(ctx: &Context, kind: Glu, dt: DType, rows: usize, inner: usize, rng: &mut Rng) -> Result<()> {
    let n = rows * inner;
    let (gs, us, ds) = (round(dt, &rng.vec(n, 5.0)), round(dt, &rng.vec(n, 2.0)), round(dt, &rng.vec(n, 1.0)));
    let (g64, u64_, d64) = (f64s(&gs), f64s(&us), f64s(&ds));
    let want = reference::forward(kind, &g64, &u64_);
    let (want_dg, want_du) = reference::backward(kind, &g64, &u64_, &d64);
    let what = format!("{kind:?} {dt:?} rows={rows} inner={inner}");

    let gate = upload(ctx, dt, &gs, "gate")?;
    let up = upload(ctx, dt, &us, "up")?;
    let dout = upload(ctx, dt, &ds, "dout")?;
    let fused = upload(ctx, dt, &reference::join(&gs, &us, inner), "gate_up")?;
    let (b, b2) = (n as u64 * dt.bytes(), 2 * n as u64 * dt.bytes());
    let out = ctx.buffer(b, "out")?;
    let out_f = ctx.buffer(b, "out fused")?;
    let dgate = ctx.buffer(b, "dgate")?;
    let dup = ctx.buffer(b, "dup")?;
    let dfused = ctx.buffer(b2, "dgate_up")?;
    let (out, out_f, dgate, dup, dfused) =
        (out.slice(0, b), out_f.slice(0, b), dgate.slice(0, b), dup.slice(0, b), dfused.slice(0, b2));
    let mut rec = ctx.recorder(false)?;
    glu::forward(&mut rec, kind, gate.view(), up.view(), out, rows, inner, dt)?;
    glu::forward_fused(&mut rec, kind, fused.view(), out_f, rows, inner, dt)?;
    glu::backward(&mut rec, kind, gate.view(), up.view(), dout.view(), dgate, dup, rows, inner, dt)?;
    glu::backward_fused(&mut rec, kind, fused.view(), dout.view(), dfused, rows, inner, dt)?;
    rec.submit()?;

    let tol = tol(dt);
    assert_close(&format!("{what} forward"), &download(ctx, dt, out)?, &want, tol);
    assert_close(&format!("{what} forward fused"), &download(ctx, dt, out_f)?, &want, tol);
    assert_close(&format!("{what} dgate"), &download(ctx, dt, dgate)?, &want_dg, tol);
    assert_close(&format!("{what} dup"), &download(ctx, dt, dup)?, &want_du, tol);
    let want_fused = reference::join(&want_dg, &want_du, inner);
    assert_close(&format!("{what} dgate_up"), &download(ctx, dt, dfused)?, &want_fused, tol);
    Ok(())
}

const SHAPES: [(usize, usize); 6] = [(1, 1), (1, 7), (5, 1), (3, 257), (17, 301), (129, 91)];

#[test]
fn gpu_forward_and_backward_match_reference() {
    on_every_device("glu", |ctx| {
        let mut rng = Rng::new(11);
        for kind in Glu::ALL {
            for (rows, inner) in SHAPES {
                check(ctx, kind, DType::F32, rows, inner, &mut rng)?;
            }
        }
        Ok(())
    });
}

#[test]
fn gpu_forward_and_backward_in_16_bits_match_reference() {
    on_halves("glu f16/bf16", 12, |ctx, rng, dt| {
        for kind in Glu::ALL {
            for (rows, inner) in SHAPES {
                check(ctx, kind, dt, rows, inner, rng)?;
            }
        }
        Ok(())
    });
}

#[test]
fn wrong_shapes_are_errors_naming_the_kernel() {
    on_every_device("glu errors", |ctx| {
        let a = ctx.buffer(6 * 4, "a")?;
        let b = ctx.buffer(12 * 4, "b")?;
        let mut rec = ctx.recorder(false)?;
        let e = glu::forward(&mut rec, Glu::SwiGlu, a.view(), b.view(), a.view(), 2, 3, DType::F32).unwrap_err();
        assert!(e.to_string().contains("glu/forward:swiglu"), "{e}");
        let e = glu::forward_fused(&mut rec, Glu::GeGlu, a.view(), a.view(), 2, 3, DType::F32).unwrap_err();
        assert!(e.to_string().contains("glu/forward:geglu") && e.to_string().contains("gate_up"), "{e}");
        let e =
            glu::backward_fused(&mut rec, Glu::GeGluTanh, b.view(), a.view(), a.view(), 2, 3, DType::F32).unwrap_err();
        assert!(e.to_string().contains("glu/backward:geglu_tanh"), "{e}");
        if ctx.caps().fp16 {
            // 12 f16 hold a fused [2, 2 * 3] gate_up but `a` is no [2, 3] output (12 f16, not 6).
            let e = glu::forward_fused(&mut rec, Glu::SwiGlu, a.view(), a.view(), 2, 3, DType::BF16).unwrap_err();
            assert!(e.to_string().contains("glu/forward:swiglu_bf16") && e.to_string().contains("out"), "{e}");
        }
        rec.submit()?;
        Ok(())
    });
}
