//! Choosing the next token of every row of the serving engine's batch, each row a request with
//! its own options: on the device (`vkformers_kernels::sample::rows`: only the ids `[n]`, and the
//! log-probabilities of the rows that ask for them, come back, never the logits `[n, V]`), or on
//! the host ([`host_choice`], the reference the device is tested against).

use vkformers_kernels::sample::rows::{self, RowBuffers, RowDraw, LOGPROB_WORDS, PARAM_WORDS};
use vkformers_kernels::sample::{Draw, NO_TOKEN};
use vkformers_tensor::{Graph, Tensor};
use vkformers_vk::{Buffer, BufferView, Recorder};

use crate::decode::DecodeError;
use crate::device_choice::device_processors;
use crate::engine::RequestOptions;
use crate::error::GenerateError;
use crate::penalties::{log_probs, TokenLogprob};
use crate::processors::{LogitsProcessor, Pipeline};
use crate::sampler::Sampler;

/// The host's choice for one request from its raw logits `[V]` (changed in place): the
/// log-probabilities of the raw distribution when asked (as OpenAI reports them), then
/// transformers' order with OpenAI's penalties where vLLM puts them (after the repetition penalty,
/// before the warpers), then greedy argmax or the draw of Philox `(seed, step = new.len(), row)`.
/// `history` is every id so far (prompt then generated) and `new` the generated ones (its tail).
pub fn host_choice(
    opts: &RequestOptions,
    pipeline: &Pipeline,
    (history, new): (&[u32], &[u32]),
    logits: &mut [f32],
) -> Result<(u32, Option<TokenLogprob>), GenerateError> {
    let raw = opts.logprobs.map(|_| log_probs(logits));
    let is_rep = |p: &&LogitsProcessor| matches!(p, LogitsProcessor::RepetitionPenalty { .. });
    pipeline.processors.iter().filter(is_rep).for_each(|p| p.apply(logits, history));
    opts.penalties.apply(logits, new);
    pipeline.processors.iter().filter(|p| !is_rep(p)).for_each(|p| p.apply(logits, history));
    let sampler = if opts.params.do_sample { Sampler::Seeded { seed: opts.seed } } else { Sampler::Greedy };
    let token = sampler.sample_row(logits, new.len() as u64, opts.row)?;
    let logprob = match (raw, opts.logprobs) {
        (Some(lp), Some(top)) => Some(TokenLogprob::of(&lp, token, top)),
        _ => None,
    };
    Ok((token, logprob))
}

/// The device row of a request in `slot` that has generated `generated` tokens, or `None` when
/// its options cannot run on the device (more alternatives than the kernel reports).
pub fn device_row(opts: &RequestOptions, pipeline: &Pipeline, slot: usize, generated: usize) -> Option<RowDraw> {
    let mut p = device_processors(pipeline)?;
    p.greedy = !opts.params.do_sample;
    if opts.logprobs.is_some_and(|n| n > rows::TOP_MAX) {
        return None;
    }
    Some(RowDraw {
        slot,
        p,
        draw: Draw { seed: opts.seed, step: generated as u64 },
        draw_row: opts.row,
        presence: opts.penalties.presence,
        frequency: opts.penalties.frequency,
        top_logprobs: opts.logprobs,
    })
}

/// The device side of the per-row choice for an engine of `slots` slots and vocabulary `v`: the
/// persistent state `[slots, v]` (see `rows::state_row`), and one output buffer of up to `slots`
/// rows: the ids `[n]`, then the log-probabilities `[n, LOGPROB_WORDS]` right after them, so one
/// read brings back both. (Each choice's parameters ride in the forward's own batch.)
pub struct RowChooser {
    slots: usize,
    v: usize,
    state: Buffer,
    out: Buffer,
}

impl RowChooser {
    pub fn new(g: &Graph<'_>, slots: usize, v: usize) -> Result<Self, DecodeError> {
        let ctx = g.ctx();
        let slots = slots.max(1);
        Ok(RowChooser {
            slots,
            v,
            state: ctx.buffer((slots * v * 4) as u64, "sampling state")?,
            out: ctx.buffer((slots * (1 + LOGPROB_WORDS) * 4) as u64, "chosen ids and logprobs")?,
        })
    }

    /// Sets slot `slot`'s state from its history (prompt then generated) whose last `generated`
    /// ids were generated. Call when the device's state of the slot is not the request's (a new
    /// request, or a choice made elsewhere). Nothing recorded may be pending on the state.
    pub fn reset(&self, g: &Graph<'_>, slot: usize, history: &[u32], generated: usize) -> Result<(), DecodeError> {
        let row = rows::state_row(history, generated, self.v);
        g.ctx().upload(&self.state, (slot * self.v * 4) as u64, bytemuck::cast_slice(&row))?;
        Ok(())
    }

    /// The state `[slots, v]` u32 (tests read it).
    pub fn state_view(&self) -> BufferView<'_> {
        self.state.view()
    }

    /// Words `[from, from + n)` of the output buffer.
    fn out(&self, from: usize, n: usize) -> BufferView<'_> {
        self.out.slice((from * 4) as u64, (n * 4) as u64)
    }

    /// Records slot `slot`'s reset (as [`RowChooser::reset`]) into the open batch instead of a
    /// submission of its own: ordered after the batches still in flight, which may draw for the
    /// slot's previous request (the engine's lookahead steps), and no wait for them (the row
    /// rides in the command buffer, in updates of at most `Recorder::UPDATE_MAX` bytes).
    pub fn reset_recorded(
        &self,
        g: &Graph<'_>,
        slot: usize,
        history: &[u32],
        generated: usize,
    ) -> Result<(), DecodeError> {
        let row = rows::state_row(history, generated, self.v);
        let at = (slot * self.v * 4) as u64;
        g.record(|rec| {
            for (i, part) in bytemuck::cast_slice::<u32, u8>(&row).chunks(Recorder::UPDATE_MAX).enumerate() {
                let from = at + (i * Recorder::UPDATE_MAX) as u64;
                rec.update(self.state.slice(from, part.len() as u64), part)?;
            }
            Ok(())
        })?;
        Ok(())
    }

    /// Records each row's choice from `logits [n, V]` (row i is `rows[i]`) into `ids [n]` u32 and
    /// `logprobs [n, LOGPROB_WORDS]`, with the parameters' upload, into the open batch; submits
    /// nothing.
    pub fn record(
        &self,
        g: &Graph<'_>,
        logits: &Tensor,
        rows: &[RowDraw],
        (ids, logprobs): (BufferView<'_>, BufferView<'_>),
    ) -> Result<(), DecodeError> {
        let n = rows.len();
        let words = rows::row_params(rows, self.v, self.slots)?;
        // Recorded into the open batch (n × 64 bytes), not a submission of its own.
        let params = g.ints(bytemuck::cast_slice(&words), &[n, PARAM_WORDS])?;
        let b = RowBuffers { logits: logits.view(), params: params.view(), state: self.state.view(), ids, logprobs };
        g.record(|rec| rows::draw_rows(rec, b, (n, 1, self.v, self.slots)))?;
        Ok(())
    }

    /// Each row's token and log-probabilities from `logits [n, V]` (row i is `rows[i]`): submits
    /// the pending forward with the parameters' upload and the choice (one submission), and reads
    /// back `n` ids, with the log-probabilities behind them only when a row asks for them.
    pub fn choose(
        &self,
        g: &Graph<'_>,
        logits: &Tensor,
        rows: &[RowDraw],
    ) -> Result<Vec<(u32, Option<TokenLogprob>)>, DecodeError> {
        let n = rows.len();
        self.record(g, logits, rows, (self.out(0, n), self.out(n, n * LOGPROB_WORDS)))?;
        g.sync()?;
        let asked = rows.iter().any(|r| r.top_logprobs.is_some());
        let words: Vec<u32> = g.ctx().read_vec(self.out(0, if asked { n * (1 + LOGPROB_WORDS) } else { n }))?;
        let (ids, lps) = words.split_at(n);
        let tops: Vec<Option<usize>> = rows.iter().map(|r| r.top_logprobs).collect();
        Ok(chosen_rows(&tops, ids, lps, self.v)?)
    }
}

/// The choices of rows asking for `tops[i]` alternatives from the kernel's words: ids `[n]` and,
/// when any row asks, the log-probabilities `[n, LOGPROB_WORDS]` as f32 bits (else empty).
pub fn chosen_rows(
    tops: &[Option<usize>],
    ids: &[u32],
    logprobs: &[u32],
    v: usize,
) -> Result<Vec<(u32, Option<TokenLogprob>)>, GenerateError> {
    tops.iter().zip(ids).enumerate().map(|(i, (&top, &id))| chosen_row(top, id, logprobs, i, v)).collect()
}

/// Row `i`'s choice of [`chosen_rows`]: the error of a row with nothing to draw.
pub fn chosen_row(
    top: Option<usize>,
    id: u32,
    logprobs: &[u32],
    i: usize,
    v: usize,
) -> Result<(u32, Option<TokenLogprob>), GenerateError> {
    if id == NO_TOKEN {
        return Err(GenerateError::NothingToSample);
    }
    let lp = top.map(|top| {
        let words: Vec<f32> =
            logprobs[i * LOGPROB_WORDS..][..LOGPROB_WORDS].iter().map(|&w| f32::from_bits(w)).collect();
        logprob_of(&words, id, top, v)
    });
    Ok((id, lp))
}

/// A row's log-probabilities from the kernel's words: the chosen token's, then `min(top, v)`
/// (id bits, logprob) pairs.
fn logprob_of(words: &[f32], token: u32, top: usize, v: usize) -> TokenLogprob {
    let pairs = words[1..].chunks(2).take(top.min(v));
    TokenLogprob { token, logprob: words[0], top: pairs.map(|p| (p[0].to_bits(), p[1])).collect() }
}
