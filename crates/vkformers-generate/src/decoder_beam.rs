//! Beam search for decoder-only models (see `crate::beam` for the search): one prompt at a time,
//! its `num_beams` beams run through the decoder without a KV cache (each step recomputes every
//! beam's whole sequence, so reordering beams moves nothing); the reference a shared-prefix
//! cached version is to be checked against.

use vkformers_models::decoder::{forward, Batch};
use vkformers_models::model::Model;
use vkformers_tensor::Graph;

use crate::beam::{search, BeamModel};
pub use crate::beam::{BeamIds, BeamOptions, EarlyStopping, Hypothesis};
use crate::decode::DecodeError;

struct Uncached<'a, 'g> {
    g: &'a Graph<'g>,
    model: &'a Model,
}

impl BeamModel for Uncached<'_, '_> {
    fn step(&mut self, beams: &[Vec<u32>]) -> Result<(Vec<f32>, usize), DecodeError> {
        let (b, t) = (beams.len(), beams[0].len());
        let ids: Vec<i32> = beams.iter().flatten().map(|&x| x as i32).collect();
        let mask = vec![1; ids.len()];
        let logits = forward(
            self.g,
            &self.model.spec,
            &self.model.weights,
            &Batch { ids: &ids, mask: &mask, batch: b, seq: t },
        )?;
        let (all, vocab) = (self.g.read(&logits)?, logits.last_dim());
        // Each beam's last position `[B, V]`.
        Ok((all.chunks(t * vocab).flat_map(|r| r[(t - 1) * vocab..].to_vec()).collect(), vocab))
    }

    fn reorder(&mut self, _src: &[usize]) -> Result<(), DecodeError> {
        Ok(())
    }
}

/// Beam search after each prompt; `num_return_sequences` hypotheses each, prompt first.
pub fn beam_search(
    g: &Graph<'_>,
    model: &Model,
    prompts: &[Vec<u32>],
    ids: &BeamIds,
    bo: &BeamOptions,
) -> Result<Vec<Vec<Hypothesis>>, DecodeError> {
    prompts
        .iter()
        .map(|p| {
            if p.is_empty() {
                return Err(DecodeError::EmptyPrompt);
            }
            g.no_grad(|| search(&mut Uncached { g, model }, p, ids, bo))
        })
        .collect()
}
