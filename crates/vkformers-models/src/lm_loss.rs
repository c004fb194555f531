//! The causal-LM training loss without whole logits: the decoder runs to its final hidden
//! states `[B·T, H]`, and the LM head (with its logit scale and softcap) and the cross-entropy
//! run a chunk of tokens at a time (`ops::chunked_loss`), so the `[B·T, V]` logits and their
//! gradient never exist whole (0.5 GB each in f32 for 4 x 1024 tokens of a 32000-token
//! vocabulary). Evaluation and generation, which return logits, keep `decoder::forward`.

use vkformers_tensor::ops::chunked_loss::chunked_cross_entropy;
use vkformers_tensor::ops::{loss, matmul};
use vkformers_tensor::{Graph, Tensor};

use crate::decoder::{head_weights, hidden_with_aux, scale_and_cap, shifted_labels, Batch, Weights};
use crate::error::Result;
use crate::spec::ModelSpec;

/// Logit elements per chunk: 2^24 (64 MiB in f32), e.g. 512 tokens of a 32000-token vocabulary
/// (head products of 512 x 32000 x H still fill a large GPU). Each chunk after the first adds
/// its head-weight gradient `[V, H]` f32 into the accumulated one (an axpy), and the recompute
/// costs one more head product per step: fewer, larger chunks trade memory for that time.
const CHUNK_ELEMENTS: usize = 1 << 24;

/// The mean causal-LM cross-entropy `[1]` of a batch (as `decoder::causal_lm_loss` of
/// `decoder::forward_with_aux`'s logits) and the MoE load-balancing loss, if the config asks
/// for it. `VKFORMERS_LOSS_CHUNK_ROWS=n` sets the tokens per chunk (tests, measurements; 0:
/// the whole-logits path).
pub fn causal_lm_training_loss(
    g: &Graph<'_>,
    spec: &ModelSpec,
    w: &Weights,
    batch: &Batch<'_>,
    labels: &[i32],
) -> Result<(Tensor, Option<Tensor>)> {
    causal_lm_loss_in_chunks(g, spec, w, batch, labels, None)
}

/// [`causal_lm_training_loss`] with `chunk` tokens per chunk (`None`: the default rule).
pub fn causal_lm_loss_in_chunks(
    g: &Graph<'_>,
    spec: &ModelSpec,
    w: &Weights,
    batch: &Batch<'_>,
    labels: &[i32],
    chunk: Option<usize>,
) -> Result<(Tensor, Option<Tensor>)> {
    let (x, aux) = hidden_with_aux(g, spec, w, batch)?;
    let lab = shifted_labels(g, labels, batch.batch, batch.seq)?;
    let (head, bias) = head_weights(spec, w)?;
    let (scale, cap) = (spec.logit_scale, spec.final_softcap);
    let head_name = format!("{}.weight", spec.head_name);
    let rows = match chunk {
        Some(rows) => Some(rows),
        // One chunk would hold the whole logits anyway, and recompute the head in backward.
        None => default_chunk_rows(head.shape()[0]).filter(|&r| r < x.rows()),
    };
    let (Some(rows), None) = (rows, w.lora().get(&head_name)) else {
        // A LoRA term on the head draws dropout per element of the whole batch: keep the
        // whole-logits path (the same masks as before); so does VKFORMERS_LOSS_CHUNK_ROWS=0.
        let logits = crate::lora::linear(g, &x, head, bias, w.lora(), &head_name)?;
        return Ok((loss::cross_entropy(g, &scale_and_cap(g, logits, scale, cap)?, &lab)?, aux));
    };
    let rows = rows.clamp(1, x.rows().max(1));
    let (head, bias) = (head.clone(), bias.cloned());
    let chunk_head = move |g: &Graph<'_>, xc: &Tensor| {
        let logits = matmul::linear(g, xc, &head, bias.as_ref())?;
        scale_and_cap(g, logits, scale, cap)
    };
    Ok((chunked_cross_entropy(g, &x, &lab, rows, Box::new(chunk_head))?, aux))
}

/// Tokens per chunk for a `vocab`-wide head; `None`: whole logits (`VKFORMERS_LOSS_CHUNK_ROWS=0`,
/// for A/B measurements).
fn default_chunk_rows(vocab: usize) -> Option<usize> {
    let forced = std::env::var("VKFORMERS_LOSS_CHUNK_ROWS").ok().and_then(|v| v.parse::<usize>().ok());
    match forced {
        Some(0) => None,
        Some(rows) => Some(rows),
        // Whole 64-row blocks where possible (the products' tiles): 524 -> 512 for 32000.
        None => Some(match CHUNK_ELEMENTS / vocab.max(1) {
            r if r >= 64 => r / 64 * 64,
            r => r.max(1),
        }),
    }
}
