//! Tape gradients of the pointwise activations against the f64 reference: the loss is
//! sum(act(x) * w) for a fixed random w, so dL/dy = w.

use vkformers_kernels::activation::reference;
use vkformers_kernels::testutil::{assert_close, f64s, Rng, TOL_F32};
use vkformers_tensor::ops::activation::{self, Activation};
use vkformers_tensor::ops::{broadcast, matmul, reduce};
use vkformers_tensor::{DType, Graph, Result, Tensor};
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

/// `down(act(up))` in inference under bf16 autocast, with the activation as `activation` (f32
/// output, then the product's cast) or `activation_for_product`; returns the product's bits and
/// the activation's storage type.
fn up_act_down(g: &Graph<'_>, rows: usize, for_product: bool) -> Result<(Vec<u32>, DType)> {
    let (k, n) = (13, 7);
    let mut rng = Rng::new(rows as u64);
    g.set_autocast(Some(DType::BF16));
    let up = g.constant(&rng.vec(rows * k, 3.0), &[rows, k])?;
    let w = g.parameter(&rng.vec(n * k, 1.0), &[n, k])?;
    g.inference(|| {
        let a = if for_product {
            activation::activation_for_product(g, &up, Activation::Gelu)?
        } else {
            activation::activation(g, &up, Activation::Gelu)?
        };
        let y = matmul::linear(g, &a, &w, None)?;
        Ok((g.read(&y)?.iter().map(|v| v.to_bits()).collect(), a.dtype()))
    })
}

/// The MLP's activation in inference under autocast writes the down product's bf16 operand
/// itself (one pass, no f32 output and cast), and the product is bit for bit the one of the
/// f32 activation cast; on a few rows (decoding's GEMV reads f32), with a tape, or without
/// autocast, it stays f32.
#[test]
fn activation_for_a_product_writes_the_16_bit_operand_in_inference() {
    on_every_device("activation for product", |ctx| {
        for rows in [3, 37] {
            let (narrow, plain) =
                (up_act_down(&Graph::new(ctx), rows, true)?, up_act_down(&Graph::new(ctx), rows, false)?);
            assert_eq!(narrow.0, plain.0, "{rows} rows: the same product");
            let gemm = !vkformers_kernels::matmul::gemv::gemv_applies(rows as u32, ctx.caps());
            assert_eq!(narrow.1, if gemm { DType::BF16 } else { DType::F32 }, "{rows} rows");
        }
        let g = Graph::new(ctx);
        let x = g.constant(&Rng::new(4).vec(37 * 5, 2.0), &[37, 5])?;
        g.set_autocast(Some(DType::BF16));
        let taped = activation::activation_for_product(&g, &x, Activation::Gelu)?;
        g.set_autocast(None);
        let wide = g.inference(|| activation::activation_for_product(&g, &x, Activation::Gelu))?;
        assert_eq!((taped.dtype(), wide.dtype()), (DType::F32, DType::F32), "with a tape, or in f32");
        Ok(())
    });
}
