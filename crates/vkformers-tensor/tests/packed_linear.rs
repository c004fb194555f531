//! The training packed product (`ops::packed_linear`) over parameters that are row blocks of
//! one storage (`Graph::parameter_rows`), split by columns with a backward
//! (`ops::packed_split`): on odd shapes, with and without a packed bias, the gradients of x,
//! of each part's weight and bias are the f64 reference's (`loss = Σ_p sum(y_p ⊙ w_p)`, so
//! `dY_p = w_p`: dX = Σ_p w_p · W_p, dW_p = w_pᵀ · X, db_p = column sums of w_p); the parts'
//! gradients are row blocks of one packed gradient (one buffer); a second backward (a later
//! micro-batch) adds into it; a part whose gradient another reader made first gets the sum.

use vkformers_tensor::ops::matmul::linear;
use vkformers_tensor::ops::packed_linear::{packed_linear, Packed};
use vkformers_tensor::ops::packed_split::split_cols_packed;
use vkformers_tensor::ops::{broadcast, reduce};
use vkformers_tensor::{Graph, Result, Tensor};
use vkformers_vk::testing::on_every_device;

fn ramp(n: usize, scale: f32, phase: f32) -> Vec<f32> {
    (0..n).map(|i| ((i as f32 * 0.61 + phase).sin() + 0.1) * scale).collect()
}

/// `sum(y * w)`.
fn weighted_sum(g: &Graph<'_>, y: &Tensor, w: &Tensor) -> Result<Tensor> {
    reduce::sum(g, &broadcast::mul(g, y, w)?)
}

/// Host values of one case: x `[m, k]`, each part's weight `[n_p, k]`, bias `[n_p]` and the
/// loss weights `[m, n_p]`.
struct Case {
    m: usize,
    k: usize,
    rows: Vec<usize>,
    x: Vec<f32>,
    w: Vec<Vec<f32>>,
    b: Vec<Vec<f32>>,
    dy: Vec<Vec<f32>>,
}

impl Case {
    fn new(m: usize, k: usize, rows: &[usize]) -> Case {
        let per = |f: &dyn Fn(usize, usize) -> Vec<f32>| rows.iter().enumerate().map(|(p, &r)| f(p, r)).collect();
        Case {
            m,
            k,
            rows: rows.to_vec(),
            x: ramp(m * k, 0.5, 0.3),
            w: per(&|p, r| ramp(r * k, 1.0 + p as f32, 1.7 * p as f32)),
            b: per(&|p, r| ramp(r, 0.3, 0.9 + p as f32)),
            dy: per(&|p, r| ramp(m * r, 0.7, 2.3 + p as f32)),
        }
    }

    /// f64 reference gradients: dX, and per part dW, db.
    fn reference(&self) -> (Vec<f64>, Vec<Vec<f64>>, Vec<Vec<f64>>) {
        let (m, k) = (self.m, self.k);
        let mut dx = vec![0.0f64; m * k];
        let (mut dw, mut db) = (Vec::new(), Vec::new());
        for ((w, dy), &n) in self.w.iter().zip(&self.dy).zip(&self.rows) {
            let mut dwp = vec![0.0f64; n * k];
            let mut dbp = vec![0.0f64; n];
            for i in 0..m {
                for o in 0..n {
                    let d = f64::from(dy[i * n + o]);
                    dbp[o] += d;
                    for j in 0..k {
                        dx[i * k + j] += d * f64::from(w[o * k + j]);
                        dwp[o * k + j] += d * f64::from(self.x[i * k + j]);
                    }
                }
            }
            dw.push(dwp);
            db.push(dbp);
        }
        (dx, dw, db)
    }
}

/// `got` within f32 rounding of `want` (`times` the reference: accumulated backwards).
fn close(what: &str, got: &[f32], want: &[f64], times: f64) {
    assert_eq!(got.len(), want.len(), "{what}");
    let scale = want.iter().fold(1.0f64, |a, v| a.max(v.abs() * times));
    for (i, (g, w)) in got.iter().zip(want).enumerate() {
        assert!((f64::from(*g) - w * times).abs() <= 2e-6 * scale, "{what}[{i}]: {g} vs {}", w * times);
    }
}

/// The packed storages (weight, bias) and their parts as parameters.
fn packed_params(g: &Graph<'_>, c: &Case) -> Result<(Tensor, Vec<Tensor>, Tensor, Vec<Tensor>)> {
    let total: usize = c.rows.iter().sum();
    let w = g.constant(&c.w.concat(), &[total, c.k])?;
    let b = g.constant(&c.b.concat(), &[total])?;
    let (mut wp, mut bp, mut row0) = (Vec::new(), Vec::new(), 0);
    for &r in &c.rows {
        wp.push(g.parameter_rows(&w, row0, r)?);
        bp.push(g.parameter_rows(&b, row0, r)?);
        row0 += r;
    }
    Ok((w, wp, b, bp))
}

/// One forward and backward of the loss; `extra` adds `sum(x · W_0ᵀ ⊙ 1)` through a separate
/// product of part 0 (a second reader of its weight).
fn step(g: &Graph<'_>, c: &Case, x: &Tensor, pk: (Packed<'_>, Option<Packed<'_>>), extra: bool) -> Result<()> {
    let y = packed_linear(g, x, pk.0, pk.1)?;
    let parts = split_cols_packed(g, &y, &c.rows)?;
    let mut loss: Option<Tensor> = None;
    for (p, part) in parts.iter().enumerate() {
        let l = weighted_sum(g, part, &g.constant(&c.dy[p], &[c.m, c.rows[p]])?)?;
        loss = Some(match loss {
            Some(s) => broadcast::add(g, &s, &l)?,
            None => l,
        });
    }
    let mut loss = loss.expect("parts");
    if extra {
        let y0 = linear(g, x, &pk.0.parts[0], None)?;
        loss = broadcast::add(g, &loss, &reduce::sum(g, &y0)?)?;
    }
    g.backward(&loss)
}

fn check(g: &Graph<'_>, c: &Case, bias: bool) -> Result<()> {
    let what = format!("{}x{} into {:?}{}", c.m, c.k, c.rows, if bias { " with bias" } else { "" });
    let (dx, dw, db) = c.reference();
    let (w, wp, b, bp) = packed_params(g, c)?;
    let x = g.parameter(&c.x, &[c.m, c.k])?;
    let pk = (Packed { storage: &w, parts: &wp }, bias.then_some(Packed { storage: &b, parts: &bp }));
    for times in [1.0, 2.0] {
        step(g, c, &x, pk, false)?;
        close(&format!("{what}: dX"), &g.read(&x.grad().unwrap())?, &dx, times);
        for (p, part) in wp.iter().enumerate() {
            close(&format!("{what}: dW_{p}"), &g.read(&part.grad().unwrap())?, &dw[p], times);
        }
        for (p, part) in bp.iter().enumerate().filter(|_| bias) {
            close(&format!("{what}: db_{p}"), &g.read(&part.grad().unwrap())?, &db[p], times);
        }
        // One packed gradient: the parts' gradients lie in one buffer.
        let ids: Vec<u64> = wp.iter().map(|p| p.grad().unwrap().view().buffer.id()).collect();
        assert!(ids.iter().all(|&i| i == ids[0]), "{what}: the parts' gradients are rows of one buffer");
    }
    // A second reader of part 0 whose backward runs first: its gradient lives apart; the packed
    // product's rows are added to it (dW_0 + column sums of x broadcast over W_0's rows).
    let (w, wp, b, bp) = packed_params(g, c)?;
    let pk = (Packed { storage: &w, parts: &wp }, bias.then_some(Packed { storage: &b, parts: &bp }));
    step(g, c, &x, pk, true)?;
    let colsum: Vec<f64> = (0..c.k).map(|j| (0..c.m).map(|i| f64::from(c.x[i * c.k + j])).sum()).collect();
    let want0: Vec<f64> = dw[0].iter().enumerate().map(|(i, v)| v + colsum[i % c.k]).collect();
    close(&format!("{what}: dW_0 with a second reader"), &g.read(&wp[0].grad().unwrap())?, &want0, 1.0);
    close(&format!("{what}: dW_1 with a second reader"), &g.read(&wp[1].grad().unwrap())?, &dw[1], 1.0);
    Ok(())
}

#[test]
fn packed_products_give_the_reference_gradients_into_one_packed_gradient() {
    on_every_device("packed_linear", |ctx| {
        let g = Graph::new(ctx);
        for (m, k, rows) in [(5, 7, vec![6, 2, 2]), (33, 24, vec![16, 8, 8]), (3, 10, vec![9, 9])] {
            for bias in [false, true] {
                check(&g, &Case::new(m, k, &rows), bias)?;
            }
        }
        Ok(())
    });
}

/// Misuse is an error: parts that are not the storage's consecutive row blocks.
#[test]
fn parts_out_of_order_are_an_error() {
    on_every_device("packed_linear errors", |ctx| {
        let g = Graph::new(ctx);
        let c = Case::new(3, 4, &[2, 2]);
        let (w, wp, _, _) = packed_params(&g, &c)?;
        let x = g.parameter(&c.x, &[3, 4])?;
        let swapped = [wp[1].clone(), wp[0].clone()];
        let err = packed_linear(&g, &x, Packed { storage: &w, parts: &swapped }, None).unwrap_err();
        assert!(err.to_string().contains("packed_linear"), "{err}");
        Ok(())
    });
}
