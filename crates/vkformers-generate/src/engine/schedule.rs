//! Admission, prefill and decode steps of the engine: which rows run in which forward, and what
//! a new token does to its request (the sink told, the request retired when it finished).

use std::time::Instant;

use vkformers_models::decoder::{forward_cached_last, Batch};
use vkformers_models::ModelSpec;
use vkformers_tensor::{Graph, Tensor};

use super::{Engine, Finished, Running, Sink};
use crate::decode::DecodeError;
use crate::generation::Finish;
use crate::penalties::TokenLogprob;
use crate::prefill_plan::{prefill_groups, width, Admitted, MAX_PREFILL_TOKENS};

impl Engine<'_> {
    /// Fills free slots with waiting requests and prefills them, as many as `prefill_groups`
    /// allows in one left-padded forward, each giving its request's first token; requests that
    /// finish on it free their slots for the next waiting ones.
    pub(super) fn admit(&mut self, g: &Graph<'_>, sink: &mut dyn Sink) -> Result<(), DecodeError> {
        loop {
            let admitted = self.seat()?;
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

    /// Whether this step admits the waiting requests: at once when no row runs (nothing to
    /// stall), when they fill every free slot, or when one of them was already held at the last
    /// step (so none waits more than one step); otherwise they wait one step, and the requests
    /// arriving meanwhile join the same prefill forward. (A lookahead row whose last token is in
    /// flight counts as running: the requests answering it and the rows finishing with it arrive
    /// over the next steps.)
    pub(super) fn admits_now(&self) -> bool {
        let free = self.slots.iter().filter(|s| s.is_none()).count();
        !self.admission_hold || self.running() == 0 || self.held > 0 || self.waiting.len() >= free
    }

    /// Gives free slots to waiting requests, in order: the admitted slots, keyed for
    /// `prefill_groups`.
    pub(super) fn seat(&mut self) -> Result<Vec<Admitted>, DecodeError> {
        let mut admitted = Vec::new();
        while let Some(slot) = self.slots.iter().position(Option::is_none) {
            let Some((model, req, _)) = self.waiting.pop_front() else { break };
            let len = req.prompt.len();
            self.admissions += 1;
            self.slots[slot] = Some(Running::new(model, req, self.admissions)?);
            self.synced[slot] = false;
            // A prefill of `len` columns has position ids up to len - 1; one model a forward.
            let long = on_long_factors(self.spec(), len - 1);
            admitted.push(Admitted { slot, len, key: 2 * model + usize::from(long) });
        }
        Ok(admitted)
    }

    /// Runs every column of the slots' histories their empty cache rows do not hold (their
    /// prompts, or after a LongRoPE switch a whole history) in one forward `[n, T]`, T the longest,
    /// shorter rows left-padded (mask 0: their padding is neither attended to nor cached), and
    /// chooses each one's next token.
    fn prefill(&mut self, g: &Graph<'_>, slots: &[usize]) -> Result<Vec<(u32, Option<TokenLogprob>)>, DecodeError> {
        let logits = self.prefill_logits(g, slots)?;
        self.choose(g, &logits, slots)
    }

    /// Records the forward of [`Engine::prefill`]: logits `[n, V]` of each row's last column.
    pub(super) fn prefill_logits(&mut self, g: &Graph<'_>, slots: &[usize]) -> Result<Tensor, DecodeError> {
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
        Ok(forward_cached_last(g, &model.spec, &model.weights, &batch, &self.cache)?)
    }

    /// One new token for every running row: rows crossing LongRoPE's original context run their
    /// whole history again alone (as alone, their cache was rotated with the short factors); the
    /// others decode together, in one forward per model and factor set.
    pub(super) fn decode_step(&mut self, g: &Graph<'_>, sink: &mut dyn Sink) -> Result<(), DecodeError> {
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
    pub(super) fn push_token(
        &mut self,
        slot: usize,
        (token, logprob): (u32, Option<TokenLogprob>),
        sink: &mut dyn Sink,
    ) {
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

/// `VKFORMERS_ADMISSION_HOLD`: `Some(true)` for 1, `Some(false)` for 0, None when unset (or
/// anything else): the caller's default then. The engine's own default is off (`generate`'s
/// continuous batching); `vkformers serve` turns it on: on an H200 (1.1B bf16, 64 clients, 512
/// requests of 256 tokens) it cut time to first token p99 from 0.36-0.80 s to 0.10 s for 2% of
/// throughput (docs/bench/h200-2026-12-05-b); a step-counted simulation before it gave 20-50%
/// fewer prefill forwards for up to 0.6 steps more wait.
pub fn admission_hold_env() -> Option<bool> {
    static ON: std::sync::OnceLock<Option<bool>> = std::sync::OnceLock::new();
    *ON.get_or_init(|| match std::env::var("VKFORMERS_ADMISSION_HOLD").as_deref() {
        Ok("1") => Some(true),
        Ok("0") => Some(false),
        _ => None,
    })
}

/// Whether a row whose next token sits at `position` runs on LongRoPE's long factors (the
/// forward's longest position id + 1 beyond the original context).
fn on_long_factors(spec: &ModelSpec, position: usize) -> bool {
    let original = spec.layers.iter().find_map(|l| l.attn.rope.as_ref().and_then(|r| r.long.as_ref()).map(|l| l.1));
    original.is_some_and(|o| position + 1 > o)
}
