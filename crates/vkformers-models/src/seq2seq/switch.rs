//! Switch Transformers' sparse feed-forward (`SwitchTransformersSparseMLP`): a top-1 router in
//! f32, `p = softmax(h Wrᵀ) [N, E]`, each token sent to `e = argmax p`; per sequence, tokens past
//! an expert's `expert_capacity` (counted in position order, `cumsum(one_hot) <= capacity`) are
//! dropped (their output is 0, the residual carries them); a routed token's output is
//! `p[e] · wo_e(act(wi_e(h)))`, so the router learns through the kept probability.
//!
//! The choice is read back to the host (it decides the gathers); the rest is differentiable ops:
//! rows gathered per expert, their weights gathered from `p`, and the outputs placed back by a
//! 0/1 selection product `S_e [N, n_e] · y_e`.

use vkformers_tensor::ops::{activation, broadcast, embedding, matmul, shape, softmax};
use vkformers_tensor::{Graph, Tensor};

use crate::decoder::{project, Weights};
use crate::error::Result;
use crate::spec::layer_name;
use vkformers_kernels::activation::Activation;

/// The sparse layers of both stacks and their experts.
#[derive(Clone, Debug, PartialEq)]
pub struct SwitchSpec {
    pub experts: usize,
    pub capacity: usize,
    pub d_ff: usize,
    pub act: Activation,
    /// Which encoder / decoder layers are sparse (`i % sparse_step == 1`, or all with step 1).
    pub encoder_sparse: Vec<bool>,
    pub decoder_sparse: Vec<bool>,
    /// Templates in `{i}` of the router (`….mlp.router.classifier`) and of an expert's module
    /// (`….mlp.experts.expert_{e}`), per stack: `[encoder, decoder]`.
    pub router: [String; 2],
    pub expert: [String; 2],
    /// `(router_z_loss_coef, router_aux_loss_coef)` when the loss includes the router losses
    /// (config `output_router_logits: true`, as `forward(..., output_router_logits=True)`).
    pub losses: Option<(f32, f32)>,
    /// Whether each stack (`[encoder, decoder]`) adds its router losses: transformers does so
    /// only for a `sparse_step` above 1.
    pub loss_stacks: [bool; 2],
}

impl SwitchSpec {
    /// Whether layer `i` of the decoder (`decoder`) or encoder stack is sparse.
    pub fn is_sparse(&self, decoder: bool, i: usize) -> bool {
        let v = if decoder { &self.decoder_sparse } else { &self.encoder_sparse };
        v.get(i).copied().unwrap_or(false)
    }

    /// The router's and expert `e`'s parameter name templates in stack `decoder`.
    pub fn names(&self, decoder: bool, e: usize) -> (String, String, String) {
        let s = usize::from(decoder);
        let x = self.expert[s].replace("{e}", &e.to_string());
        (self.router[s].clone(), format!("{x}.wi"), format!("{x}.wo"))
    }
}

/// Top-1 choice with capacity: for rows `[B, T]` of probabilities `[B·T, E]`, each token's
/// expert, or `None` when its expert is already full in its sequence.
pub fn route(probs: &[f32], (b, t, e): (usize, usize, usize), capacity: usize) -> Vec<Option<usize>> {
    let mut out = Vec::with_capacity(b * t);
    for row in 0..b {
        let mut count = vec![0usize; e];
        for pos in 0..t {
            let p = &probs[(row * t + pos) * e..(row * t + pos + 1) * e];
            // torch.argmax: the first of equal maxima.
            let best = (0..e).fold(0, |m, j| if p[j] > p[m] { j } else { m });
            count[best] += 1;
            out.push((count[best] <= capacity).then_some(best));
        }
    }
    out
}

/// The sparse block of layer `i` on normed rows `h [B·T, d]` of `b` sequences.
pub(crate) fn forward(
    g: &Graph<'_>,
    w: &Weights,
    sw: &SwitchSpec,
    (decoder, i): (bool, usize),
    h: &Tensor,
    b: usize,
) -> Result<Tensor> {
    let (n, d, e) = (h.shape()[0], h.shape()[1], sw.experts);
    let (router, _, _) = sw.names(decoder, 0);
    let logits = project(g, w, &router, i, h, false)?;
    let probs = softmax::softmax(g, &logits)?;
    let choice = route(&g.read(&probs)?, (b, n / b, e), sw.capacity);
    if super::router_loss::active() {
        let host = g.read(&logits)?;
        super::router_loss::record(super::router_loss::Record { decoder, logits, probs: probs.clone(), host, b });
    }
    let flat = shape::reshape(g, &probs, &[n * e, 1])?;
    let mut out: Option<Tensor> = None;
    for x in 0..e {
        let rows: Vec<usize> = (0..n).filter(|&r| choice[r] == Some(x)).collect();
        if rows.is_empty() {
            continue;
        }
        let ints = |v: Vec<i32>| g.ints(&v, &[rows.len()]);
        let xs = embedding::embedding(g, h, &ints(rows.iter().map(|&r| r as i32).collect())?)?;
        let (_, wi, wo) = sw.names(decoder, x);
        let y = project(g, w, &wo, i, &activation::activation(g, &project(g, w, &wi, i, &xs, false)?, sw.act)?, false)?;
        // The kept probability of each row, spread over d columns by a product with ones.
        let p = embedding::embedding(g, &flat, &ints(rows.iter().map(|&r| (r * e + x) as i32).collect())?)?;
        let p = matmul::matmul(g, &p, &g.constant(&vec![1.0; d], &[1, d])?)?;
        let y = broadcast::mul(g, &y, &p)?;
        let mut sel = vec![0f32; n * rows.len()];
        for (k, &r) in rows.iter().enumerate() {
            sel[r * rows.len() + k] = 1.0;
        }
        let placed = matmul::matmul(g, &g.constant(&sel, &[n, rows.len()])?, &y)?;
        out = Some(match out {
            Some(o) => broadcast::add(g, &o, &placed)?,
            None => placed,
        });
    }
    match out {
        Some(o) => Ok(o),
        None => Ok(g.constant(&vec![0.0; n * d], &[n, d])?),
    }
}

/// A sparse layer's parameters: the router `[E, d]`, each expert's `wi [d_ff, d]`, `wo [d, d_ff]`.
pub(crate) fn plan_layer(out: &mut Vec<crate::init::Planned>, sw: &SwitchSpec, decoder: bool, i: usize, d: usize) {
    let (router, _, _) = sw.names(decoder, 0);
    crate::init::linear(out, &layer_name(&router, i), sw.experts, d, false);
    for x in 0..sw.experts {
        let (_, wi, wo) = sw.names(decoder, x);
        crate::init::linear(out, &layer_name(&wi, i), sw.d_ff, d, false);
        crate::init::linear(out, &layer_name(&wo, i), d, sw.d_ff, false);
    }
}

#[cfg(test)]
mod tests {
    use super::route;

    #[test]
    fn top1_with_capacity_per_sequence_in_position_order() {
        // Two sequences of 4 tokens over 2 experts, capacity 2: the third token choosing expert 0
        // in a sequence is dropped; the count restarts with the next sequence; ties take the first.
        let p = [
            0.9, 0.1, 0.8, 0.2, 0.3, 0.7, 0.6, 0.4, // sequence 0: 0, 0, 1, 0 (dropped)
            0.5, 0.5, 0.2, 0.8, 0.1, 0.9, 0.4, 0.6, // sequence 1: 0 (tie), 1, 1, 1 (dropped)
        ];
        let want = [Some(0), Some(0), Some(1), None, Some(0), Some(1), Some(1), None];
        assert_eq!(route(&p, (2, 4, 2), 2), want);
    }
}
