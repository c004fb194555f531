//! The generation loop: a batch of prompts, left-padded to one length, prefilled in one forward,
//! then one token per row per step against the KV cache on the device. Each step reads back only
//! the last position's logits `[B, V]`; the logits processors and the sampler run on the host, as
//! transformers' `generate` (`_sample`) does, with its rules for finished rows: a row that produced
//! an EOS id (or that the caller stops) keeps receiving `pad` tokens, which are not reported.

use std::time::Instant;

use vkformers_models::decoder::{forward_cached, Batch, KvCache};
use vkformers_models::model::Model;
use vkformers_models::ModelSpec;
use vkformers_tensor::{Graph, Tensor};

use crate::decode::DecodeError;
use crate::processors::SamplingParams;
use crate::sampler::Sampler;

/// What to generate.
#[derive(Debug, Clone, PartialEq)]
pub struct GenerateOptions {
    /// Greedy or sampling, and the processors' parameters.
    pub params: SamplingParams,
    /// Seed of the sampler (ignored when greedy).
    pub seed: u64,
    /// New tokens per row at most.
    pub max_new_tokens: usize,
    /// A row finishes after producing one of these (the EOS id is kept in its tokens).
    pub eos: Vec<u32>,
    /// Left padding of shorter prompts, and what finished rows are fed.
    pub pad: u32,
}

impl GenerateOptions {
    /// Greedy decoding of `max_new_tokens` with no EOS.
    pub fn greedy(max_new_tokens: usize) -> Self {
        Self { params: SamplingParams::greedy(), seed: 0, max_new_tokens, eos: Vec::new(), pad: 0 }
    }
}

/// Why a row stopped.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Finish {
    /// It produced an EOS id.
    Eos,
    /// The caller's callback stopped it (a stop string).
    Stopped,
    /// `max_new_tokens` reached.
    Length,
}

impl Finish {
    /// transformers / OpenAI-style name: `stop` or `length`.
    pub fn name(self) -> &'static str {
        match self {
            Finish::Eos | Finish::Stopped => "stop",
            Finish::Length => "length",
        }
    }
}

/// Seconds and tokens of the two phases.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Timings {
    /// Real (unpadded) prompt tokens run by the prefill.
    pub prefill_tokens: usize,
    /// From the start to the first tokens' logits on the host.
    pub prefill_secs: f64,
    /// Tokens produced by decode steps (every new token after each row's first).
    pub decode_tokens: usize,
    /// Time of the decode steps.
    pub decode_secs: f64,
}

impl Timings {
    /// Prompt tokens per second of the prefill.
    pub fn prefill_tokens_per_sec(&self) -> f64 {
        rate(self.prefill_tokens, self.prefill_secs)
    }

    /// New tokens per second of the decode steps (all rows together).
    pub fn decode_tokens_per_sec(&self) -> f64 {
        rate(self.decode_tokens, self.decode_secs)
    }
}

fn rate(n: usize, secs: f64) -> f64 {
    if secs > 0.0 {
        n as f64 / secs
    } else {
        0.0
    }
}

/// The new tokens of every row.
#[derive(Debug, Clone, PartialEq)]
pub struct Generation {
    /// `rows[b]`: row b's new tokens (EOS included when it finished on one).
    pub rows: Vec<Vec<u32>>,
    pub finish: Vec<Finish>,
    pub timings: Timings,
}

/// Left-pads `prompts` to the longest: ids and mask `[B, W]` row-major, and W.
pub fn left_pad(prompts: &[Vec<u32>], pad: u32) -> (Vec<i32>, Vec<i32>, usize) {
    let width = prompts.iter().map(Vec::len).max().unwrap_or(0);
    let mut ids = Vec::with_capacity(prompts.len() * width);
    let mut mask = Vec::with_capacity(prompts.len() * width);
    for p in prompts {
        let gap = width - p.len();
        ids.extend(std::iter::repeat_n(pad as i32, gap).chain(p.iter().map(|&t| t as i32)));
        mask.extend(std::iter::repeat_n(0, gap).chain(std::iter::repeat_n(1, p.len())));
    }
    (ids, mask, width)
}

/// Logits of the last column of every row of `logits [B·T, V]`, read back as `[B][V]`.
fn last_logits(g: &Graph<'_>, logits: &Tensor, b: usize, t: usize) -> Result<Vec<Vec<f32>>, DecodeError> {
    let vocab = logits.last_dim();
    g.sync()?;
    let row_bytes = (vocab * 4) as u64;
    let buf = logits.view().buffer;
    (0..b)
        .map(|row| {
            let at = ((row * t + t - 1) * vocab * 4) as u64;
            Ok(g.ctx().read_vec::<f32>(buf.slice(at, row_bytes))?)
        })
        .collect()
}

/// Whether `new` positions after `cached` ones cross a LongRoPE model's original context with a
/// cache written under the short factors: transformers (Phi-3's `prepare_inputs_for_generation`)
/// then drops the cache and runs the whole sequence again, rotated with the long factors.
pub fn crosses_longrope_context(spec: &ModelSpec, cached: usize, new: usize) -> bool {
    let original = spec.layers.iter().find_map(|l| l.attn.rope.as_ref().and_then(|r| r.long.as_ref()).map(|l| l.1));
    original.is_some_and(|o| cached > 0 && cached <= o && cached + new > o)
}

/// Per-row state of a running generation.
struct Rows {
    history: Vec<Vec<u32>>,
    new: Vec<Vec<u32>>,
    finish: Vec<Option<Finish>>,
}

/// Generates after every prompt (a batch, left-padded). `on_token(row, new_tokens)` runs after each
/// token a row produces (for streaming); returning `true` finishes that row (a stop string).
pub fn generate(
    g: &Graph<'_>,
    model: &Model,
    prompts: &[Vec<u32>],
    opts: &GenerateOptions,
    on_token: &mut dyn FnMut(usize, &[u32]) -> bool,
) -> Result<Generation, DecodeError> {
    if prompts.is_empty() || prompts.iter().any(Vec::is_empty) {
        return Err(DecodeError::EmptyPrompt);
    }
    let pipeline = opts.params.processors()?;
    let sampler = if opts.params.do_sample { Sampler::Seeded { seed: opts.seed } } else { Sampler::Greedy };
    let (ids, mask, width) = left_pad(prompts, opts.pad);
    let b = prompts.len();
    let start = Instant::now();
    let mut timings = Timings { prefill_tokens: prompts.iter().map(Vec::len).sum(), ..Timings::default() };
    // transformers' repetition penalty reads `input_ids`, padding included.
    let mut rows = Rows {
        history: ids.chunks(width).map(|r| r.iter().map(|&t| t as u32).collect()).collect(),
        new: vec![Vec::new(); b],
        finish: vec![None; b],
    };
    g.no_grad(|| -> Result<(), DecodeError> {
        let capacity = width + opts.max_new_tokens;
        let mut cache = KvCache::batched(g, &model.spec, b, capacity)?;
        let batch = Batch { ids: &ids, mask: &mask, batch: b, seq: width };
        let mut logits = last_logits(g, &forward_cached(g, &model.spec, &model.weights, &batch, &cache)?, b, width)?;
        timings.prefill_secs = start.elapsed().as_secs_f64();
        let decode_start = Instant::now();
        for step in 0..opts.max_new_tokens {
            let next = choose(&mut rows, &mut logits, &pipeline, &sampler, step, opts)?;
            // Rows not finished before this step are exactly those that produced a token.
            for row in 0..b {
                if rows.finish[row].is_none() {
                    report(&mut rows, row, opts, on_token);
                }
            }
            if rows.finish.iter().all(Option::is_some) || step + 1 == opts.max_new_tokens {
                break;
            }
            if crosses_longrope_context(&model.spec, cache.len(), 1) {
                // Every cached key was rotated with the short factors: run everything again.
                cache = KvCache::batched(g, &model.spec, b, capacity)?;
                let len = rows.history[0].len();
                let all: Vec<i32> = rows.history.iter().flatten().map(|&t| t as i32).collect();
                let all_mask: Vec<i32> = mask
                    .chunks(width)
                    .flat_map(|m| m.iter().copied().chain(std::iter::repeat_n(1, len - width)))
                    .collect();
                let batch = Batch { ids: &all, mask: &all_mask, batch: b, seq: len };
                logits = last_logits(g, &forward_cached(g, &model.spec, &model.weights, &batch, &cache)?, b, len)?;
                continue;
            }
            let ones = vec![1; b];
            let batch = Batch { ids: &next, mask: &ones, batch: b, seq: 1 };
            logits = last_logits(g, &forward_cached(g, &model.spec, &model.weights, &batch, &cache)?, b, 1)?;
        }
        timings.decode_secs = decode_start.elapsed().as_secs_f64();
        Ok(())
    })?;
    timings.decode_tokens = rows.new.iter().map(|r| r.len().saturating_sub(1)).sum();
    let finish = rows.finish.iter().map(|f| f.unwrap_or(Finish::Length)).collect();
    Ok(Generation { rows: rows.new, finish, timings })
}

/// Chooses step `step`'s token of every row (pad for finished rows) and records it.
fn choose(
    rows: &mut Rows,
    logits: &mut [Vec<f32>],
    pipeline: &crate::processors::Pipeline,
    sampler: &Sampler,
    step: usize,
    opts: &GenerateOptions,
) -> Result<Vec<i32>, DecodeError> {
    let mut next = Vec::with_capacity(logits.len());
    for (row, scores) in logits.iter_mut().enumerate() {
        let token = if rows.finish[row].is_some() {
            opts.pad
        } else {
            pipeline.apply(scores, &rows.history[row]);
            let t = sampler.sample_row(scores, step as u64, row as u32)?;
            rows.new[row].push(t);
            t
        };
        rows.history[row].push(token);
        next.push(token as i32);
    }
    Ok(next)
}

/// Marks a row that just produced a token: finished on EOS, on the caller's word, or at the limit.
fn report(rows: &mut Rows, row: usize, opts: &GenerateOptions, on_token: &mut dyn FnMut(usize, &[u32]) -> bool) {
    let Some(&last) = rows.new[row].last() else { return };
    let stop = on_token(row, &rows.new[row]);
    if opts.eos.contains(&last) {
        rows.finish[row] = Some(Finish::Eos);
    } else if stop {
        rows.finish[row] = Some(Finish::Stopped);
    } else if rows.new[row].len() == opts.max_new_tokens {
        rows.finish[row] = Some(Finish::Length);
    }
}
