//! Tensors with a dtype and mixed precision (autocast): casts differentiate, f32-only ops refuse
//! 16-bit inputs by name, products and attention under autocast equal the f32 ops on operands
//! rounded to the 16-bit type (the products of two bf16/f16 values are exact in f32, so only
//! f32 accumulation separates them), and 16-bit copies are kept and dropped as documented.

use vkformers_kernels::matmul::reference;
use vkformers_kernels::testutil::storage::round;
use vkformers_kernels::testutil::{assert_close, f64s, Rng, TOL_BF16, TOL_F16, TOL_F32};
use vkformers_tensor::ops::attention::{attention, AttnOptions};
use vkformers_tensor::ops::cast::cast;
use vkformers_tensor::ops::matmul::linear;
use vkformers_tensor::ops::{broadcast, reduce, shape};
use vkformers_tensor::{DType, Graph, Result, Tensor};
use vkformers_vk::testing::on_every_device;

/// `loss = sum(out * w)`, so dL/dout = w.
fn dot_loss(g: &Graph<'_>, out: &Tensor, w: &Tensor) -> Result<Tensor> {
    reduce::sum(g, &broadcast::mul(g, out, &shape::reshape(g, w, out.shape())?)?)
}

fn transpose(x: &[f64], r: usize, c: usize) -> Vec<f64> {
    (0..c * r).map(|i| x[(i % r) * c + i / r]).collect()
}

#[test]
fn cast_round_trips_and_its_gradient_is_cast_back() {
    on_every_device("cast", |ctx| {
        let g = Graph::new(ctx);
        let mut rng = Rng::new(3);
        let x = rng.vec(37, 3.0);
        let w = rng.vec(37, 2.0);
        for dt in [DType::BF16, DType::F16] {
            let xp = g.parameter(&x, &[37])?;
            let y = cast(&g, &xp, dt)?;
            assert_eq!(y.dtype(), dt);
            let z = cast(&g, &y, DType::F32)?;
            assert_eq!(g.read(&z)?, round(dt, &x), "{dt:?}: values rounded to the type");
            g.backward(&dot_loss(&g, &z, &g.constant(&w, &[37])?)?)?;
            assert_eq!(g.read(&xp.grad().expect("grad"))?, round(dt, &w), "{dt:?}: gradient cast back");
        }
        Ok(())
    });
}

#[test]
fn f32_ops_refuse_16_bit_inputs_naming_shape_and_dtype() {
    on_every_device("dtype errors", |ctx| {
        let g = Graph::new(ctx);
        let x = cast(&g, &g.constant(&[1.0; 6], &[2, 3])?, DType::BF16)?;
        let e = broadcast::add(&g, &x, &x).expect_err("bf16 into an f32 op must fail").to_string();
        assert!(e.contains("BF16") && e.contains("[2, 3]") && e.contains("cast"), "{e}");
        let w16 = cast(&g, &g.constant(&[1.0; 6], &[2, 3])?, DType::F16)?;
        let e = linear(&g, &x, &w16, None).expect_err("bf16 x f16 must fail").to_string();
        assert!(e.contains("different 16-bit types"), "{e}");
        Ok(())
    });
}

/// `linear` under autocast vs the f64 reference on rounded operands, with its gradients: on 21
/// rows (the GEMM) and on 5 (rows the f32 GEMV takes without a tape; with one, as in training,
/// the forward multiplies the rounded operands its backward multiplies, as torch.autocast does).
#[test]
fn linear_under_autocast_equals_the_product_of_rounded_operands() {
    on_every_device("autocast linear", |ctx| {
        for rows in [21, 5] {
            linear_under_autocast_on(ctx, rows)?;
        }
        Ok(())
    });
}

fn linear_under_autocast_on(ctx: &vkformers_vk::Context, rows: usize) -> Result<()> {
    let (k, n) = (37, 19);
    let mut rng = Rng::new(11);
    let (x, w, b, up) = (rng.vec(rows * k, 1.0), rng.vec(n * k, 1.0), rng.vec(n, 1.0), rng.vec(rows * n, 1.0));
    for dt in [DType::BF16, DType::F16] {
        let g = Graph::new(ctx);
        g.set_autocast(Some(dt));
        let (xp, wp, bp) = (g.parameter(&x, &[rows, k])?, g.parameter(&w, &[n, k])?, g.parameter(&b, &[n])?);
        let y = linear(&g, &xp, &wp, Some(&bp))?;
        assert_eq!(y.dtype(), DType::F32, "products give f32");
        g.backward(&dot_loss(&g, &y, &g.constant(&up, &[rows, n])?)?)?;
        let (xr, wr, upr) = (f64s(&round(dt, &x)), f64s(&round(dt, &w)), f64s(&round(dt, &up)));
        let mut want = reference::matmul(&xr, &transpose(&wr, n, k), rows, k, n);
        for (i, v) in want.iter_mut().enumerate() {
            *v += f64::from(b[i % n]);
        }
        // Only f32 accumulation separates these from the reference: the f32 tolerance.
        assert_close(&format!("{dt:?} {rows} rows y"), &g.read(&y)?, &want, TOL_F32);
        let dx = reference::matmul(&upr, &wr, rows, n, k);
        assert_close(&format!("{dt:?} {rows} rows dx"), &g.read(&xp.grad().expect("dx"))?, &dx, TOL_F32);
        let dw = reference::matmul(&transpose(&upr, rows, n), &xr, n, rows, k);
        assert_close(&format!("{dt:?} {rows} rows dW"), &g.read(&wp.grad().expect("dW"))?, &dw, TOL_F32);
        let db: Vec<f64> = (0..n).map(|j| (0..rows).map(|r| f64::from(up[r * n + j])).sum()).collect();
        assert_close(&format!("{dt:?} {rows} rows db"), &g.read(&bp.grad().expect("db"))?, &db, TOL_F32);
        // And far from the unrounded product (the test sees the rounding).
        let exact = reference::matmul(&f64s(&x), &transpose(&f64s(&w), n, k), rows, k, n);
        let got = g.read(&y)?;
        let moved = got.iter().zip(&exact).any(|(g, e)| (f64::from(*g) - e).abs() > 1e-4);
        assert!(moved, "{dt:?} on {rows} rows: autocast left the product unrounded");
    }
    Ok(())
}

/// Attention under autocast equals f32 attention on rounded q, k, v (and a rounded upstream
/// gradient) within the 16-bit tolerance: the kernels store o, dq, dk, dv in the 16-bit type.
#[test]
fn attention_under_autocast_tracks_f32_attention_on_rounded_inputs() {
    on_every_device("autocast attention", |ctx| {
        let (b, t, hq, hkv, d) = (2, 7, 4, 2, 16);
        let mut rng = Rng::new(5);
        let (q, k, v) = (rng.vec(b * t * hq * d, 1.0), rng.vec(b * t * hkv * d, 1.0), rng.vec(b * t * hkv * d, 1.0));
        let up = rng.vec(b * t * hq * d, 1.0);
        let run = |g: &Graph<'_>, q: &[f32], k: &[f32], v: &[f32], up: &[f32]| -> Result<[Vec<f32>; 4]> {
            let qp = g.parameter(q, &[b, t, hq, d])?;
            let kp = g.parameter(k, &[b, t, hkv, d])?;
            let vp = g.parameter(v, &[b, t, hkv, d])?;
            let o = attention(g, &qp, &kp, &vp, &AttnOptions::default())?;
            g.backward(&dot_loss(g, &o, &g.constant(up, &[b * t * hq * d])?)?)?;
            let grad = |p: &Tensor| g.read(&p.grad().expect("grad"));
            Ok([g.read(&o)?, grad(&qp)?, grad(&kp)?, grad(&vp)?])
        };
        for (dt, tol) in [(DType::BF16, TOL_BF16), (DType::F16, TOL_F16)] {
            let mixed = Graph::new(ctx);
            mixed.set_autocast(Some(dt));
            let got = run(&mixed, &q, &k, &v, &up)?;
            let plain = Graph::new(ctx);
            let want = run(&plain, &round(dt, &q), &round(dt, &k), &round(dt, &v), &round(dt, &up))?;
            for (name, (gv, wv)) in ["o", "dq", "dk", "dv"].iter().zip(got.iter().zip(&want)) {
                assert_close(&format!("{dt:?} {name}"), gv, &f64s(wv), tol);
            }
        }
        Ok(())
    });
}

#[test]
fn weight_copies_live_until_cleared_and_activation_copies_die_with_the_tape() {
    on_every_device("autocast cache", |ctx| {
        let g = Graph::new(ctx);
        g.set_autocast(Some(DType::BF16));
        let w = g.parameter(&[0.5; 12], &[3, 4])?;
        let x = broadcast::scale(&g, &g.parameter(&[1.0; 8], &[2, 4])?, 2.0)?; // an activation
        let y1 = linear(&g, &x, &w, None)?;
        let y2 = linear(&g, &x, &w, None)?;
        assert_eq!(g.kept_casts(), 2, "one copy of W and one of x for both products");
        g.backward(&reduce::sum(&g, &broadcast::add(&g, &y1, &y2)?)?)?;
        assert_eq!(g.kept_casts(), 1, "after backward only the weight's copy stays");
        g.clear_casts();
        assert_eq!(g.kept_casts(), 0);
        g.no_grad(|| -> Result<()> {
            // 20 rows: a GEMM (up to 16 rows without a tape take the GEMV kernel, no cast).
            let x = broadcast::scale(&g, &g.constant(&[1.0; 80], &[20, 4])?, 2.0)?;
            linear(&g, &x, &w, None)?;
            Ok(())
        })?;
        assert_eq!(g.kept_casts(), 1, "without a tape, activations are cast each time and not kept");
        Ok(())
    });
}

/// Under autocast the AdamW step rewrites each weight's kept 16-bit copy from the new f32
/// value (no re-cast next step): the copy the next product reads is the updated weight rounded
/// to the type, for bf16 and f16, and a weight without a copy (a bias) keeps none.
#[test]
fn adamw_step_rewrites_the_kept_weight_copies() {
    use vkformers_kernels::optim::AdamW as Hp;
    use vkformers_tensor::ops::cast::autocast_copy;
    use vkformers_tensor::optim::{AdamW, Param};
    on_every_device("adamw copies", |ctx| {
        let mut rng = Rng::new(17);
        for dt in [DType::BF16, DType::F16] {
            let g = Graph::new(ctx);
            g.set_autocast(Some(dt));
            let w = g.parameter(&rng.vec(7 * 5, 1.0), &[7, 5])?;
            let b = g.parameter(&rng.vec(7, 1.0), &[7])?;
            let x = g.constant(&rng.vec(19 * 5, 1.0), &[19, 5])?;
            let params = [Param { tensor: w.clone(), decay: true }, Param { tensor: b.clone(), decay: false }];
            let mut opt = AdamW::new(Hp { lr: 0.05, ..Hp::default() }, 1.0);
            for step in 0..2 {
                let y = linear(&g, &x, &w, Some(&b))?;
                g.backward(&dot_loss(&g, &y, &g.constant(&rng.vec(19 * 7, 1.0), &[19, 7])?)?)?;
                let before = g.read(&w)?;
                opt.step(&g, &params)?;
                // W's and the constant x's (both sources); the bias is read in f32 and has none.
                assert_eq!(g.kept_casts(), 2, "{dt:?} step {step}: copies kept across the step");
                let after = g.read(&w)?;
                assert_ne!(before, after, "{dt:?}: the step moved W");
                let copy = autocast_copy(&g, &w, dt)?;
                assert_eq!(g.read(&copy)?, round(dt, &after), "{dt:?} step {step}: copy = rounded new W");
            }
        }
        Ok(())
    });
}

/// The tape keeps what each op's backward saved, not every op input: under autocast an f32
/// activation read only by a product is released after the forward (the product saved its
/// 16-bit copy), while in f32 the product saves the activation itself. Gradients still flow.
#[test]
fn tape_does_not_keep_an_autocast_products_f32_input() {
    on_every_device("tape inputs", |ctx| {
        for dt in [None, Some(DType::BF16)] {
            let g = Graph::new(ctx);
            g.set_autocast(dt);
            let w = g.parameter(&[0.25; 12], &[3, 4])?;
            let p = g.parameter(&[1.0; 80], &[20, 4])?;
            let x = broadcast::scale(&g, &p, 2.0)?; // an activation only the product reads
            let weak = x.downgrade();
            let y = linear(&g, &x, &w, None)?;
            drop(x);
            assert_eq!(weak.is_alive(), dt.is_none(), "{dt:?}: f32 input kept by the tape");
            g.backward(&reduce::sum(&g, &y)?)?;
            // dL/dp = 2 · colsum(W) = 2 · 3 · 0.25 per element.
            assert_eq!(g.read(&p.grad().expect("grad"))?, vec![1.5; 80], "{dt:?}");
        }
        Ok(())
    });
}

/// Under autocast attention's f32 output is its 16-bit result widened, so that 16-bit result is
/// kept as the output's copy: the product after attention (o_proj) reads it instead of casting
/// the output back (q, k, v copies + o's = 4 kept), and the product equals one on rounded o.
#[test]
fn attention_output_keeps_its_16_bit_result_for_the_next_product() {
    on_every_device("autocast attention copy", |ctx| {
        let (b, t, h, d) = (1, 20, 2, 16); // 20 rows: a GEMM, not the few-row f32 GEMV
        let mut rng = Rng::new(8);
        let (q, k, v, w) = (
            rng.vec(b * t * h * d, 1.0),
            rng.vec(b * t * h * d, 1.0),
            rng.vec(b * t * h * d, 1.0),
            rng.vec(3 * h * d, 1.0),
        );
        let g = Graph::new(ctx);
        g.set_autocast(Some(DType::BF16));
        let [qp, kp, vp] = [&q, &k, &v].map(|x| g.parameter(x, &[b, t, h, d]));
        let o = attention(&g, &qp?, &kp?, &vp?, &AttnOptions::default())?;
        assert_eq!(o.dtype(), DType::F32);
        assert_eq!(g.kept_casts(), 4, "q, k, v copies and o's 16-bit result");
        let wp = g.parameter(&w, &[3, h * d])?;
        let (profile, y) = g.profiled(|| linear(&g, &shape::reshape(&g, &o, &[b * t, h * d])?, &wp, None))?;
        assert_eq!(
            profile.calls_of("cast/"),
            1,
            "only the weight is cast for the product: {:?}",
            profile.kernels.keys()
        );
        let o_rounded = round(DType::BF16, &g.read(&o)?);
        let want =
            reference::matmul(&f64s(&o_rounded), &transpose(&f64s(&round(DType::BF16, &w)), 3, h * d), b * t, h * d, 3);
        assert_close("o_proj on o's copy", &g.read(&y)?, &want, TOL_F32);
        Ok(())
    });
}
