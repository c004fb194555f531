//! PhiMoE's sparsemixer router (eval mode) on the device: the top-2 choice of each row of router
//! logits and the additive masks `[n, 2, E]` (0 or −10³⁰) of the two softmaxes its weights come
//! from (see `vkformers_kernels::moe::sparsemixer`). A choice: no gradient flows through it.

use vkformers_kernels::moe::sparsemixer as k;

use super::moe::TopK;
use crate::{Graph, Result, Tensor};

/// The choice (`flat` indexes the `[n·2, E]` masked softmax, not the logits) and the masks of
/// `logits [n, E]` with threshold `eps` (`router_jitter_noise`).
pub fn sparsemixer(g: &Graph<'_>, logits: &Tensor, eps: f32) -> Result<(TopK, Tensor)> {
    let (n, e) = (logits.rows(), logits.last_dim());
    let (mask, ids, flat, sel) = (g.empty(&[n, 2, e])?, g.empty(&[n, 2])?, g.empty(&[n, 2])?, g.empty(&[n, e])?);
    g.record(|rec| {
        let out = (mask.view(), ids.view(), flat.view(), sel.view());
        k::sparsemixer(rec, logits.view(), out, (n, e), eps)
    })?;
    Ok((TopK { ids, flat, sel }, mask))
}
