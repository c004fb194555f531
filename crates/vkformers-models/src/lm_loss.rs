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

/// Logit elements per chunk: 2^24 (64 MiB in f32), e.g. 524 tokens of a 32000-token vocabulary
/// (head products of 524 x 32000 x H still fill a large GPU).
const CHUNK_ELEMENTS: usize = 1 << 24;

/// The mean causal-LM cross-entropy `[1]` of a batch (as `decoder::causal_lm_loss` of
/// `decoder::forward_with_aux`'s logits) and the MoE load-balancing loss, if the config asks
/// for it. `VKFORMERS_LOSS_CHUNK_ROWS=n` sets the tokens per chunk (tests, measurements).
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
    if w.lora().get(&head_name).is_some() {
        // A LoRA term on the head draws dropout per element of the whole batch: keep the
        // whole-logits path (the same masks as before).
        let logits = crate::lora::linear(g, &x, head, bias, w.lora(), &head_name)?;
        return Ok((loss::cross_entropy(g, &scale_and_cap(g, logits, scale, cap)?, &lab)?, aux));
    }
    let rows = chunk.unwrap_or_else(|| chunk_rows(head.shape()[0])).clamp(1, x.rows().max(1));
    let (head, bias) = (head.clone(), bias.cloned());
    let chunk_head = move |g: &Graph<'_>, xc: &Tensor| {
        let logits = matmul::linear(g, xc, &head, bias.as_ref())?;
        scale_and_cap(g, logits, scale, cap)
    };
    Ok((chunked_cross_entropy(g, &x, &lab, rows, Box::new(chunk_head))?, aux))
}

/// Tokens per chunk for a `vocab`-wide head.
fn chunk_rows(vocab: usize) -> usize {
    let forced = std::env::var("VKFORMERS_LOSS_CHUNK_ROWS").ok().and_then(|v| v.parse::<usize>().ok());
    forced.unwrap_or(CHUNK_ELEMENTS / vocab.max(1))
}
