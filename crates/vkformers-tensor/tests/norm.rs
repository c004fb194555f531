//! Tape gradients of `rms_norm` and `layer_norm` against the f64 reference. The loss is
//! sum(y * w) for a fixed random w (so dL/dy = w), formed from `broadcast::mul` and `reduce::sum`.

use vkformers_kernels::norm::reference;
use vkformers_kernels::testutil::{assert_close, f64s, Rng, TOL_F32};
use vkformers_tensor::ops::norm::{layer_norm, rms_norm};
use vkformers_tensor::ops::{broadcast, reduce, shape};
use vkformers_tensor::{Graph, Result, Tensor};
use vkformers_vk::testing::on_every_device;
use vkformers_vk::Context;

/// `loss [1] = sum(out * w)` from the library's own ops (so dL/dout = w); `w` holds as many
/// elements as `out`, in any shape.
fn dot_loss(g: &Graph<'_>, out: &Tensor, w: &Tensor) -> Result<Tensor> {
    reduce::sum(g, &broadcast::mul(g, out, &shape::reshape(g, w, out.shape())?)?)
}

const SHAPE: [usize; 3] = [2, 3, 37];
const EPS: f32 = 1e-5;

/// Random `(x, w, b, dy)` for `SHAPE`.
fn data(seed: u64) -> (Vec<f32>, Vec<f32>, Vec<f32>, Vec<f32>) {
    let (n, d) = (SHAPE.iter().product(), SHAPE[2]);
    let mut rng = Rng::new(seed);
    (rng.vec(n, 2.0), rng.vec(d, 1.0), rng.vec(d, 1.0), rng.vec(n, 1.0))
}

fn rms_case(ctx: &Context, weight: bool, unit_offset: bool, seed: u64) -> Result<()> {
    let (xv, wv, _, lv) = data(seed);
    let g = Graph::new(ctx);
    let x = g.parameter(&xv, &SHAPE)?;
    let w = if weight { Some(g.parameter(&wv, &[SHAPE[2]])?) } else { None };
    let l = g.constant(&lv, &[lv.len()])?;
    let y = rms_norm(&g, &x, w.as_ref(), EPS, unit_offset)?;
    g.backward(&dot_loss(&g, &y, &l)?)?;
    let (x64, w64, l64) = (f64s(&xv), f64s(&wv), f64s(&lv));
    let wr = weight.then_some(&w64[..]);
    let (want_y, _) = reference::rms_norm(&x64, wr, SHAPE[2], f64::from(EPS), unit_offset);
    let (want_dx, want_dw) = reference::rms_norm_backward(&x64, wr, &l64, SHAPE[2], f64::from(EPS), unit_offset);
    assert_close("y", &g.read(&y)?, &want_y, TOL_F32);
    assert_close("dx", &g.read(&x.grad().expect("dx"))?, &want_dx, TOL_F32);
    if let Some(w) = &w {
        assert_close("dw", &g.read(&w.grad().expect("dw"))?, &want_dw, TOL_F32);
    }
    Ok(())
}

fn layer_case(ctx: &Context, weight: bool, bias: bool, seed: u64) -> Result<()> {
    let (xv, wv, bv, lv) = data(seed);
    let g = Graph::new(ctx);
    let x = g.parameter(&xv, &SHAPE)?;
    let w = if weight { Some(g.parameter(&wv, &[SHAPE[2]])?) } else { None };
    let b = if bias { Some(g.parameter(&bv, &[SHAPE[2]])?) } else { None };
    let l = g.constant(&lv, &[lv.len()])?;
    let y = layer_norm(&g, &x, w.as_ref(), b.as_ref(), EPS)?;
    g.backward(&dot_loss(&g, &y, &l)?)?;
    let (x64, w64, b64, l64) = (f64s(&xv), f64s(&wv), f64s(&bv), f64s(&lv));
    let (wr, br) = (weight.then_some(&w64[..]), bias.then_some(&b64[..]));
    let (want_y, _, _) = reference::layer_norm(&x64, wr, br, SHAPE[2], f64::from(EPS));
    let (want_dx, want_dw, want_db) = reference::layer_norm_backward(&x64, wr, &l64, SHAPE[2], f64::from(EPS));
    assert_close("y", &g.read(&y)?, &want_y, TOL_F32);
    assert_close("dx", &g.read(&x.grad().expect("dx"))?, &want_dx, TOL_F32);
    if let Some(w) = &w {
        assert_close("dw", &g.read(&w.grad().expect("dw"))?, &want_dw, TOL_F32);
    }
    if let Some(b) = &b {
        assert_close("db", &g.read(&b.grad().expect("db"))?, &want_db, TOL_F32);
    }
    Ok(())
}

#[test]
fn rms_norm_matches_reference() {
    on_every_device("tensor rms_norm", |ctx| {
        rms_case(ctx, true, false, 1)?;
        rms_case(ctx, true, true, 2)?;
        rms_case(ctx, false, false, 3)
    });
}

#[test]
fn layer_norm_matches_reference() {
    on_every_device("tensor layer_norm", |ctx| {
        layer_case(ctx, true, true, 4)?;
        layer_case(ctx, true, false, 5)?;
        layer_case(ctx, false, false, 6)
    });
}

/// Two forward + backward passes give exactly twice the gradients of one.
#[test]
fn norm_gradients_accumulate() {
    on_every_device("tensor norm accumulate", |ctx| {
        let (xv, wv, bv, lv) = data(7);
        let g = Graph::new(ctx);
        let x = g.parameter(&xv, &SHAPE)?;
        let w = g.parameter(&wv, &[SHAPE[2]])?;
        let b = g.parameter(&bv, &[SHAPE[2]])?;
        let rw = g.parameter(&wv, &[SHAPE[2]])?;
        let l = g.constant(&lv, &[lv.len()])?;
        let params = [&x, &w, &b, &rw];
        let mut passes: Vec<Vec<Vec<f32>>> = Vec::new();
        for _ in 0..2 {
            let h = layer_norm(&g, &x, Some(&w), Some(&b), EPS)?;
            let y = rms_norm(&g, &h, Some(&rw), EPS, true)?;
            g.backward(&dot_loss(&g, &y, &l)?)?;
            passes.push(params.iter().map(|p| g.read(&p.grad().expect("grad"))).collect::<Result<_>>()?);
        }
        for (one, two) in passes[0].iter().zip(&passes[1]) {
            let doubled: Vec<f32> = one.iter().map(|v| 2.0 * v).collect();
            assert_eq!(two, &doubled);
        }
        Ok(())
    });
}
