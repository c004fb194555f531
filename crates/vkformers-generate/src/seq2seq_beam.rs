//! Beam search for encoder-decoder models (see `crate::beam` for the search), every source at
//! once as transformers searches a batch: the sources, right-padded with `pad_token_id` (masked),
//! go through the encoder in one forward `[N, S]`, whose output is repeated for each source's
//! `num_beams` beams (`[N·K, S]`, source-major); the `N·K` beams are the rows of one
//! `Seq2SeqCache`, each step decodes all of them in one forward `[N·K, 1]`, and their decoder
//! history is reordered after each step.

use vkformers_models::model::Model;
use vkformers_models::seq2seq::{encode, Encoded, Seq2SeqCache};
use vkformers_tensor::ops::{cast, embedding, shape};
use vkformers_tensor::{DType, Graph, Tensor};

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
    let n = sources.len();
    // Each source's mask repeated for its K beams: `[N·K, S]`.
    let mask: Vec<i32> = src_mask.chunks(s).flat_map(|row| row.repeat(k)).collect();
    g.no_grad(|| {
        let hidden = encode(g, &model.spec, &model.weights, &src_ids, &src_mask, (n, s))?;
        let hidden = per_beam(g, &hidden, (n, s, k))?;
        let enc = Encoded { hidden: &hidden, mask: &mask, len: s };
        let cache = Seq2SeqCache::new(g, &model.spec, &model.weights, &enc, n * k, opts.max_new_tokens + 1)?;
        let starts = vec![vec![opts.decoder_start]; n];
        search_batch(&mut Decoder { g, model, cache }, &starts, &ids, bo)
    })
}

/// The encoder output `[N·S, hidden]` of N sources repeated for each one's K beams,
/// `[N·K·S, hidden]` (source-major): the rows `[N, S·hidden]` gathered by `n·K + j ↦ n` (a
/// lookup in the output as a table), so the encoder runs on N rows, not N·K.
fn per_beam(g: &Graph<'_>, hidden: &Tensor, (n, s, k): (usize, usize, usize)) -> Result<Tensor, DecodeError> {
    let width = hidden.numel() / (n * s);
    // The lookup reads f32 tables (a 16-bit output is widened; the projections take either).
    let hidden = if hidden.dtype() == DType::F32 { hidden.clone() } else { cast::cast(g, hidden, DType::F32)? };
    let table = shape::reshape(g, &hidden, &[n, s * width])?;
    let idx: Vec<i32> = (0..n * k).map(|r| (r / k) as i32).collect();
    let rows = embedding::embedding(g, &table, &g.ints(&idx, &[n * k])?)?;
    Ok(shape::reshape(g, &rows, &[n * k * s, width])?)
}
