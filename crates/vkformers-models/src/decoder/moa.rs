//! JetMoE's mixture of attention heads (MoA) in the decoder graph, on the tokens `h [n, H]`
//! (n = B·T) of one layer with E attention experts, top-k, `kv` key/value heads of D values:
//!
//! ```text
//! logits [n, E] = h · W_routerᵀ;  ids [n, k] = top-k(logits);  w [n, k] = softmax(logits[ids])
//! q_e   [kv·D] = W_in[e] · h           for each chosen expert e of the token   (grouped GEMM)
//! k, v  [n, kv, D] = the layer's k/v projections (one K/V for every expert)
//! heads: q of chosen slot s, head j attends with kv head j (transformers `repeat`s K/V k times)
//! o_s   [kv·D] -> y = sum_s w[s] · W_out[ids[s]] · o_s + bias                 (grouped GEMM)
//! ```
//!
//! The fused attention pairs query head `j` with kv head `j / (Hq / kv)`, so the query heads are
//! reordered from transformers' `(slot, head)` to `(head, slot)` before it (and back after): a
//! row gather of the `[n·k·kv, D]` heads, exact, whose backward scatters the gradient back.
//! Expert products run on the assignments sorted by expert (`moe::group`); the attention outputs
//! go to that order with `scatter_rows` (the inverse of the gather by `Groups::slot`).

use vkformers_tensor::ops::{broadcast, embedding, matmul, moe, rope, scatter, shape, softmax};
use vkformers_tensor::{Graph, Tensor};

use super::{attend, project, Inputs, Weights};
use crate::error::Result;
use crate::moe::{MoaSpec, RouterOut};
use crate::spec::{layer_name, AttnSpec, ModelSpec};

/// Row indices that reorder `n` tokens' `k × kv` heads: with `to_head_major`, destination row
/// `(t·kv + h)·k + s` reads source row `(t·k + s)·kv + h`; otherwise the inverse.
fn head_order(n: usize, k: usize, kv: usize, to_head_major: bool) -> Vec<i32> {
    let mut idx = vec![0i32; n * k * kv];
    for t in 0..n {
        for s in 0..k {
            for h in 0..kv {
                let (slot_major, head_major) = ((t * k + s) * kv + h, (t * kv + h) * k + s);
                let (dst, src) = if to_head_major { (head_major, slot_major) } else { (slot_major, head_major) };
                idx[dst] = src as i32;
            }
        }
    }
    idx
}

/// `x [n·k·kv, D]` with its heads reordered (see [`head_order`]).
fn reorder(g: &Graph<'_>, x: &Tensor, (n, k, kv): (usize, usize, usize), to_head_major: bool) -> Result<Tensor> {
    let idx = g.ints(&head_order(n, k, kv, to_head_major), &[n * k * kv])?;
    Ok(embedding::embedding(g, x, &idx)?)
}

/// The MoA output `[B·T, H]` of layer `i` on `h [B·T, H]`.
#[allow(clippy::too_many_arguments)]
pub(super) fn attention(
    g: &Graph<'_>,
    spec: &ModelSpec,
    w: &Weights,
    (a, m): (&AttnSpec, &MoaSpec),
    i: usize,
    h: &Tensor,
    inp: &Inputs<'_>,
    (b, t): (usize, usize),
) -> Result<Tensor> {
    let (n, hidden, k, kv, d) = (b * t, h.last_dim(), m.top_k, a.kv_heads, a.head_dim);
    let router = layer_name(&m.router, i);
    let logits = crate::lora::linear(g, h, w.get(&router)?, None, w.lora(), &router)?;
    let (choice, weights) = crate::moe::topk_softmax(g, &logits, k)?;
    if let Some(r) = &inp.router {
        let probs = softmax::softmax(g, &logits)?;
        r.borrow_mut().push(RouterOut { probs, sel: choice.sel.clone() });
    }
    let groups = moe::group(g, &choice.ids, m.experts)?;
    // Queries per assignment (token·k + slot) [n·k, kv·D], then heads in (head, slot) order.
    let xs = embedding::embedding(g, h, &groups.token)?;
    // The packed stacks with an adapter's LoRA delta where it targets them (target_parameters).
    let stack = |t: &str| crate::moe::lora::expert_weight(g, w, &layer_name(t, i));
    let q_sorted = moe::grouped_linear(g, &xs, &stack(&m.input)?, &groups)?;
    let q = embedding::embedding(g, &q_sorted, &groups.slot)?;
    let q = reorder(g, &shape::reshape(g, &q, &[n * k * kv, d])?, (n, k, kv), true)?;
    let mut q = shape::reshape(g, &q, &[b, t, k * kv, d])?;
    let names = &spec.layer_names;
    let mut kk = shape::reshape(g, &project(g, w, &names.k, i, h, false)?, &[b, t, kv, d])?;
    let v = shape::reshape(g, &project(g, w, &names.v, i, h, false)?, &[b, t, kv, d])?;
    if let Some(r) = &a.rope {
        let freq = inp.freq(g, &r.inv_freq)?;
        q = rope::rope(g, &q, &inp.pos, &freq, r.layout, r.rotary_dim, r.mscale)?;
        kk = rope::rope(g, &kk, &inp.pos, &freq, r.layout, r.rotary_dim, r.mscale)?;
    }
    let o = attend(g, (a, w), i, (&q, &kk, &v), inp)?;
    // Back to assignments [n·k, kv·D], then to expert order for the output experts.
    let o = reorder(g, &shape::reshape(g, &o, &[n * k * kv, d])?, (n, k, kv), false)?;
    let o = shape::reshape(g, &o, &[n * k, kv * d])?;
    let o_sorted = scatter::scatter_rows(g, &o, &groups.slot, n * k)?;
    let y_sorted = moe::grouped_linear(g, &o_sorted, &stack(&m.output)?, &groups)?;
    // Each token's weighted sum over its k experts: [n, 1, k] · [n, k, H].
    let per = shape::reshape(g, &embedding::embedding(g, &y_sorted, &groups.slot)?, &[n, k, hidden])?;
    let wk = shape::reshape(g, &weights, &[n, 1, k])?;
    let y = shape::reshape(g, &matmul::matmul(g, &wk, &per)?, &[n, hidden])?;
    Ok(broadcast::add(g, &y, w.get(&layer_name(&m.bias, i))?)?)
}

#[cfg(test)]
mod tests {
    use super::head_order;

    #[test]
    fn head_orders_are_inverse_permutations() {
        let (n, k, kv) = (3, 2, 4);
        let (to, back) = (head_order(n, k, kv, true), head_order(n, k, kv, false));
        for (dst, &src) in back.iter().enumerate() {
            assert_eq!(to[src as usize] as usize, dst);
        }
        // Token 0: head-major row 1 is (head 0, slot 1) = slot-major row kv.
        assert_eq!(to[1] as usize, kv);
    }
}
