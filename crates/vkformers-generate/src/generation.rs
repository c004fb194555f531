//! The generation loop: a batch of prompts, left-padded to one length, prefilled in one forward,
//! then one token per row per step against the KV cache on the device. The next token is chosen
//! on the device (`vkformers_kernels::sample`: greedy argmax, or transformers' processors and a
//! seeded draw) and each step reads back only the chosen ids `[B]`. `processors` and `sampler`
//! stay the host reference the device is tested against (`tests/device_sampling.rs`). Finished
//! rows follow transformers' `generate` (`_sample`): a row that produced an EOS id (or that the
//! caller stops) keeps receiving `pad` tokens, which are not reported. Where the device chooses,
//! the steps run one ahead of the host (`crate::lookahead`, [`Stepping`]) with the tokens and the
//! cache of the synchronous loop here (`run`), which stays the reference and the fallback.

use std::time::Instant;

use vkformers_kernels::sample::{Draw, Processors};
use vkformers_models::decoder::{forward_cached_last, Batch, KvCache};
use vkformers_models::model::Model;
use vkformers_models::ModelSpec;
use vkformers_tensor::{Graph, Tensor};

use crate::decode::DecodeError;
use crate::device_choice::{device_processors, required, AheadChoice, DeviceChooser};
use crate::processors::{Pipeline, SamplingParams};
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
    /// From the start to the first tokens on the host.
    pub prefill_secs: f64,
    /// Tokens produced by decode steps (every new token after each row's first).
    pub decode_tokens: usize,
    /// Time of the decode steps.
    pub decode_secs: f64,
    /// Decode steps the host replayed instead of recording (`lookahead` + `replay`).
    pub replayed_steps: usize,
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
    /// The whole run: prompt tokens over prefill time, new tokens of decode steps over their time.
    pub timings: Timings,
    /// `per_row[b]`: row b's prompt tokens and prefill time (a batch's prefill is shared), its
    /// decode tokens and the time from its first token to its last.
    pub per_row: Vec<Timings>,
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
pub(crate) fn last_logits(g: &Graph<'_>, logits: &Tensor, b: usize, t: usize) -> Result<Vec<Vec<f32>>, DecodeError> {
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
pub(crate) struct Rows {
    pub(crate) history: Vec<Vec<u32>>,
    pub(crate) new: Vec<Vec<u32>>,
    pub(crate) finish: Vec<Option<Finish>>,
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
    let (ids, mask, width) = left_pad(prompts, opts.pad);
    let history = ids.chunks(width).map(|r| r.iter().map(|&t| t as u32).collect()).collect();
    let masks = mask.chunks(width).map(<[i32]>::to_vec).collect();
    let mut cache = KvCache::batched(g, &model.spec, prompts.len(), width + opts.max_new_tokens)?;
    generate_cached(g, model, &mut cache, Context { history, masks }, opts, on_token)
}

/// Every column of a batch so far, cached or not: `history[b]` the ids (padding included; the
/// repetition penalty reads them, as transformers' `input_ids`), `masks[b]` 1 real / 0 padding.
#[derive(Debug, Clone, PartialEq)]
pub struct Context {
    pub history: Vec<Vec<u32>>,
    pub masks: Vec<Vec<i32>>,
}

/// How the decode steps of [`generate_cached_stepping`] run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stepping {
    /// The device one step ahead of the host (`crate::lookahead`: step s + 1 is submitted before
    /// step s's ids are read) where the choice is made on the device and the model has no
    /// LongRoPE; otherwise synchronous.
    Ahead,
    /// Record, submit, wait for and read each step before recording the next (the reference).
    Synchronous,
}

impl Stepping {
    /// `Ahead`, unless `VKFORMERS_DECODE_LOOKAHEAD=0` (read once) asks for `Synchronous`.
    pub fn from_env() -> Self {
        if crate::lookahead::enabled() {
            Stepping::Ahead
        } else {
            Stepping::Synchronous
        }
    }
}

/// Generates after `ctx`, whose first `cache.len()` columns the cache already holds (a chat turn
/// continues the previous turns' cache). On return the cache holds every column but the last
/// token of each row. Runs ahead unless `VKFORMERS_DECODE_LOOKAHEAD=0` ([`Stepping::from_env`]);
/// either way the tokens and the cache left are the same.
pub fn generate_cached(
    g: &Graph<'_>,
    model: &Model,
    cache: &mut KvCache,
    ctx: Context,
    opts: &GenerateOptions,
    on_token: &mut dyn FnMut(usize, &[u32]) -> bool,
) -> Result<Generation, DecodeError> {
    generate_cached_stepping(g, model, cache, ctx, opts, Stepping::from_env(), on_token)
}

/// [`generate_cached`] with its decode steps run as `stepping` says.
pub fn generate_cached_stepping(
    g: &Graph<'_>,
    model: &Model,
    cache: &mut KvCache,
    ctx: Context,
    opts: &GenerateOptions,
    stepping: Stepping,
    on_token: &mut dyn FnMut(usize, &[u32]) -> bool,
) -> Result<Generation, DecodeError> {
    let b = ctx.history.len();
    let width = ctx.history.first().map_or(0, Vec::len);
    if b == 0 || width <= cache.len() || b != cache.batch() {
        return Err(DecodeError::NothingNew { rows: b, width, cached: cache.len(), batch: cache.batch() });
    }
    let choice = Choice::of(opts)?;
    let how = match choice {
        Choice::DeviceGreedy => Some(AheadChoice::Argmax),
        Choice::Device(processors) => Some(AheadChoice::Draw(processors, opts.seed)),
        Choice::Host(_) => None,
    };
    if let (Stepping::Ahead, Some(how)) = (stepping, how) {
        if crate::lookahead::applies(&model.spec) {
            return crate::lookahead::run(g, model, cache, ctx, opts, how, on_token);
        }
    }
    let chooser = Chooser::new(g, b, choice, opts)?;
    run(g, model, cache, ctx, opts, chooser, on_token)
}

/// [`generate_cached`] run synchronously (record, submit, wait, read each step) with the choice
/// made by `chooser` (checked by the caller).
fn run(
    g: &Graph<'_>,
    model: &Model,
    cache: &mut KvCache,
    ctx: Context,
    opts: &GenerateOptions,
    mut chooser: Chooser,
    on_token: &mut dyn FnMut(usize, &[u32]) -> bool,
) -> Result<Generation, DecodeError> {
    let b = ctx.history.len();
    let start = Instant::now();
    let real: usize = ctx.masks.iter().map(|m| m[cache.len()..].iter().filter(|&&v| v != 0).count()).sum();
    let mut timings = Timings { prefill_tokens: real, ..Timings::default() };
    let Context { history, mut masks } = ctx;
    let prompt_tokens: Vec<usize> =
        masks.iter().map(|m| m[cache.len()..].iter().filter(|&&v| v != 0).count()).collect();
    let mut rows = Rows { history, new: vec![Vec::new(); b], finish: vec![None; b] };
    // Decode seconds at which each row finished.
    let mut ended = vec![None; b];
    g.no_grad(|| -> Result<(), DecodeError> {
        let mut logits = feed(g, model, cache, &rows.history, &masks, opts.max_new_tokens)?;
        let mut decode_start = None;
        for step in 0..opts.max_new_tokens {
            let chosen = chooser.choose(g, &logits, &rows, step)?;
            record(&mut rows, &chosen, opts);
            if step == 0 {
                timings.prefill_secs = start.elapsed().as_secs_f64();
                decode_start = Some(Instant::now());
            }
            masks.iter_mut().for_each(|m| m.push(1));
            // Rows not finished before this step are exactly those that produced a token.
            report_step(&mut rows, &mut ended, decode_start, opts, on_token);
            if rows.finish.iter().all(Option::is_some) || step + 1 == opts.max_new_tokens {
                break;
            }
            logits = feed(g, model, cache, &rows.history, &masks, opts.max_new_tokens - step - 1)?;
        }
        timings.decode_secs = decode_start.map_or(0.0, |s| s.elapsed().as_secs_f64());
        Ok(())
    })?;
    Ok(finished(rows, timings, &prompt_tokens, &ended))
}

/// Logits of the columns just run, `[B·T, V]` (row b's last column is `b·T + T − 1`) and T; generation
/// runs the head on each row's last column only, so `[B, V]` and T = 1.
pub(crate) struct Logits {
    pub(crate) all: Tensor,
    pub(crate) t: usize,
}

/// Runs the columns of `history` the cache does not hold yet and returns their logits (recorded,
/// not yet submitted). Crossing a LongRoPE model's original context starts a fresh cache over every column
/// (room for `more` further positions).
pub(crate) fn feed(
    g: &Graph<'_>,
    model: &Model,
    cache: &mut KvCache,
    history: &[Vec<u32>],
    masks: &[Vec<i32>],
    more: usize,
) -> Result<Logits, DecodeError> {
    let (b, width) = (history.len(), history[0].len());
    if crosses_longrope_context(&model.spec, cache.len(), width - cache.len()) {
        // Every cached key was rotated with the short factors: run everything again.
        *cache = KvCache::batched(g, &model.spec, b, width + more)?;
    }
    let from = cache.len();
    let t = width - from;
    let ids: Vec<i32> = history.iter().flat_map(|r| r[from..].iter().map(|&x| x as i32)).collect();
    let mask: Vec<i32> = masks.iter().flat_map(|m| m[from..].iter().copied()).collect();
    // A large batch's prefill in groups of rows (crate::prefill_rows): the same logits.
    if let Some(all) = crate::prefill_rows::in_groups(g, model, cache, (&ids, &mask), (b, t))? {
        return Ok(Logits { all, t: 1 });
    }
    let batch = Batch { ids: &ids, mask: &mask, batch: b, seq: t };
    // Only each row's last column is chosen from: logits `[B, V]`, one column a row.
    Ok(Logits { all: forward_cached_last(g, &model.spec, &model.weights, &batch, cache)?, t: 1 })
}

/// How each step's tokens are chosen: on the device (greedy, or the processors then greedy or a
/// draw; only the ids come back), or, for a pipeline the device cannot express (none that
/// `SamplingParams` builds), by the host pipeline and sampler on the logits read back.
enum Chooser {
    DeviceGreedy(DeviceChooser),
    DeviceSampling { device: DeviceChooser, processors: Processors, seed: u64 },
    Host { pipeline: Pipeline, sampler: Sampler },
}

/// What makes each step's choice (see [`Chooser`]): the device's argmax, the device's
/// processors (then greedy or a draw), or the host's pipeline.
enum Choice {
    DeviceGreedy,
    Device(Processors),
    Host(Pipeline),
}

impl Choice {
    fn of(opts: &GenerateOptions) -> Result<Self, DecodeError> {
        let pipeline = opts.params.processors()?;
        let device = device_processors(&pipeline);
        Ok(match (opts.params.do_sample, device) {
            (false, _) if pipeline.processors.is_empty() => Choice::DeviceGreedy,
            (do_sample, Some(processors)) => Choice::Device(Processors { greedy: !do_sample, ..processors }),
            (_, None) => Choice::Host(pipeline),
        })
    }
}

impl Chooser {
    fn new(g: &Graph<'_>, rows: usize, choice: Choice, opts: &GenerateOptions) -> Result<Self, DecodeError> {
        Ok(match choice {
            Choice::DeviceGreedy => Chooser::DeviceGreedy(DeviceChooser::new(g, rows)?),
            Choice::Device(processors) => {
                Chooser::DeviceSampling { device: DeviceChooser::new(g, rows)?, processors, seed: opts.seed }
            }
            Choice::Host(pipeline) => {
                let sampler = if opts.params.do_sample { Sampler::Seeded { seed: opts.seed } } else { Sampler::Greedy };
                Chooser::Host { pipeline, sampler }
            }
        })
    }

    /// Step `step`'s token of every row still running (`None` for finished rows).
    fn choose(
        &mut self,
        g: &Graph<'_>,
        logits: &Logits,
        rows: &Rows,
        step: usize,
    ) -> Result<Vec<Option<u32>>, DecodeError> {
        let running = |row: usize| rows.finish[row].is_none();
        let ids = match self {
            Chooser::DeviceGreedy(device) => device.greedy(g, &logits.all, logits.t)?,
            Chooser::DeviceSampling { device, processors, seed } => {
                let d = Draw { seed: *seed, step: step as u64 };
                device.sample(g, (&logits.all, logits.t), &rows.history, processors, d)?
            }
            Chooser::Host { pipeline, sampler } => {
                let mut scores = last_logits(g, &logits.all, rows.history.len(), logits.t)?;
                let picked = scores.iter_mut().enumerate().map(|(row, s)| {
                    running(row).then(|| {
                        pipeline.apply(s, &rows.history[row]);
                        sampler.sample_row(s, step as u64, row as u32)
                    })
                });
                return Ok(picked.map(Option::transpose).collect::<Result<_, _>>()?);
            }
        };
        let picked = ids.into_iter().enumerate().map(|(row, id)| running(row).then(|| required(id)));
        Ok(picked.map(Option::transpose).collect::<Result<_, _>>()?)
    }
}

/// Records step's tokens: `chosen[row]` for running rows, `pad` for finished ones.
pub(crate) fn record(rows: &mut Rows, chosen: &[Option<u32>], opts: &GenerateOptions) {
    for (row, &id) in chosen.iter().enumerate() {
        if let Some(t) = id {
            rows.new[row].push(t);
        }
        rows.history[row].push(id.unwrap_or(opts.pad));
    }
}

/// Reports the step's token of every row still running ([`report`]), noting in `ended` the
/// decode seconds at which a row finishes.
pub(crate) fn report_step(
    rows: &mut Rows,
    ended: &mut [Option<f64>],
    decode_start: Option<Instant>,
    opts: &GenerateOptions,
    on_token: &mut dyn FnMut(usize, &[u32]) -> bool,
) {
    for (row, end) in ended.iter_mut().enumerate() {
        if rows.finish[row].is_none() {
            report(rows, row, opts, on_token);
            if rows.finish[row].is_some() {
                *end = decode_start.map(|s| s.elapsed().as_secs_f64());
            }
        }
    }
}

/// The generation's result: each row's tokens and finish reason (`Length` where none), the
/// aggregate timings with their decode tokens, and each row's timings (`ended`: the decode
/// seconds at which it finished, else the whole decode).
pub(crate) fn finished(rows: Rows, mut timings: Timings, prompt_tokens: &[usize], ended: &[Option<f64>]) -> Generation {
    timings.decode_tokens = rows.new.iter().map(|r| r.len().saturating_sub(1)).sum();
    let finish = rows.finish.iter().map(|f| f.unwrap_or(Finish::Length)).collect();
    let per_row = (0..rows.new.len())
        .map(|row| Timings {
            prefill_tokens: prompt_tokens[row],
            prefill_secs: timings.prefill_secs,
            decode_tokens: rows.new[row].len().saturating_sub(1),
            decode_secs: ended[row].unwrap_or(timings.decode_secs),
            replayed_steps: timings.replayed_steps,
        })
        .collect();
    Generation { rows: rows.new, finish, timings, per_row }
}

/// Marks a row that just produced a token: finished on EOS, on the caller's word, or at the limit.
pub(crate) fn report(
    rows: &mut Rows,
    row: usize,
    opts: &GenerateOptions,
    on_token: &mut dyn FnMut(usize, &[u32]) -> bool,
) {
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

#[cfg(test)]
mod tests {
    use std::path::PathBuf;

    use vkformers_vk::testing::on_every_device;

    use super::*;

    /// Sampling with every processor on, and greedy decoding with a repetition penalty, chosen on
    /// the device give the tokens of the host pipeline and sampler on the logits read back (the
    /// choice of every step is equal, so the histories and presence stay equal too).
    #[test]
    fn device_choice_equals_host_choice_in_the_loop() {
        let sampling = SamplingParams {
            temperature: 1.4,
            top_k: 30,
            top_p: 0.97,
            min_p: Some(0.01),
            repetition_penalty: 1.3,
            ..SamplingParams::sampling()
        };
        let greedy = SamplingParams { repetition_penalty: 1.3, ..SamplingParams::greedy() };
        for params in [sampling, greedy] {
            device_equals_host(params);
        }
    }

    fn device_equals_host(params: SamplingParams) {
        on_every_device("device vs host choice in the loop", |ctx| {
            let g = Graph::new(ctx);
            let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures/qwen2");
            let model = Model::load(&g, &dir).unwrap();
            let prompts = vec![vec![5u32, 9, 14, 9, 30, 2], vec![7u32, 7, 40]];
            let opts = GenerateOptions { params: params.clone(), seed: 21, ..GenerateOptions::greedy(24) };
            let go = |host: bool| {
                let (ids, mask, width) = left_pad(&prompts, opts.pad);
                let history = ids.chunks(width).map(|r| r.iter().map(|&t| t as u32).collect()).collect();
                let masks = mask.chunks(width).map(<[i32]>::to_vec).collect();
                let mut cache = KvCache::batched(&g, &model.spec, 2, width + 24).unwrap();
                let chooser = if host {
                    let pipeline = opts.params.processors().unwrap();
                    let sampler =
                        if opts.params.do_sample { Sampler::Seeded { seed: opts.seed } } else { Sampler::Greedy };
                    Chooser::Host { pipeline, sampler }
                } else {
                    Chooser::new(&g, 2, Choice::of(&opts).unwrap(), &opts).unwrap()
                };
                assert_eq!(matches!(chooser, Chooser::DeviceSampling { .. }), !host);
                run(&g, &model, &mut cache, Context { history, masks }, &opts, chooser, &mut |_, _| false).unwrap()
            };
            let (device, host) = (go(false), go(true));
            assert_eq!(device.rows, host.rows);
            assert_eq!(device.rows.iter().map(Vec::len).collect::<Vec<_>>(), [24, 24]);
            Ok(())
        });
    }
}
