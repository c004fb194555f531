//! The engine's lookahead step: the device runs one step ahead of the host, as plain greedy
//! `generate` does (`crate::lookahead`).
//!
//! Step k records (1) one decode forward of every running row that still wants a token, its ids
//! copied on the device from step k − 1's choices (or from the host, for a row whose last token
//! the host already has), (2) the prefills of requests admitted to free slots, then each forward's
//! choice into output set `k % 2` and its copy for the host; it submits them as one batch, and
//! only then waits for step k − 1's batch and reports its tokens (the sink told, finished rows
//! retired). So the device runs step k while the host reads, detokenizes, checks stops and
//! schedules step k − 1's tokens, and records step k + 1.
//!
//! Same tokens as the synchronous step: each row's forward reads only its own blocks and its own
//! chosen id; its draw's step counts the choice in flight (`Running::pending`); the per-row
//! sampler's state (the penalties' counts) is kept by the kernel on the device, every choice of a
//! penalised row being made there (a slot's state is reset, recorded into the batch, only at its
//! admission, when the host's history is the prompt). The engine falls back to the synchronous
//! step (after draining the step in flight) while any running or waiting request needs the host's
//! choice (`set_host_sampling`, or options the device sampler cannot express), on LongRoPE models
//! (whose context switch runs a whole history again on the host's ids), and when switched off
//! (`Engine::set_lookahead`, `VKFORMERS_DECODE_LOOKAHEAD=0`).
//!
//! What a row finishing at step k − 1 costs: step k ran for it anyway (wasted, and one column more
//! in its blocks, given back with the rest when it retires; a later admission's prefill into those
//! blocks is recorded in a later batch, ordered after). A row that has all its `max_new_tokens` in
//! hand or in flight is not run again. A joining request is prefilled in the step after the one
//! that freed its slot, and its first token reaches the host one step later than in the
//! synchronous engine (the batch holding its prefill is read at the next step).

use std::collections::BTreeMap;
use std::time::Instant;

use vkformers_kernels::sample::{self, rows::RowDraw, rows::LOGPROB_WORDS};
use vkformers_models::decoder::{forward_cached_last_ids, Batch};
use vkformers_tensor::{Graph, Tensor};
use vkformers_vk::{Buffer, BufferKind, BufferView, VkError};

use super::{Engine, Sink, StepTimes};
use crate::decode::DecodeError;
use crate::prefill_plan::{prefill_groups, MAX_PREFILL_TOKENS};
use crate::row_choice::{chosen_row, RowChooser};

/// Lookahead steps between full synchronisations: only then may the buffers dropped meanwhile
/// take host uploads again (`Context::reclaim_buffers`), so the pool does not grow.
const SYNC_EVERY: usize = 64;

/// One step's choices on the device and their host-visible copy: ids u32 at words `[0, cap)`,
/// then log-probabilities `[cap, LOGPROB_WORDS]` from word `cap` (cap: two choices a slot, a
/// decode and a prefill).
struct Outputs {
    device: Buffer,
    host: Buffer,
}

/// One recorded choice: its position in the step's outputs is its index.
#[derive(Clone, Copy)]
struct Choice {
    slot: usize,
    /// The admission it belongs to (the slot's request may have changed since).
    serial: u64,
    /// The request's first token (its prefill's choice).
    first: bool,
    /// Log-probabilities asked with this many alternatives.
    top: Option<usize>,
}

/// A submitted lookahead step.
struct Flight {
    set: usize,
    ticket: usize,
    choices: Vec<Choice>,
}

/// The lookahead's state: two output sets (step k writes set `k % 2` while the host reads the
/// other) and the step in flight.
pub(super) struct Ahead {
    sets: [Outputs; 2],
    cap: usize,
    next: usize,
    flight: Option<Flight>,
    /// Steps whose flight was read, and steps recorded ahead.
    steps: usize,
    recorded: usize,
}

impl Ahead {
    fn new(g: &Graph<'_>, slots: usize) -> Result<Self, DecodeError> {
        let cap = 2 * slots.max(1);
        let bytes = (cap * (1 + LOGPROB_WORDS) * 4) as u64;
        let set = |i: usize| -> Result<Outputs, DecodeError> {
            let ctx = g.ctx();
            Ok(Outputs {
                device: ctx.buffer(bytes, &format!("lookahead choices {i}"))?,
                host: ctx.buffer_of_kind(bytes, BufferKind::Download, &format!("lookahead choices {i} (host)"))?,
            })
        };
        Ok(Ahead { sets: [set(0)?, set(1)?], cap, next: 0, flight: None, steps: 0, recorded: 0 })
    }

    /// Words `[from, from + n)` of set `set`'s device buffer.
    fn words(&self, set: usize, from: usize, n: usize) -> BufferView<'_> {
        self.sets[set].device.slice((from * 4) as u64, (n * 4) as u64)
    }
}

impl Engine<'_> {
    /// Steps recorded ahead of the host so far (0 when every step was synchronous).
    pub fn steps_ahead(&self) -> usize {
        self.ahead.as_ref().map_or(0, |a| a.recorded)
    }

    /// Whether this step runs ahead (see the module).
    pub(super) fn runs_ahead(&self) -> bool {
        let longrope = self.spec().layers.iter().any(|l| l.attn.rope.as_ref().is_some_and(|r| r.long.is_some()));
        self.lookahead
            && !self.host_sampling
            && !longrope
            && self.slots.iter().flatten().all(|r| r.on_device)
            && self.waiting.iter().all(|&(_, _, on_device)| on_device)
    }

    /// One lookahead step (see the module); on an error nothing stays in flight for the host.
    pub(super) fn step_ahead(&mut self, g: &Graph<'_>, sink: &mut dyn Sink) -> Result<(), DecodeError> {
        let out = self.try_step_ahead(g, sink);
        if out.is_err() {
            if let Some(a) = self.ahead.as_mut() {
                a.flight = None;
            }
            self.slots.iter_mut().flatten().for_each(|r| r.pending = 0);
        }
        out
    }

    fn try_step_ahead(&mut self, g: &Graph<'_>, sink: &mut dyn Sink) -> Result<(), DecodeError> {
        let start = Instant::now();
        let waited = g.batch_wait_secs();
        if self.ahead.is_none() {
            self.ahead = Some(Ahead::new(g, self.slots.len())?);
        }
        let ahead = self.ahead.as_mut().expect("just made");
        let (set, prev) = (ahead.next, ahead.flight.take());
        let mut choices = Vec::new();
        self.record_decode(g, set, prev.as_ref(), &mut choices)?;
        let admitted = if self.admits_now() { self.seat()? } else { Vec::new() };
        // Those left waiting have been held one step.
        self.held = self.waiting.len();
        for group in prefill_groups(&admitted, self.max_pad, MAX_PREFILL_TOKENS) {
            let logits = self.prefill_logits(g, &group)?;
            self.record_choice(g, &logits, &group, set, true, &mut choices)?;
        }
        host_phase(&mut self.host_times, g, (start, waited), |t| &mut t.record_secs);
        let ahead = self.ahead.as_mut().expect("made above");
        if !choices.is_empty() {
            let (n, cap) = (choices.len(), ahead.cap);
            let logprobs = choices.iter().any(|c| c.top.is_some());
            let (device, host) = (&ahead.sets[set].device, &ahead.sets[set].host);
            g.record(|rec| {
                rec.copy(device.slice(0, n as u64 * 4), host.slice(0, n as u64 * 4))?;
                if !logprobs {
                    return Ok(());
                }
                let (at, len) = ((cap * 4) as u64, (n * LOGPROB_WORDS * 4) as u64);
                rec.copy(device.slice(at, len), host.slice(at, len))
            })?;
            let submit = (Instant::now(), g.batch_wait_secs());
            ahead.flight = Some(Flight { set, ticket: g.flush_ticket()?, choices });
            host_phase(&mut self.host_times, g, submit, |t| &mut t.submit_secs);
            ahead.next = 1 - set;
            ahead.recorded += 1;
        }
        let Some(prev) = prev else {
            // The first step only records (its prefills): prefill time.
            self.total.prefill_secs += start.elapsed().as_secs_f64();
            return Ok(());
        };
        self.wait_device(|| g.wait_submitted(prev.ticket))?;
        self.report(&prev, sink)?;
        // The step's time is the wait for `prev`: decode time when it decoded, else prefill time
        // (prefills riding with a decode are counted in the decode's time).
        let secs = start.elapsed().as_secs_f64();
        if prev.choices.iter().any(|c| !c.first) {
            self.total.decode_secs += secs;
        } else {
            self.total.prefill_secs += secs;
        }
        let ahead = self.ahead.as_mut().expect("made above");
        ahead.steps += 1;
        if ahead.flight.is_none() || ahead.steps.is_multiple_of(SYNC_EVERY) {
            self.wait_device(|| g.sync())?;
        }
        Ok(())
    }

    /// Waits for the lookahead step in flight, if any, and reports its tokens: afterwards the host
    /// holds every token chosen (the synchronous step starts from there).
    pub(super) fn drain(&mut self, g: &Graph<'_>, sink: &mut dyn Sink) -> Result<(), DecodeError> {
        let Some(prev) = self.ahead.as_mut().and_then(|a| a.flight.take()) else { return Ok(()) };
        self.wait_device(|| g.wait_submitted(prev.ticket))?;
        self.report(&prev, sink)?;
        self.wait_device(|| g.sync())?;
        Ok(())
    }

    /// Runs `wait` (the host blocked on the device), counting its time in
    /// [`Engine::device_wait_secs`].
    fn wait_device(&mut self, wait: impl FnOnce() -> Result<(), VkError>) -> Result<(), VkError> {
        let start = Instant::now();
        let out = wait();
        self.host_times.wait_secs += start.elapsed().as_secs_f64();
        out
    }

    /// Where the lookahead steps' time went so far (see [`StepTimes`]).
    pub fn step_times(&self) -> StepTimes {
        self.host_times
    }

    /// Records one decode forward per model of every running row that wants another token, its
    /// input the id chosen for it by `prev` (copied on the device) or, when none is in flight, its
    /// last token on the host.
    fn record_decode(
        &mut self,
        g: &Graph<'_>,
        set: usize,
        prev: Option<&Flight>,
        choices: &mut Vec<Choice>,
    ) -> Result<(), DecodeError> {
        // Per slot: the position of the live choice in flight for it (a plain vector: no map
        // built and hashed every step).
        let mut source = vec![None; self.slots.len()];
        for (pos, c) in prev.iter().flat_map(|f| f.choices.iter().enumerate()) {
            if self.slots[c.slot].as_ref().is_some_and(|r| r.serial == c.serial) {
                source[c.slot] = Some(pos);
            }
        }
        let mut groups: BTreeMap<usize, Vec<usize>> = BTreeMap::new();
        for (s, r) in self.slots.iter().enumerate() {
            let Some(r) = r.as_ref().filter(|r| r.wants_more()) else { continue };
            if r.pending > 0 && source[s].is_none() {
                // Its last choice is in no step the host can still read: it would never run again.
                return Err(DecodeError::Request(format!("request {}: its choice in flight is lost", r.id)));
            }
            groups.entry(r.model).or_default().push(s);
        }
        for (model, group) in groups {
            self.cache.select(&group)?;
            let ids = self.decode_ids(g, &group, prev.map(|f| f.set), &source)?;
            let n = group.len();
            let (zeros, ones) = (vec![0; n], vec![1; n]);
            let batch = Batch { ids: &zeros, mask: &ones, batch: n, seq: 1 };
            let model = self.models[model];
            let logits = forward_cached_last_ids(g, &model.spec, &model.weights, &batch, &ids, &self.cache)?;
            self.record_choice(g, &logits, &group, set, false, choices)?;
        }
        Ok(())
    }

    /// The input ids `[n, 1]` of a decode forward of `group`: uploaded from the host for rows with
    /// nothing in flight, then copied over from set `prev`'s choices (runs of rows whose sources
    /// are consecutive, one copy each) for the others.
    fn decode_ids(
        &self,
        g: &Graph<'_>,
        group: &[usize],
        prev: Option<usize>,
        source: &[Option<usize>],
    ) -> Result<Tensor, DecodeError> {
        let row = |s: usize| self.slots[s].as_ref().expect("a running slot");
        let host: Vec<i32> = group
            .iter()
            .map(|&s| if row(s).pending == 0 { *row(s).history.last().expect("a token") as i32 } else { 0 })
            .collect();
        let ids = g.ints(&host, &[group.len(), 1])?;
        // (first row, first source, length) of each run copied on the device.
        let mut runs: Vec<(usize, usize, usize)> = Vec::new();
        for (i, &s) in group.iter().enumerate() {
            let Some(from) = source[s].filter(|_| row(s).pending > 0) else { continue };
            match runs.last_mut() {
                Some((r, f, len)) if *r + *len == i && *f + *len == from => *len += 1,
                _ => runs.push((i, from, 1)),
            }
        }
        if let (Some(prev), false) = (prev, runs.is_empty()) {
            let ahead = self.ahead.as_ref().expect("made by the step");
            let dst = ids.view();
            g.record(|rec| {
                for &(i, from, len) in &runs {
                    let to =
                        BufferView { buffer: dst.buffer, offset: dst.offset + (i * 4) as u64, len: (len * 4) as u64 };
                    rec.copy(ahead.words(prev, from, len), to)?;
                }
                Ok::<(), VkError>(())
            })?;
        }
        Ok(ids)
    }

    /// Records the choice of each slot of `slots` from `logits [n, V]` into set `set` after the
    /// step's `choices` so far (the argmax when every row is plain greedy, else the per-row
    /// sampler), and counts it in flight.
    fn record_choice(
        &mut self,
        g: &Graph<'_>,
        logits: &Tensor,
        slots: &[usize],
        set: usize,
        first: bool,
        choices: &mut Vec<Choice>,
    ) -> Result<(), DecodeError> {
        let (pos, n) = (choices.len(), slots.len());
        let greedy = slots.iter().all(|&s| self.slots[s].as_ref().is_some_and(|r| r.device_greedy()));
        let tops: Vec<Option<usize>> = if greedy {
            let ahead = self.ahead.as_ref().expect("made by the step");
            let ids = ahead.words(set, pos, n);
            g.record(|rec| sample::argmax_last(rec, logits.view(), ids, n, 1, logits.last_dim()))?;
            vec![None; n]
        } else {
            let draws = self.ahead_draws(g, slots)?;
            let ahead = self.ahead.as_ref().expect("made by the step");
            let views =
                (ahead.words(set, pos, n), ahead.words(set, ahead.cap + pos * LOGPROB_WORDS, n * LOGPROB_WORDS));
            self.rows.as_ref().expect("made by ahead_draws").record(g, logits, &draws, views)?;
            draws.iter().map(|d| d.top_logprobs).collect()
        };
        for (&slot, top) in slots.iter().zip(tops) {
            let r = self.slots[slot].as_mut().expect("a running slot");
            r.pending += 1;
            choices.push(Choice { slot, serial: r.serial, first, top });
        }
        Ok(())
    }

    /// The per-row sampler's draws of `slots` for their next token not yet recorded; a penalised
    /// slot whose state is not its request's (just admitted) gets it reset first, recorded into
    /// the batch (a step in flight may still draw for the slot's previous request).
    fn ahead_draws(&mut self, g: &Graph<'_>, slots: &[usize]) -> Result<Vec<RowDraw>, DecodeError> {
        if self.rows.is_none() {
            self.rows = Some(RowChooser::new(g, self.slots.len(), self.spec().vocab)?);
        }
        let chooser = self.rows.as_ref().expect("just made");
        let mut draws = Vec::with_capacity(slots.len());
        for &s in slots {
            let r = self.slots[s].as_ref().expect("a running slot");
            let off = || DecodeError::Request(format!("request {}: its options do not run on the device", r.id));
            let d = r.device_row_ahead(s).ok_or_else(off)?;
            if d.reads_state() && !self.synced[s] {
                if r.pending > 0 {
                    return Err(DecodeError::Request(format!("request {}: its sampler state lags a choice", r.id)));
                }
                chooser.reset_recorded(g, s, &r.history, r.new.len())?;
                self.synced[s] = true;
            }
            draws.push(d);
        }
        Ok(draws)
    }

    /// Reads the choices of `flight` (its batch completed) and reports each to its request, unless
    /// the request left meanwhile (finished or cancelled: its choice is wasted).
    fn report(&mut self, flight: &Flight, sink: &mut dyn Sink) -> Result<(), DecodeError> {
        let ahead = self.ahead.as_ref().expect("a flight has its sets");
        let n = flight.choices.len();
        let logprobs = flight.choices.iter().any(|c| c.top.is_some());
        let mut words = vec![0u32; if logprobs { ahead.cap + n * LOGPROB_WORDS } else { n }];
        if !ahead.sets[flight.set].host.read_mapped(bytemuck::cast_slice_mut(&mut words)) {
            return Err(VkError::Allocator("the lookahead choices' host buffer is not mapped".into()).into());
        }
        let (ids, lps) = (&words[..n], if logprobs { &words[ahead.cap..] } else { &[][..] });
        let v = self.spec().vocab;
        for (i, c) in flight.choices.iter().enumerate() {
            let Some(r) = self.slots[c.slot].as_mut().filter(|r| r.serial == c.serial) else { continue };
            let token = chosen_row(c.top, ids[i], lps, i, v)?;
            r.pending -= 1;
            if c.first {
                r.timings.prefill_secs = r.admitted.elapsed().as_secs_f64();
                r.first_token = Instant::now();
                self.total.prefill_tokens += r.timings.prefill_tokens;
            } else {
                r.timings.decode_tokens += 1;
                self.total.decode_tokens += 1;
            }
            self.push_token(c.slot, token, sink);
        }
        Ok(())
    }
}

/// Counts the time since `start` (when the graph had waited `waited` seconds for batches) in the
/// phase of `times` that `phase` picks, less the waits for batches inside it (the graph waits for
/// the oldest batch when too many are in flight), which count as device waits.
fn host_phase(
    times: &mut StepTimes,
    g: &Graph<'_>,
    (start, waited): (Instant, f64),
    phase: fn(&mut StepTimes) -> &mut f64,
) {
    let blocked = g.batch_wait_secs() - waited;
    *phase(times) += start.elapsed().as_secs_f64() - blocked;
    times.wait_secs += blocked;
}
