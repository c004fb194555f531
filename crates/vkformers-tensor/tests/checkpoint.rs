//! Gradient checkpointing: a Llama-style MLP block (with dropout) run through `checkpoint`
//! must give the gradients of the same block on the plain tape, for an input that requires
//! grad, an input that does not, and parameters the block only captures; while keeping
//! neither the block's nodes nor its activations (nor their 16-bit copies) after forward.

use std::cell::RefCell;
use std::rc::Rc;

use vkformers_kernels::glu::Glu;
use vkformers_kernels::testutil::Rng;
use vkformers_tensor::ops::checkpoint::checkpoint;
use vkformers_tensor::ops::{broadcast, dropout, glu, matmul as mm, norm, reduce};
use vkformers_tensor::{DType, Graph, Result, Tensor, WeakTensor};
use vkformers_vk::testing::on_every_device;

const N: usize = 3;
const H: usize = 6;
const I: usize = 10;

/// Host values of the parameters and of the block's non-differentiated input.
struct Data {
    x0: Vec<f32>,
    w_in: Vec<f32>,
    norm: Vec<f32>,
    gate: Vec<f32>,
    up: Vec<f32>,
    down: Vec<f32>,
    c: Vec<f32>,
    ws: Vec<f32>,
}

fn data() -> Data {
    let mut rng = Rng::new(7);
    Data {
        x0: rng.vec(N * H, 1.0),
        w_in: rng.vec(H * H, 0.5),
        norm: rng.vec(H, 1.0),
        gate: rng.vec(I * H, 0.5),
        up: rng.vec(I * H, 0.5),
        down: rng.vec(H * I, 0.5),
        c: rng.vec(N * I, 1.0),
        ws: rng.vec(N * H, 1.0),
    }
}

/// The block's parameters (captured by it, never passed as inputs).
#[derive(Clone)]
struct Block {
    norm: Tensor,
    gate: Tensor,
    up: Tensor,
    down: Tensor,
}

/// What one run left behind.
struct Run {
    /// Gradients of x0, w_in, norm, gate, up, down (absent ones as empty).
    grads: Vec<Vec<f32>>,
    /// Tape nodes once the loss is built.
    tape_len: usize,
    /// Whether the block's inner activation (the SwiGLU output `[N, I]`) outlived forward.
    inner_alive: bool,
    /// 16-bit copies kept once the loss is built.
    kept_casts: usize,
}

/// `x + W_down · dropout(swiglu(W_gate · rms(x), W_up · rms(x)) ⊙ c)`; x `[N, H]`, c `[N, I]`.
fn block(g: &Graph<'_>, p: &Block, x: &Tensor, c: &Tensor, seen: &RefCell<Option<WeakTensor>>) -> Result<Tensor> {
    let hn = norm::rms_norm(g, x, Some(&p.norm), 1e-6, false)?;
    let a = glu::glu(g, &mm::linear(g, &hn, &p.gate, None)?, &mm::linear(g, &hn, &p.up, None)?, Glu::SwiGlu)?;
    *seen.borrow_mut() = Some(a.downgrade());
    let a = dropout::dropout(g, &broadcast::mul(g, &a, c)?, 0.25, 1234, 0)?;
    broadcast::add(g, x, &mm::linear(g, &a, &p.down, None)?)
}

/// Builds `loss = sum(block(x0 · W_inᵀ (or x0 itself, a constant), c) ⊙ ws)`, plain or
/// checkpointed, back-propagates it and reads every parameter's gradient.
fn run(g: &Graph<'_>, d: &Data, ckpt: bool, x_needs_grad: bool) -> Result<Run> {
    let x0 = if x_needs_grad { g.parameter(&d.x0, &[N, H])? } else { g.constant(&d.x0, &[N, H])? };
    let w_in = g.parameter(&d.w_in, &[H, H])?;
    let p = Block {
        norm: g.parameter(&d.norm, &[H])?,
        gate: g.parameter(&d.gate, &[I, H])?,
        up: g.parameter(&d.up, &[I, H])?,
        down: g.parameter(&d.down, &[H, I])?,
    };
    let c = g.constant(&d.c, &[N, I])?;
    // A non-leaf input (its gradient must flow on to x0 and W_in), or a constant one.
    let x = if x_needs_grad { mm::linear(g, &x0, &w_in, None)? } else { x0.clone() };
    let seen = Rc::new(RefCell::new(None));
    let y = if ckpt {
        let (p, seen) = (p.clone(), seen.clone());
        checkpoint(g, &[x, c], move |g, xs| block(g, &p, &xs[0], &xs[1], &seen))?
    } else {
        block(g, &p, &x, &c, &seen)?
    };
    let loss = reduce::sum(g, &broadcast::mul(g, &y, &g.constant(&d.ws, &[N, H])?)?)?;
    let inner_alive = seen.borrow().as_ref().is_some_and(WeakTensor::is_alive);
    let (tape_len, kept_casts) = (g.tape_len(), g.kept_casts());
    g.backward(&loss)?;
    let mut grads = Vec::new();
    for t in [&x0, &w_in, &p.norm, &p.gate, &p.up, &p.down] {
        grads.push(match t.grad() {
            Some(gt) => g.read(&gt)?,
            None => Vec::new(),
        });
    }
    Ok(Run { grads, tape_len, inner_alive, kept_casts })
}

/// Each gradient of `got` equals `want` within 1e-6 of the tensor's largest magnitude.
fn assert_same_grads(what: &str, got: &Run, want: &Run) {
    let names = ["x0", "w_in", "norm", "gate", "up", "down"];
    for ((name, a), b) in names.iter().zip(&got.grads).zip(&want.grads) {
        assert_eq!(a.len(), b.len(), "{what}: d{name} present in one run only");
        let scale = b.iter().fold(0f32, |m, v| m.max(v.abs()));
        let diff = a.iter().zip(b).fold(0f32, |m, (x, y)| m.max((x - y).abs()));
        assert!(diff <= 1e-6 * scale, "{what}: d{name} differs by {diff:e} (scale {scale:e})");
    }
}

#[test]
fn checkpointed_block_gives_the_plain_gradients_and_keeps_no_activations() {
    on_every_device("checkpoint mlp", |ctx| {
        let d = data();
        for x_needs_grad in [true, false] {
            let what = format!("x requires grad: {x_needs_grad}");
            let plain = run(&Graph::new(ctx), &d, false, x_needs_grad)?;
            let ckpt = run(&Graph::new(ctx), &d, true, x_needs_grad)?;
            assert_same_grads(&what, &ckpt, &plain);
            assert!(plain.grads.iter().skip(2).all(|g| !g.is_empty()), "{what}: captured parameters get gradients");
            assert_eq!(plain.grads[0].is_empty(), !x_needs_grad, "{what}: dx0 exactly when x0 is a parameter");
            // The block's 8 nodes (norm, 3 products, glu, mul, dropout, add) become one.
            assert!(plain.inner_alive && !ckpt.inner_alive, "{what}: the block's activations are released");
            assert_eq!(plain.tape_len - ckpt.tape_len, 7, "{what}: tape {} vs {}", plain.tape_len, ckpt.tape_len);
        }
        Ok(())
    });
}

#[test]
fn checkpointed_block_under_autocast_keeps_no_activation_casts() {
    on_every_device("checkpoint autocast", |ctx| {
        let d = data();
        let graph = |ckpt| -> Result<Run> {
            let g = Graph::new(ctx);
            g.set_autocast(Some(DType::BF16));
            let r = run(&g, &d, ckpt, true)?;
            // Backward forgets every activation copy, the recompute's included.
            assert_eq!(g.kept_casts(), 5, "after backward: the copies of x0 and the 4 weights only");
            Ok(r)
        };
        let (plain, ckpt) = (graph(false)?, graph(true)?);
        assert_same_grads("bf16", &ckpt, &plain);
        // rms(x), read by two products, and the dropout output are activations copied once each;
        // the SwiGLU output has the 16-bit twin its kernel writes under autocast (kept while the
        // mul that reads it, no product, saves the f32 output).
        assert_eq!(plain.kept_casts, 8, "plain forward keeps its activation copies");
        assert_eq!(ckpt.kept_casts, 5, "checkpointed forward drops the block's activation copies");
        Ok(())
    });
}

#[test]
fn a_captured_tensor_that_requires_grad_is_an_error() {
    on_every_device("checkpoint capture", |ctx| {
        let g = Graph::new(ctx);
        let w = g.parameter(&[1.0, 2.0, 3.0, 4.0], &[2, 2])?;
        let x = mm::linear(&g, &g.constant(&[0.5, -1.0], &[1, 2])?, &w, None)?;
        let hidden = x.clone();
        // The block reads `hidden` (an activation of the outer tape) without taking it in.
        let y = checkpoint(&g, &[], move |g, _| broadcast::scale(g, &hidden, 2.0))?;
        let err = g.backward(&reduce::sum(&g, &y)?).expect_err("a captured activation");
        assert!(err.to_string().contains("without taking them as inputs"), "{err}");
        Ok(())
    });
}
