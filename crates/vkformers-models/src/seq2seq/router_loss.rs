//! Switch Transformers' router losses, as `SwitchTransformersForConditionalGeneration(...,
//! output_router_logits=True)` adds them to the cross-entropy: per stack whose `sparse_step` is
//! above 1, with the router logits `l [B, T·L, E]` of its L sparse layers concatenated along the
//! sequence (`M = B·T·L` rows),
//!
//! ```text
//! z   = Σ_rows lse(l)² / M                                   (router_z_loss_func)
//! aux = E² · mean_{b,e} ( frac[b, e] · mean_t p[b, t, e] )   (load_balancing_loss_func)
//! ```
//!
//! with `p = softmax(l)` and `frac[b, e]` the share of group b's rows whose argmax is e (no
//! gradient). `loss += z_coef · (z_enc + z_dec) + aux_coef · (aux_enc + aux_dec)`.
//!
//! Both are built from ops with constant coefficients computed on the host from the logits read
//! back: aux is linear in p; z's gradient is `2·lse·p / M` per row, so `Σ K ⊙ l` with
//! `K = 2·lse·p / M` (host values) has z's gradient exactly, and a constant brings its value to z.

use std::cell::RefCell;

use vkformers_tensor::ops::{broadcast, reduce};
use vkformers_tensor::{Graph, Tensor};

use crate::error::Result;

/// One sparse layer's router output: logits `[B·T, E]` (graph and host copies), probabilities.
pub(crate) struct Record {
    pub decoder: bool,
    pub logits: Tensor,
    pub probs: Tensor,
    pub host: Vec<f32>,
    pub b: usize,
}

thread_local! {
    static RECORDS: RefCell<Option<Vec<Record>>> = const { RefCell::new(None) };
}

/// Whether a `collect` is running.
pub(crate) fn active() -> bool {
    RECORDS.with(|c| c.borrow().is_some())
}

/// Keeps `r` when a `collect` is running (training with router losses); drops it otherwise.
pub(crate) fn record(r: Record) {
    RECORDS.with(|c| {
        if let Some(v) = c.borrow_mut().as_mut() {
            v.push(r);
        }
    });
}

/// Runs `f` recording every sparse layer's router output.
pub(crate) fn collect<T>(f: impl FnOnce() -> Result<T>) -> Result<(T, Vec<Record>)> {
    RECORDS.with(|c| *c.borrow_mut() = Some(Vec::new()));
    let out = f();
    let recs = RECORDS.with(|c| c.borrow_mut().take()).unwrap_or_default();
    Ok((out?, recs))
}

/// `z_coef · z + aux_coef · aux` of one stack's records (`[1]`), or `None` without records.
pub(crate) fn stack_loss(g: &Graph<'_>, recs: &[&Record], (z_coef, aux_coef): (f32, f32)) -> Result<Option<Tensor>> {
    let Some(first) = recs.first() else { return Ok(None) };
    let (b, e) = (first.b, first.logits.last_dim());
    let t = first.logits.rows() / b;
    let (layers, m) = (recs.len(), (b * t * recs.len()) as f64);
    // frac[b, e]: rows of group b (every layer's) whose argmax is e.
    let mut frac = vec![0f64; b * e];
    for r in recs {
        for (n, row) in r.host.chunks(e).enumerate() {
            let best = (0..e).fold(0, |k, j| if row[j] > row[k] { j } else { k });
            frac[(n / t) * e + best] += 1.0 / (t * layers) as f64;
        }
    }
    let mut total: Option<Tensor> = None;
    let mut constant = 0f64;
    for r in recs {
        let (mut kz, mut ka) = (vec![0f32; r.host.len()], vec![0f32; r.host.len()]);
        for (n, row) in r.host.chunks(e).enumerate() {
            let max = row.iter().fold(f64::NEG_INFINITY, |a, &x| a.max(f64::from(x)));
            let sum: f64 = row.iter().map(|&x| (f64::from(x) - max).exp()).sum();
            let lse = max + sum.ln();
            constant += f64::from(z_coef) * lse * lse / m;
            for j in 0..e {
                let p = (f64::from(row[j]) - max).exp() / sum;
                kz[n * e + j] = (f64::from(z_coef) * 2.0 * lse * p / m) as f32;
                constant -= f64::from(kz[n * e + j]) * f64::from(row[j]);
                // aux = E² / (B·E) · Σ frac[b, e] · p[row, e] / (T·L).
                ka[n * e + j] = (f64::from(aux_coef) * (e * e) as f64 / (b * e) as f64 * frac[(n / t) * e + j]
                    / (t * layers) as f64) as f32;
            }
        }
        let shape = [r.host.len() / e, e];
        let z = reduce::sum(g, &broadcast::mul(g, &r.logits, &g.constant(&kz, &shape)?)?)?;
        let a = reduce::sum(g, &broadcast::mul(g, &r.probs, &g.constant(&ka, &shape)?)?)?;
        let both = broadcast::add(g, &z, &a)?;
        total = Some(match total {
            Some(t) => broadcast::add(g, &t, &both)?,
            None => both,
        });
    }
    let total = total.expect("one record");
    let c = g.constant(&[constant as f32], &[1])?;
    Ok(Some(broadcast::add(g, &shape_1(g, &total)?, &c)?))
}

fn shape_1(g: &Graph<'_>, x: &Tensor) -> Result<Tensor> {
    Ok(vkformers_tensor::ops::shape::reshape(g, x, &[1])?)
}
