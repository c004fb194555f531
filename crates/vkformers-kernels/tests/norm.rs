//! Norm kernels: the f64 reference backward against finite differences, then the GPU forward
//! and backward against the reference on odd shapes, on every device with validation on, in
//! each storage type (f32, f16, bf16: inputs rounded on the host, the reference computed on the
//! rounded values; 16-bit outputs compared with that type's tolerance, f32 outputs with f32's).
//! The residual add fused with RMSNorm (inference) against the add and the plain forward.

use vkformers_kernels::dtype::{DType, Twin};
use vkformers_kernels::norm::{self, reference, LayerNorm, ParamGrads, RmsNorm};
use vkformers_kernels::testutil::storage::{read, round, supported, tol, upload};
use vkformers_kernels::testutil::{assert_close, assert_grad_matches_fd, f64s, Rng, TOL_F32};
use vkformers_vk::testing::on_every_device;
use vkformers_vk::{Buffer, Context, Result, VkError};

/// Odd shapes `(rows, dim)`: size-1 edges, dims around the workgroup size, more rows than the
/// 1024 gradient blocks, a dim of a few thousand (the RMSNorm backward's register path) and one
/// past 4096 (its memory path).
const SHAPES: &[(usize, usize)] =
    &[(1, 1), (3, 1), (1, 7), (5, 33), (17, 257), (300, 19), (1030, 24), (2, 1031), (7, 3001), (3, 4101)];

fn dot(a: &[f64], b: &[f64]) -> f64 {
    a.iter().zip(b).map(|(x, y)| x * y).sum()
}

#[test]
fn rms_reference_backward_matches_finite_differences() {
    let mut rng = Rng::new(1);
    let (rows, dim, eps) = (3, 5, 1e-6);
    let x = f64s(&rng.vec(rows * dim, 1.0));
    let w = f64s(&rng.vec(dim, 1.0));
    let g = f64s(&rng.vec(rows * dim, 1.0));
    for (weight, unit) in [(false, false), (true, false), (true, true)] {
        let wo = weight.then_some(&w[..]);
        let (dx, dw) = reference::rms_norm_backward(&x, wo, &g, dim, eps, unit);
        let fx = |xs: &[f64]| dot(&reference::rms_norm(xs, wo, dim, eps, unit).0, &g);
        assert_grad_matches_fd(&format!("rms dx (w {weight}, unit {unit})"), fx, &x, &dx);
        if weight {
            let fw = |ws: &[f64]| dot(&reference::rms_norm(&x, Some(ws), dim, eps, unit).0, &g);
            assert_grad_matches_fd(&format!("rms dw (unit {unit})"), fw, &w, &dw);
        }
    }
}

#[test]
fn layer_reference_backward_matches_finite_differences() {
    let mut rng = Rng::new(2);
    let (rows, dim, eps) = (3, 6, 1e-5);
    let x = f64s(&rng.vec(rows * dim, 1.0));
    let w = f64s(&rng.vec(dim, 1.0));
    let b = f64s(&rng.vec(dim, 1.0));
    let g = f64s(&rng.vec(rows * dim, 1.0));
    for affine in 0..3 {
        let wo = (affine >= 1).then_some(&w[..]);
        let bo = (affine >= 2).then_some(&b[..]);
        let (dx, dw, db) = reference::layer_norm_backward(&x, wo, &g, dim, eps);
        let fx = |xs: &[f64]| dot(&reference::layer_norm(xs, wo, bo, dim, eps).0, &g);
        assert_grad_matches_fd(&format!("layer dx (affine {affine})"), fx, &x, &dx);
        if affine >= 1 {
            let fw = |ws: &[f64]| dot(&reference::layer_norm(&x, Some(ws), bo, dim, eps).0, &g);
            assert_grad_matches_fd("layer dw", fw, &w, &dw);
        }
        if affine >= 2 {
            let fb = |bs: &[f64]| dot(&reference::layer_norm(&x, wo, Some(bs), dim, eps).0, &g);
            assert_grad_matches_fd("layer db", fb, &b, &db);
        }
    }
}

fn zeros(ctx: &Context, n: usize, what: &str) -> Result<Buffer> {
    ctx.buffer_from(&vec![0f32; n], what)
}

/// Runs RMSNorm forward and backward on the GPU for one shape and option set; compares all
/// outputs with the reference. With a weight, `dw` starts at `dw0` and is accumulated into.
/// `x`, `w`, `y`, `dy`, `dx` are stored in `dt`.
#[allow(clippy::too_many_arguments)]
fn check_rms(ctx: &Context, rng: &mut Rng, dt: DType, rows: usize, dim: usize, weight: bool, unit: bool) -> Result<()> {
    let eps = 1e-6f32;
    let xs = round(dt, &rng.vec(rows * dim, 2.0));
    let ws = round(dt, &rng.vec(dim, 1.0));
    let gs = round(dt, &rng.vec(rows * dim, 1.0));
    let dw0 = rng.vec(dim, 1.0);
    let p = RmsNorm { rows: rows as u32, dim: dim as u32, eps, unit_offset: unit, dtype: dt };
    let x = upload(ctx, dt, &xs, "x")?;
    let w = upload(ctx, dt, &ws, "w")?;
    let dy = upload(ctx, dt, &gs, "dy")?;
    let dw = ctx.buffer_from(&dw0, "dw")?;
    let y = upload(ctx, dt, &vec![0.0; rows * dim], "y")?;
    let dx = upload(ctx, dt, &vec![0.0; rows * dim], "dx")?;
    let rstd = zeros(ctx, rows, "rstd")?;
    let scratch = ctx.buffer(norm::weight_grad_scratch_bytes(rows as u32, dim as u32), "scratch")?;
    let wv = weight.then(|| w.view());
    let mut rec = ctx.recorder(false)?;
    norm::rms_norm_forward(&mut rec, &p, x.view(), wv, y.view(), rstd.view())?;
    let grads = weight.then(|| ParamGrads { dw: dw.view(), db: None, scratch: scratch.view(), accumulate: true });
    norm::rms_norm_backward(&mut rec, &p, x.view(), wv, rstd.view(), dy.view(), dx.view(), grads)?;
    rec.submit()?;

    let (x64, w64, g64) = (f64s(&xs), f64s(&ws), f64s(&gs));
    let wo = weight.then_some(&w64[..]);
    let (y_ref, rstd_ref) = reference::rms_norm(&x64, wo, dim, f64::from(eps), unit);
    let (dx_ref, dw_ref) = reference::rms_norm_backward(&x64, wo, &g64, dim, f64::from(eps), unit);
    let what = format!("rms {dt:?} [{rows}, {dim}] w {weight} unit {unit}");
    assert_close(&format!("{what}: y"), &read(ctx, dt, &y)?, &y_ref, tol(dt));
    assert_close(&format!("{what}: rstd"), &ctx.read_vec::<f32>(rstd.view())?, &rstd_ref, TOL_F32);
    assert_close(&format!("{what}: dx"), &read(ctx, dt, &dx)?, &dx_ref, tol(dt));
    let dw_want: Vec<f64> =
        if weight { dw_ref.iter().zip(&dw0).map(|(r, &a)| r + f64::from(a)).collect() } else { f64s(&dw0) };
    assert_close(&format!("{what}: dw"), &ctx.read_vec::<f32>(dw.view())?, &dw_want, TOL_F32);
    Ok(())
}

fn rms_norm_in(dt: DType, seed: u64) {
    on_every_device(&format!("rms_norm {dt:?}"), |ctx| {
        if !supported(ctx, dt, "rms_norm") {
            return Ok(());
        }
        let mut rng = Rng::new(seed);
        for &(rows, dim) in SHAPES {
            for (weight, unit) in [(true, false), (true, true), (false, false)] {
                check_rms(ctx, &mut rng, dt, rows, dim, weight, unit)?;
            }
        }
        Ok(())
    });
}

#[test]
fn rms_norm_gpu_matches_reference() {
    rms_norm_in(DType::F32, 3);
}

#[test]
fn rms_norm_f16_matches_reference() {
    rms_norm_in(DType::F16, 13);
}

#[test]
fn rms_norm_bf16_matches_reference() {
    rms_norm_in(DType::BF16, 23);
}

/// The residual add fused with RMSNorm: h is `x + r` rounded to the storage type, and y, rstd
/// are bit for bit those of the (tree-sum) forward run on that h.
fn check_add_rms(ctx: &Context, rng: &mut Rng, dt: DType, (rows, dim): (usize, usize), weight: bool) -> Result<()> {
    let (xs, rs, ws) = (round(dt, &rng.vec(rows * dim, 2.0)), round(dt, &rng.vec(rows * dim, 2.0)), rng.vec(dim, 1.0));
    let p = RmsNorm { rows: rows as u32, dim: dim as u32, eps: 1e-5, unit_offset: false, dtype: dt };
    let (x, r, w) = (upload(ctx, dt, &xs, "x")?, upload(ctx, dt, &rs, "r")?, upload(ctx, dt, &round(dt, &ws), "w")?);
    let out = |what| upload(ctx, dt, &vec![0.0; rows * dim], what);
    let (h, y, y_plain) = (out("h")?, out("y")?, out("y plain")?);
    let (rstd, rstd_plain) = (zeros(ctx, rows, "rstd")?, zeros(ctx, rows, "rstd plain")?);
    let wv = weight.then(|| w.view());
    let mut rec = ctx.recorder(false)?;
    norm::add_rms_norm_forward(&mut rec, &p, (x.view(), r.view()), wv, h.view(), y.view(), rstd.view())?;
    norm::rms_norm_forward(&mut rec, &p, h.view(), wv, y_plain.view(), rstd_plain.view())?;
    rec.submit()?;
    let what = format!("add+rms {dt:?} [{rows}, {dim}] w {weight}");
    let sum: Vec<f32> = xs.iter().zip(&rs).map(|(a, b)| a + b).collect();
    assert_eq!(read(ctx, dt, &h)?, round(dt, &sum), "{what}: h");
    assert_eq!(read(ctx, dt, &y)?, read(ctx, dt, &y_plain)?, "{what}: y");
    assert_eq!(ctx.read_vec::<f32>(rstd.view())?, ctx.read_vec::<f32>(rstd_plain.view())?, "{what}: rstd");
    Ok(())
}

#[test]
fn add_fused_with_rms_norm_equals_add_then_rms_norm() {
    for (dt, seed) in [(DType::F32, 5), (DType::F16, 15), (DType::BF16, 25)] {
        on_every_device(&format!("add + rms_norm {dt:?}"), |ctx| {
            if !supported(ctx, dt, "add + rms_norm") {
                return Ok(());
            }
            let mut rng = Rng::new(seed);
            for &shape in SHAPES {
                check_add_rms(ctx, &mut rng, dt, shape, true)?;
                check_add_rms(ctx, &mut rng, dt, shape, false)?;
            }
            Ok(())
        });
    }
}

/// The residual add fused with LayerNorm (inference, f32): y is bit for bit layer_forward run
/// on the f32 sum x + r, close to the f64 reference of that sum, and the twin (when asked for)
/// is y rounded to its 16-bit type.
fn check_add_layer(
    ctx: &Context,
    rng: &mut Rng,
    (rows, dim): (usize, usize),
    affine: u32,
    twin: Option<DType>,
) -> Result<()> {
    let f = DType::F32;
    let xs: Vec<f32> = rng.vec(rows * dim, 2.0).iter().map(|v| v + 3.0).collect();
    let (rs, ws, bs) = (rng.vec(rows * dim, 2.0), rng.vec(dim, 1.0), rng.vec(dim, 1.0));
    let sum: Vec<f32> = xs.iter().zip(&rs).map(|(a, b)| a + b).collect();
    let p = LayerNorm { rows: rows as u32, dim: dim as u32, eps: 1e-5, dtype: f };
    let (x, r, h) = (upload(ctx, f, &xs, "x")?, upload(ctx, f, &rs, "r")?, upload(ctx, f, &sum, "h")?);
    let (w, b) = (upload(ctx, f, &ws, "w")?, upload(ctx, f, &bs, "b")?);
    let (y, y_plain) = (zeros(ctx, rows * dim, "y")?, zeros(ctx, rows * dim, "y plain")?);
    let (mean, rstd) = (zeros(ctx, rows, "mean")?, zeros(ctx, rows, "rstd")?);
    let half = twin.map(|dt| upload(ctx, dt, &vec![0.0; rows * dim], "twin")).transpose()?;
    let (wv, bv) = ((affine >= 1).then(|| w.view()), (affine >= 2).then(|| b.view()));
    let mut rec = ctx.recorder(false)?;
    let tw = half.as_ref().zip(twin).map(|(t, dtype)| Twin { view: t.view(), dtype });
    norm::add_layer_norm_forward(&mut rec, &p, (x.view(), r.view()), (wv, bv), y.view(), tw)?;
    norm::layer_norm_forward(&mut rec, &p, h.view(), wv, bv, y_plain.view(), mean.view(), rstd.view())?;
    rec.submit()?;
    let what = format!("add+layer [{rows}, {dim}] affine {affine} twin {twin:?}");
    let got = ctx.read_vec::<f32>(y.view())?;
    assert_eq!(got, ctx.read_vec::<f32>(y_plain.view())?, "{what}: y equals add then layer_forward");
    let (w64, b64) = (f64s(&ws), f64s(&bs));
    let (wo, bo) = ((affine >= 1).then_some(&w64[..]), (affine >= 2).then_some(&b64[..]));
    assert_close(&format!("{what}: y"), &got, &reference::layer_norm(&f64s(&sum), wo, bo, dim, 1e-5).0, TOL_F32);
    if let (Some(t), Some(dt)) = (&half, twin) {
        assert_eq!(read(ctx, dt, t)?, round(dt, &got), "{what}: the twin is y rounded");
    }
    Ok(())
}

#[test]
fn add_fused_with_layer_norm_equals_add_then_layer_norm() {
    on_every_device("add + layer_norm", |ctx| {
        let mut rng = Rng::new(35);
        for twin in [None, Some(DType::BF16), Some(DType::F16)] {
            if twin.is_some_and(|dt| !supported(ctx, dt, "add + layer_norm twin")) {
                continue;
            }
            for &shape in SHAPES {
                for affine in 0..3 {
                    check_add_layer(ctx, &mut rng, shape, affine, twin)?;
                }
            }
        }
        Ok(())
    });
}

/// LayerNorm forward and backward on the GPU against the reference; `affine` 0, 1 or 2 is
/// no parameters, weight, weight and bias. Gradients overwrite (`accumulate` false).
/// `x`, `w`, `b`, `y`, `dy`, `dx` are stored in `dt`.
fn check_layer(ctx: &Context, rng: &mut Rng, dt: DType, rows: usize, dim: usize, affine: u32) -> Result<()> {
    let eps = 1e-5f32;
    // An offset mean, so the two-pass variance matters.
    let xs: Vec<f32> = round(dt, &rng.vec(rows * dim, 2.0).iter().map(|v| v + 3.0).collect::<Vec<_>>());
    let ws = round(dt, &rng.vec(dim, 1.0));
    let bs = round(dt, &rng.vec(dim, 1.0));
    let gs = round(dt, &rng.vec(rows * dim, 1.0));
    let p = LayerNorm { rows: rows as u32, dim: dim as u32, eps, dtype: dt };
    let x = upload(ctx, dt, &xs, "x")?;
    let w = upload(ctx, dt, &ws, "w")?;
    let b = upload(ctx, dt, &bs, "b")?;
    let dy = upload(ctx, dt, &gs, "dy")?;
    let filled = |what| ctx.buffer_from(&vec![7f32; dim], what);
    let (dw, db) = (filled("dw")?, filled("db")?);
    let y = upload(ctx, dt, &vec![0.0; rows * dim], "y")?;
    let dx = upload(ctx, dt, &vec![0.0; rows * dim], "dx")?;
    let mean = zeros(ctx, rows, "mean")?;
    let rstd = zeros(ctx, rows, "rstd")?;
    let scratch = ctx.buffer(norm::weight_grad_scratch_bytes(rows as u32, dim as u32), "scratch")?;
    let wv = (affine >= 1).then(|| w.view());
    let bv = (affine >= 2).then(|| b.view());
    let mut rec = ctx.recorder(false)?;
    norm::layer_norm_forward(&mut rec, &p, x.view(), wv, bv, y.view(), mean.view(), rstd.view())?;
    let grads = (affine >= 1).then(|| ParamGrads {
        dw: dw.view(),
        db: bv.map(|_| db.view()),
        scratch: scratch.view(),
        accumulate: false,
    });
    norm::layer_norm_backward(&mut rec, &p, x.view(), wv, mean.view(), rstd.view(), dy.view(), dx.view(), grads)?;
    rec.submit()?;

    let (x64, w64, b64, g64) = (f64s(&xs), f64s(&ws), f64s(&bs), f64s(&gs));
    let wo = (affine >= 1).then_some(&w64[..]);
    let bo = (affine >= 2).then_some(&b64[..]);
    let (y_ref, mean_ref, rstd_ref) = reference::layer_norm(&x64, wo, bo, dim, f64::from(eps));
    let (dx_ref, dw_ref, db_ref) = reference::layer_norm_backward(&x64, wo, &g64, dim, f64::from(eps));
    let what = format!("layer {dt:?} [{rows}, {dim}] affine {affine}");
    assert_close(&format!("{what}: y"), &read(ctx, dt, &y)?, &y_ref, tol(dt));
    assert_close(&format!("{what}: mean"), &ctx.read_vec::<f32>(mean.view())?, &mean_ref, TOL_F32);
    assert_close(&format!("{what}: rstd"), &ctx.read_vec::<f32>(rstd.view())?, &rstd_ref, TOL_F32);
    assert_close(&format!("{what}: dx"), &read(ctx, dt, &dx)?, &dx_ref, tol(dt));
    let untouched = vec![7.0; dim];
    let dw_want = if affine >= 1 { &dw_ref } else { &untouched };
    let db_want = if affine >= 2 { &db_ref } else { &untouched };
    assert_close(&format!("{what}: dw"), &ctx.read_vec::<f32>(dw.view())?, dw_want, TOL_F32);
    assert_close(&format!("{what}: db"), &ctx.read_vec::<f32>(db.view())?, db_want, TOL_F32);
    Ok(())
}

fn layer_norm_in(dt: DType, seed: u64) {
    on_every_device(&format!("layer_norm {dt:?}"), |ctx| {
        if !supported(ctx, dt, "layer_norm") {
            return Ok(());
        }
        let mut rng = Rng::new(seed);
        for &(rows, dim) in SHAPES {
            for affine in 0..3 {
                check_layer(ctx, &mut rng, dt, rows, dim, affine)?;
            }
        }
        Ok(())
    });
}

#[test]
fn layer_norm_gpu_matches_reference() {
    layer_norm_in(DType::F32, 4);
}

#[test]
fn layer_norm_f16_matches_reference() {
    layer_norm_in(DType::F16, 14);
}

#[test]
fn layer_norm_bf16_matches_reference() {
    layer_norm_in(DType::BF16, 24);
}

#[test]
fn more_rows_than_workgroups_per_dispatch() {
    // 70_001 rows of 3: the forward strides rows over a grid of 65_535 workgroups.
    on_every_device("rms_norm many rows", |ctx| check_rms(ctx, &mut Rng::new(5), DType::F32, 70_001, 3, true, false));
    on_every_device("rms_norm bf16 many rows", |ctx| {
        if !supported(ctx, DType::BF16, "rms_norm many rows") {
            return Ok(());
        }
        check_rms(ctx, &mut Rng::new(15), DType::BF16, 70_001, 3, true, false)
    });
}

#[test]
fn gradients_are_deterministic() {
    on_every_device("norm determinism", |ctx| {
        let mut rng = Rng::new(6);
        let (rows, dim) = (1000usize, 37usize);
        let p = LayerNorm { rows: rows as u32, dim: dim as u32, eps: 1e-5, dtype: DType::F32 };
        let x = ctx.buffer_from(&rng.vec(rows * dim, 1.0), "x")?;
        let w = ctx.buffer_from(&rng.vec(dim, 1.0), "w")?;
        let dy = ctx.buffer_from(&rng.vec(rows * dim, 1.0), "dy")?;
        let (mean, rstd) = (zeros(ctx, rows, "mean")?, zeros(ctx, rows, "rstd")?);
        let (y, dx) = (zeros(ctx, rows * dim, "y")?, zeros(ctx, rows * dim, "dx")?);
        let scratch = ctx.buffer(norm::weight_grad_scratch_bytes(rows as u32, dim as u32), "scratch")?;
        let mut runs = Vec::new();
        for _ in 0..3 {
            let (dw, db) = (zeros(ctx, dim, "dw")?, zeros(ctx, dim, "db")?);
            let mut rec = ctx.recorder(false)?;
            norm::layer_norm_forward(&mut rec, &p, x.view(), Some(w.view()), None, y.view(), mean.view(), rstd.view())?;
            let g = ParamGrads { dw: dw.view(), db: Some(db.view()), scratch: scratch.view(), accumulate: false };
            let (xv, wv) = (x.view(), Some(w.view()));
            norm::layer_norm_backward(&mut rec, &p, xv, wv, mean.view(), rstd.view(), dy.view(), dx.view(), Some(g))?;
            rec.submit()?;
            let dwv: Vec<u32> = ctx.read_vec(dw.view())?;
            let dbv: Vec<u32> = ctx.read_vec(db.view())?;
            runs.push((dwv, dbv));
        }
        assert!(runs.windows(2).all(|r| r[0] == r[1]), "bitwise different gradients across runs");
        Ok(())
    });
}

#[test]
fn wrong_shapes_are_errors_naming_the_kernel() {
    on_every_device("norm errors", |ctx| {
        let x = ctx.buffer(4 * 12, "x")?;
        let short = ctx.buffer(4 * 11, "short")?;
        let r = ctx.buffer(4 * 3, "r")?;
        let p = RmsNorm { rows: 3, dim: 4, eps: 1e-6, unit_offset: false, dtype: DType::F32 };
        let mut rec = ctx.recorder(false)?;
        let e = norm::rms_norm_forward(&mut rec, &p, x.view(), None, short.view(), r.view()).unwrap_err();
        assert!(matches!(&e, VkError::Kernel { kernel, .. } if kernel == "norm/rms_forward"), "{e}");
        let lp = LayerNorm { rows: 3, dim: 4, eps: 1e-5, dtype: DType::F32 };
        let e = norm::layer_norm_forward(&mut rec, &lp, x.view(), None, Some(r.view()), x.view(), r.view(), r.view())
            .unwrap_err();
        assert!(matches!(&e, VkError::Kernel { kernel, .. } if kernel == "norm/layer_forward"), "{e}");
        // 12 f32 are 24 f16: an f16 norm of [3, 4] rejects them and names its variant.
        let hp = RmsNorm { dtype: DType::F16, ..p };
        let e = norm::rms_norm_forward(&mut rec, &hp, x.view(), None, x.view(), r.view()).unwrap_err();
        assert!(matches!(&e, VkError::Kernel { kernel, .. } if kernel == "norm/rms_forward:f16"), "{e}");
        rec.submit()?;
        Ok(())
    });
}
