//! Decoding loops over a loaded model: uncached greedy decoding (every step runs the whole prefix
//! through the decoder; the reference the cached loops are checked against) and cached greedy
//! decoding of one sequence, a special case of [`crate::generation::generate`].

use vkformers_models::decoder::{forward, Batch};
use vkformers_models::model::Model;
use vkformers_tensor::Graph;

use crate::generation::{generate, GenerateOptions};
use crate::sampler::argmax;
use crate::GenerateError;

/// Errors of a decoding loop.
#[derive(Debug, thiserror::Error)]
pub enum DecodeError {
    #[error(transparent)]
    Model(#[from] vkformers_models::ModelError),
    #[error(transparent)]
    Device(#[from] vkformers_vk::VkError),
    #[error(transparent)]
    Sampling(#[from] GenerateError),
    #[error("empty prompt: give at least one token")]
    EmptyPrompt,
    #[error("the context ({rows} rows of {width} columns) has nothing the KV cache ({cached} columns of {batch} rows) does not hold")]
    NothingNew { rows: usize, width: usize, cached: usize, batch: usize },
    #[error("no token can be chosen (every logit is NaN)")]
    NoToken,
    #[error("bad request: {0}")]
    Request(String),
}

/// Greedy decoding of `new_tokens` tokens after `prompt`, recomputing the whole prefix each
/// step (no KV cache): the logits of the last position, argmax with the first index on ties.
pub fn greedy_uncached(
    g: &Graph<'_>,
    model: &Model,
    prompt: &[u32],
    new_tokens: usize,
) -> Result<Vec<u32>, DecodeError> {
    if prompt.is_empty() {
        return Err(DecodeError::EmptyPrompt);
    }
    let mut ids: Vec<i32> = prompt.iter().map(|&t| t as i32).collect();
    let mut out = Vec::with_capacity(new_tokens);
    g.no_grad(|| -> Result<(), DecodeError> {
        for _ in 0..new_tokens {
            let mask = vec![1; ids.len()];
            let batch = Batch { ids: &ids, mask: &mask, batch: 1, seq: ids.len() };
            let logits = forward(g, &model.spec, &model.weights, &batch)?;
            let all = g.read(&logits)?;
            let vocab = logits.last_dim();
            let next = argmax(&all[all.len() - vocab..]).ok_or(DecodeError::NoToken)?;
            out.push(next);
            ids.push(next as i32);
        }
        Ok(())
    })?;
    Ok(out)
}

/// Greedy decoding with a KV cache on the device: the prompt runs once (prefill), then each new
/// token runs alone against the cached keys and values.
pub fn greedy_cached(g: &Graph<'_>, model: &Model, prompt: &[u32], new_tokens: usize) -> Result<Vec<u32>, DecodeError> {
    let mut rows = greedy_batched(g, model, &[prompt.to_vec()], new_tokens)?;
    Ok(rows.remove(0))
}

/// Greedy decoding of a batch of prompts of any lengths (left-padded with id 0, never attended),
/// `new_tokens` per row, no EOS.
pub fn greedy_batched(
    g: &Graph<'_>,
    model: &Model,
    prompts: &[Vec<u32>],
    new_tokens: usize,
) -> Result<Vec<Vec<u32>>, DecodeError> {
    Ok(generate(g, model, prompts, &GenerateOptions::greedy(new_tokens), &mut |_, _| false)?.rows)
}
