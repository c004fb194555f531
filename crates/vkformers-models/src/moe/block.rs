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
    activation, broadcast, clamped_swiglu, embedding, glu, matmul, moe, scatter, shape, softmax,
};
use vkformers_tensor::{Graph, Tensor};

use super::aux_loss::RouterOut;
use super::route::route;
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
    let mut xs = embedding::embedding(g, h, &groups.token)?;
    let input_scaled = m.router == Router::SigmoidTopKInput;
    if input_scaled {
        // Each slot's input times its score: the scores [n·k, 1] moved to slot order.
        let scores = shape::reshape(g, &weights, &[n * k, 1])?;
        xs = broadcast::mul(g, &xs, &scatter::scatter_rows(g, &scores, &groups.slot, n * k)?)?;
    }
    let out = match &m.biased {
        Some(b) => biased_experts(g, w, (m, b), i, &xs, &groups)?,
        None => experts(g, w, m, i, &xs, &groups)?,
    };
    // Back to assignment order [n, k, H], then each token's weighted sum: [n, 1, k] · [n, k, H].
    let per = shape::reshape(g, &embedding::embedding(g, &out, &groups.slot)?, &[n, k, hidden])?;
    // Input-scaled experts are summed as they are.
    let wk = if input_scaled {
        g.constant(&vec![1.0; n * k], &[n, 1, k])?
    } else {
        shape::reshape(g, &weights, &[n, 1, k])?
    };
    let mut y = shape::reshape(g, &matmul::matmul(g, &wk, &per)?, &[n, hidden])?;
    if let Some(b) = &m.out_bias {
        y = broadcast::add(g, &y, w.get(&layer_name(b, i))?)?;
    }
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
    // A packed parameter an adapter targets comes with its LoRA delta (target_parameters).
    let stack = |name: &str| super::lora::expert_weight(g, w, &layer_name(name, i));
    if m.in_out {
        // [E, H, 2I] as [E·H, 2I] and [E, I, H] as [E·I, H]: each expert's block used as stored.
        let (e, h, inter) = (m.experts, xs.last_dim(), m.intermediate);
        let gate_up = shape::reshape(g, &stack(&names.gate_up)?, &[e * h, 2 * inter])?;
        let act = glu::glu_fused(g, &moe::grouped_matmul(g, xs, &gate_up, groups)?, m.glu)?;
        let down = shape::reshape(g, &stack(&names.down)?, &[e * inter, h])?;
        return Ok(moe::grouped_matmul(g, &act, &down, groups)?);
    }
    let gate_up = moe::grouped_linear(g, xs, &stack(&names.gate_up)?, groups)?;
    let act = match &names.up {
        Some(up) => {
            let up = moe::grouped_linear(g, xs, w.get(&layer_name(up, i))?, groups)?;
            glu::glu(g, &gate_up, &up, m.glu)?
        }
        None => glu::glu_fused(g, &gate_up, m.glu)?,
    };
    let down = stack(&names.down)?;
    Ok(if m.down_transposed {
        moe::grouped_matmul(g, &act, &down, groups)?
    } else {
        moe::grouped_linear(g, &act, &down, groups)?
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
    // The stacks with an adapter's LoRA delta where it targets them (target_parameters).
    let stack = |t: &str| super::lora::expert_weight(g, w, &layer_name(t, i));
    let gate_up = shape::reshape(g, &stack(&m.names.gate_up)?, &[e * h, 2 * inter])?;
    let bias = embedding::embedding(g, get(&b.gate_up_bias)?, &groups.expert)?;
    let gate_up = broadcast::add(g, &moe::grouped_matmul(g, xs, &gate_up, groups)?, &bias)?;
    let act = clamped_swiglu::clamped_swiglu(g, &gate_up, b.act)?;
    let down = shape::reshape(g, &stack(&m.names.down)?, &[e * inter, h])?;
    let bias = embedding::embedding(g, get(&b.down_bias)?, &groups.expert)?;
    Ok(broadcast::add(g, &moe::grouped_matmul(g, &act, &down, groups)?, &bias)?)
}
