//! Continuous batching: more prompts than rows of the KV cache (`max_batch` slots). Each slot runs
//! one prompt; when a row finishes (EOS, the caller's stop, `max_new_tokens`) its blocks go back to
//! the paged cache's pools and the next waiting prompt takes the slot at once: its prefill runs
//! alone (flash attention over its prompt, keys and values stored in fresh blocks) while the other
//! rows have their decode steps paused only for that forward. Every decode step runs all running
//! rows together, one new token each, through the paged decode kernel.
//!
//! Each prompt gets exactly the tokens it gets alone: a row's attention reads only its own blocks,
//! its position ids count only its own tokens, its prefill is never padded, and rows that run on
//! LongRoPE's long factors decode in a separate forward from rows on the short ones (the factor
//! is chosen per forward, from its longest row, as transformers does for a batch). With sampling,
//! a row's draws are those of the same prompt alone (seed, the row's own step, row 0); the host
//! pipeline chooses them (the device chooser keeps per-batch-row presence state).

use std::collections::{HashMap, VecDeque};
use std::time::Instant;

use vkformers_models::decoder::{forward_cached_last, Batch, KvCache};
use vkformers_models::model::Model;
use vkformers_models::ModelSpec;
use vkformers_tensor::{Graph, Tensor};

use crate::decode::DecodeError;
use crate::device_choice::{required, DeviceChooser};
use crate::generation::{last_logits, Finish, GenerateOptions, Generation, Timings};
use crate::processors::Pipeline;
use crate::sampler::Sampler;

/// One running prompt.
struct Running {
    prompt: usize,
    /// Prompt and new tokens so far.
    history: Vec<u32>,
    new: Vec<u32>,
    timings: Timings,
    /// When its first token was on the host (its decode time runs from there).
    first_token: Instant,
}

/// Results gathered by prompt index.
struct Done {
    rows: Vec<Vec<u32>>,
    finish: Vec<Finish>,
    per_row: Vec<Timings>,
    total: Timings,
}

/// How tokens are chosen: greedy on the device (one chooser per batch size), else the host
/// pipeline and sampler on the logits read back.
enum Choice {
    Device(HashMap<usize, DeviceChooser>),
    Host { pipeline: Pipeline, sampler: Sampler },
}

impl Choice {
    fn new(opts: &GenerateOptions) -> Result<Self, DecodeError> {
        let pipeline = opts.params.processors()?;
        Ok(match (opts.params.do_sample, pipeline.processors.is_empty()) {
            (false, true) => Choice::Device(HashMap::new()),
            (do_sample, _) => {
                let sampler = if do_sample { Sampler::Seeded { seed: opts.seed } } else { Sampler::Greedy };
                Choice::Host { pipeline, sampler }
            }
        })
    }

    /// The next token of each row of `logits [n·t, V]` (rows in `rows`' order).
    fn choose(&mut self, g: &Graph<'_>, logits: &Tensor, t: usize, rows: &[&Running]) -> Result<Vec<u32>, DecodeError> {
        let n = rows.len();
        match self {
            Choice::Device(by_size) => {
                let chooser = match by_size.entry(n) {
                    std::collections::hash_map::Entry::Occupied(e) => e.into_mut(),
                    std::collections::hash_map::Entry::Vacant(e) => e.insert(DeviceChooser::new(g, n)?),
                };
                let ids = chooser.greedy(g, logits, t)?;
                Ok(ids.into_iter().map(required).collect::<Result<_, _>>()?)
            }
            Choice::Host { pipeline, sampler } => {
                let mut scores = last_logits(g, logits, n, t)?;
                let picked = scores.iter_mut().zip(rows).map(|(s, r)| {
                    pipeline.apply(s, &r.history);
                    sampler.sample_row(s, r.new.len() as u64, 0)
                });
                Ok(picked.collect::<Result<_, _>>()?)
            }
        }
    }
}

/// Generates after every prompt with at most `max_batch` running at once (see the module docs).
/// `on_token(prompt, new_tokens)` runs after each token a prompt produces; returning `true`
/// finishes it. Rows, finish reasons and per-row timings come back in prompt order.
pub fn generate_continuous(
    g: &Graph<'_>,
    model: &Model,
    prompts: &[Vec<u32>],
    opts: &GenerateOptions,
    max_batch: usize,
    on_token: &mut dyn FnMut(usize, &[u32]) -> bool,
) -> Result<Generation, DecodeError> {
    if prompts.is_empty() || prompts.iter().any(Vec::is_empty) {
        return Err(DecodeError::EmptyPrompt);
    }
    let slots = max_batch.clamp(1, prompts.len());
    let longest = prompts.iter().map(Vec::len).max().unwrap_or(0);
    let cache = KvCache::batched(g, &model.spec, slots, longest + opts.max_new_tokens)?;
    let mut choice = Choice::new(opts)?;
    let mut waiting: VecDeque<usize> = (0..prompts.len()).collect();
    let mut running: Vec<Option<Running>> = (0..slots).map(|_| None).collect();
    let n = prompts.len();
    let mut done = Done {
        rows: vec![Vec::new(); n],
        finish: vec![Finish::Length; n],
        per_row: vec![Timings::default(); n],
        total: Timings::default(),
    };
    if opts.max_new_tokens == 0 {
        return Ok(Generation { rows: done.rows, finish: done.finish, timings: done.total, per_row: done.per_row });
    }
    g.no_grad(|| -> Result<(), DecodeError> {
        loop {
            admit(g, model, &cache, prompts, (&mut waiting, &mut running), &mut choice, opts, &mut done, on_token)?;
            if running.iter().all(Option::is_none) {
                return Ok(());
            }
            decode_step(g, model, &cache, &mut running, &mut choice, opts, &mut done, on_token)?;
        }
    })?;
    Ok(Generation { rows: done.rows, finish: done.finish, timings: done.total, per_row: done.per_row })
}

/// Fills free slots with waiting prompts: each prefill runs alone and gives the prompt's first
/// token; a prompt that finishes on it frees its slot for the next.
#[allow(clippy::too_many_arguments)]
fn admit(
    g: &Graph<'_>,
    model: &Model,
    cache: &KvCache,
    prompts: &[Vec<u32>],
    (waiting, running): (&mut VecDeque<usize>, &mut [Option<Running>]),
    choice: &mut Choice,
    opts: &GenerateOptions,
    done: &mut Done,
    on_token: &mut dyn FnMut(usize, &[u32]) -> bool,
) -> Result<(), DecodeError> {
    while let Some(slot) = running.iter().position(Option::is_none) {
        let Some(prompt) = waiting.pop_front() else { return Ok(()) };
        let start = Instant::now();
        let mut row = Running {
            prompt,
            history: prompts[prompt].clone(),
            new: Vec::new(),
            timings: Timings { prefill_tokens: prompts[prompt].len(), ..Timings::default() },
            first_token: start,
        };
        let token = prefill(g, model, cache, slot, &row, choice)?;
        row.timings.prefill_secs = start.elapsed().as_secs_f64();
        row.first_token = Instant::now();
        done.total.prefill_tokens += row.timings.prefill_tokens;
        done.total.prefill_secs += row.timings.prefill_secs;
        running[slot] = Some(row);
        push_token(cache, slot, running, token, opts, done, on_token);
    }
    Ok(())
}

/// Runs every column of `row`'s history the empty slot does not hold (its prompt, or after a
/// LongRoPE switch its whole history) and chooses the next token.
fn prefill(
    g: &Graph<'_>,
    model: &Model,
    cache: &KvCache,
    slot: usize,
    row: &Running,
    choice: &mut Choice,
) -> Result<u32, DecodeError> {
    cache.release(slot);
    cache.select(&[slot])?;
    let ids: Vec<i32> = row.history.iter().map(|&t| t as i32).collect();
    let mask = vec![1; ids.len()];
    let batch = Batch { ids: &ids, mask: &mask, batch: 1, seq: ids.len() };
    // Logits `[1, V]` of the last column only.
    let logits = forward_cached_last(g, &model.spec, &model.weights, &batch, cache)?;
    Ok(choice.choose(g, &logits, 1, &[row])?[0])
}

/// Whether a row whose next token sits at `position` runs on LongRoPE's long factors (the
/// forward's longest position id + 1 beyond the original context).
fn on_long_factors(spec: &ModelSpec, position: usize) -> bool {
    let original = spec.layers.iter().find_map(|l| l.attn.rope.as_ref().and_then(|r| r.long.as_ref()).map(|l| l.1));
    original.is_some_and(|o| position + 1 > o)
}

/// One new token for every running row: rows crossing LongRoPE's original context run their
/// whole history again alone (as alone, their cache was rotated with the short factors); the
/// others decode together, in one forward per factor set.
#[allow(clippy::too_many_arguments)]
fn decode_step(
    g: &Graph<'_>,
    model: &Model,
    cache: &KvCache,
    running: &mut [Option<Running>],
    choice: &mut Choice,
    opts: &GenerateOptions,
    done: &mut Done,
    on_token: &mut dyn FnMut(usize, &[u32]) -> bool,
) -> Result<(), DecodeError> {
    let start = Instant::now();
    let active: Vec<usize> = (0..running.len()).filter(|&s| running[s].is_some()).collect();
    let spec = &model.spec;
    // Decided before any row runs: a re-prefilled row must not decode again in this step.
    let (crossing, rest): (Vec<usize>, Vec<usize>) = active.iter().partition(|&&s| crosses_now(spec, cache.row_len(s)));
    let mut chosen: Vec<(usize, u32)> = Vec::new();
    for &slot in &crossing {
        let row = running[slot].as_ref().expect("active slot");
        chosen.push((slot, prefill(g, model, cache, slot, row, choice)?));
    }
    let (long, short): (Vec<usize>, Vec<usize>) = rest.iter().partition(|&&s| on_long_factors(spec, cache.row_len(s)));
    for group in [short, long].into_iter().filter(|g| !g.is_empty()) {
        cache.select(&group)?;
        let ids: Vec<i32> = group
            .iter()
            .map(|&s| *running[s].as_ref().expect("active").history.last().expect("a token") as i32)
            .collect();
        let mask = vec![1; group.len()];
        let batch = Batch { ids: &ids, mask: &mask, batch: group.len(), seq: 1 };
        let logits = forward_cached_last(g, spec, &model.weights, &batch, cache)?;
        let rows: Vec<&Running> = group.iter().map(|&s| running[s].as_ref().expect("active")).collect();
        chosen.extend(group.iter().copied().zip(choice.choose(g, &logits, 1, &rows)?));
    }
    let secs = start.elapsed().as_secs_f64();
    done.total.decode_secs += secs;
    done.total.decode_tokens += chosen.len();
    for (slot, token) in chosen {
        if let Some(r) = running[slot].as_mut() {
            r.timings.decode_tokens += 1;
        }
        push_token(cache, slot, running, token, opts, done, on_token);
    }
    Ok(())
}

/// Whether a row holding `cached` positions crosses LongRoPE's original context with its next one.
fn crosses_now(spec: &ModelSpec, cached: usize) -> bool {
    crate::generation::crosses_longrope_context(spec, cached, 1)
}

/// Appends a row's new token, tells the caller, and retires the row when it finished: its
/// tokens and timings are kept, its blocks go back to the pools and its slot is free.
fn push_token(
    cache: &KvCache,
    slot: usize,
    running: &mut [Option<Running>],
    token: u32,
    opts: &GenerateOptions,
    done: &mut Done,
    on_token: &mut dyn FnMut(usize, &[u32]) -> bool,
) {
    let Some(row) = running[slot].as_mut() else { return };
    row.new.push(token);
    row.history.push(token);
    let stop = on_token(row.prompt, &row.new);
    let finish = if opts.eos.contains(&token) {
        Some(Finish::Eos)
    } else if stop {
        Some(Finish::Stopped)
    } else {
        (row.new.len() >= opts.max_new_tokens).then_some(Finish::Length)
    };
    let Some(finish) = finish else { return };
    let Some(mut row) = running[slot].take() else { return };
    row.timings.decode_secs = row.first_token.elapsed().as_secs_f64();
    done.finish[row.prompt] = finish;
    done.per_row[row.prompt] = row.timings;
    done.rows[row.prompt] = std::mem::take(&mut row.new);
    cache.release(slot);
}
