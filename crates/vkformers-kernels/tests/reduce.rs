//! Sum/mean reductions: reference backward against finite differences; GPU rows and
//! everything reductions (multi-stage, any n) and their backward against the reference, in
//! f32, f16 and bf16 storage (16-bit inputs are rounded on the host, the reference runs on the
//! rounded values; full reductions' outputs and their gradients stay f32).

use vkformers_kernels::dtype::DType;
use vkformers_kernels::reduce::{self, reference};
use vkformers_kernels::testutil::storage::{download, on_halves, round, tol, upload};
use vkformers_kernels::testutil::{assert_close, assert_grad_matches_fd, f64s, Rng, TOL_F32};
use vkformers_vk::testing::on_every_device;
use vkformers_vk::{Context, Result};

const F32: DType = DType::F32;

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

fn check_rows(ctx: &Context, dt: DType, rows: usize, d: usize, rng: &mut Rng) -> Result<()> {
    let (xv, dyv) = (round(dt, &rng.vec(rows * d, 1.0)), round(dt, &rng.vec(rows, 1.0)));
    let (x64, dy64) = (f64s(&xv), f64s(&dyv));
    let x = upload(ctx, dt, &xv, "x")?;
    let dy = upload(ctx, dt, &dyv, "dy")?;
    let (b, bx) = (rows as u64 * dt.bytes(), (rows * d) as u64 * dt.bytes());
    let (s, m) = (ctx.buffer(b, "sum")?, ctx.buffer(b, "mean")?);
    let (dxs, dxm) = (ctx.buffer(bx, "dx sum")?, ctx.buffer(bx, "dx mean")?);
    let (s, m, dxs, dxm) = (s.slice(0, b), m.slice(0, b), dxs.slice(0, bx), dxm.slice(0, bx));
    let mut rec = ctx.recorder(false)?;
    reduce::sum_rows(&mut rec, x.view(), s, rows, d, dt)?;
    reduce::mean_rows(&mut rec, x.view(), m, rows, d, dt)?;
    reduce::sum_rows_backward(&mut rec, dy.view(), dxs, rows, d, dt)?;
    reduce::mean_rows_backward(&mut rec, dy.view(), dxm, rows, d, dt)?;
    rec.submit()?;
    let (what, tol) = (format!("{dt:?} {rows}x{d}"), tol(dt));
    assert_close(&format!("sum_rows {what}"), &download(ctx, dt, s)?, &reference::sum_rows(&x64, d), tol);
    assert_close(&format!("mean_rows {what}"), &download(ctx, dt, m)?, &reference::mean_rows(&x64, d), tol);
    let want = reference::sum_rows_backward(&dy64, d);
    assert_close(&format!("sum_rows backward {what}"), &download(ctx, dt, dxs)?, &want, tol);
    let want = reference::mean_rows_backward(&dy64, d);
    assert_close(&format!("mean_rows backward {what}"), &download(ctx, dt, dxm)?, &want, tol);
    Ok(())
}

const ROW_SHAPES: [(usize, usize); 7] = [(1, 1), (7, 1), (1, 7), (5, 257), (33, 1000), (3, 20_011), (1001, 3)];

#[test]
fn gpu_row_reductions_match_reference() {
    on_every_device("reduce rows", |ctx| {
        let mut rng = Rng::new(37);
        for (rows, d) in ROW_SHAPES {
            check_rows(ctx, F32, rows, d, &mut rng)?;
        }
        Ok(())
    });
}

#[test]
fn gpu_row_reductions_in_16_bits_match_reference() {
    on_halves("reduce rows f16/bf16", 38, |ctx, rng, dt| {
        for (rows, d) in ROW_SHAPES {
            check_rows(ctx, dt, rows, d, rng)?;
        }
        Ok(())
    });
}

/// Sum and mean of everything (x of storage `dt`, outputs f32), and their backward (dy f32,
/// dx of `dt`); returns the GPU sum so callers can compare runs.
fn check_all(ctx: &Context, dt: DType, n: usize, rng: &mut Rng) -> Result<f32> {
    let xv = round(dt, &rng.vec(n, 1.0));
    let x64 = f64s(&xv);
    let x = upload(ctx, dt, &xv, "x")?;
    let scratch = ctx.buffer(reduce::all_scratch_bytes(n as u64), "scratch")?;
    let (s, m) = (ctx.buffer(4, "sum")?, ctx.buffer(4, "mean")?);
    let dy = ctx.buffer_from(&[0.37f32], "dy")?;
    let bx = n as u64 * dt.bytes();
    let (dxs, dxm) = (ctx.buffer(bx, "dx sum")?, ctx.buffer(bx, "dx mean")?);
    let (dxs, dxm) = (dxs.slice(0, bx), dxm.slice(0, bx));
    let mut rec = ctx.recorder(false)?;
    reduce::sum_all(&mut rec, x.view(), scratch.view(), s.view(), dt)?;
    reduce::mean_all(&mut rec, x.view(), scratch.view(), m.view(), dt)?;
    reduce::sum_all_backward(&mut rec, dy.view(), dxs, dt)?;
    reduce::mean_all_backward(&mut rec, dy.view(), dxm, dt)?;
    rec.submit()?;
    // The f32 outputs see only f32 summation error.
    let sum = ctx.read_vec::<f32>(s.view())?;
    assert_close(&format!("sum_all {dt:?} n={n}"), &sum, &[reference::sum_all(&x64)], TOL_F32);
    let mean = ctx.read_vec::<f32>(m.view())?;
    assert_close(&format!("mean_all {dt:?} n={n}"), &mean, &[reference::mean_all(&x64)], TOL_F32);
    let g = f64::from(0.37f32);
    let want = reference::sum_all_backward(g, n);
    assert_close(&format!("sum_all backward {dt:?} n={n}"), &download(ctx, dt, dxs)?, &want, tol(dt));
    let want = reference::mean_all_backward(g, n);
    assert_close(&format!("mean_all backward {dt:?} n={n}"), &download(ctx, dt, dxm)?, &want, tol(dt));
    Ok(sum[0])
}

#[test]
fn gpu_full_reductions_match_reference_for_any_n() {
    on_every_device("reduce all", |ctx| {
        for n in [1, 2, 255, 4096, 4097, 70_001, 1_000_003] {
            check_all(ctx, F32, n, &mut Rng::new(41))?;
        }
        Ok(())
    });
}

#[test]
fn gpu_full_reductions_of_16_bits_match_reference() {
    // A fresh RNG per length: each n's values as drawn alone.
    on_halves("reduce all f16/bf16", 42, |ctx, _, dt| {
        for n in [1, 2, 255, 4096, 4097, 70_001, 300_007] {
            check_all(ctx, dt, n, &mut Rng::new(42))?;
        }
        Ok(())
    });
}

#[test]
fn full_reduction_is_deterministic() {
    on_every_device("reduce all deterministic", |ctx| {
        let a = check_all(ctx, F32, 300_007, &mut Rng::new(43))?;
        let b = check_all(ctx, F32, 300_007, &mut Rng::new(43))?;
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
        let e = reduce::sum_all(&mut rec, x.view(), out.view(), out.view(), F32).unwrap_err();
        assert!(e.to_string().contains("reduce/rows") && e.to_string().contains("scratch"), "{e}");
        let e = reduce::mean_rows(&mut rec, x.view(), out.view(), 2, 2500, F32).unwrap_err();
        assert!(e.to_string().contains("reduce/rows"), "{e}");
        let e = reduce::sum_rows_backward(&mut rec, out.view(), x.view(), 3, 1000, F32).unwrap_err();
        assert!(e.to_string().contains("reduce/backward"), "{e}");
        if ctx.caps().fp16 {
            // 5000 f32 are 10000 bf16: reducing them needs scratch; out [1] must be f32.
            let e = reduce::sum_all(&mut rec, x.view(), out.view(), out.view(), DType::BF16).unwrap_err();
            assert!(e.to_string().contains("reduce/rows:bf16_to_f32") && e.to_string().contains("scratch"), "{e}");
            let e = reduce::mean_all(&mut rec, x.slice(0, 200), x.view(), out.slice(0, 2), DType::F16).unwrap_err();
            assert!(e.to_string().contains("reduce/rows:f16_to_f32") && e.to_string().contains("out"), "{e}");
            // dy [1] f32 into 10000 f16.
            let e = reduce::mean_all_backward(&mut rec, x.view(), x.view(), DType::F16).unwrap_err();
            assert!(e.to_string().contains("reduce/backward:f32_to_f16") && e.to_string().contains("dy"), "{e}");
        }
        rec.submit()?;
        Ok(())
    });
}
