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

use vkformers_tensor::ops::{
    activation, broadcast, clamped_swiglu, embedding, glu, matmul, moe, reduce, shape, softmax, sparsemixer,
};
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
    // The router and shared projections take an adapter's LoRA terms like any Linear.
    let router_name = layer_name(&names.router, i);
    let router_bias = m.biased.as_ref().map(|b| w.get(&layer_name(&b.router_bias, i))).transpose()?;
    let logits = crate::lora::linear(g, h, w.get(&router_name)?, router_bias, w.lora(), &router_name)?;
    let (choice, weights) = route(g, w, m, i, &logits)?;
    let groups = moe::group(g, &choice.ids, e)?;
    let xs = embedding::embedding(g, h, &groups.token)?;
    let out = match &m.biased {
        Some(b) => biased_experts(g, w, (m, b), i, &xs, &groups)?,
        None => experts(g, w, m, i, &xs, &groups)?,
    };
    // Back to assignment order [n, k, H], then each token's weighted sum: [n, 1, k] · [n, k, H].
    let per = shape::reshape(g, &embedding::embedding(g, &out, &groups.slot)?, &[n, k, hidden])?;
    let wk = shape::reshape(g, &weights, &[n, 1, k])?;
    let mut y = shape::reshape(g, &matmul::matmul(g, &wk, &per)?, &[n, hidden])?;
    if let Some(s) = &m.shared {
        let proj = |t: &str, x: &Tensor| -> Result<Tensor> {
            let name = format!("{}.weight", layer_name(t, i));
            Ok(crate::lora::linear(g, x, w.get(&name)?, None, w.lora(), &name)?)
        };
        let inner = match &s.up_proj {
            Some(up) => glu::glu(g, &proj(&s.gate_proj, h)?, &proj(up, h)?, m.glu)?,
            None => glu::glu_fused(g, &proj(&s.gate_proj, h)?, m.glu)?,
        };
        let mut shared = proj(&s.down_proj, &inner)?;
        if let Some(gate) = &s.gate {
            let scale = activation::sigmoid(g, &proj(gate, h)?)?;
            shared = broadcast::mul(g, &scale, &shared)?;
        }
        y = broadcast::add(g, &y, &shared)?;
    }
    if let Some(r) = router {
        // The load-balancing loss reads the full softmax whatever the router (transformers
        // recomputes it from the router logits).
        let probs = softmax::softmax(g, &logits)?;
        // Its counts are of the top-k of p itself, without a correction bias.
        let sel = match m.router {
            Router::SoftmaxBiasedTopK { .. } => moe::topk(g, &probs, k)?.sel,
            _ => choice.sel,
        };
        r.borrow_mut().push(RouterOut { probs, sel });
    }
    Ok(y)
}

/// The experts' outputs `[S, H]` on the grouped rows `xs [S, H]`: a gated MLP per expert from the
/// packed (or separate gate and up) stacks, the down stack as stored or transposed.
fn experts(g: &Graph<'_>, w: &Weights, m: &MoeSpec, i: usize, xs: &Tensor, groups: &moe::Groups) -> Result<Tensor> {
    let names = &m.names;
    let gate_up = moe::grouped_linear(g, xs, w.get(&layer_name(&names.gate_up, i))?, groups)?;
    let act = match &names.up {
        Some(up) => {
            let up = moe::grouped_linear(g, xs, w.get(&layer_name(up, i))?, groups)?;
            glu::glu(g, &gate_up, &up, m.glu)?
        }
        None => glu::glu_fused(g, &gate_up, m.glu)?,
    };
    let down = w.get(&layer_name(&names.down, i))?;
    Ok(if m.down_transposed {
        moe::grouped_matmul(g, &act, down, groups)?
    } else {
        moe::grouped_linear(g, &act, down, groups)?
    })
}

/// gpt-oss's experts on `xs [S, H]`: `a = clamped_swiglu(xs ·_e GU_e + b_e)` with `GU [E, H, 2I]`
/// used in-out and `b [E, 2I]` gathered by each slot's expert, then `a ·_e D_e + d_e`
/// (`D [E, I, H]`, `d [E, H]`); bias gradients sum over each expert's slots (the gather's
/// backward).
fn biased_experts(
    g: &Graph<'_>,
    w: &Weights,
    (m, b): (&MoeSpec, &super::BiasedExperts),
    i: usize,
    xs: &Tensor,
    groups: &moe::Groups,
) -> Result<Tensor> {
    let (e, h, inter) = (m.experts, xs.last_dim(), m.intermediate);
    let get = |t: &str| w.get(&layer_name(t, i));
    let gate_up = shape::reshape(g, get(&m.names.gate_up)?, &[e * h, 2 * inter])?;
    let bias = embedding::embedding(g, get(&b.gate_up_bias)?, &groups.expert)?;
    let gate_up = broadcast::add(g, &moe::grouped_matmul(g, xs, &gate_up, groups)?, &bias)?;
    let act = clamped_swiglu::clamped_swiglu(g, &gate_up, b.act)?;
    let down = shape::reshape(g, get(&m.names.down)?, &[e * inter, h])?;
    let bias = embedding::embedding(g, get(&b.down_bias)?, &groups.expert)?;
    Ok(broadcast::add(g, &moe::grouped_matmul(g, &act, &down, groups)?, &bias)?)
}

/// The chosen experts and their weights `[n, k]` from the router logits `[n, E]`.
fn route(g: &Graph<'_>, w: &Weights, m: &MoeSpec, i: usize, logits: &Tensor) -> Result<(moe::TopK, Tensor)> {
    let (n, e, k) = (logits.rows(), m.experts, m.top_k);
    if m.router == Router::TopKSoftmax {
        // The k largest logits are the k largest probabilities; their softmax is the weights.
        let choice = moe::topk(g, logits, k)?;
        let weights = softmax::softmax(g, &gathered(g, logits, &choice.flat, k)?)?;
        return Ok((choice, scaled(g, weights, m.routed_scale)?));
    }
    if let Router::SparseMixer { eps } = m.router {
        return sparse_mixer(g, logits, eps);
    }
    let probs = softmax::softmax(g, logits)?;
    // The scores the top-k chooses from, and those its weights are read from.
    let (choose, scores, renormalize) = match &m.router {
        Router::SoftmaxTopK { renormalize } => (probs.clone(), probs.clone(), *renormalize),
        Router::SoftmaxBiasedTopK { bias } => {
            (broadcast::add(g, &probs, w.get(&layer_name(bias, i))?)?, probs.clone(), true)
        }
        Router::SoftmaxGroupLimited { groups, top_groups } => {
            let keep = group_mask(g, &probs, (*groups, *top_groups), 1)?;
            // p with the experts of the other groups zeroed, [n, G, E/G] -> [n, E].
            let grouped = shape::reshape(g, &probs, &[n, *groups, e / groups])?;
            let masked = shape::reshape(g, &broadcast::mul(g, &grouped, &keep)?, &[n, e])?;
            (masked.clone(), masked, false)
        }
        Router::SigmoidGroupLimited { groups, top_groups, renormalize, bias } => {
            let s = activation::sigmoid(g, logits)?;
            let biased = match bias {
                Some(b) => broadcast::add(g, &s, w.get(&layer_name(b, i))?)?,
                None => s.clone(),
            };
            let keep = group_mask(g, &biased, (*groups, *top_groups), 2)?;
            // Outside the kept groups s + bias − 10³⁰ (transformers' −inf): never chosen.
            let off = broadcast::scale(g, &broadcast::sub(g, &keep, &g.constant(&[1.0], &[1])?)?, 1e30)?;
            let grouped = shape::reshape(g, &biased, &[n, *groups, e / groups])?;
            (shape::reshape(g, &broadcast::add(g, &grouped, &off)?, &[n, e])?, s, *renormalize)
        }
        Router::TopKSoftmax | Router::SparseMixer { .. } => unreachable!("handled above"),
    };
    let choice = moe::topk(g, &choose, k)?;
    // The chosen scores [n, k]: a gather from the scores viewed as a table [n·E, 1].
    let mut weights = gathered(g, &scores, &choice.flat, k)?;
    if renormalize {
        let sum = shape::reshape(g, &reduce::sum_last(g, &weights)?, &[n, 1])?;
        weights = broadcast::div(g, &weights, &sum)?;
    }
    Ok((choice, scaled(g, weights, m.routed_scale)?))
}

/// PhiMoE's eval-mode sparsemixer: the two choices and their weights, each the chosen entry of
/// a softmax over the logits plus that choice's mask: `[n, 1, E] + [n, 2, E]` -> softmax over E
/// -> gathered at `flat` from the `[n·2·E]` table.
fn sparse_mixer(g: &Graph<'_>, logits: &Tensor, eps: f32) -> Result<(moe::TopK, Tensor)> {
    let (n, e) = (logits.rows(), logits.last_dim());
    let (choice, mask) = sparsemixer::sparsemixer(g, logits, eps)?;
    let masked = broadcast::add(g, &shape::reshape(g, logits, &[n, 1, e])?, &mask)?;
    let probs = softmax::softmax(g, &shape::reshape(g, &masked, &[n * 2, e])?)?;
    let table = shape::reshape(g, &probs, &[n * 2 * e, 1])?;
    let weights = shape::reshape(g, &embedding::embedding(g, &table, &choice.flat)?, &[n, 2])?;
    Ok((choice, weights))
}

/// The routing weights times `routed_scaling_factor` (after any renormalisation).
fn scaled(g: &Graph<'_>, weights: Tensor, scale: f32) -> Result<Tensor> {
    Ok(if scale == 1.0 { weights } else { broadcast::scale(g, &weights, scale)? })
}

/// `x [rows, E]` at the int32 flat indices `flat [rows, k]` (`row·E + column`) as `[rows, k]`;
/// gradients flow back to the gathered entries.
fn gathered(g: &Graph<'_>, x: &Tensor, flat: &Tensor, k: usize) -> Result<Tensor> {
    let (rows, e) = (x.rows(), x.last_dim());
    let table = shape::reshape(g, x, &[rows * e, 1])?;
    Ok(shape::reshape(g, &embedding::embedding(g, &table, flat)?, &[rows, k])?)
}

/// The 0/1 mask `[n, G, 1]` of each token's `top_groups` best expert groups, a group ranked by
/// the sum of its `best` largest scores (`scores [n, E]`, E = G · E/G experts in G contiguous
/// groups). A choice, so no gradient flows through it.
fn group_mask(g: &Graph<'_>, scores: &Tensor, (groups, top_groups): (usize, usize), best: usize) -> Result<Tensor> {
    let (n, e) = (scores.rows(), scores.last_dim());
    let per_group = shape::reshape(g, scores, &[n * groups, e / groups])?;
    let top = moe::topk(g, &per_group, best)?;
    let mut rank = gathered(g, &per_group, &top.flat, best)?;
    if best > 1 {
        rank = reduce::sum_last(g, &rank)?;
    }
    let rank = shape::reshape(g, &rank, &[n, groups])?;
    let chosen = moe::topk(g, &rank, top_groups)?;
    Ok(shape::reshape(g, &chosen.sel, &[n, groups, 1])?)
}
