//! Greedy generation for encoder-decoder models (T5, BART families), as transformers' `generate`:
//! the encoder runs once over the (right-padded) sources; the decoder starts from
//! `decoder_start_token_id` and adds one token per row per step against
//! `vkformers_models::seq2seq::Seq2SeqCache` (cross-attention keys and values projected once,
//! self-attention keys and values appended). `forced_bos_token_id` is forced as the first new
//! token, `forced_eos_token_id` as the last one `max_length` allows; a row that emits an EOS id
//! is finished and continues with `pad_token_id` until every row is. Other tokens come from the
//! logits processors of `params` (repetition penalty over the decoder ids so far, start token
//! included; when sampling, temperature, top-k, top-p, min-p) and then argmax or the seeded draw
//! of `Sampler::Seeded` (per step and row, so a seed repeats a run exactly). The uncached loop
//! reruns the whole decoder prefix each step: the reference the cache is checked against.

use serde_json::Value;
use vkformers_models::model::Model;
use vkformers_models::seq2seq::{decode, encode, Encoded, Seq2SeqCache};
use vkformers_tensor::{Graph, Tensor};

use crate::config::token_id;
use crate::decode::DecodeError;
use crate::processors::{Pipeline, SamplingParams};
use crate::sampler::Sampler;

/// What a seq2seq generation runs with (from the config and `generation_config.json`).
#[derive(Clone, Debug, PartialEq)]
pub struct Seq2SeqOptions {
    pub max_new_tokens: usize,
    pub decoder_start: u32,
    pub eos: Vec<u32>,
    pub pad: u32,
    pub forced_bos: Option<u32>,
    pub forced_eos: Option<u32>,
    /// Processors and greedy / sampled choice (`SamplingParams::greedy()` from the configs).
    pub params: SamplingParams,
    /// The sampler's seed (ignored when greedy).
    pub seed: u64,
}

impl Seq2SeqOptions {
    /// The ids from `generation_config.json` (`gen`, may be null) over `config.json` (`cfg`), as
    /// transformers merges them; `max_new_tokens` as given.
    pub fn from_configs(gen: &Value, cfg: &Value, max_new_tokens: usize) -> Result<Self, DecodeError> {
        // Ids past u32 name no token: they are as absent (`config::token_id`), never wrapped.
        let field = |k: &str| gen.get(k).filter(|v| !v.is_null()).or_else(|| cfg.get(k));
        let id = |k: &str| field(k).and_then(token_id);
        let ids = |k: &str| -> Vec<u32> {
            match field(k) {
                Some(Value::Array(a)) => a.iter().filter_map(token_id).collect(),
                Some(v) => token_id(v).into_iter().collect(),
                None => Vec::new(),
            }
        };
        let start = id("decoder_start_token_id").or_else(|| id("bos_token_id")).ok_or_else(|| {
            DecodeError::Model(vkformers_models::ModelError::Config(
                "config.json names no decoder_start_token_id (nor bos_token_id) to start the decoder from \
                 (a token id: an integer below 2^32)"
                    .into(),
            ))
        })?;
        Ok(Seq2SeqOptions {
            max_new_tokens,
            decoder_start: start,
            eos: ids("eos_token_id"),
            pad: id("pad_token_id").unwrap_or(0),
            forced_bos: id("forced_bos_token_id"),
            forced_eos: ids("forced_eos_token_id").first().copied(),
            params: SamplingParams::greedy(),
            seed: 0,
        })
    }
}

/// Sources right-padded with `pad`: ids and mask `[B, S]`.
pub(crate) fn pad_sources(sources: &[Vec<u32>], pad: u32) -> Result<(Vec<i32>, Vec<i32>, usize), DecodeError> {
    let s = sources.iter().map(Vec::len).max().unwrap_or(0);
    if s == 0 || sources.iter().any(Vec::is_empty) {
        return Err(DecodeError::EmptyPrompt);
    }
    let mut ids = Vec::with_capacity(sources.len() * s);
    let mut mask = Vec::with_capacity(sources.len() * s);
    for src in sources {
        ids.extend(src.iter().map(|&t| t as i32));
        mask.extend(std::iter::repeat_n(1, src.len()));
        ids.extend(std::iter::repeat_n(pad as i32, s - src.len()));
        mask.extend(std::iter::repeat_n(0, s - src.len()));
    }
    Ok((ids, mask, s))
}

/// How a run picks tokens: `opts.params`' processors, then argmax or the seeded draw.
struct Choice {
    pipeline: Pipeline,
    sampler: Sampler,
}

impl Choice {
    fn new(opts: &Seq2SeqOptions) -> Result<Self, DecodeError> {
        let sampler = if opts.params.do_sample { Sampler::Seeded { seed: opts.seed } } else { Sampler::Greedy };
        Ok(Choice { pipeline: opts.params.processors()?, sampler })
    }
}

/// The next token of each row from its logits row (`rows` are the decoder ids so far), after the
/// forced-token processors; finished rows get `pad`.
fn choose(
    opts: &Seq2SeqOptions,
    choice: &Choice,
    logits: &[f32],
    vocab: usize,
    step: usize,
    (rows, done): (&[Vec<u32>], &[bool]),
) -> Result<Vec<u32>, DecodeError> {
    let last = step + 1 == opts.max_new_tokens;
    let mut out = Vec::with_capacity(done.len());
    for (r, (row, &finished)) in logits.chunks(vocab).zip(done).enumerate() {
        // ForcedBOS at the first new token, ForcedEOS at the last one `max_length` allows (they
        // leave every other token at -inf, so no processor or draw can change them).
        out.push(match (finished, step, opts.forced_bos, last, opts.forced_eos) {
            (true, ..) => opts.pad,
            (_, 0, Some(bos), _, _) => bos,
            (_, _, _, true, Some(eos)) => eos,
            _ => {
                let mut scores = row.to_vec();
                choice.pipeline.apply(&mut scores, &rows[r]);
                choice.sampler.sample_row(&scores, step as u64, r as u32)?
            }
        });
    }
    Ok(out)
}

/// Runs `step` (logits `[B, V]` of the decoder ids so far) until every row has emitted an EOS id
/// or `max_new_tokens` are made; rows are the decoder sequences (start token first), finished
/// rows padded with `pad` to the longest, as `generate` returns them.
fn run_loop(
    g: &Graph<'_>,
    opts: &Seq2SeqOptions,
    b: usize,
    mut step: impl FnMut(&[Vec<u32>]) -> Result<Tensor, DecodeError>,
) -> Result<Vec<Vec<u32>>, DecodeError> {
    let choice = Choice::new(opts)?;
    let mut rows = vec![vec![opts.decoder_start]; b];
    let mut done = vec![false; b];
    for n in 0..opts.max_new_tokens {
        let logits = step(&rows)?;
        let vocab = logits.last_dim();
        let next = choose(opts, &choice, &g.read(&logits)?, vocab, n, (&rows, &done))?;
        for ((row, finished), t) in rows.iter_mut().zip(done.iter_mut()).zip(next) {
            row.push(t);
            *finished |= opts.eos.contains(&t);
        }
        if done.iter().all(|&d| d) {
            break;
        }
    }
    Ok(rows)
}

/// Pads the sources (with `pad`), runs the encoder on them once without gradients, and hands
/// its output and the batch size B to `then` (inside the same no-grad scope).
fn with_encoded<T>(
    g: &Graph<'_>,
    model: &Model,
    sources: &[Vec<u32>],
    pad: u32,
    then: impl FnOnce(&Encoded<'_>, usize) -> Result<T, DecodeError>,
) -> Result<T, DecodeError> {
    let (ids, mask, s) = pad_sources(sources, pad)?;
    let b = sources.len();
    g.no_grad(|| {
        let hidden = encode(g, &model.spec, &model.weights, &ids, &mask, (b, s))?;
        then(&Encoded { hidden: &hidden, mask: &mask, len: s }, b)
    })
}

/// Cached greedy generation for each source (see the module docs).
pub fn greedy(
    g: &Graph<'_>,
    model: &Model,
    sources: &[Vec<u32>],
    opts: &Seq2SeqOptions,
) -> Result<Vec<Vec<u32>>, DecodeError> {
    with_encoded(g, model, sources, opts.pad, |enc, b| {
        let cache = Seq2SeqCache::new(g, &model.spec, &model.weights, enc, b, opts.max_new_tokens + 1)?;
        run_loop(g, opts, b, |rows| {
            let last: Vec<i32> = rows.iter().map(|r| r[r.len() - 1] as i32).collect();
            Ok(cache.step(g, &model.spec, &model.weights, &last)?)
        })
    })
}

/// Greedy generation recomputing the whole decoder prefix each step (the encoder runs once).
pub fn greedy_uncached(
    g: &Graph<'_>,
    model: &Model,
    sources: &[Vec<u32>],
    opts: &Seq2SeqOptions,
) -> Result<Vec<Vec<u32>>, DecodeError> {
    with_encoded(g, model, sources, opts.pad, |enc, b| {
        run_loop(g, opts, b, |rows| {
            let t = rows[0].len();
            let dec: Vec<i32> = rows.iter().flatten().map(|&x| x as i32).collect();
            let ones = vec![1; b * t];
            let logits = decode(g, &model.spec, &model.weights, enc, (&dec, &ones), (b, t))?;
            // Each row's last position `[B, V]`.
            let all = g.read(&logits)?;
            let vocab = logits.last_dim();
            let last: Vec<f32> = all.chunks(t * vocab).flat_map(|r| r[(t - 1) * vocab..].to_vec()).collect();
            Ok(g.constant(&last, &[b, vocab])?)
        })
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn opts(forced_bos: Option<u32>, forced_eos: Option<u32>) -> Seq2SeqOptions {
        Seq2SeqOptions {
            max_new_tokens: 3,
            decoder_start: 0,
            eos: vec![2],
            pad: 1,
            forced_bos,
            forced_eos,
            params: SamplingParams::greedy(),
            seed: 0,
        }
    }

    /// `choose` over rows of a vocabulary of 4 whose history is the start token 0 then token 3.
    fn pick(o: &Seq2SeqOptions, logits: &[f32], step: usize, done: &[bool]) -> Result<Vec<u32>, DecodeError> {
        let rows = vec![vec![0, 3]; done.len()];
        choose(o, &Choice::new(o)?, logits, 4, step, (&rows, done))
    }

    #[test]
    fn processors_and_seeded_draws_pick_the_free_tokens() {
        let logits = [0.0, 0.1, 0.2, 0.9, 0.0, 0.1, 0.2, 0.9];
        let live = [false, false];
        // Repetition penalty 10 on the history's token 3: 0.9 / 10 falls below 0.2.
        let mut o = opts(None, None);
        o.params.repetition_penalty = 10.0;
        assert_eq!(pick(&o, &logits, 1, &live).unwrap(), vec![2, 2]);
        // Sampling with top-k 1 is argmax; the forced tokens still win.
        let mut o = opts(Some(1), None);
        o.params = SamplingParams { top_k: 1, ..SamplingParams::sampling() };
        assert_eq!(pick(&o, &logits, 0, &live).unwrap(), vec![1, 1]);
        assert_eq!(pick(&o, &logits, 1, &live).unwrap(), vec![3, 3]);
        // A seeded draw per (step, row): the sampler's own choice, repeated by the same seed.
        let mut o = opts(None, None);
        o.params = SamplingParams { temperature: 5.0, top_k: 0, ..SamplingParams::sampling() };
        o.seed = 7;
        let warm: Vec<f32> = logits[..4].iter().map(|x| x / 5.0).collect();
        let want: Vec<u32> = (0..2).map(|r| Sampler::Seeded { seed: 7 }.sample_row(&warm, 1, r).unwrap()).collect();
        assert_eq!(pick(&o, &logits, 1, &live).unwrap(), want);
        assert_eq!(pick(&o, &logits, 1, &live).unwrap(), want);
    }

    #[test]
    fn forced_tokens_and_finished_rows_as_transformers() {
        // Two rows of a vocabulary of 4; token 3 is every row's argmax.
        let logits = [0.0, 0.1, 0.2, 0.9, 0.0, 0.1, 0.2, 0.9];
        let live = [false, false];
        assert_eq!(pick(&opts(None, None), &logits, 0, &live).unwrap(), vec![3, 3]);
        // ForcedBOS: the first new token only; ForcedEOS: the last one max_new_tokens allows.
        assert_eq!(pick(&opts(Some(0), Some(2)), &logits, 0, &live).unwrap(), vec![0, 0]);
        assert_eq!(pick(&opts(Some(0), Some(2)), &logits, 1, &live).unwrap(), vec![3, 3]);
        assert_eq!(pick(&opts(Some(0), Some(2)), &logits, 2, &live).unwrap(), vec![2, 2]);
        // A finished row continues with pad.
        assert_eq!(pick(&opts(None, None), &logits, 1, &[true, false]).unwrap(), vec![1, 3]);
    }

    #[test]
    fn options_prefer_generation_config_over_config() {
        let gen = serde_json::json!({"decoder_start_token_id": 5, "forced_bos_token_id": 7, "eos_token_id": [2, 3]});
        let cfg = serde_json::json!({"decoder_start_token_id": 0, "pad_token_id": 1, "eos_token_id": 2,
                                     "forced_eos_token_id": 2});
        let o = Seq2SeqOptions::from_configs(&gen, &cfg, 4).unwrap();
        assert_eq!(
            o,
            Seq2SeqOptions {
                max_new_tokens: 4,
                decoder_start: 5,
                eos: vec![2, 3],
                pad: 1,
                forced_bos: Some(7),
                forced_eos: Some(2),
                params: SamplingParams::greedy(),
                seed: 0,
            }
        );
        assert!(Seq2SeqOptions::from_configs(&serde_json::Value::Null, &serde_json::json!({}), 4).is_err());
    }

    /// Ids past u32 were wrapped (`2^32 + 5` read as 5); they name no token, so they are as absent.
    #[test]
    fn options_take_no_id_past_u32() {
        let big = 1u64 << 32;
        let gen = serde_json::json!({"decoder_start_token_id": big + 5, "eos_token_id": [2, big + 3],
                                     "forced_bos_token_id": big + 7});
        let o = Seq2SeqOptions::from_configs(&gen, &serde_json::json!({"bos_token_id": 0}), 4).unwrap();
        assert_eq!((o.decoder_start, o.eos, o.forced_bos), (0, vec![2], None));
        let e = Seq2SeqOptions::from_configs(&gen, &serde_json::json!({}), 4).unwrap_err();
        assert!(e.to_string().contains("below 2^32"), "{e}");
    }
}
