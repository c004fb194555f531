//! Beam search for encoder-decoder models (see `crate::beam` for the search), every source at
//! once as transformers searches a batch: the sources, right-padded with `pad_token_id` (masked),
//! each repeated for its `num_beams` beams (`[N·K, S]`, source-major), go through the encoder in
//! one forward; the `N·K` beams are the rows of one `Seq2SeqCache`, each step decodes all of them
//! in one forward `[N·K, 1]`, and their decoder history is reordered after each step.

use vkformers_models::model::Model;
use vkformers_models::seq2seq::{encode, Encoded, Seq2SeqCache};
use vkformers_tensor::Graph;

use crate::beam::{search_batch, BeamIds, BeamModel};
pub use crate::beam::{BeamOptions, EarlyStopping, Hypothesis};
use crate::decode::DecodeError;
use crate::seq2seq::{pad_sources, Seq2SeqOptions};

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

/// Beam search of every source in one batch; `num_return_sequences` hypotheses each, the
/// decoder's start token first, every one as long as the batch's longest.
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
    let (src_ids, src_mask, s) = pad_sources(sources, opts.pad)?;
    // Each source's row repeated for its K beams: `[N·K, S]`.
    let beams = |x: &[i32]| -> Vec<i32> { x.chunks(s).flat_map(|row| row.repeat(k)).collect() };
    let (enc_ids, mask) = (beams(&src_ids), beams(&src_mask));
    let rows = sources.len() * k;
    g.no_grad(|| {
        let hidden = encode(g, &model.spec, &model.weights, &enc_ids, &mask, (rows, s))?;
        let enc = Encoded { hidden: &hidden, mask: &mask, len: s };
        let cache = Seq2SeqCache::new(g, &model.spec, &model.weights, &enc, rows, opts.max_new_tokens + 1)?;
        let starts = vec![vec![opts.decoder_start]; sources.len()];
        search_batch(&mut Decoder { g, model, cache }, &starts, &ids, bo)
    })
}
