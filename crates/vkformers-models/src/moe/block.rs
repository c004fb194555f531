//! The routed MoE block of one layer on n token rows `h [n, H]`:
//!
//! ```text
//! logits [n, E] = h · W_routerᵀ;  p = softmax(logits)
//! ids [n, k] = top-k(p) (no gradient);  w [n, k] = p[ids] (a gather: gradients reach the router
//!     through the chosen probabilities, as in transformers), renormalised if the router says so
//! slots: the S = n·k assignments sorted by expert on the device (counting sort)
//! xs [S, H] = h[token of slot];  a [S, I] = glu(xs ·_e gate_upᵀ);  o [S, H] = a ·_e downᵀ
//! y [n, H] = sum_j w[n, j] · o[slot of (n, j)]   (+ the shared expert, optionally gated)
//! ```

use std::cell::RefCell;

use vkformers_tensor::ops::{activation, broadcast, embedding, glu, matmul, moe, reduce, shape, softmax};
use vkformers_tensor::{Graph, Tensor};

use super::aux_loss::RouterOut;
use super::{MoeSpec, Router};
use crate::decoder::Weights;
use crate::error::Result;
use crate::spec::layer_name;

/// `y [n, H]` of the MoE block of layer `i` on `h [n, H]`; the router's probabilities and
/// choices go to `router` when the load-balancing loss is wanted.
pub(crate) fn block(
    g: &Graph<'_>,
    w: &Weights,
    m: &MoeSpec,
    i: usize,
    h: &Tensor,
    router: Option<&RefCell<Vec<RouterOut>>>,
) -> Result<Tensor> {
    let (n, hidden, e, k) = (h.rows(), h.last_dim(), m.experts, m.top_k);
    let names = &m.names;
    let logits = matmul::linear(g, h, w.get(&layer_name(&names.router, i))?, None)?;
    let probs = softmax::softmax(g, &logits)?;
    let Router::SoftmaxTopK { renormalize } = m.router;
    let choice = moe::topk(g, &probs, k)?;
    // The chosen probabilities [n, k]: a gather from p viewed as a table [n·E, 1].
    let table = shape::reshape(g, &probs, &[n * e, 1])?;
    let mut weights = shape::reshape(g, &embedding::embedding(g, &table, &choice.flat)?, &[n, k])?;
    if renormalize {
        let sum = shape::reshape(g, &reduce::sum_last(g, &weights)?, &[n, 1])?;
        weights = broadcast::div(g, &weights, &sum)?;
    }
    let groups = moe::group(g, &choice.ids, e)?;
    let xs = embedding::embedding(g, h, &groups.token)?;
    let gate_up = moe::grouped_linear(g, &xs, w.get(&layer_name(&names.gate_up, i))?, &groups)?;
    let act = glu::glu_fused(g, &gate_up, m.glu)?;
    let out = moe::grouped_linear(g, &act, w.get(&layer_name(&names.down, i))?, &groups)?;
    // Back to assignment order [n, k, H], then each token's weighted sum: [n, 1, k] · [n, k, H].
    let per = shape::reshape(g, &embedding::embedding(g, &out, &groups.slot)?, &[n, k, hidden])?;
    let wk = shape::reshape(g, &weights, &[n, 1, k])?;
    let mut y = shape::reshape(g, &matmul::matmul(g, &wk, &per)?, &[n, hidden])?;
    if let Some(s) = &m.shared {
        let proj = |t: &str, x: &Tensor| -> Result<Tensor> {
            Ok(matmul::linear(g, x, w.get(&format!("{}.weight", layer_name(t, i)))?, None)?)
        };
        let inner = glu::glu(g, &proj(&s.gate_proj, h)?, &proj(&s.up_proj, h)?, m.glu)?;
        let mut shared = proj(&s.down_proj, &inner)?;
        if let Some(gate) = &s.gate {
            let scale = activation::sigmoid(g, &proj(gate, h)?)?;
            shared = broadcast::mul(g, &scale, &shared)?;
        }
        y = broadcast::add(g, &y, &shared)?;
    }
    if let Some(r) = router {
        r.borrow_mut().push(RouterOut { probs, sel: choice.sel });
    }
    Ok(y)
}
