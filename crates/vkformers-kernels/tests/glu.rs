//! Gated activations (SwiGLU, GeGLU): reference backward against finite differences, GPU
//! forward/backward (separate and fused gate_up layouts) against the reference.

use vkformers_kernels::glu::{self, reference, Glu};
use vkformers_kernels::testutil::{assert_close, assert_grad_matches_fd, f64s, Rng, TOL_F32};
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

fn check(ctx: &Context, kind: Glu, rows: usize, inner: usize, rng: &mut Rng) -> Result<()> {
    let n = rows * inner;
    let (gs, us, ds) = (rng.vec(n, 5.0), rng.vec(n, 2.0), rng.vec(n, 1.0));
    let (g64, u64_, d64) = (f64s(&gs), f64s(&us), f64s(&ds));
    let want = reference::forward(kind, &g64, &u64_);
    let (want_dg, want_du) = reference::backward(kind, &g64, &u64_, &d64);
    let what = format!("{kind:?} rows={rows} inner={inner}");

    let gate = ctx.buffer_from(&gs, "gate")?;
    let up = ctx.buffer_from(&us, "up")?;
    let dout = ctx.buffer_from(&ds, "dout")?;
    let fused = ctx.buffer_from(&reference::join(&gs, &us, inner), "gate_up")?;
    let out = ctx.buffer((n * 4) as u64, "out")?;
    let out_f = ctx.buffer((n * 4) as u64, "out fused")?;
    let dgate = ctx.buffer((n * 4) as u64, "dgate")?;
    let dup = ctx.buffer((n * 4) as u64, "dup")?;
    let dfused = ctx.buffer((2 * n * 4) as u64, "dgate_up")?;
    let mut rec = ctx.recorder(false)?;
    glu::forward(&mut rec, kind, gate.view(), up.view(), out.view(), rows, inner)?;
    glu::forward_fused(&mut rec, kind, fused.view(), out_f.view(), rows, inner)?;
    glu::backward(&mut rec, kind, gate.view(), up.view(), dout.view(), dgate.view(), dup.view(), rows, inner)?;
    glu::backward_fused(&mut rec, kind, fused.view(), dout.view(), dfused.view(), rows, inner)?;
    rec.submit()?;

    assert_close(&format!("{what} forward"), &ctx.read_vec::<f32>(out.view())?, &want, TOL_F32);
    assert_close(&format!("{what} forward fused"), &ctx.read_vec::<f32>(out_f.view())?, &want, TOL_F32);
    assert_close(&format!("{what} dgate"), &ctx.read_vec::<f32>(dgate.view())?, &want_dg, TOL_F32);
    assert_close(&format!("{what} dup"), &ctx.read_vec::<f32>(dup.view())?, &want_du, TOL_F32);
    let want_fused = reference::join(&want_dg, &want_du, inner);
    assert_close(&format!("{what} dgate_up"), &ctx.read_vec::<f32>(dfused.view())?, &want_fused, TOL_F32);
    Ok(())
}

#[test]
fn gpu_forward_and_backward_match_reference() {
    on_every_device("glu", |ctx| {
        let mut rng = Rng::new(11);
        for kind in Glu::ALL {
            for (rows, inner) in [(1, 1), (1, 7), (5, 1), (3, 257), (17, 301), (129, 91)] {
                check(ctx, kind, rows, inner, &mut rng)?;
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
        let e = glu::forward(&mut rec, Glu::SwiGlu, a.view(), b.view(), a.view(), 2, 3).unwrap_err();
        assert!(e.to_string().contains("glu/forward:swiglu"), "{e}");
        let e = glu::forward_fused(&mut rec, Glu::GeGlu, a.view(), a.view(), 2, 3).unwrap_err();
        assert!(e.to_string().contains("glu/forward:geglu") && e.to_string().contains("gate_up"), "{e}");
        let e = glu::backward_fused(&mut rec, Glu::GeGluTanh, b.view(), a.view(), a.view(), 2, 3).unwrap_err();
        assert!(e.to_string().contains("glu/backward:geglu_tanh"), "{e}");
        rec.submit()?;
        Ok(())
    });
}
