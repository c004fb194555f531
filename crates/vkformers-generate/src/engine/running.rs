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
}

impl Running {
    /// A request admitted to a slot: its processors built.
    pub(super) fn new(model: usize, req: Request) -> Result<Self, DecodeError> {
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
    pub(super) fn device_greedy(&self) -> bool {
        self.pipeline.processors.is_empty()
            && !self.opts.params.do_sample
            && self.opts.penalties.is_off()
            && self.opts.logprobs.is_none()
    }

    /// Chooses the next token from the row's raw logits `[V]` on the host.
    pub(super) fn choose_host(&self, logits: &mut [f32]) -> Result<(u32, Option<TokenLogprob>), DecodeError> {
        Ok(host_choice(&self.opts, &self.pipeline, (&self.history, &self.new), logits)?)
    }

    /// The row's device choice in `slot`, when its options run there.
    pub(super) fn device_row(&self, slot: usize) -> Option<RowDraw> {
        device_row(&self.opts, &self.pipeline, slot, self.new.len())
    }
}
