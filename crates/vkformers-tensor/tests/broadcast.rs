//! Tape gradients of the broadcasting binary ops and `scale` against the f64 reference: the
//! loss is sum(op(a, b) * w) for a fixed random w, so dL/dout = w.

use vkformers_kernels::broadcast::{reference, BinaryOp};
use vkformers_kernels::testutil::{assert_close, f64s, Rng, TOL_F32};
use vkformers_tensor::ops::{broadcast, reduce};
use vkformers_tensor::{Graph, Result, Tensor};
use vkformers_vk::testing::on_every_device;

/// Operand shape pairs: equal, trailing vector, both sides broadcast, fewer dims, 4 dims.
const SHAPES: [(&[usize], &[usize]); 5] =
    [(&[5, 7], &[5, 7]), (&[3, 1, 5], &[4, 1]), (&[1, 6], &[5, 1]), (&[2, 3, 9], &[9]), (&[2, 1, 3, 5], &[1, 4, 1, 5])];

fn run(g: &Graph<'_>, op: BinaryOp, a: &Tensor, b: &Tensor) -> Result<Tensor> {
    match op {
        BinaryOp::Add => broadcast::add(g, a, b),
        BinaryOp::Sub => broadcast::sub(g, a, b),
        BinaryOp::Mul => broadcast::mul(g, a, b),
        BinaryOp::Div => broadcast::div(g, a, b),
    }
}

/// Values in ±[0.5, 1.5): safe divisors.
fn away_from_zero(rng: &mut Rng, n: usize) -> Vec<f32> {
    rng.vec(n, 1.0).into_iter().map(|v| v.signum() * (0.5 + v.abs())).collect()
}

/// `sum(y * w)`.
fn weighted_sum(g: &Graph<'_>, y: &Tensor, w: &Tensor) -> Result<Tensor> {
    reduce::sum(g, &broadcast::mul(g, y, w)?)
}

fn grad(g: &Graph<'_>, t: &Tensor) -> Result<Vec<f32>> {
    g.read(&t.grad().expect("gradient"))
}

#[test]
fn binary_ops_forward_and_tape_gradients_match_reference() {
    on_every_device("tensor broadcast binary", |ctx| {
        let mut rng = Rng::new(11);
        for op in BinaryOp::ALL {
            for (a_shape, b_shape) in SHAPES {
                let what = format!("{op:?} {a_shape:?} {b_shape:?}");
                let (na, nb) = (a_shape.iter().product(), b_shape.iter().product());
                let (av, bv) = (rng.vec(na, 2.0), away_from_zero(&mut rng, nb));
                let g = Graph::new(ctx);
                let (a, b) = (g.parameter(&av, a_shape)?, g.parameter(&bv, b_shape)?);
                let out = run(&g, op, &a, &b)?;
                let wv = rng.vec(out.numel(), 1.0);
                let w = g.constant(&wv, out.shape())?;
                g.backward(&weighted_sum(&g, &out, &w)?)?;
                let (want, out_shape) = reference::forward(op, &f64s(&av), a_shape, &f64s(&bv), b_shape);
                assert_eq!(out.shape(), out_shape.as_slice(), "{what}: shape");
                assert_close(&format!("{what}: out"), &g.read(&out)?, &want, TOL_F32);
                let (da, db) = reference::backward(op, &f64s(&av), a_shape, &f64s(&bv), b_shape, &f64s(&wv));
                assert_close(&format!("{what}: da"), &grad(&g, &a)?, &da, TOL_F32);
                assert_close(&format!("{what}: db"), &grad(&g, &b)?, &db, TOL_F32);
            }
        }
        Ok(())
    });
}

#[test]
fn constant_operand_gets_no_gradient() {
    on_every_device("tensor broadcast constant operand", |ctx| {
        let mut rng = Rng::new(12);
        let (av, bv, wv) = (rng.vec(15, 1.0), away_from_zero(&mut rng, 5), rng.vec(15, 1.0));
        let g = Graph::new(ctx);
        let (a, b) = (g.constant(&av, &[3, 5])?, g.parameter(&bv, &[5])?);
        let w = g.constant(&wv, &[3, 5])?;
        g.backward(&weighted_sum(&g, &broadcast::div(&g, &a, &b)?, &w)?)?;
        assert!(a.grad().is_none(), "constant a has a gradient");
        let (_, db) = reference::backward(BinaryOp::Div, &f64s(&av), &[3, 5], &f64s(&bv), &[5], &f64s(&wv));
        assert_close("db", &grad(&g, &b)?, &db, TOL_F32);
        Ok(())
    });
}

#[test]
fn same_tensor_on_both_sides() {
    on_every_device("tensor broadcast x * x", |ctx| {
        let mut rng = Rng::new(13);
        let (xv, wv) = (rng.vec(23, 2.0), rng.vec(23, 1.0));
        let g = Graph::new(ctx);
        let x = g.parameter(&xv, &[23])?;
        let w = g.constant(&wv, &[23])?;
        let y = broadcast::mul(&g, &x, &x)?;
        g.backward(&weighted_sum(&g, &y, &w)?)?;
        let want: Vec<f64> = xv.iter().zip(&wv).map(|(&x, &w)| 2.0 * f64::from(x) * f64::from(w)).collect();
        assert_close("dx", &grad(&g, &x)?, &want, TOL_F32);
        Ok(())
    });
}

#[test]
fn composition_through_intermediate_tensors() {
    // y = (a - b) / c * a: a reaches the loss along two paths through non-leaf tensors.
    on_every_device("tensor broadcast composition", |ctx| {
        let mut rng = Rng::new(14);
        let (sa, sb, sc) = ([4usize, 6], [6usize], [4usize, 1]);
        let (av, bv, cv) = (rng.vec(24, 1.0), rng.vec(6, 1.0), away_from_zero(&mut rng, 4));
        let wv = rng.vec(24, 1.0);
        let g = Graph::new(ctx);
        let (a, b, c) = (g.parameter(&av, &sa)?, g.parameter(&bv, &sb)?, g.parameter(&cv, &sc)?);
        let d = broadcast::sub(&g, &a, &b)?;
        let q = broadcast::div(&g, &d, &c)?;
        let y = broadcast::mul(&g, &q, &a)?;
        g.backward(&weighted_sum(&g, &y, &g.constant(&wv, &sa)?)?)?;
        let (a64, b64, c64, w64) = (f64s(&av), f64s(&bv), f64s(&cv), f64s(&wv));
        let (d64, _) = reference::forward(BinaryOp::Sub, &a64, &sa, &b64, &sb);
        let (q64, _) = reference::forward(BinaryOp::Div, &d64, &sa, &c64, &sc);
        let (dq, da_mul) = reference::backward(BinaryOp::Mul, &q64, &sa, &a64, &sa, &w64);
        let (dd, dc) = reference::backward(BinaryOp::Div, &d64, &sa, &c64, &sc, &dq);
        let (da_sub, db) = reference::backward(BinaryOp::Sub, &a64, &sa, &b64, &sb, &dd);
        let da: Vec<f64> = da_mul.iter().zip(&da_sub).map(|(x, y)| x + y).collect();
        assert_close("da", &grad(&g, &a)?, &da, TOL_F32);
        assert_close("db", &grad(&g, &b)?, &db, TOL_F32);
        assert_close("dc", &grad(&g, &c)?, &dc, TOL_F32);
        Ok(())
    });
}

#[test]
fn scale_forward_and_gradient() {
    on_every_device("tensor broadcast scale", |ctx| {
        let mut rng = Rng::new(15);
        let (xv, wv) = (rng.vec(3 * 13, 2.0), rng.vec(3 * 13, 1.0));
        let alpha = -0.375f32;
        let g = Graph::new(ctx);
        let x = g.parameter(&xv, &[3, 13])?;
        let y = broadcast::scale(&g, &x, alpha)?;
        g.backward(&weighted_sum(&g, &y, &g.constant(&wv, &[3, 13])?)?)?;
        assert_close("y", &g.read(&y)?, &reference::scale(&f64s(&xv), f64::from(alpha)), TOL_F32);
        assert_close("dx", &grad(&g, &x)?, &reference::scale(&f64s(&wv), f64::from(alpha)), TOL_F32);
        Ok(())
    });
}

#[test]
fn gradients_accumulate_over_two_backward_passes() {
    on_every_device("tensor broadcast accumulation", |ctx| {
        let mut rng = Rng::new(16);
        let (sa, sb) = ([3usize, 1, 5], [4usize, 1]);
        let (av, bv, wv) = (rng.vec(15, 1.0), away_from_zero(&mut rng, 4), rng.vec(60, 1.0));
        let g = Graph::new(ctx);
        let (a, b) = (g.parameter(&av, &sa)?, g.parameter(&bv, &sb)?);
        let w = g.constant(&wv, &[3, 4, 5])?;
        let pass = || -> Result<()> { g.backward(&weighted_sum(&g, &broadcast::div(&g, &a, &b)?, &w)?) };
        pass()?;
        let (da1, db1) = (grad(&g, &a)?, grad(&g, &b)?);
        pass()?;
        let (da2, db2) = (grad(&g, &a)?, grad(&g, &b)?);
        assert_eq!(da2, da1.iter().map(|v| 2.0 * v).collect::<Vec<_>>(), "da doubles");
        assert_eq!(db2, db1.iter().map(|v| 2.0 * v).collect::<Vec<_>>(), "db doubles");
        Ok(())
    });
}
