//! The chunked head + cross-entropy against the whole-logits path it replaces in training:
//! `loss::cross_entropy(head(x), labels)` with the same kernels. Odd shapes, chunks that do and
//! do not divide the rows, ignored labels (-100 and out of range), a head with a bias, a scale
//! and a softcap, f32 and bf16 autocast; the loss and every gradient (head weight and bias, and
//! the parameter upstream of x) must agree.

use vkformers_kernels::testutil::Rng;
use vkformers_tensor::ops::chunked_loss::chunked_cross_entropy;
use vkformers_tensor::ops::{activation, broadcast, loss, matmul};
use vkformers_tensor::{DType, Graph, Result, Tensor};
use vkformers_vk::testing::on_every_device;

const N: usize = 13;
const H: usize = 6;
const V: usize = 11;

/// `c·tanh(0.7·(x Wᵀ + b) / c)`, from differentiable ops.
fn head(g: &Graph<'_>, x: &Tensor, w: &Tensor, b: &Tensor) -> Result<Tensor> {
    let z = broadcast::scale(g, &matmul::linear(g, x, w, Some(b))?, 0.7)?;
    let c = 3.0;
    let s = activation::sigmoid(g, &broadcast::scale(g, &z, 2.0 / c)?)?;
    broadcast::sub(g, &broadcast::scale(g, &s, 2.0 * c)?, &g.constant(&[c], &[1])?)
}

/// Loss and gradients (p, w, b) with `chunk` rows per chunk, or the whole-logits path.
fn run(g: &Graph<'_>, data: &[Vec<f32>; 4], labels: &[i32], chunk: Option<usize>) -> Result<Vec<Vec<f32>>> {
    let p = g.parameter(&data[0], &[N, H])?;
    let w = g.parameter(&data[1], &[V, H])?;
    let b = g.parameter(&data[2], &[V])?;
    let c = g.constant(&data[3], &[N, H])?;
    let x = broadcast::mul(g, &p, &c)?; // an intermediate: its gradient flows on to p
    let lab = g.ints(labels, &[N])?;
    let l = match chunk {
        Some(rows) => {
            let (w2, b2) = (w.clone(), b.clone());
            chunked_cross_entropy(g, &x, &lab, rows, Box::new(move |g, xc| head(g, xc, &w2, &b2)))?
        }
        None => loss::cross_entropy(g, &head(g, &x, &w, &b)?, &lab)?,
    };
    g.backward(&l)?;
    let mut out = vec![g.read(&l)?];
    for t in [&p, &w, &b] {
        out.push(g.read(&t.grad().expect("a gradient"))?);
    }
    Ok(out)
}

fn compare(what: &str, got: &[Vec<f32>], want: &[Vec<f32>], tol: f32) {
    for (k, (a, b)) in got.iter().zip(want).enumerate() {
        let scale = b.iter().fold(0f32, |m, v| m.max(v.abs())).max(1e-6);
        for (i, (x, y)) in a.iter().zip(b).enumerate() {
            assert!((x - y).abs() <= tol * scale, "{what} output {k}[{i}]: {x} vs {y}");
        }
    }
}

#[test]
fn chunked_head_loss_equals_the_whole_logits_path() {
    on_every_device("chunked cross-entropy", |ctx| {
        let mut rng = Rng::new(21);
        let data = [rng.vec(N * H, 1.0), rng.vec(V * H, 0.5), rng.vec(V, 0.5), rng.vec(N * H, 1.0)];
        let labels: Vec<i32> = (0..N as i32)
            .map(|i| {
                if i % 5 == 4 {
                    -100
                } else if i == 7 {
                    V as i32
                } else {
                    (i * 3) % V as i32
                }
            })
            .collect();
        for autocast in [None, Some(DType::BF16)] {
            let g = Graph::new(ctx);
            g.set_autocast(autocast);
            let want = run(&g, &data, &labels, None)?;
            for rows in [1, 4, 5, 13, 20] {
                let got = run(&g, &data, &labels, Some(rows))?;
                // Same kernels on the same rows: only the head products' row blocking may differ.
                compare(&format!("{autocast:?} chunks of {rows}"), &got, &want, 1e-5);
            }
        }
        Ok(())
    });
}

#[test]
fn chunked_loss_without_grad_is_the_loss() {
    on_every_device("chunked cross-entropy no grad", |ctx| {
        let mut rng = Rng::new(5);
        let g = Graph::new(ctx);
        let x = g.constant(&rng.vec(N * H, 1.0), &[N, H])?;
        let w = g.constant(&rng.vec(V * H, 0.5), &[V, H])?;
        let lab = g.ints(&(0..N as i32).map(|i| i % V as i32).collect::<Vec<_>>(), &[N])?;
        let want = g.read(&loss::cross_entropy(&g, &matmul::linear(&g, &x, &w, None)?, &lab)?)?;
        let w2 = w.clone();
        let l = g.no_grad(|| {
            chunked_cross_entropy(&g, &x, &lab, 3, Box::new(move |g, xc| matmul::linear(g, xc, &w2, None)))
        })?;
        assert!(!l.requires_grad());
        let got = g.read(&l)?;
        assert!((got[0] - want[0]).abs() <= 1e-6 * want[0].abs(), "{got:?} vs {want:?}");
        Ok(())
    });
}
