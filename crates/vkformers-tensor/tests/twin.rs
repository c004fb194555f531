//! 16-bit twins under autocast: in training, RMSNorm, RoPE and the GLU write the 16-bit copy of
//! their f32 output themselves, so the products reading those activations run no cast, and
//! read exactly the copy a cast would have made (the product equals one of the rounded f32
//! output). In plain `no_grad` nothing is kept, so no twin is written; `Graph::inference` keeps
//! activations' copies (one cast for several products) and the fused add + LayerNorm's.

mod common;

use vkformers_kernels::glu::Glu;
use vkformers_kernels::matmul::reference;
use vkformers_kernels::testutil::storage::round;
use vkformers_kernels::testutil::{assert_close, f64s, Rng, TOL_F32};
use vkformers_tensor::ops::attention::{attention, attention_for_product, AttnOptions};
use vkformers_tensor::ops::cast::autocast_copy;
use vkformers_tensor::ops::matmul::linear;
use vkformers_tensor::ops::rope::{rope, RopeLayout};
use vkformers_tensor::ops::{broadcast, glu, norm, reduce, shape};
use vkformers_tensor::{DType, Graph, Result, Tensor};
use vkformers_vk::testing::on_every_device;

use common::casts_of;

/// `a [m, k] · w [n, k]ᵀ` of the host values `a` and `w` rounded to `dt`, in f64.
fn product_of_rounded(dt: DType, a: &[f32], w: &[f32], (m, k, n): (usize, usize, usize)) -> Vec<f64> {
    let (ar, wr) = (f64s(&round(dt, a)), f64s(&round(dt, w)));
    let wt: Vec<f64> = (0..k * n).map(|i| wr[(i % n) * k + i / n]).collect();
    reference::matmul(&ar, &wt, m, k, n)
}

/// `y = act · wᵀ` for each activation, checked against the product of the rounded f32
/// activation; returns the products.
fn check_products(g: &Graph<'_>, dt: DType, acts: &[(&str, &Tensor)], w: &Tensor, wv: &[f32]) -> Result<Vec<Tensor>> {
    let mut ys = Vec::new();
    for (what, a) in acts {
        let (m, k) = (a.rows(), a.last_dim());
        let y = linear(g, &shape::reshape(g, a, &[m, k])?, w, None)?;
        let want = product_of_rounded(dt, &g.read(a)?, wv, (m, k, w.rows()));
        assert_close(&format!("{dt:?} {what}: product of the twin"), &g.read(&y)?, &want, TOL_F32);
        ys.push(y);
    }
    Ok(ys)
}

#[test]
fn products_read_the_twins_of_norm_rope_and_glu_outputs_without_a_cast() {
    on_every_device("twin autocast", |ctx| {
        let (t, h, d) = (19, 3, 6); // 19 rows: a GEMM, not the few-row f32 GEMV
        let mut rng = Rng::new(21);
        let (x, nw, wv) = (rng.vec(t * h * d, 2.0), rng.vec(h * d, 1.0), rng.vec(5 * d, 1.0));
        let (gate, up) = (rng.vec(t * d, 2.0), rng.vec(t * d, 2.0));
        let pos: Vec<i32> = (0..t as i32).map(|p| p * 7).collect();
        let inv: Vec<f32> = (0..d / 2).map(|i| 10_000f32.powf(-2.0 * i as f32 / d as f32)).collect();
        for dt in [DType::BF16, DType::F16] {
            let g = Graph::new(ctx);
            g.set_autocast(Some(dt));
            let xp = g.parameter(&x, &[t, h * d])?;
            let (np, w) = (g.parameter(&nw, &[h * d])?, g.parameter(&wv, &[5, d])?);
            let (gp, upp) = (g.parameter(&gate, &[t, d])?, g.parameter(&up, &[t, d])?);
            let (pos, inv) = (g.ints(&pos, &[1, t])?, g.constant(&inv, &[d / 2])?);
            let w_wide = g.parameter(&rng.vec(2 * h * d, 1.0), &[2, h * d])?;
            for weight in [&w_wide, &w] {
                autocast_copy(&g, weight, dt)?; // cast once, outside the counts
            }
            let (casts, ys) = casts_of(&g, || {
                let hn = norm::rms_norm(&g, &xp, Some(&np), 1e-5, false)?;
                let q = rope(&g, &shape::reshape(&g, &xp, &[1, t, h, d])?, &pos, &inv, RopeLayout::HalfSplit, d, 1.0)?;
                let a = glu::glu(&g, &gp, &upp, Glu::SwiGlu)?;
                let mut ys = vec![linear(&g, &hn, &w_wide, None)?];
                ys.extend(check_products(&g, dt, &[("rope", &q), ("swiglu", &a)], &w, &wv)?);
                let want = product_of_rounded(dt, &g.read(&hn)?, &g.read(&w_wide)?, (t, h * d, 2));
                assert_close(&format!("{dt:?} rms_norm: product of the twin"), &g.read(&ys[0])?, &want, TOL_F32);
                Ok(ys)
            })?;
            assert_eq!(casts, 0, "{dt:?}: the products read the twins");
            // Gradients flow through the twins' ops as before.
            let mut loss = reduce::sum(&g, &ys[0])?;
            for y in &ys[1..] {
                loss = broadcast::add(&g, &loss, &reduce::sum(&g, y)?)?;
            }
            g.backward(&loss)?;
            for p in [&xp, &np, &gp, &upp] {
                assert!(p.grad().is_some(), "{dt:?}: a gradient reaches every input");
            }
            assert_eq!(g.kept_casts(), 2, "{dt:?}: only the weights' copies outlive backward");
        }
        Ok(())
    });
}

#[test]
fn inference_writes_no_twin() {
    on_every_device("twin no_grad", |ctx| {
        let g = Graph::new(ctx);
        g.set_autocast(Some(DType::BF16));
        let x = g.parameter(&Rng::new(3).vec(5 * 7, 1.0), &[5, 7])?;
        let kept = g.no_grad(|| -> Result<usize> {
            let y = norm::rms_norm(&g, &x, None, 1e-5, false)?;
            let _a = glu::glu(&g, &y, &y, Glu::GeGlu)?;
            Ok(g.kept_casts())
        })?;
        assert_eq!(kept, 0);
        Ok(())
    });
}

/// An encoder block's products under autocast without a tape: q, k, v = x·W (one f32 x read by
/// three products), attention, o_proj. `g.inference` keeps the activations' 16-bit copies while
/// it runs, so x is cast once and o_proj reads the 16-bit o attention wrote; plain `no_grad`
/// casts x three times and o back. Same kernels, same roundings: the same bits. Returns the
/// output's bits and the cast dispatches.
fn qkv_block(g: &Graph<'_>, keep: bool) -> Result<(Vec<u32>, u64)> {
    let (t, h, d) = (19, 2, 6); // 19 rows: GEMMs, not the few-row f32 GEMV
    let mut rng = Rng::new(8);
    g.set_autocast(Some(DType::BF16));
    let x0 = g.constant(&rng.vec(t * h * d, 1.0), &[t, h * d])?;
    let ws: Vec<Tensor> =
        (0..4).map(|_| g.parameter(&rng.vec(h * d * h * d, 0.5), &[h * d, h * d])).collect::<Result<_>>()?;
    for w in &ws {
        autocast_copy(g, w, DType::BF16)?; // the weights' copies, outside the counts
    }
    let block = || -> Result<Vec<f32>> {
        // An activation (a constant's copy would be kept as a weight's is).
        let x = broadcast::scale(g, &x0, 1.0)?;
        let heads = |w: &Tensor| shape::reshape(g, &linear(g, &x, w, None)?, &[1, t, h, d]);
        let (q, k, v) = (heads(&ws[0])?, heads(&ws[1])?, heads(&ws[2])?);
        let o = attention(g, &q, &k, &v, &AttnOptions::default())?;
        g.read(&linear(g, &shape::reshape(g, &o, &[t, h * d])?, &ws[3], None)?)
    };
    let (casts, y) = casts_of(g, || if keep { g.inference(block) } else { g.no_grad(block) })?;
    assert_eq!(g.kept_casts(), ws.len(), "keep {keep}: only the weights' copies outlive the forward");
    Ok((y.iter().map(|v| v.to_bits()).collect(), casts))
}

#[test]
fn inference_casts_an_activation_once_for_all_its_products() {
    on_every_device("inference casts", |ctx| {
        let (kept, plain) = (qkv_block(&Graph::new(ctx), true)?, qkv_block(&Graph::new(ctx), false)?);
        assert_eq!(kept.0, plain.0, "the same values either way");
        // x once, q, k, v, o widened to f32 by attention; no_grad adds x twice more and o back.
        assert_eq!((kept.1, plain.1), (5, 8), "cast dispatches with and without inference's copies");
        Ok(())
    });
}

/// Gradients of `x`, W_gate, W_up, W_q of `sum(W_d · glu(W_gate · x, W_up · x)) + sum(rope(W_q ·
/// x) ⊙ c)` under autocast, and the casts to 16 bits its backward ran. With `blocked` a scale
/// by 1 (exact) sits between each product and the glu / rope, so their gradients' twins are not
/// what the products' backward reads.
fn glu_rope_grads(g: &Graph<'_>, dt: DType, blocked: bool) -> Result<(Vec<Vec<u32>>, u64)> {
    let (t, h, d, i) = (17, 2, 6, 9);
    let mut rng = Rng::new(5);
    g.set_autocast(Some(dt));
    let x = g.parameter(&rng.vec(t * h * d, 1.0), &[t, h * d])?;
    let wg = g.parameter(&rng.vec(i * h * d, 1.0), &[i, h * d])?;
    let wu = g.parameter(&rng.vec(i * h * d, 1.0), &[i, h * d])?;
    let wq = g.parameter(&rng.vec(h * d * h * d, 1.0), &[h * d, h * d])?;
    let wd = g.constant(&rng.vec(3 * i, 1.0), &[3, i])?;
    let c = g.constant(&rng.vec(t * h * d, 1.0), &[1, t, h, d])?;
    let pos = g.ints(&(0..t as i32).collect::<Vec<_>>(), &[1, t])?;
    let inv: Vec<f32> = (0..d / 2).map(|j| 10_000f32.powf(-2.0 * j as f32 / d as f32)).collect();
    let inv = g.constant(&inv, &[d / 2])?;
    let block = |y: Tensor| if blocked { broadcast::scale(g, &y, 1.0) } else { Ok(y) };
    let (gate, up) = (block(linear(g, &x, &wg, None)?)?, block(linear(g, &x, &wu, None)?)?);
    let m = linear(g, &glu::glu(g, &gate, &up, Glu::SwiGlu)?, &wd, None)?;
    let q = block(shape::reshape(g, &linear(g, &x, &wq, None)?, &[1, t, h, d])?)?;
    let q = rope(g, &q, &pos, &inv, RopeLayout::HalfSplit, d, 1.0)?;
    let loss = broadcast::add(g, &reduce::sum(g, &m)?, &reduce::sum(g, &broadcast::mul(g, &q, &c)?)?)?;
    let (casts, ()) = casts_of(g, || g.backward(&loss))?;
    let mut grads = Vec::new();
    for p in [&x, &wg, &wu, &wq] {
        grads.push(g.read(&p.grad().expect("gradient"))?.iter().map(|v| v.to_bits()).collect());
    }
    Ok((grads, casts))
}

#[test]
fn backward_products_read_the_twins_of_glu_and_rope_gradients() {
    on_every_device("twin backward", |ctx| {
        for dt in [DType::BF16, DType::F16] {
            let (twins, casts) = glu_rope_grads(&Graph::new(ctx), dt, false)?;
            let (plain, casts_plain) = glu_rope_grads(&Graph::new(ctx), dt, true)?;
            // The same values, bit for bit: a twin is exactly the cast it replaces.
            assert!(twins == plain, "{dt:?}: gradients differ with the twins");
            assert_eq!(casts_plain - casts, 3, "{dt:?}: dgate, dup and dq need no cast ({casts} vs {casts_plain})");
        }
        Ok(())
    });
}

/// Gradient of p in `sum((x + W · rms(x)) ⊙ c)` with `x = 2p` (a residual around a normed
/// product), and the add dispatches its backward ran. With `blocked` the norm reads `1 · x`
/// (exact), so its backward cannot take in the residual's gradient of x.
fn residual_grad(g: &Graph<'_>, dt: Option<DType>, blocked: bool) -> Result<(Vec<u32>, u64)> {
    let (t, d) = (19, 13);
    let mut rng = Rng::new(9);
    g.set_autocast(dt);
    let p = g.parameter(&rng.vec(t * d, 1.0), &[t, d])?;
    let (nw, w) = (g.parameter(&rng.vec(d, 1.0), &[d])?, g.parameter(&rng.vec(d * d, 1.0), &[d, d])?);
    let c = g.constant(&rng.vec(t * d, 1.0), &[t, d])?;
    let x = broadcast::scale(g, &p, 2.0)?;
    let normed_in = if blocked { broadcast::scale(g, &x, 1.0)? } else { x.clone() };
    let y = linear(g, &norm::rms_norm(g, &normed_in, Some(&nw), 1e-5, false)?, &w, None)?;
    let loss = reduce::sum(g, &broadcast::mul(g, &broadcast::add(g, &x, &y)?, &c)?)?;
    g.sync()?;
    g.set_profiling(true);
    g.backward(&loss)?;
    let profile = g.take_profile()?.expect("profiling on");
    let adds = profile.kernels.iter().filter(|(n, _)| n.starts_with("elementwise/binary:add")).map(|(_, k)| k.calls);
    let grad = g.read(&p.grad().expect("gradient"))?;
    Ok((grad.iter().map(|v| v.to_bits()).collect(), adds.sum()))
}

#[test]
fn rms_norm_backward_takes_in_the_residual_gradient() {
    on_every_device("residual gradient", |ctx| {
        for dt in [None, Some(DType::BF16)] {
            let (fused, adds) = residual_grad(&Graph::new(ctx), dt, false)?;
            let (plain, adds_plain) = residual_grad(&Graph::new(ctx), dt, true)?;
            assert!(fused == plain, "{dt:?}: the gradient differs when the norm adds it in");
            assert_eq!((adds, adds_plain), (0, 1), "{dt:?}: the residual's add is gone");
        }
        Ok(())
    });
}

/// Under autocast the GLU's backward keeps gate and up in 16 bits (as torch.autocast keeps the
/// products' 16-bit outputs): its gradients are the f64 reference's on the rounded gate and up,
/// while the forward still reads the f32 values.
#[test]
fn glu_backward_reads_16_bit_gate_and_up_under_autocast() {
    on_every_device("glu saved 16-bit", |ctx| {
        let (rows, inner) = (7, 11);
        let mut rng = Rng::new(13);
        let (gate, up, c) = (rng.vec(rows * inner, 3.0), rng.vec(rows * inner, 2.0), rng.vec(rows * inner, 1.0));
        for dt in [DType::BF16, DType::F16] {
            for kind in Glu::ALL {
                let g = Graph::new(ctx);
                g.set_autocast(Some(dt));
                let (gp, upp) = (g.parameter(&gate, &[rows, inner])?, g.parameter(&up, &[rows, inner])?);
                let a = glu::glu(&g, &gp, &upp, kind)?;
                let fwd = vkformers_kernels::glu::reference::forward(kind, &f64s(&gate), &f64s(&up));
                assert_close(&format!("{dt:?} {kind:?} forward on f32"), &g.read(&a)?, &fwd, TOL_F32);
                g.backward(&reduce::sum(&g, &broadcast::mul(&g, &a, &g.constant(&c, &[rows, inner])?)?)?)?;
                let (gr, ur) = (f64s(&round(dt, &gate)), f64s(&round(dt, &up)));
                let (dg, du) = vkformers_kernels::glu::reference::backward(kind, &gr, &ur, &f64s(&c));
                assert_close(&format!("{dt:?} {kind:?} dgate"), &g.read(&gp.grad().expect("dgate"))?, &dg, TOL_F32);
                assert_close(&format!("{dt:?} {kind:?} dup"), &g.read(&upp.grad().expect("dup"))?, &du, TOL_F32);
            }
        }
        Ok(())
    });
}

/// Values and gradients of `sum((W · y) ⊙ c) + sum(h ⊙ c2)` with `(h, y)` the residual add of
/// `2p` and `2q` and the RMSNorm after it, fused (`add_rms_norm`) or as two ops, and the
/// dispatches the forward ran.
fn add_norm_run(g: &Graph<'_>, dt: Option<DType>, fused: bool) -> Result<(Vec<Vec<u32>>, u64)> {
    let (t, d) = (19, 13);
    let mut rng = Rng::new(17);
    g.set_autocast(dt);
    let (p, q) = (g.parameter(&rng.vec(t * d, 1.0), &[t, d])?, g.parameter(&rng.vec(t * d, 1.0), &[t, d])?);
    let (nw, w) = (g.parameter(&rng.vec(d, 1.0), &[d])?, g.parameter(&rng.vec(5 * d, 1.0), &[5, d])?);
    let (c, c2) = (g.constant(&rng.vec(t * 5, 1.0), &[t, 5])?, g.constant(&rng.vec(t * d, 1.0), &[t, d])?);
    let (x, r) = (broadcast::scale(g, &p, 2.0)?, broadcast::scale(g, &q, 2.0)?);
    g.sync()?;
    g.set_profiling(true);
    let (h, y) = if fused {
        norm::add_rms_norm(g, (&x, &r), Some(&nw), 1e-5, false)?
    } else {
        let h = broadcast::add(g, &x, &r)?;
        let y = norm::rms_norm(g, &h, Some(&nw), 1e-5, false)?;
        (h, y)
    };
    let dispatches = g.take_profile()?.expect("profiling on").dispatches;
    g.set_profiling(false);
    let out = linear(g, &y, &w, None)?;
    let loss = broadcast::add(
        g,
        &reduce::sum(g, &broadcast::mul(g, &out, &c)?)?,
        &reduce::sum(g, &broadcast::mul(g, &h, &c2)?)?,
    )?;
    let mut values = vec![g.read(&h)?, g.read(&y)?, g.read(&out)?];
    g.backward(&loss)?;
    for t in [&p, &q, &nw, &w] {
        values.push(g.read(&t.grad().expect("gradient"))?);
    }
    Ok((values.iter().map(|v| v.iter().map(|x| x.to_bits()).collect()).collect(), dispatches))
}

#[test]
fn fused_residual_add_and_norm_trains_as_the_two_ops() {
    on_every_device("add_rms_norm training", |ctx| {
        for dt in [None, Some(DType::BF16), Some(DType::F16)] {
            let (fused, n_fused) = add_norm_run(&Graph::new(ctx), dt, true)?;
            let (plain, n_plain) = add_norm_run(&Graph::new(ctx), dt, false)?;
            assert!(fused == plain, "{dt:?}: values or gradients differ when fused");
            assert_eq!(n_plain - n_fused, 1, "{dt:?}: one dispatch for the add and the norm");
        }
        Ok(())
    });
}

/// The post-LN residual `LayerNorm(x + r)` fused for inference: the values of the add and the
/// norm apart; inside `inference` under autocast it writes y's 16-bit copy, so the product
/// reading y runs no cast and equals the product of the rounded y; with a tape it declines.
#[test]
fn fused_add_and_layer_norm_in_inference_writes_the_copy_products_read() {
    on_every_device("add + layer_norm inference", |ctx| {
        let (t, d, n) = (21, 10, 4); // 21 rows: a GEMM, not the few-row f32 GEMV
        let mut rng = Rng::new(31);
        let g = Graph::new(ctx);
        g.set_autocast(Some(DType::BF16));
        let (x, r) = (g.constant(&rng.vec(t * d, 2.0), &[t, d])?, g.constant(&rng.vec(t * d, 2.0), &[t, d])?);
        let (w, b) = (g.parameter(&rng.vec(d, 1.0), &[d])?, g.parameter(&rng.vec(d, 1.0), &[d])?);
        let wv = rng.vec(n * d, 1.0);
        let proj = g.parameter(&wv, &[n, d])?;
        autocast_copy(&g, &proj, DType::BF16)?; // the weight's copy, outside the counts
        assert!(norm::add_layer_norm_inference(&g, (&x, &r), (Some(&w), Some(&b)), 1e-5)?.is_none(), "a tape records");
        let (casts, (fused, plain, y)) = casts_of(&g, || {
            g.inference(|| {
                let fused = norm::add_layer_norm_inference(&g, (&x, &r), (Some(&w), Some(&b)), 1e-5)?.expect("fused");
                let y = linear(&g, &fused, &proj, None)?;
                let plain = norm::layer_norm(&g, &broadcast::add(&g, &x, &r)?, Some(&w), Some(&b), 1e-5)?;
                Ok((g.read(&fused)?, g.read(&plain)?, g.read(&y)?))
            })
        })?;
        assert_eq!(casts, 0, "the product reads the fused kernel's copy");
        let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
        assert_eq!(bits(&fused), bits(&plain), "the add and the norm's values");
        assert_close("product of the copy", &y, &product_of_rounded(DType::BF16, &fused, &wv, (t, d, n)), TOL_F32);
        Ok(())
    });
}

/// Attention for o_proj in inference under autocast returns the 16-bit o the kernel writes (no
/// widening cast): o_proj's product is bit for bit the one of `attention`'s f32 o (which is
/// that o widened). Decoding's few rows and a recording tape keep the f32 o.
#[test]
fn attention_for_a_product_returns_the_16_bit_o_in_inference() {
    on_every_device("attention for product", |ctx| {
        let (h, d) = (2, 8);
        for t in [3, 23] {
            let g = Graph::new(ctx);
            g.set_autocast(Some(DType::BF16));
            let mut rng = Rng::new(t as u64);
            let qkv: Vec<Tensor> =
                (0..3).map(|_| g.constant(&rng.vec(t * h * d, 1.0), &[1, t, h, d])).collect::<Result<_>>()?;
            let w = g.parameter(&rng.vec(5 * h * d, 1.0), &[5, h * d])?;
            let opts = AttnOptions::default();
            let run = |for_product: bool| -> Result<(Vec<u32>, DType)> {
                g.inference(|| {
                    let o = if for_product {
                        attention_for_product(&g, &qkv[0], &qkv[1], &qkv[2], &opts)?
                    } else {
                        attention(&g, &qkv[0], &qkv[1], &qkv[2], &opts)?
                    };
                    let y = linear(&g, &shape::reshape(&g, &o, &[t, h * d])?, &w, None)?;
                    Ok((g.read(&y)?.iter().map(|v| v.to_bits()).collect(), o.dtype()))
                })
            };
            let ((fused, dt), (plain, _)) = (run(true)?, run(false)?);
            assert_eq!(fused, plain, "t {t}: o_proj's product");
            let gemm = !vkformers_kernels::matmul::gemv::gemv_applies(t as u32, ctx.caps());
            assert_eq!(dt, if gemm { DType::BF16 } else { DType::F32 }, "t {t}");
            let taped = attention_for_product(&g, &qkv[0], &qkv[1], &qkv[2], &opts)?;
            assert_eq!(taped.dtype(), DType::F32, "t {t}: with a tape o stays f32");
        }
        Ok(())
    });
}
