//! Tape gradients of the pointwise activations against the f64 reference: the loss is
//! sum(act(x) * w) for a fixed random w, so dL/dy = w.

use vkformers_kernels::activation::reference;
use vkformers_kernels::testutil::{assert_close, f64s, Rng, TOL_F32};
use vkformers_tensor::ops::activation::{self, Activation};
use vkformers_tensor::ops::{broadcast, reduce};
use vkformers_tensor::{Graph, Result, Tensor};
use vkformers_vk::testing::on_every_device;

type ActFn = fn(&Graph<'_>, &Tensor) -> Result<Tensor>;

/// Each convenience function with the activation it must apply.
const NAMED: [(Activation, ActFn); 6] = [
    (Activation::Silu, activation::silu),
    (Activation::Gelu, activation::gelu),
    (Activation::GeluTanh, activation::gelu_tanh),
    (Activation::Relu, activation::relu),
    (Activation::Relu2, activation::relu2),
    (Activation::Sigmoid, activation::sigmoid),
];

const SHAPE: [usize; 3] = [3, 5, 19];

/// `sum(y * w)`.
fn weighted_sum(g: &Graph<'_>, y: &Tensor, w: &Tensor) -> Result<Tensor> {
    reduce::sum(g, &broadcast::mul(g, y, w)?)
}

/// Runs `f` on x [SHAPE] with loss sum(y * w) and checks y and dx against `act`'s reference.
fn check(
    ctx: &vkformers_vk::Context,
    act: Activation,
    f: impl Fn(&Graph<'_>, &Tensor) -> Result<Tensor>,
) -> Result<()> {
    let n = SHAPE.iter().product();
    let mut rng = Rng::new(21);
    let (xv, wv) = (rng.vec(n, 4.0), rng.vec(n, 1.0));
    let g = Graph::new(ctx);
    let x = g.parameter(&xv, &SHAPE)?;
    let y = f(&g, &x)?;
    assert_eq!(y.shape(), SHAPE, "{act:?}: shape");
    g.backward(&weighted_sum(&g, &y, &g.constant(&wv, &SHAPE)?)?)?;
    let x64 = f64s(&xv);
    assert_close(&format!("{act:?}: y"), &g.read(&y)?, &reference::forward(act, &x64), TOL_F32);
    let want_dx = reference::backward(act, &x64, &f64s(&wv));
    assert_close(&format!("{act:?}: dx"), &g.read(&x.grad().expect("grad"))?, &want_dx, TOL_F32);
    Ok(())
}

#[test]
fn activations_forward_and_tape_gradient_match_reference() {
    on_every_device("tensor activation", |ctx| {
        for act in Activation::ALL {
            check(ctx, act, |g, x| activation::activation(g, x, act))?;
        }
        Ok(())
    });
}

#[test]
fn convenience_functions_apply_their_activation() {
    on_every_device("tensor activation named", |ctx| {
        for (act, f) in NAMED {
            check(ctx, act, f)?;
        }
        Ok(())
    });
}

#[test]
fn gradients_accumulate_over_two_backward_passes() {
    on_every_device("tensor activation accumulation", |ctx| {
        let mut rng = Rng::new(22);
        let (xv, wv) = (rng.vec(7 * 9, 3.0), rng.vec(7 * 9, 1.0));
        for act in Activation::ALL {
            let g = Graph::new(ctx);
            let x = g.parameter(&xv, &[7, 9])?;
            let w = g.constant(&wv, &[7, 9])?;
            let mut grads = Vec::new();
            for _ in 0..2 {
                g.backward(&weighted_sum(&g, &activation::activation(&g, &x, act)?, &w)?)?;
                grads.push(g.read(&x.grad().expect("grad"))?);
            }
            let doubled: Vec<f32> = grads[0].iter().map(|v| 2.0 * v).collect();
            assert_eq!(grads[1], doubled, "{act:?}: gradient doubles");
        }
        Ok(())
    });
}

#[test]
fn no_grad_records_no_tape() {
    on_every_device("tensor activation no_grad", |ctx| {
        let g = Graph::new(ctx);
        let x = g.parameter(&[0.5, -1.0, 2.0], &[3])?;
        let y = g.no_grad(|| activation::silu(&g, &x))?;
        assert!(!y.requires_grad(), "output under no_grad requires grad");
        assert_eq!(g.tape_len(), 0, "tape under no_grad");
        assert_close("y", &g.read(&y)?, &reference::forward(Activation::Silu, &[0.5, -1.0, 2.0]), TOL_F32);
        Ok(())
    });
}
