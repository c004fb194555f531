//! Tape gradients of `matmul`, `matmul_nt` and `linear` against the f64 reference. The loss is
//! sum(out * w) for a fixed random w (so dL/dout = w), formed from `broadcast::mul` and `reduce::sum`.

use vkformers_kernels::matmul::reference;
use vkformers_kernels::testutil::{assert_close, f64s, Rng, TOL_F32};
use vkformers_tensor::ops::matmul::{linear, matmul, matmul_nt};
use vkformers_tensor::ops::{broadcast, reduce, shape};
use vkformers_tensor::{Graph, Result, Tensor};
use vkformers_vk::testing::on_every_device;

/// `loss [1] = sum(out * w)` from the library's own ops (so dL/dout = w); `w` holds as many
/// elements as `out`, in any shape.
fn dot_loss(g: &Graph<'_>, out: &Tensor, w: &Tensor) -> Result<Tensor> {
    reduce::sum(g, &broadcast::mul(g, out, &shape::reshape(g, w, out.shape())?)?)
}

/// `[r, c]` -> `[c, r]`.
fn transpose(x: &[f64], r: usize, c: usize) -> Vec<f64> {
    (0..c * r).map(|i| x[(i % r) * c + i / r]).collect()
}

/// One matmul problem: A `[lead.., m, k]`, B shared or batched, stored `[k, n]` or (`nt`)
/// `[n, k]`.
struct Case {
    lead: Vec<usize>,
    m: usize,
    k: usize,
    n: usize,
    batched_b: bool,
    nt: bool,
}

/// f64 reference: (C, dA, dB as stored) for dL/dC = w.
fn reference_case(c: &Case, a: &[f64], b: &[f64], w: &[f64]) -> (Vec<f64>, Vec<f64>, Vec<f64>) {
    let batch: usize = c.lead.iter().product();
    let (m, k, n) = (c.m, c.k, c.n);
    let (mut out, mut da) = (Vec::new(), Vec::new());
    let mut db = vec![0.0; if c.batched_b { batch * k * n } else { k * n }];
    for i in 0..batch {
        let bi = if c.batched_b { i } else { 0 };
        let stored = &b[bi * k * n..][..k * n];
        let b_kn = if c.nt { transpose(stored, n, k) } else { stored.to_vec() };
        let (ai, wi) = (&a[i * m * k..][..m * k], &w[i * m * n..][..m * n]);
        out.extend(reference::matmul(ai, &b_kn, m, k, n));
        let (dai, dbi) = reference::matmul_backward(ai, &b_kn, wi, m, k, n);
        da.extend(dai);
        let dbi = if c.nt { transpose(&dbi, k, n) } else { dbi };
        for (acc, v) in db[bi * k * n..][..k * n].iter_mut().zip(dbi) {
            *acc += v;
        }
    }
    (out, da, db)
}

fn run_case(ctx: &vkformers_vk::Context, c: &Case, seed: u64) -> Result<()> {
    let batch: usize = c.lead.iter().product();
    let mut rng = Rng::new(seed);
    let a_shape: Vec<usize> = c.lead.iter().copied().chain([c.m, c.k]).collect();
    let b_mat = if c.nt { [c.n, c.k] } else { [c.k, c.n] };
    let b_lead = if c.batched_b { c.lead.clone() } else { Vec::new() };
    let b_shape: Vec<usize> = b_lead.into_iter().chain(b_mat).collect();
    let (an, bn, cn) = (batch * c.m * c.k, b_shape.iter().product::<usize>(), batch * c.m * c.n);
    let (av, bv, wv) = (rng.vec(an, 1.0), rng.vec(bn, 1.0), rng.vec(cn, 1.0));
    let g = Graph::new(ctx);
    let a = g.parameter(&av, &a_shape)?;
    let b = g.parameter(&bv, &b_shape)?;
    let w = g.constant(&wv, &[cn])?;
    let out = if c.nt { matmul_nt(&g, &a, &b)? } else { matmul(&g, &a, &b)? };
    let out_shape: Vec<usize> = c.lead.iter().copied().chain([c.m, c.n]).collect();
    assert_eq!(out.shape(), &out_shape[..]);
    g.backward(&dot_loss(&g, &out, &w)?)?;
    let (want_c, want_da, want_db) = reference_case(c, &f64s(&av), &f64s(&bv), &f64s(&wv));
    assert_close("C", &g.read(&out)?, &want_c, TOL_F32);
    assert_close("dA", &g.read(&a.grad().expect("dA"))?, &want_da, TOL_F32);
    assert_close("dB", &g.read(&b.grad().expect("dB"))?, &want_db, TOL_F32);
    Ok(())
}

#[test]
fn matmul_shared_and_batched_b_match_reference() {
    on_every_device("tensor matmul", |ctx| {
        let cases = [
            Case { lead: vec![], m: 5, k: 7, n: 3, batched_b: false, nt: false },
            Case { lead: vec![2, 3], m: 5, k: 7, n: 9, batched_b: false, nt: false },
            Case { lead: vec![3], m: 4, k: 6, n: 5, batched_b: true, nt: false },
        ];
        for (i, c) in cases.iter().enumerate() {
            run_case(ctx, c, 10 + i as u64)?;
        }
        Ok(())
    });
}

#[test]
fn matmul_nt_shared_and_batched_b_match_reference() {
    on_every_device("tensor matmul_nt", |ctx| {
        let cases = [
            Case { lead: vec![2], m: 5, k: 7, n: 11, batched_b: false, nt: true },
            Case { lead: vec![2, 2], m: 3, k: 5, n: 6, batched_b: true, nt: true },
        ];
        for (i, c) in cases.iter().enumerate() {
            run_case(ctx, c, 20 + i as u64)?;
        }
        Ok(())
    });
}

/// `linear` on x `[2, 3, 7]`, W `[5, 7]`, bias `[5]`: the forward, dx, dW and dbias.
#[test]
fn linear_with_bias_matches_reference() {
    on_every_device("tensor linear", |ctx| {
        let (rows, din, dout) = (6, 7, 5);
        let mut rng = Rng::new(31);
        let (xv, wv, bv, lv) =
            (rng.vec(rows * din, 1.0), rng.vec(dout * din, 1.0), rng.vec(dout, 1.0), rng.vec(rows * dout, 1.0));
        let g = Graph::new(ctx);
        let x = g.parameter(&xv, &[2, 3, din])?;
        let w = g.parameter(&wv, &[dout, din])?;
        let bias = g.parameter(&bv, &[dout])?;
        let lw = g.constant(&lv, &[rows * dout])?;
        let y = linear(&g, &x, &w, Some(&bias))?;
        assert_eq!(y.shape(), &[2, 3, dout]);
        g.backward(&dot_loss(&g, &y, &lw)?)?;
        let wt = transpose(&f64s(&wv), dout, din);
        let mut want_y = reference::matmul(&f64s(&xv), &wt, rows, din, dout);
        for (i, v) in want_y.iter_mut().enumerate() {
            *v += f64::from(bv[i % dout]);
        }
        let (dx, dwt) = reference::matmul_backward(&f64s(&xv), &wt, &f64s(&lv), rows, din, dout);
        assert_close("y", &g.read(&y)?, &want_y, TOL_F32);
        assert_close("dx", &g.read(&x.grad().expect("dx"))?, &dx, TOL_F32);
        assert_close("dW", &g.read(&w.grad().expect("dW"))?, &transpose(&dwt, din, dout), TOL_F32);
        let db = reference::bias_backward(&f64s(&lv), rows, dout);
        assert_close("dbias", &g.read(&bias.grad().expect("dbias"))?, &db, TOL_F32);
        Ok(())
    });
}

/// Two forward + backward passes accumulate exactly twice the gradient of one, and a
/// constant input gets no gradient.
#[test]
fn linear_gradients_accumulate() {
    on_every_device("tensor linear accumulate", |ctx| {
        let (rows, din, dout) = (5, 9, 4);
        let mut rng = Rng::new(41);
        let (xv, wv, bv, lv) =
            (rng.vec(rows * din, 1.0), rng.vec(dout * din, 1.0), rng.vec(dout, 1.0), rng.vec(rows * dout, 1.0));
        let g = Graph::new(ctx);
        let x = g.constant(&xv, &[rows, din])?;
        let w = g.parameter(&wv, &[dout, din])?;
        let bias = g.parameter(&bv, &[dout])?;
        let lw = g.constant(&lv, &[rows * dout])?;
        let mut grads = Vec::new();
        for _ in 0..2 {
            let y = linear(&g, &x, &w, Some(&bias))?;
            g.backward(&dot_loss(&g, &y, &lw)?)?;
            grads.push((g.read(&w.grad().expect("dW"))?, g.read(&bias.grad().expect("dbias"))?));
        }
        assert!(x.grad().is_none());
        for (one, two) in [(&grads[0].0, &grads[1].0), (&grads[0].1, &grads[1].1)] {
            let doubled: Vec<f32> = one.iter().map(|v| 2.0 * v).collect();
            assert_eq!(two, &doubled);
        }
        Ok(())
    });
}

/// One activation read by three products (the later products' backward add their dx into the
/// gradient already gathered, in place) and one weight read by two products (the second adds its
/// dW into the weight's accumulator): every gradient equals the f64 sum of its parts.
#[test]
fn gradients_shared_by_several_products_add_up() {
    on_every_device("tensor shared-gradient sums", |ctx| {
        let (rows, din, dout) = (6, 10, 7);
        let mut rng = Rng::new(53);
        let (x0v, zv) = (rng.vec(rows * din, 1.0), rng.vec(rows * din, 1.0));
        let wv: Vec<Vec<f32>> = (0..3).map(|_| rng.vec(dout * din, 1.0)).collect();
        let lv: Vec<Vec<f32>> = (0..4).map(|_| rng.vec(rows * dout, 1.0)).collect();
        let g = Graph::new(ctx);
        let x0 = g.parameter(&x0v, &[rows, din])?;
        let z = g.constant(&zv, &[rows, din])?;
        // An inner tensor (not a leaf), as a normalised activation is.
        let x = broadcast::mul(&g, &x0, &g.constant(&vec![1.0; rows * din], &[rows, din])?)?;
        let ws: Vec<Tensor> = wv.iter().map(|w| g.parameter(w, &[dout, din])).collect::<Result<_>>()?;
        let reads = [(&x, 0), (&x, 1), (&x, 2), (&z, 0)];
        let mut loss: Option<Tensor> = None;
        for (i, (input, w)) in reads.iter().enumerate() {
            let y = linear(&g, input, &ws[*w], None)?;
            let part = dot_loss(&g, &y, &g.constant(&lv[i], &[rows * dout])?)?;
            loss = Some(match loss {
                Some(l) => broadcast::add(&g, &l, &part)?,
                None => part,
            });
        }
        g.backward(&loss.expect("loss"))?;
        let mut want_dx = vec![0.0; rows * din];
        let mut want_dw = vec![vec![0.0; dout * din]; 3];
        for (i, (input, w)) in reads.iter().enumerate() {
            let a = if i < 3 { f64s(&x0v) } else { f64s(&zv) };
            let wt = transpose(&f64s(&wv[*w]), dout, din);
            let (da, dwt) = reference::matmul_backward(&a, &wt, &f64s(&lv[i]), rows, din, dout);
            if std::ptr::eq(*input, &x) {
                want_dx.iter_mut().zip(da).for_each(|(s, v)| *s += v);
            }
            want_dw[*w].iter_mut().zip(transpose(&dwt, din, dout)).for_each(|(s, v)| *s += v);
        }
        assert_close("dx", &g.read(&x0.grad().expect("dx"))?, &want_dx, TOL_F32);
        for (i, w) in ws.iter().enumerate() {
            assert_close(&format!("dW{i}"), &g.read(&w.grad().expect("dW"))?, &want_dw[i], TOL_F32);
        }
        Ok(())
    });
}
