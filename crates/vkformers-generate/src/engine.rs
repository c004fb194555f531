//! The step-wise batching engine: requests join and leave the running batch at every decode step.
//!
//! The engine owns a paged KV cache of `max_batch` slots. [`Engine::submit`] queues a request;
//! [`Engine::step`] first gives free slots to waiting requests and prefills them, several prompt
//! lengths in one left-padded forward ([`crate::prefill_plan`]: flash attention over each prompt
//! with its padding masked, only the real keys and values stored in fresh blocks; it gives each
//! request's first token), then runs one decode step of every running request together (one new
//! token each, through the paged decode kernel). A request that finishes (EOS, the sink's stop,
//! its `max_new_tokens`) or is cancelled ([`Engine::cancel`]) gives its blocks back to the pools
//! at once and its slot goes to the next waiting request at the next step.
//!
//! Each request gets exactly the tokens it gets alone: a row's attention reads only its own
//! blocks and never its padding, a prefill's width is aligned so that its numbers do not depend on
//! the other rows ([`crate::prefill_plan`]), its position ids count only its own tokens, and rows
//! on LongRoPE's long factors never share a forward with rows on the short ones (the factor is
//! chosen per forward, from its longest row, as transformers does for a batch). A request's draws
//! depend only on its own seed, its own step and its `row` (seed, step, row), so sampling does not
//! depend on what else runs.
//!
//! Tokens are chosen on the device, so a step reads back only ids `[n]`: the argmax when every row
//! of a forward is plain greedy; otherwise the per-row sampler ([`crate::row_choice`]), each row
//! with its own processors, repetition penalty, OpenAI's presence/frequency penalties, seed, step
//! and draw row, and its log-probabilities (of the model's raw distribution, as OpenAI reports
//! them) only when asked. The host pipeline ([`crate::row_choice::host_choice`]: reads the logits
//! `[n, V]`) is the reference, used when [`Engine::set_host_sampling`] asks for it.

use std::collections::{HashMap, VecDeque};
use std::time::Instant;

use vkformers_models::decoder::{forward_cached_last, Batch, KvCache};
use vkformers_models::model::Model;
use vkformers_models::ModelSpec;
use vkformers_tensor::{Graph, Tensor};

use crate::decode::DecodeError;
use crate::device_choice::{required, DeviceChooser};
use crate::generation::{last_logits, Finish, GenerateOptions, Timings};
use crate::penalties::{Penalties, TokenLogprob};
use crate::prefill_plan::{prefill_groups, width, Admitted, MAX_PREFILL_TOKENS};
use crate::processors::{Pipeline, SamplingParams};
use crate::row_choice::{device_row, host_choice, RowChooser};
use crate::GenerateError;
use vkformers_kernels::sample::rows::RowDraw;

/// How much padding a prefill forward takes by default (see [`Engine::set_max_prefill_padding`]):
/// up to twice the columns of its rows alone.
pub const DEFAULT_MAX_PAD: f64 = 2.0;

/// How one request generates.
#[derive(Debug, Clone, PartialEq)]
pub struct RequestOptions {
    /// Greedy or sampling, and transformers' processors.
    pub params: SamplingParams,
    /// OpenAI's presence and frequency penalties over the request's new tokens.
    pub penalties: Penalties,
    /// Seed of the sampler (ignored when greedy).
    pub seed: u64,
    /// The draw's row: draws are Philox of `(seed, step, row)`; `n` choices of one request
    /// differ by row.
    pub row: u32,
    /// New tokens at most (at least 1).
    pub max_new_tokens: usize,
    /// The request finishes after producing one of these (kept in its tokens).
    pub eos: Vec<u32>,
    /// Report each token's log-probability and this many most likely alternatives.
    pub logprobs: Option<usize>,
}

impl RequestOptions {
    /// The options of one prompt of a fixed-list generation (`generate_continuous`).
    pub fn from_generate(opts: &GenerateOptions) -> Self {
        RequestOptions {
            params: opts.params.clone(),
            penalties: Penalties::default(),
            seed: opts.seed,
            row: 0,
            max_new_tokens: opts.max_new_tokens,
            eos: opts.eos.clone(),
            logprobs: None,
        }
    }
}

/// A request: an id chosen by the caller (unique among those not finished), a prompt and options.
#[derive(Debug, Clone, PartialEq)]
pub struct Request {
    pub id: u64,
    pub prompt: Vec<u32>,
    pub opts: RequestOptions,
}

/// Why a request was refused.
#[derive(Debug, thiserror::Error, PartialEq)]
pub enum SubmitError {
    #[error("empty prompt: give at least one token")]
    EmptyPrompt,
    #[error("token id {id} is outside the model's vocabulary of {vocab} ids")]
    OutOfVocabulary { id: u32, vocab: usize },
    #[error("max_new_tokens must be at least 1")]
    NoNewTokens,
    #[error("request id {0} is already queued or running")]
    DuplicateId(u64),
    #[error("the engine has no model {0}")]
    UnknownModel(usize),
    #[error(transparent)]
    Sampling(#[from] GenerateError),
}

/// A finished request.
#[derive(Debug, Clone, PartialEq)]
pub struct Finished {
    /// Its new tokens (EOS included when it finished on one).
    pub tokens: Vec<u32>,
    pub finish: Finish,
    /// Its prompt tokens and prefill time, its decode tokens and the time from its first token to
    /// its last.
    pub timings: Timings,
}

/// Where the engine reports tokens.
pub trait Sink {
    /// Request `id` produced a token; `new` is every new token so far, `logprob` its
    /// log-probabilities when asked for. Returning `true` finishes the request (a stop string).
    fn token(&mut self, id: u64, new: &[u32], logprob: Option<&TokenLogprob>) -> bool;
    /// Request `id` finished (not called for a cancelled request).
    fn finished(&mut self, id: u64, done: Finished);
}

/// A running request.
struct Running {
    id: u64,
    /// Its model (index into the engine's models: the base or an adapter over it).
    model: usize,
    opts: RequestOptions,
    pipeline: Pipeline,
    /// Prompt and new tokens so far.
    history: Vec<u32>,
    new: Vec<u32>,
    timings: Timings,
    /// When its first token was on the host (its decode time runs from there).
    first_token: Instant,
}

impl Running {
    /// A request admitted to a slot: its processors built.
    fn new(model: usize, req: Request) -> Result<Self, DecodeError> {
        let pipeline = req.opts.params.processors()?;
        Ok(Running {
            id: req.id,
            model,
            pipeline,
            timings: Timings { prefill_tokens: req.prompt.len(), ..Timings::default() },
            history: req.prompt,
            new: Vec::new(),
            opts: req.opts,
            first_token: Instant::now(),
        })
    }

    /// Whether the device's greedy argmax chooses this row's tokens.
    fn device_greedy(&self) -> bool {
        self.pipeline.processors.is_empty()
            && !self.opts.params.do_sample
            && self.opts.penalties.is_off()
            && self.opts.logprobs.is_none()
    }

    /// Chooses the next token from the row's raw logits `[V]` on the host.
    fn choose_host(&self, logits: &mut [f32]) -> Result<(u32, Option<TokenLogprob>), DecodeError> {
        Ok(host_choice(&self.opts, &self.pipeline, (&self.history, &self.new), logits)?)
    }

    /// The row's device choice in `slot`, when its options run there.
    fn device_row(&self, slot: usize) -> Option<RowDraw> {
        device_row(&self.opts, &self.pipeline, slot, self.new.len())
    }
}

/// The step-wise engine (see the module docs).
pub struct Engine<'m> {
    /// The models requests run on: one base and adapters over it (one spec, one KV cache layout).
    models: Vec<&'m Model>,
    cache: KvCache,
    slots: Vec<Option<Running>>,
    /// Waiting requests with their model.
    waiting: VecDeque<(usize, Request)>,
    /// Device greedy choosers by batch size.
    device: HashMap<usize, DeviceChooser>,
    /// The per-row device sampler (made at the first step that samples).
    rows: Option<RowChooser>,
    /// Per slot: whether the row sampler's state holds the slot's request (false after an
    /// admission or a choice made elsewhere: the state is uploaded before its next device draw).
    synced: Vec<bool>,
    /// Choose every non-greedy token on the host (the reference path; tests compare the two).
    host_sampling: bool,
    /// A prefill forward pads at most this many times its real tokens (1: one length each).
    max_pad: f64,
    /// Prefill forwards run so far.
    prefill_forwards: usize,
    /// Rows whose logits were read back for the host's choice.
    host_rows: usize,
    total: Timings,
}

impl<'m> Engine<'m> {
    /// An engine of `max_batch` slots whose cache starts with room for `capacity` positions per
    /// slot (it grows when needed).
    pub fn new(g: &Graph<'_>, model: &'m Model, max_batch: usize, capacity: usize) -> Result<Self, DecodeError> {
        Self::with_models(g, vec![model], max_batch, capacity)
    }

    /// An engine serving several models of one spec (a base and LoRA adapters over its shared
    /// weights) from one pool of slots and one KV cache: a request names its model
    /// ([`Engine::submit_to`]); each forward runs the rows of one model.
    pub fn with_models(
        g: &Graph<'_>,
        models: Vec<&'m Model>,
        max_batch: usize,
        capacity: usize,
    ) -> Result<Self, DecodeError> {
        let Some(first) = models.first() else {
            return Err(DecodeError::Request("an engine needs at least one model".into()));
        };
        if models.iter().any(|m| m.spec != first.spec) {
            return Err(DecodeError::Request("an engine's models must share one spec (adapters of one base)".into()));
        }
        let slots = max_batch.max(1);
        let cache = KvCache::batched(g, &first.spec, slots, capacity)?;
        Ok(Engine {
            models,
            cache,
            slots: (0..slots).map(|_| None).collect(),
            waiting: VecDeque::new(),
            device: HashMap::new(),
            rows: None,
            synced: vec![false; slots],
            host_sampling: false,
            max_pad: DEFAULT_MAX_PAD,
            prefill_forwards: 0,
            host_rows: 0,
            total: Timings::default(),
        })
    }

    /// Queues a request on the first model (checked now: its prompt, ids and sampling parameters).
    pub fn submit(&mut self, req: Request) -> Result<(), SubmitError> {
        self.submit_to(0, req)
    }

    /// Queues a request on model `model` of [`Engine::with_models`].
    pub fn submit_to(&mut self, model: usize, req: Request) -> Result<(), SubmitError> {
        if model >= self.models.len() {
            return Err(SubmitError::UnknownModel(model));
        }
        if req.prompt.is_empty() {
            return Err(SubmitError::EmptyPrompt);
        }
        let vocab = self.spec().vocab;
        if let Some(&id) = req.prompt.iter().find(|&&t| t as usize >= vocab) {
            return Err(SubmitError::OutOfVocabulary { id, vocab });
        }
        if req.opts.max_new_tokens == 0 {
            return Err(SubmitError::NoNewTokens);
        }
        req.opts.params.processors()?;
        if self.holds(req.id) {
            return Err(SubmitError::DuplicateId(req.id));
        }
        self.waiting.push_back((model, req));
        Ok(())
    }

    fn spec(&self) -> &'m ModelSpec {
        &self.models[0].spec
    }

    fn holds(&self, id: u64) -> bool {
        self.waiting.iter().any(|(_, r)| r.id == id) || self.slots.iter().flatten().any(|r| r.id == id)
    }

    /// Drops request `id`, queued or running; a running one's blocks go back to the pools now.
    /// Returns whether it was there.
    pub fn cancel(&mut self, id: u64) -> bool {
        if let Some(at) = self.waiting.iter().position(|(_, r)| r.id == id) {
            self.waiting.remove(at);
            return true;
        }
        let Some(slot) = self.slots.iter().position(|r| r.as_ref().is_some_and(|r| r.id == id)) else {
            return false;
        };
        self.slots[slot] = None;
        self.cache.release(slot);
        true
    }

    /// Chooses sampled (and penalised, or logprob-reporting) tokens on the host, reading back the
    /// logits `[n, V]`, instead of on the device: the reference path the device's is tested against.
    pub fn set_host_sampling(&mut self, on: bool) {
        self.host_sampling = on;
    }

    /// Lets a prefill forward cost up to `max_pad` (>= 1) times the columns its rows cost alone:
    /// requests admitted together prefill in fewer forwards; 1 groups only prompts of one width.
    pub fn set_max_prefill_padding(&mut self, max_pad: f64) {
        self.max_pad = max_pad.max(1.0);
    }

    /// Prefill forwards run so far (fewer than the requests admitted when they share forwards).
    pub fn prefill_forwards(&self) -> usize {
        self.prefill_forwards
    }

    /// Rows whose logits `[V]` were read back for the host's choice so far (0 when every token
    /// was chosen on the device).
    pub fn host_chosen_rows(&self) -> usize {
        self.host_rows
    }

    /// Requests waiting for a slot.
    pub fn queued(&self) -> usize {
        self.waiting.len()
    }

    /// Requests holding a slot.
    pub fn running(&self) -> usize {
        self.slots.iter().flatten().count()
    }

    /// Nothing queued or running.
    pub fn is_idle(&self) -> bool {
        self.waiting.is_empty() && self.running() == 0
    }

    /// KV cache blocks in use (over all layer groups) and the pools' blocks.
    pub fn blocks_in_use(&self) -> (usize, usize) {
        self.cache.blocks_in_use()
    }

    /// Prompt and decode tokens and seconds of everything run so far.
    pub fn timings(&self) -> Timings {
        self.total
    }

    /// Admits waiting requests to free slots (one prefill each), then one decode step of every
    /// running request. Tokens and finished requests go to `sink`.
    pub fn step(&mut self, g: &Graph<'_>, sink: &mut dyn Sink) -> Result<(), DecodeError> {
        g.no_grad(|| {
            self.admit(g, sink)?;
            if self.running() > 0 {
                self.decode_step(g, sink)?;
            }
            Ok(())
        })
    }

    /// Fills free slots with waiting requests and prefills them, as many as `prefill_groups`
    /// allows in one left-padded forward, each giving its request's first token; requests that
    /// finish on it free their slots for the next waiting ones.
    fn admit(&mut self, g: &Graph<'_>, sink: &mut dyn Sink) -> Result<(), DecodeError> {
        loop {
            let mut admitted = Vec::new();
            while let Some(slot) = self.slots.iter().position(Option::is_none) {
                let Some((model, req)) = self.waiting.pop_front() else { break };
                let len = req.prompt.len();
                self.slots[slot] = Some(Running::new(model, req)?);
                self.synced[slot] = false;
                // A prefill of `len` columns has position ids up to len - 1; one model a forward.
                let long = on_long_factors(self.spec(), len - 1);
                admitted.push(Admitted { slot, len, key: 2 * model + usize::from(long) });
            }
            if admitted.is_empty() {
                return Ok(());
            }
            for group in prefill_groups(&admitted, self.max_pad, MAX_PREFILL_TOKENS) {
                let start = Instant::now();
                let chosen = self.prefill(g, &group)?;
                let secs = start.elapsed().as_secs_f64();
                self.total.prefill_secs += secs;
                for (&slot, token) in group.iter().zip(chosen) {
                    let row = self.slots[slot].as_mut().expect("just admitted");
                    row.timings.prefill_secs = secs;
                    row.first_token = Instant::now();
                    self.total.prefill_tokens += row.timings.prefill_tokens;
                    self.push_token(slot, token, sink);
                }
            }
        }
    }

    /// Runs every column of the slots' histories their empty cache rows do not hold (their
    /// prompts, or after a LongRoPE switch a whole history) in one forward `[n, T]`, T the longest,
    /// shorter rows left-padded (mask 0: their padding is neither attended to nor cached), and
    /// chooses each one's next token.
    fn prefill(&mut self, g: &Graph<'_>, slots: &[usize]) -> Result<Vec<(u32, Option<TokenLogprob>)>, DecodeError> {
        slots.iter().for_each(|&s| self.cache.release(s));
        self.cache.select(slots)?;
        self.prefill_forwards += 1;
        let rows: Vec<&Running> = slots.iter().map(|&s| self.slots[s].as_ref().expect("a running slot")).collect();
        // Aligned, so that the prefill's numbers do not depend on the other rows (prefill_plan).
        let t = width(rows.iter().map(|r| r.history.len()).max().unwrap_or(0));
        let (mut ids, mut mask) = (Vec::with_capacity(rows.len() * t), Vec::with_capacity(rows.len() * t));
        for r in &rows {
            let pad = t - r.history.len();
            ids.extend(std::iter::repeat_n(0, pad).chain(r.history.iter().map(|&x| x as i32)));
            mask.extend(std::iter::repeat_n(0, pad).chain(std::iter::repeat_n(1, r.history.len())));
        }
        let batch = Batch { ids: &ids, mask: &mask, batch: slots.len(), seq: t };
        let model = self.models[rows[0].model];
        // Logits `[n, V]` of each row's last column only.
        let logits = forward_cached_last(g, &model.spec, &model.weights, &batch, &self.cache)?;
        self.choose(g, &logits, slots)
    }

    /// The next token of each slot in `slots` from `logits [n, V]` (one row each, in order): the
    /// device's argmax when every row is plain greedy, else the device's per-row sampler (only ids,
    /// and the log-probabilities asked for, come back), else the host's pipeline.
    fn choose(
        &mut self,
        g: &Graph<'_>,
        logits: &Tensor,
        slots: &[usize],
    ) -> Result<Vec<(u32, Option<TokenLogprob>)>, DecodeError> {
        let rows: Vec<&Running> = slots.iter().map(|&s| self.slots[s].as_ref().expect("a running slot")).collect();
        let n = rows.len();
        if rows.iter().all(|r| r.device_greedy()) {
            slots.iter().for_each(|&s| self.synced[s] = false);
            let chooser = match self.device.entry(n) {
                std::collections::hash_map::Entry::Occupied(e) => e.into_mut(),
                std::collections::hash_map::Entry::Vacant(e) => e.insert(DeviceChooser::new(g, n)?),
            };
            let ids = chooser.greedy(g, logits, 1)?;
            return ids.into_iter().map(|id| Ok((required(id)?, None))).collect();
        }
        let draws: Option<Vec<RowDraw>> =
            if self.host_sampling { None } else { slots.iter().zip(&rows).map(|(&s, r)| r.device_row(s)).collect() };
        if let Some(draws) = draws {
            return self.choose_on_device(g, logits, slots, &draws);
        }
        slots.iter().for_each(|&s| self.synced[s] = false);
        self.host_rows += n;
        let rows: Vec<&Running> = slots.iter().map(|&s| self.slots[s].as_ref().expect("a running slot")).collect();
        let mut scores = last_logits(g, logits, n, 1)?;
        scores.iter_mut().zip(rows).map(|(s, r)| r.choose_host(s)).collect()
    }

    /// The per-row device sampler's choice: uploads the state of the penalised slots it does not
    /// hold yet, then draws (the kernel records each choice in the state, so a slot stays in sync).
    fn choose_on_device(
        &mut self,
        g: &Graph<'_>,
        logits: &Tensor,
        slots: &[usize],
        draws: &[RowDraw],
    ) -> Result<Vec<(u32, Option<TokenLogprob>)>, DecodeError> {
        if self.rows.is_none() {
            self.rows = Some(RowChooser::new(g, self.slots.len(), self.spec().vocab)?);
        }
        let chooser = self.rows.as_ref().expect("just made");
        // Only the penalties read the state: other rows need no upload (an admission costs none).
        for (&s, d) in slots.iter().zip(draws) {
            if d.reads_state() && !self.synced[s] {
                let r = self.slots[s].as_ref().expect("a running slot");
                chooser.reset(g, s, &r.history, r.new.len())?;
                self.synced[s] = true;
            }
        }
        chooser.choose(g, logits, draws)
    }

    /// One new token for every running row: rows crossing LongRoPE's original context run their
    /// whole history again alone (as alone, their cache was rotated with the short factors); the
    /// others decode together, in one forward per model and factor set.
    fn decode_step(&mut self, g: &Graph<'_>, sink: &mut dyn Sink) -> Result<(), DecodeError> {
        let start = Instant::now();
        let active: Vec<usize> = (0..self.slots.len()).filter(|&s| self.slots[s].is_some()).collect();
        let spec = self.spec();
        // Decided before any row runs: a re-prefilled row must not decode again in this step.
        let (crossing, rest): (Vec<usize>, Vec<usize>) =
            active.iter().partition(|&&s| crate::generation::crosses_longrope_context(spec, self.cache.row_len(s), 1));
        let mut groups: std::collections::BTreeMap<(usize, bool), Vec<usize>> = Default::default();
        for s in rest {
            let model = self.slots[s].as_ref().expect("active").model;
            groups.entry((model, on_long_factors(spec, self.cache.row_len(s)))).or_default().push(s);
        }
        let mut chosen = Vec::new();
        for &slot in &crossing {
            chosen.push((slot, self.prefill(g, &[slot])?.remove(0)));
        }
        for ((model, _), group) in groups {
            self.cache.select(&group)?;
            let ids: Vec<i32> = group
                .iter()
                .map(|&s| *self.slots[s].as_ref().expect("active").history.last().expect("a token") as i32)
                .collect();
            let mask = vec![1; group.len()];
            let batch = Batch { ids: &ids, mask: &mask, batch: group.len(), seq: 1 };
            let model = self.models[model];
            let logits = forward_cached_last(g, spec, &model.weights, &batch, &self.cache)?;
            chosen.extend(group.iter().copied().zip(self.choose(g, &logits, &group)?));
        }
        self.total.decode_secs += start.elapsed().as_secs_f64();
        self.total.decode_tokens += chosen.len();
        for (slot, token) in chosen {
            if let Some(r) = self.slots[slot].as_mut() {
                r.timings.decode_tokens += 1;
            }
            self.push_token(slot, token, sink);
        }
        Ok(())
    }

    /// Appends a row's new token, tells the sink, and retires the row when it finished: its
    /// blocks go back to the pools and its slot is free.
    fn push_token(&mut self, slot: usize, (token, logprob): (u32, Option<TokenLogprob>), sink: &mut dyn Sink) {
        let Some(row) = self.slots[slot].as_mut() else { return };
        row.new.push(token);
        row.history.push(token);
        let stop = sink.token(row.id, &row.new, logprob.as_ref());
        let finish = if row.opts.eos.contains(&token) {
            Some(Finish::Eos)
        } else if stop {
            Some(Finish::Stopped)
        } else {
            (row.new.len() >= row.opts.max_new_tokens).then_some(Finish::Length)
        };
        let Some(finish) = finish else { return };
        let Some(mut row) = self.slots[slot].take() else { return };
        self.cache.release(slot);
        row.timings.decode_secs = row.first_token.elapsed().as_secs_f64();
        sink.finished(row.id, Finished { tokens: std::mem::take(&mut row.new), finish, timings: row.timings });
    }
}

/// Whether a row whose next token sits at `position` runs on LongRoPE's long factors (the
/// forward's longest position id + 1 beyond the original context).
fn on_long_factors(spec: &ModelSpec, position: usize) -> bool {
    let original = spec.layers.iter().find_map(|l| l.attn.rope.as_ref().and_then(|r| r.long.as_ref()).map(|l| l.1));
    original.is_some_and(|o| position + 1 > o)
}
