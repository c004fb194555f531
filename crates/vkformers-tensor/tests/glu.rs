//! Tape gradients of the gated linear units (separate and fused gate/up) against the f64
//! reference: the loss is sum(glu(..) * w) for a fixed random w, so dL/dout = w.

use vkformers_kernels::glu::reference;
use vkformers_kernels::testutil::{assert_close, f64s, Rng, TOL_F32};
use vkformers_tensor::ops::glu::{self, Glu};
use vkformers_tensor::ops::{broadcast, reduce};
use vkformers_tensor::{Graph, Result, Tensor};
use vkformers_vk::testing::on_every_device;

/// Leading dims and the inner (intermediate) size.
const LEAD: [usize; 2] = [3, 5];
const INNER: usize = 13;

fn shape(last: usize) -> Vec<usize> {
    vec![LEAD[0], LEAD[1], last]
}

/// `sum(y * w)`.
fn weighted_sum(g: &Graph<'_>, y: &Tensor, w: &Tensor) -> Result<Tensor> {
    reduce::sum(g, &broadcast::mul(g, y, w)?)
}

fn grad(g: &Graph<'_>, t: &Tensor) -> Result<Vec<f32>> {
    g.read(&t.grad().expect("gradient"))
}

#[test]
fn glu_forward_and_tape_gradients_match_reference() {
    on_every_device("tensor glu", |ctx| {
        let n = LEAD.iter().product::<usize>() * INNER;
        let mut rng = Rng::new(31);
        for kind in Glu::ALL {
            let (gv, uv, wv) = (rng.vec(n, 4.0), rng.vec(n, 2.0), rng.vec(n, 1.0));
            let g = Graph::new(ctx);
            let (gate, up) = (g.parameter(&gv, &shape(INNER))?, g.parameter(&uv, &shape(INNER))?);
            let out = glu::glu(&g, &gate, &up, kind)?;
            assert_eq!(out.shape(), shape(INNER), "{kind:?}: shape");
            g.backward(&weighted_sum(&g, &out, &g.constant(&wv, &shape(INNER))?)?)?;
            let (g64, u64_) = (f64s(&gv), f64s(&uv));
            assert_close(&format!("{kind:?}: out"), &g.read(&out)?, &reference::forward(kind, &g64, &u64_), TOL_F32);
            let (dgate, dup) = reference::backward(kind, &g64, &u64_, &f64s(&wv));
            assert_close(&format!("{kind:?}: dgate"), &grad(&g, &gate)?, &dgate, TOL_F32);
            assert_close(&format!("{kind:?}: dup"), &grad(&g, &up)?, &dup, TOL_F32);
        }
        Ok(())
    });
}

#[test]
fn fused_glu_forward_and_tape_gradient_match_reference() {
    on_every_device("tensor glu fused", |ctx| {
        let n = LEAD.iter().product::<usize>() * INNER;
        let mut rng = Rng::new(32);
        for kind in Glu::ALL {
            let (fv, wv) = (rng.vec(2 * n, 4.0), rng.vec(n, 1.0));
            let g = Graph::new(ctx);
            let gate_up = g.parameter(&fv, &shape(2 * INNER))?;
            let out = glu::glu_fused(&g, &gate_up, kind)?;
            assert_eq!(out.shape(), shape(INNER), "{kind:?}: shape");
            g.backward(&weighted_sum(&g, &out, &g.constant(&wv, &shape(INNER))?)?)?;
            let (g64, u64_) = reference::split(&f64s(&fv), INNER);
            assert_close(&format!("{kind:?}: out"), &g.read(&out)?, &reference::forward(kind, &g64, &u64_), TOL_F32);
            let (dgate, dup) = reference::backward(kind, &g64, &u64_, &f64s(&wv));
            let want = reference::join(&dgate, &dup, INNER);
            assert_close(&format!("{kind:?}: dgate_up"), &grad(&g, &gate_up)?, &want, TOL_F32);
        }
        Ok(())
    });
}

#[test]
fn gradients_accumulate_over_two_backward_passes() {
    on_every_device("tensor glu accumulation", |ctx| {
        let mut rng = Rng::new(33);
        let (gv, uv, wv) = (rng.vec(4 * 7, 3.0), rng.vec(4 * 7, 2.0), rng.vec(4 * 7, 1.0));
        let g = Graph::new(ctx);
        let (gate, up) = (g.parameter(&gv, &[4, 7])?, g.parameter(&uv, &[4, 7])?);
        let gate_up = g.parameter(&reference::join(&gv, &uv, 7), &[4, 14])?;
        let w = g.constant(&wv, &[4, 7])?;
        let mut grads = Vec::new();
        for _ in 0..2 {
            g.backward(&weighted_sum(&g, &glu::glu(&g, &gate, &up, Glu::SwiGlu)?, &w)?)?;
            g.backward(&weighted_sum(&g, &glu::glu_fused(&g, &gate_up, Glu::GeGlu)?, &w)?)?;
            grads.push([grad(&g, &gate)?, grad(&g, &up)?, grad(&g, &gate_up)?]);
        }
        for (what, (once, twice)) in ["dgate", "dup", "dgate_up"].iter().zip(grads[0].iter().zip(&grads[1])) {
            let doubled: Vec<f32> = once.iter().map(|v| 2.0 * v).collect();
            assert_eq!(*twice, doubled, "{what}: gradient doubles");
        }
        Ok(())
    });
}

#[test]
fn bad_shapes_are_errors() {
    on_every_device("tensor glu shapes", |ctx| {
        let g = Graph::new(ctx);
        let (a, b) = (g.full(&[2, 3], 1.0)?, g.full(&[2, 4], 1.0)?);
        assert!(glu::glu(&g, &a, &b, Glu::SwiGlu).is_err(), "gate and up of different shapes");
        assert!(glu::glu_fused(&g, &a, Glu::SwiGlu).is_err(), "odd fused last dim");
        Ok(())
    });
}
