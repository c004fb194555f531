//! Beam search for encoder-decoder models (see `crate::beam` for the search): one source at a
//! time, encoded once for its `num_beams` beams, which are the rows of a `Seq2SeqCache` whose
//! decoder history is reordered after each step.

use vkformers_models::model::Model;
use vkformers_models::seq2seq::{encode, Encoded, Seq2SeqCache};
use vkformers_tensor::Graph;

use crate::beam::{search, BeamIds, BeamModel};
pub use crate::beam::{BeamOptions, EarlyStopping, Hypothesis};
use crate::decode::DecodeError;
use crate::seq2seq::Seq2SeqOptions;

/// The decoder of one source's beams.
struct Decoder<'a, 'g> {
    g: &'a Graph<'g>,
    model: &'a Model,
    cache: Seq2SeqCache,
}

impl BeamModel for Decoder<'_, '_> {
    fn step(&mut self, beams: &[Vec<u32>]) -> Result<(Vec<f32>, usize), DecodeError> {
        let last: Vec<i32> = beams.iter().map(|b| b[b.len() - 1] as i32).collect();
        let logits = self.cache.step(self.g, &self.model.spec, &self.model.weights, &last)?;
        Ok((self.g.read(&logits)?, logits.last_dim()))
    }

    fn reorder(&mut self, src: &[usize]) -> Result<(), DecodeError> {
        Ok(self.cache.reorder(self.g, src)?)
    }
}

/// Beam search of each source; `num_return_sequences` hypotheses each, the decoder's start token
/// first.
pub fn beam_search(
    g: &Graph<'_>,
    model: &Model,
    sources: &[Vec<u32>],
    opts: &Seq2SeqOptions,
    bo: &BeamOptions,
) -> Result<Vec<Vec<Hypothesis>>, DecodeError> {
    bo.check()?;
    let ids = BeamIds {
        eos: opts.eos.clone(),
        pad: opts.pad,
        forced_bos: opts.forced_bos,
        forced_eos: opts.forced_eos,
        max_new_tokens: opts.max_new_tokens,
    };
    let k = bo.num_beams;
    sources
        .iter()
        .map(|src| {
            if src.is_empty() {
                return Err(DecodeError::EmptyPrompt);
            }
            g.no_grad(|| {
                let enc_ids: Vec<i32> = (0..k).flat_map(|_| src.iter().map(|&t| t as i32)).collect();
                let mask = vec![1; enc_ids.len()];
                let hidden = encode(g, &model.spec, &model.weights, &enc_ids, &mask, (k, src.len()))?;
                let enc = Encoded { hidden: &hidden, mask: &mask, len: src.len() };
                let cache = Seq2SeqCache::new(g, &model.spec, &model.weights, &enc, k, opts.max_new_tokens + 1)?;
                search(&mut Decoder { g, model, cache }, &[opts.decoder_start], &ids, bo)
            })
        })
        .collect()
}
