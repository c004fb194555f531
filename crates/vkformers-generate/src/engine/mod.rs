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
//! Every prefill forward stalls the decode of every running row, so a request that arrives while
//! rows run may be held one step ([`Engine::set_admission_hold`]; the engine's default is off,
//! `vkformers serve` turns it on, `VKFORMERS_ADMISSION_HOLD=1`/`0` overrides both, see
//! [`admission_hold_env`]): the requests arriving over
//! two steps (a server's clients answering rows that finished together send theirs a few
//! milliseconds apart) then share one forward. A request is never held more than one step, nor
//! when no row runs or the waiting requests fill every free slot.
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
//!
//! # Lookahead
//!
//! Where every row's token is chosen on the device, a step runs one step ahead of the host
//! ([`ahead`]): step k's forwards (their ids copied on the device from step k − 1's choices) and
//! the prefills of joining requests are submitted before step k − 1's tokens are read, reported
//! and scheduled, so the device does not idle through the host's share of a step. Same tokens;
//! a row finishing at step k − 1 had step k run for it (wasted; its blocks go back when it
//! retires). [`Engine::set_lookahead`] (or `VKFORMERS_DECODE_LOOKAHEAD=0`) switches it off.

mod ahead;
mod choose;
mod request;
mod running;
mod schedule;

use std::collections::{HashMap, VecDeque};

use vkformers_models::decoder::KvCache;
use vkformers_models::model::Model;
use vkformers_models::ModelSpec;
use vkformers_tensor::Graph;

use crate::decode::DecodeError;
use crate::device_choice::DeviceChooser;
use crate::generation::Timings;
use crate::row_choice::RowChooser;

pub use request::{Finished, Request, RequestOptions, Sink, SubmitError};
use running::Running;
pub use schedule::admission_hold_env;

/// How much padding a prefill forward takes by default (see [`Engine::set_max_prefill_padding`]):
/// up to twice the columns of its rows alone.
pub const DEFAULT_MAX_PAD: f64 = 2.0;

/// The step-wise engine (see the module docs).
pub struct Engine<'m> {
    /// The models requests run on: one base and adapters over it (one spec, one KV cache layout).
    models: Vec<&'m Model>,
    cache: KvCache,
    slots: Vec<Option<Running>>,
    /// Waiting requests with their model, and whether every choice of theirs is made on the
    /// device (decided once, at submission: the lookahead step asks it of every waiting request).
    waiting: VecDeque<(usize, Request, bool)>,
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
    /// Run the device one step ahead of the host where every row's choice is made there.
    lookahead: bool,
    /// The lookahead steps' output buffers and the step in flight (made at the first one).
    ahead: Option<ahead::Ahead>,
    /// Requests admitted so far (each admission's serial number).
    admissions: u64,
    /// Hold a request that arrives while rows run for one step, so that requests arriving over
    /// two steps share one prefill forward (see [`Engine::set_admission_hold`]).
    admission_hold: bool,
    /// Requests left waiting at the end of the last step (they have been held once already).
    held: usize,
    /// Where the lookahead steps' time went ([`Engine::step_times`]).
    host_times: StepTimes,
}

/// Seconds of the engine's lookahead steps so far, by what the engine thread was doing: the host's
/// own work is `record_secs` (and the sink's, which the caller times); `submit_secs` is the
/// driver's submission alone; `wait_secs` is every wait for the device (the graph's waits for
/// in-flight batches inside recording or submitting included), near zero when the host is the
/// bottleneck (the device idles between steps).
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct StepTimes {
    /// Recording the step's forwards and choices (the graph built, kernels recorded, and the
    /// submissions of batches the graph flushes as it fills).
    pub record_secs: f64,
    /// Submitting the recorded batch.
    pub submit_secs: f64,
    /// Waiting for the previous step's batch, the periodic full synchronisations, and the waits
    /// for the oldest batch inside recording or submitting (a graph keeps at most three batches
    /// in flight: a step of two batches waits for the previous step's first as it submits).
    pub wait_secs: f64,
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
            lookahead: crate::lookahead::enabled(),
            ahead: None,
            admissions: 0,
            admission_hold: schedule::admission_hold_env().unwrap_or(false),
            held: 0,
            host_times: StepTimes::default(),
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
        let pipeline = req.opts.params.processors()?;
        if self.holds(req.id) {
            return Err(SubmitError::DuplicateId(req.id));
        }
        let on_device = running::chosen_on_device(&req.opts, &pipeline);
        self.waiting.push_back((model, req, on_device));
        Ok(())
    }

    fn spec(&self) -> &'m ModelSpec {
        &self.models[0].spec
    }

    fn holds(&self, id: u64) -> bool {
        self.waiting.iter().any(|(_, r, _)| r.id == id) || self.slots.iter().flatten().any(|r| r.id == id)
    }

    /// Drops request `id`, queued or running; a running one's blocks go back to the pools now.
    /// Returns whether it was there.
    pub fn cancel(&mut self, id: u64) -> bool {
        if let Some(at) = self.waiting.iter().position(|(_, r, _)| r.id == id) {
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

    /// Runs the device one step ahead of the host (see [the module](self#lookahead)): on by default
    /// unless `VKFORMERS_DECODE_LOOKAHEAD=0`; off, every step is synchronous (for comparison).
    pub fn set_lookahead(&mut self, on: bool) {
        self.lookahead = on;
    }

    /// Holds a request that arrives while other rows run for at most one step before it is
    /// admitted (off by default unless `VKFORMERS_ADMISSION_HOLD=1`; `vkformers serve` turns it
    /// on): requests arriving over
    /// two steps then share one prefill forward,
    /// each of which stalls every running row's decode (a server's clients send their next
    /// requests a few steps apart). Off, every step admits whatever waits.
    pub fn set_admission_hold(&mut self, on: bool) {
        self.admission_hold = on;
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

    /// Forgets the counters of the work run so far (prefill forwards, host-chosen rows, timings,
    /// step times), as a fresh engine's: a server's warm-up runs before it serves, and its
    /// `/metrics` count only the clients' work. (The admission serials go on: they stay unique.)
    pub fn reset_counters(&mut self) {
        self.prefill_forwards = 0;
        self.host_rows = 0;
        self.total = Timings::default();
        self.host_times = StepTimes::default();
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
            if self.runs_ahead() {
                return self.step_ahead(g, sink);
            }
            // The synchronous step starts from the host knowing every token chosen so far.
            self.drain(g, sink)?;
            if self.admits_now() {
                self.admit(g, sink)?;
            }
            if self.running() > 0 {
                self.decode_step(g, sink)?;
            }
            self.held = self.waiting.len();
            Ok(())
        })
    }
}
