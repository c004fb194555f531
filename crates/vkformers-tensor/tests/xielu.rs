//! xIELU (Apertus' activation) against an f64 reference written from its definition: forward,
//! and the tape gradients of x and of the two learned scalars, with loss sum(y * w).

use vkformers_kernels::testutil::{assert_close, Rng, TOL_F32};
use vkformers_tensor::ops::activation::{xielu, Xielu};
use vkformers_tensor::ops::{broadcast, reduce};
use vkformers_tensor::Graph;
use vkformers_vk::testing::on_every_device;

fn softplus(u: f64) -> f64 {
    u.exp().ln_1p()
}

fn sigmoid(u: f64) -> f64 {
    1.0 / (1.0 + (-u).exp())
}

/// (y, dx, d a_p, d a_n) in f64 for raw scalars `a`, constants `(beta, eps)`.
fn reference(x: &[f32], w: &[f32], a: (f64, f64), (beta, eps): (f64, f64)) -> (Vec<f64>, Vec<f64>, f64, f64) {
    let (ap, an) = (softplus(a.0), beta + softplus(a.1));
    let (mut y, mut dx, mut gp, mut gn) = (Vec::new(), Vec::new(), 0.0, 0.0);
    for (&x, &w) in x.iter().zip(w) {
        let (x, w) = (f64::from(x), f64::from(w));
        if x > 0.0 {
            y.push(ap * x * x + beta * x);
            dx.push(w * (2.0 * ap * x + beta));
            gp += w * x * x;
        } else {
            let neg = x.min(eps).exp_m1() - x;
            y.push(an * neg + beta * x);
            let de = if x < eps { x.exp() } else { 0.0 };
            dx.push(w * (an * (de - 1.0) + beta));
            gn += w * neg;
        }
    }
    (y, dx, gp * sigmoid(a.0), gn * sigmoid(a.1))
}

#[test]
fn xielu_forward_and_gradients_match_the_f64_reference() {
    on_every_device("xielu", |ctx| {
        let n = 3 * 7 * 13;
        let mut rng = Rng::new(5);
        // Mostly O(1) inputs, with some at the tiny negative values where min(x, eps) switches
        // and expm1 must not cancel.
        let mut xv = rng.vec(n, 3.0);
        for (i, v) in xv.iter_mut().enumerate().filter(|(i, _)| i % 9 == 0) {
            *v = -(i as f32) * 1e-7;
        }
        let wv = rng.vec(n, 1.0);
        let (a, consts) = ((0.4f32, -0.7f32), (0.5f32, -1e-6f32));
        let g = Graph::new(ctx);
        let x = g.parameter(&xv, &[3, 7, 13])?;
        let (a_p, a_n) = (g.parameter(&[a.0], &[1])?, g.parameter(&[a.1], &[1])?);
        let (beta, eps) = (g.constant(&[consts.0], &[1])?, g.constant(&[consts.1], &[1])?);
        let y = xielu(&g, &x, &Xielu { a_p: &a_p, a_n: &a_n, beta: &beta, eps: &eps })?;
        let loss = reduce::sum(&g, &broadcast::mul(&g, &y, &g.constant(&wv, &[3, 7, 13])?)?)?;
        g.backward(&loss)?;
        let (want_y, want_dx, want_dp, want_dn) =
            reference(&xv, &wv, (f64::from(a.0), f64::from(a.1)), (f64::from(consts.0), f64::from(consts.1)));
        assert_close("y", &g.read(&y)?, &want_y, TOL_F32);
        assert_close("dx", &g.read(&x.grad().expect("dx"))?, &want_dx, TOL_F32);
        assert_close("d a_p", &g.read(&a_p.grad().expect("d a_p"))?, &[want_dp], TOL_F32);
        assert_close("d a_n", &g.read(&a_n.grad().expect("d a_n"))?, &[want_dn], TOL_F32);
        Ok(())
    });
}
