//! Sum/mean reductions: reference backward against finite differences; GPU rows and
//! everything reductions (multi-stage, any n) and their backward against the reference.

use vkformers_kernels::reduce::{self, reference};
use vkformers_kernels::testutil::{assert_close, assert_grad_matches_fd, f64s, Rng, TOL_F32};
use vkformers_vk::testing::on_every_device;
use vkformers_vk::{Context, Result};

#[test]
fn reference_backward_matches_finite_differences() {
    let mut rng = Rng::new(31);
    for (rows, d) in [(1, 1), (3, 7), (4, 13)] {
        let x = f64s(&rng.vec(rows * d, 2.0));
        let w = f64s(&rng.vec(rows, 1.0));
        let dot = |y: Vec<f64>| y.iter().zip(&w).map(|(a, b)| a * b).sum::<f64>();
        let what = format!("{rows}x{d}");
        assert_grad_matches_fd(
            &format!("sum_rows {what}"),
            |x| dot(reference::sum_rows(x, d)),
            &x,
            &reference::sum_rows_backward(&w, d),
        );
        assert_grad_matches_fd(
            &format!("mean_rows {what}"),
            |x| dot(reference::mean_rows(x, d)),
            &x,
            &reference::mean_rows_backward(&w, d),
        );
        let g = 0.7;
        let n = x.len();
        assert_grad_matches_fd(
            &format!("sum_all {what}"),
            |x| g * reference::sum_all(x),
            &x,
            &reference::sum_all_backward(g, n),
        );
        assert_grad_matches_fd(
            &format!("mean_all {what}"),
            |x| g * reference::mean_all(x),
            &x,
            &reference::mean_all_backward(g, n),
        );
    }
}

fn check_rows(ctx: &Context, rows: usize, d: usize, rng: &mut Rng) -> Result<()> {
    let (xv, dyv) = (rng.vec(rows * d, 1.0), rng.vec(rows, 1.0));
    let (x64, dy64) = (f64s(&xv), f64s(&dyv));
    let x = ctx.buffer_from(&xv, "x")?;
    let dy = ctx.buffer_from(&dyv, "dy")?;
    let (s, m) = (ctx.buffer((rows * 4) as u64, "sum")?, ctx.buffer((rows * 4) as u64, "mean")?);
    let (dxs, dxm) = (ctx.buffer((rows * d * 4) as u64, "dx sum")?, ctx.buffer((rows * d * 4) as u64, "dx mean")?);
    let mut rec = ctx.recorder(false)?;
    reduce::sum_rows(&mut rec, x.view(), s.view(), rows, d)?;
    reduce::mean_rows(&mut rec, x.view(), m.view(), rows, d)?;
    reduce::sum_rows_backward(&mut rec, dy.view(), dxs.view(), rows, d)?;
    reduce::mean_rows_backward(&mut rec, dy.view(), dxm.view(), rows, d)?;
    rec.submit()?;
    let what = format!("{rows}x{d}");
    assert_close(&format!("sum_rows {what}"), &ctx.read_vec::<f32>(s.view())?, &reference::sum_rows(&x64, d), TOL_F32);
    assert_close(
        &format!("mean_rows {what}"),
        &ctx.read_vec::<f32>(m.view())?,
        &reference::mean_rows(&x64, d),
        TOL_F32,
    );
    let want = reference::sum_rows_backward(&dy64, d);
    assert_close(&format!("sum_rows backward {what}"), &ctx.read_vec::<f32>(dxs.view())?, &want, TOL_F32);
    let want = reference::mean_rows_backward(&dy64, d);
    assert_close(&format!("mean_rows backward {what}"), &ctx.read_vec::<f32>(dxm.view())?, &want, TOL_F32);
    Ok(())
}

#[test]
fn gpu_row_reductions_match_reference() {
    on_every_device("reduce rows", |ctx| {
        let mut rng = Rng::new(37);
        for (rows, d) in [(1, 1), (7, 1), (1, 7), (5, 257), (33, 1000), (3, 20_011), (1001, 3)] {
            check_rows(ctx, rows, d, &mut rng)?;
        }
        Ok(())
    });
}

/// Sum and mean of everything; returns the GPU sum so callers can compare runs.
fn check_all(ctx: &Context, n: usize, rng: &mut Rng) -> Result<f32> {
    let xv = rng.vec(n, 1.0);
    let x64 = f64s(&xv);
    let x = ctx.buffer_from(&xv, "x")?;
    let scratch = ctx.buffer(reduce::all_scratch_bytes(n as u64), "scratch")?;
    let (s, m) = (ctx.buffer(4, "sum")?, ctx.buffer(4, "mean")?);
    let dy = ctx.buffer_from(&[0.37f32], "dy")?;
    let (dxs, dxm) = (ctx.buffer((n * 4) as u64, "dx sum")?, ctx.buffer((n * 4) as u64, "dx mean")?);
    let mut rec = ctx.recorder(false)?;
    reduce::sum_all(&mut rec, x.view(), scratch.view(), s.view())?;
    reduce::mean_all(&mut rec, x.view(), scratch.view(), m.view())?;
    reduce::sum_all_backward(&mut rec, dy.view(), dxs.view())?;
    reduce::mean_all_backward(&mut rec, dy.view(), dxm.view())?;
    rec.submit()?;
    let sum = ctx.read_vec::<f32>(s.view())?;
    assert_close(&format!("sum_all n={n}"), &sum, &[reference::sum_all(&x64)], TOL_F32);
    assert_close(&format!("mean_all n={n}"), &ctx.read_vec::<f32>(m.view())?, &[reference::mean_all(&x64)], TOL_F32);
    let g = f64::from(0.37f32);
    let want = reference::sum_all_backward(g, n);
    assert_close(&format!("sum_all backward n={n}"), &ctx.read_vec::<f32>(dxs.view())?, &want, TOL_F32);
    let want = reference::mean_all_backward(g, n);
    assert_close(&format!("mean_all backward n={n}"), &ctx.read_vec::<f32>(dxm.view())?, &want, TOL_F32);
    Ok(sum[0])
}

#[test]
fn gpu_full_reductions_match_reference_for_any_n() {
    on_every_device("reduce all", |ctx| {
        for n in [1, 2, 255, 4096, 4097, 70_001, 1_000_003] {
            check_all(ctx, n, &mut Rng::new(41))?;
        }
        Ok(())
    });
}

#[test]
fn full_reduction_is_deterministic() {
    on_every_device("reduce all deterministic", |ctx| {
        let a = check_all(ctx, 300_007, &mut Rng::new(43))?;
        let b = check_all(ctx, 300_007, &mut Rng::new(43))?;
        assert_eq!(a.to_bits(), b.to_bits());
        Ok(())
    });
}

#[test]
fn stages_and_errors() {
    assert_eq!(reduce::all_scratch_bytes(4096), 0);
    assert_eq!(reduce::all_scratch_bytes(4097), 2 * 4);
    assert_eq!(reduce::all_scratch_bytes(1_000_003), 245 * 4);
    assert_eq!(reduce::all_scratch_bytes(4096 * 4096 + 1), (4097 + 2) * 4);
    on_every_device("reduce errors", |ctx| {
        let x = ctx.buffer(5000 * 4, "x")?;
        let out = ctx.buffer(4, "out")?;
        let mut rec = ctx.recorder(false)?;
        let e = reduce::sum_all(&mut rec, x.view(), out.view(), out.view()).unwrap_err();
        assert!(e.to_string().contains("reduce/rows") && e.to_string().contains("scratch"), "{e}");
        let e = reduce::mean_rows(&mut rec, x.view(), out.view(), 2, 2500).unwrap_err();
        assert!(e.to_string().contains("reduce/rows"), "{e}");
        let e = reduce::sum_rows_backward(&mut rec, out.view(), x.view(), 3, 1000).unwrap_err();
        assert!(e.to_string().contains("reduce/backward"), "{e}");
        rec.submit()?;
        Ok(())
    });
}
