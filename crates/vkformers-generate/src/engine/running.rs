//! A request holding a slot: its processors, its tokens so far and its timings.

use std::time::Instant;

use vkformers_kernels::sample::rows::RowDraw;

use super::{Request, RequestOptions};
use crate::decode::DecodeError;
use crate::generation::Timings;
use crate::penalties::TokenLogprob;
use crate::processors::Pipeline;
use crate::row_choice::{device_row, host_choice};

/// A running request.
pub(super) struct Running {
    pub(super) id: u64,
    /// Its model (index into the engine's models: the base or an adapter over it).
    pub(super) model: usize,
    pub(super) opts: RequestOptions,
    pub(super) pipeline: Pipeline,
    /// Prompt and new tokens so far.
    pub(super) history: Vec<u32>,
    pub(super) new: Vec<u32>,
    pub(super) timings: Timings,
    /// When its first token was on the host (its decode time runs from there).
    pub(super) first_token: Instant,
    /// When it was admitted (a lookahead prefill's time runs from there to its first token).
    pub(super) admitted: Instant,
    /// Its admission's number (unique): a lookahead step's choice for its slot is its own only
    /// when this matches (the slot may have passed to another request meanwhile).
    pub(super) serial: u64,
    /// Its choices recorded on the device and not yet read (0 or 1: the lookahead step in flight).
    pub(super) pending: usize,
    /// Every token of it is chosen on the device (the lookahead steps need it; asked every step).
    pub(super) on_device: bool,
}

impl Running {
    /// A request admitted to a slot: its processors built.
    pub(super) fn new(model: usize, req: Request, serial: u64) -> Result<Self, DecodeError> {
        let pipeline = req.opts.params.processors()?;
        let on_device = chosen_on_device(&req.opts, &pipeline);
        Ok(Running {
            id: req.id,
            model,
            pipeline,
            timings: Timings { prefill_tokens: req.prompt.len(), ..Timings::default() },
            history: req.prompt,
            new: Vec::new(),
            opts: req.opts,
            first_token: Instant::now(),
            admitted: Instant::now(),
            serial,
            pending: 0,
            on_device,
        })
    }

    /// Whether the device's greedy argmax chooses this row's tokens.
    pub(super) fn device_greedy(&self) -> bool {
        argmax_chooses(&self.opts, &self.pipeline)
    }

    /// Chooses the next token from the row's raw logits `[V]` on the host.
    pub(super) fn choose_host(&self, logits: &mut [f32]) -> Result<(u32, Option<TokenLogprob>), DecodeError> {
        Ok(host_choice(&self.opts, &self.pipeline, (&self.history, &self.new), logits)?)
    }

    /// The row's device choice in `slot`, when its options run there.
    pub(super) fn device_row(&self, slot: usize) -> Option<RowDraw> {
        device_row(&self.opts, &self.pipeline, slot, self.new.len())
    }

    /// The row's device choice in `slot` for its next token not yet recorded: its draw's step
    /// counts the choices in flight too.
    pub(super) fn device_row_ahead(&self, slot: usize) -> Option<RowDraw> {
        device_row(&self.opts, &self.pipeline, slot, self.new.len() + self.pending)
    }

    /// Whether another token may still be asked of the device (its `max_new_tokens` not yet met
    /// by the tokens it has and those in flight).
    pub(super) fn wants_more(&self) -> bool {
        self.new.len() + self.pending < self.opts.max_new_tokens
    }
}

/// Whether the device's greedy argmax chooses the tokens of a request of `opts` and `pipeline`.
fn argmax_chooses(opts: &RequestOptions, pipeline: &Pipeline) -> bool {
    pipeline.processors.is_empty() && !opts.params.do_sample && opts.penalties.is_off() && opts.logprobs.is_none()
}

/// Whether every token of a request of `opts` and `pipeline` is chosen on the device: the argmax,
/// or the per-row sampler (whose state the kernel keeps, so it needs no upload once admitted).
pub(super) fn chosen_on_device(opts: &RequestOptions, pipeline: &Pipeline) -> bool {
    argmax_chooses(opts, pipeline) || device_row(opts, pipeline, 0, 0).is_some()
}
