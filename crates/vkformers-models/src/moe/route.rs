//! Routing: the router logits `[n, E]` to the chosen experts (top-k ids, flat indices, 0/1
//! selection) and their weights `[n, k]`, by the spec's `Router` kind. Gradients reach the
//! router through the gathered scores (as in transformers); the choices themselves take none.

use vkformers_tensor::ops::{activation, broadcast, embedding, moe, reduce, shape, softmax, sparsemixer};
use vkformers_tensor::{Graph, Tensor};

use super::{MoeSpec, Router};
use crate::decoder::Weights;
use crate::error::Result;
use crate::spec::layer_name;

/// The chosen experts and their weights `[n, k]` from the router logits `[n, E]`.
pub(super) fn route(g: &Graph<'_>, w: &Weights, m: &MoeSpec, i: usize, logits: &Tensor) -> Result<(moe::TopK, Tensor)> {
    let (n, e, k) = (logits.rows(), m.experts, m.top_k);
    if m.router == Router::TopKSoftmax {
        let (choice, weights) = topk_softmax(g, logits, k)?;
        return Ok((choice, scaled(g, weights, m.routed_scale)?));
    }
    if m.router == Router::SigmoidTopKInput {
        // Llama 4: the k largest logits choose, their sigmoids are the (input) scales.
        let choice = moe::topk(g, logits, k)?;
        let scales = activation::sigmoid(g, &gathered(g, logits, &choice.flat, k)?)?;
        return Ok((choice, scales));
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
        Router::TopKSoftmax | Router::SparseMixer { .. } | Router::SigmoidTopKInput => {
            unreachable!("handled above")
        }
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

/// The k largest logits of `logits [n, E]` (the k largest probabilities) and the softmax over
/// those k, `[n, k]`: GraniteMoE's and JetMoE's routers.
pub(crate) fn topk_softmax(g: &Graph<'_>, logits: &Tensor, k: usize) -> Result<(moe::TopK, Tensor)> {
    let choice = moe::topk(g, logits, k)?;
    let weights = softmax::softmax(g, &gathered(g, logits, &choice.flat, k)?)?;
    Ok((choice, weights))
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
