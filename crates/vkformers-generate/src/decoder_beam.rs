//! Beam search for decoder-only models (see `crate::beam` for the search), one prompt at a time,
//! on the paged KV cache:
//! - the prompt is prefilled once, in row 0; rows 1..K (the other beams) then share its blocks
//!   (`KvCache::share`: block tables re-pointed, blocks counted once);
//! - each step decodes the newest token of all K beams in one forward `[K, 1]`;
//! - reordering beams after a step re-points block tables and reference counts instead of
//!   copying caches; a beam writing into a shared, partly filled last block copies that block
//!   alone (copy on write, in the cache's store);
//! - when the search ends every row is released: the pools are back to empty.
//!
//! Models on LongRoPE's long factors past their original context (whose whole history must be
//! rotated again when they cross it) run the uncached search instead: each step recomputes every
//! beam's whole sequence ([`beam_search_uncached`], also the reference the cached search is
//! tested against).

use vkformers_models::decoder::{forward, forward_cached_last, Batch, KvCache, BLOCK_SIZE};
use vkformers_models::model::Model;
use vkformers_tensor::Graph;

use crate::beam::{search, BeamModel};
pub use crate::beam::{BeamIds, BeamOptions, EarlyStopping, Hypothesis};
use crate::decode::DecodeError;

/// Every beam's whole sequence through the decoder each step.
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

/// Blocks of the paged cache (summed over its layer groups) during one prompt's search.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct BlockUse {
    /// In use once the prompt is prefilled and shared by every beam.
    pub after_prompt: usize,
    /// The most in use after any step.
    pub peak: usize,
    /// In use after the search released its rows (0 unless a block leaked).
    pub at_end: usize,
}

/// The K beams as the K rows of a paged cache.
struct Paged<'a, 'g> {
    g: &'a Graph<'g>,
    model: &'a Model,
    cache: KvCache,
    usage: BlockUse,
}

impl Paged<'_, '_> {
    /// Logits `[n, V]` of the last column of `rows` fed `ids` (`[n, T]`).
    fn forward(&self, rows: &[usize], ids: &[i32]) -> Result<(Vec<f32>, usize), DecodeError> {
        self.cache.select(rows)?;
        let mask = vec![1; ids.len()];
        let batch = Batch { ids, mask: &mask, batch: rows.len(), seq: ids.len() / rows.len() };
        let logits = forward_cached_last(self.g, &self.model.spec, &self.model.weights, &batch, &self.cache)?;
        Ok((self.g.read(&logits)?, logits.last_dim()))
    }
}

impl BeamModel for Paged<'_, '_> {
    fn step(&mut self, beams: &[Vec<u32>]) -> Result<(Vec<f32>, usize), DecodeError> {
        let k = beams.len();
        let rows: Vec<usize> = (0..k).collect();
        if self.cache.row_len(0) == 0 {
            // The first step: every beam is the prompt. It runs once, in row 0; the other beams
            // share its blocks and its logits (transformers computes K equal rows).
            let ids: Vec<i32> = beams[0].iter().map(|&x| x as i32).collect();
            let (logits, vocab) = self.forward(&[0], &ids)?;
            self.cache.share(&rows[1..], &vec![0; k - 1])?;
            self.usage.after_prompt = self.cache.blocks_in_use().0;
            self.usage.peak = self.usage.after_prompt;
            return Ok((logits.repeat(k), vocab));
        }
        let last: Vec<i32> = beams.iter().map(|b| b[b.len() - 1] as i32).collect();
        let out = self.forward(&rows, &last)?;
        self.usage.peak = self.usage.peak.max(self.cache.blocks_in_use().0);
        Ok(out)
    }

    fn reorder(&mut self, src: &[usize]) -> Result<(), DecodeError> {
        let rows: Vec<usize> = (0..src.len()).collect();
        Ok(self.cache.share(&rows, src)?)
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
            if beyond_longrope_context(model, p.len() + ids.max_new_tokens) {
                return one_uncached(g, model, p, ids, bo);
            }
            Ok(beam_search_paged(g, model, p, ids, bo, BLOCK_SIZE)?.0)
        })
        .collect()
}

/// Beam search after one prompt on a paged cache of `block_size`-position blocks, and how many
/// blocks it used.
pub fn beam_search_paged(
    g: &Graph<'_>,
    model: &Model,
    prompt: &[u32],
    ids: &BeamIds,
    bo: &BeamOptions,
    block_size: usize,
) -> Result<(Vec<Hypothesis>, BlockUse), DecodeError> {
    if prompt.is_empty() {
        return Err(DecodeError::EmptyPrompt);
    }
    bo.check()?;
    let k = bo.num_beams;
    let capacity = prompt.len() + ids.max_new_tokens;
    let cache = KvCache::with_block_size(g, &model.spec, k, capacity, block_size)?;
    let mut paged = Paged { g, model, cache, usage: BlockUse::default() };
    let hyps = g.no_grad(|| search(&mut paged, prompt, ids, bo))?;
    (0..k).for_each(|r| paged.cache.release(r));
    paged.usage.at_end = paged.cache.blocks_in_use().0;
    Ok((hyps, paged.usage))
}

/// Beam search after each prompt without a KV cache (every beam's whole sequence each step).
pub fn beam_search_uncached(
    g: &Graph<'_>,
    model: &Model,
    prompts: &[Vec<u32>],
    ids: &BeamIds,
    bo: &BeamOptions,
) -> Result<Vec<Vec<Hypothesis>>, DecodeError> {
    prompts.iter().map(|p| one_uncached(g, model, p, ids, bo)).collect()
}

fn one_uncached(
    g: &Graph<'_>,
    model: &Model,
    prompt: &[u32],
    ids: &BeamIds,
    bo: &BeamOptions,
) -> Result<Vec<Hypothesis>, DecodeError> {
    if prompt.is_empty() {
        return Err(DecodeError::EmptyPrompt);
    }
    g.no_grad(|| search(&mut Uncached { g, model }, prompt, ids, bo))
}

/// Whether a sequence of `len` positions runs past a LongRoPE model's original context.
fn beyond_longrope_context(model: &Model, len: usize) -> bool {
    let long = |l: &vkformers_models::spec::LayerSpec| l.attn.rope.as_ref().and_then(|r| r.long.as_ref()).map(|l| l.1);
    model.spec.layers.iter().find_map(long).is_some_and(|original| len > original)
}
