//! Tape gradients of the sum/mean reductions against the f64 reference: the loss is
//! sum(op(x) * w) for a fixed random w, so dL/dout = w.

use vkformers_kernels::reduce::{reference, CHUNK};
use vkformers_kernels::testutil::{assert_close, f64s, Rng, TOL_F32};
use vkformers_tensor::ops::{broadcast, reduce};
use vkformers_tensor::{Graph, Result, Tensor};
use vkformers_vk::testing::on_every_device;

/// A reduction op under test.
#[derive(Clone, Copy, Debug)]
enum Op {
    Sum,
    Mean,
    SumLast,
    MeanLast,
}

fn run(g: &Graph<'_>, op: Op, x: &Tensor) -> Result<Tensor> {
    match op {
        Op::Sum => reduce::sum(g, x),
        Op::Mean => reduce::mean(g, x),
        Op::SumLast => reduce::sum_last(g, x),
        Op::MeanLast => reduce::mean_last(g, x),
    }
}

/// (forward, backward given dL/dout = w) of `op` on x [shape].
fn expected(op: Op, x: &[f64], shape: &[usize], w: &[f64]) -> (Vec<f64>, Vec<f64>) {
    let d = *shape.last().expect("at least one dim");
    match op {
        Op::Sum => (vec![reference::sum_all(x)], reference::sum_all_backward(w[0], x.len())),
        Op::Mean => (vec![reference::mean_all(x)], reference::mean_all_backward(w[0], x.len())),
        Op::SumLast => (reference::sum_rows(x, d), reference::sum_rows_backward(w, d)),
        Op::MeanLast => (reference::mean_rows(x, d), reference::mean_rows_backward(w, d)),
    }
}

/// `sum(y * w)` for a fixed random w of y's shape; returns the loss and w.
fn weighted_loss(g: &Graph<'_>, y: &Tensor, rng: &mut Rng) -> Result<(Tensor, Vec<f32>)> {
    let wv = rng.vec(y.numel(), 1.0);
    let w = g.constant(&wv, y.shape())?;
    Ok((reduce::sum(g, &broadcast::mul(g, y, &w)?)?, wv))
}

fn check(ctx: &vkformers_vk::Context, op: Op, shape: &[usize], out_shape: &[usize], seed: u64) -> Result<()> {
    let what = format!("{op:?} {shape:?}");
    let mut rng = Rng::new(seed);
    let xv = rng.vec(shape.iter().product(), 1.0);
    let g = Graph::new(ctx);
    let x = g.parameter(&xv, shape)?;
    let y = run(&g, op, &x)?;
    assert_eq!(y.shape(), out_shape, "{what}: output shape");
    let (loss, wv) = weighted_loss(&g, &y, &mut rng)?;
    g.backward(&loss)?;
    let (want_y, want_dx) = expected(op, &f64s(&xv), shape, &f64s(&wv));
    assert_close(&format!("{what}: y"), &g.read(&y)?, &want_y, TOL_F32);
    assert_close(&format!("{what}: dx"), &g.read(&x.grad().expect("grad"))?, &want_dx, TOL_F32);
    Ok(())
}

#[test]
fn reduce_all_forward_and_tape_gradient_match_reference() {
    on_every_device("tensor reduce all", |ctx| {
        for op in [Op::Sum, Op::Mean] {
            check(ctx, op, &[1], &[1], 1)?;
            check(ctx, op, &[3, 5, 7], &[1], 2)?;
            // Beyond one CHUNK: staged through scratch memory.
            check(ctx, op, &[3, CHUNK as usize + 5], &[1], 3)?;
        }
        Ok(())
    });
}

#[test]
fn reduce_last_forward_and_tape_gradient_match_reference() {
    on_every_device("tensor reduce last", |ctx| {
        for op in [Op::SumLast, Op::MeanLast] {
            check(ctx, op, &[3, 4, 7], &[3, 4], 4)?;
            check(ctx, op, &[5, 301], &[5], 5)?;
            check(ctx, op, &[11], &[1], 6)?;
            check(ctx, op, &[2, 1, 3, 1], &[2, 1, 3], 7)?;
        }
        Ok(())
    });
}

#[test]
fn gradients_accumulate_over_two_backward_passes() {
    on_every_device("tensor reduce accumulation", |ctx| {
        for op in [Op::Sum, Op::Mean, Op::SumLast, Op::MeanLast] {
            let mut rng = Rng::new(8);
            let xv = rng.vec(6 * 9, 1.0);
            let g = Graph::new(ctx);
            let x = g.parameter(&xv, &[6, 9])?;
            let mut grads = Vec::new();
            for _ in 0..2 {
                let mut wrng = Rng::new(9);
                let (loss, _) = weighted_loss(&g, &run(&g, op, &x)?, &mut wrng)?;
                g.backward(&loss)?;
                grads.push(g.read(&x.grad().expect("grad"))?);
            }
            let doubled: Vec<f32> = grads[0].iter().map(|v| 2.0 * v).collect();
            assert_eq!(grads[1], doubled, "{op:?}: gradient doubles");
        }
        Ok(())
    });
}

#[test]
fn mean_of_nothing_is_an_error() {
    on_every_device("tensor reduce empty", |ctx| {
        let g = Graph::new(ctx);
        let x = g.empty(&[3, 0])?;
        assert!(reduce::mean_last(&g, &x).is_err(), "mean_last over an empty dim");
        assert!(reduce::mean(&g, &x).is_err(), "mean of no elements");
        Ok(())
    });
}
