//! Continuous batching of a fixed list of prompts: more prompts than rows of the KV cache
//! (`max_batch` slots), through the step-wise [`crate::engine::Engine`]. Every prompt is queued at
//! once; when a row finishes (EOS, the caller's stop, `max_new_tokens`) its blocks go back to the
//! pools and the next waiting prompt takes the slot at the next step. Each prompt gets exactly
//! the tokens it gets alone (see the engine's docs); with sampling, a prompt's draws are those of
//! the same prompt alone (seed, its own step, row 0).

use crate::decode::DecodeError;
use crate::engine::{Engine, Finished, Request, RequestOptions, Sink, SubmitError};
use crate::generation::{Finish, GenerateOptions, Generation, Timings};
use crate::TokenLogprob;

use vkformers_models::model::Model;
use vkformers_tensor::Graph;

/// Gathers results by prompt index (the request id) and forwards tokens to the caller.
struct Collect<'a> {
    rows: Vec<Vec<u32>>,
    finish: Vec<Finish>,
    per_row: Vec<Timings>,
    on_token: &'a mut dyn FnMut(usize, &[u32]) -> bool,
}

impl Sink for Collect<'_> {
    fn token(&mut self, id: u64, new: &[u32], _: Option<&TokenLogprob>) -> bool {
        (self.on_token)(id as usize, new)
    }

    fn finished(&mut self, id: u64, done: Finished) {
        let p = id as usize;
        (self.rows[p], self.finish[p], self.per_row[p]) = (done.tokens, done.finish, done.timings);
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
    let n = prompts.len();
    let mut out = Collect {
        rows: vec![Vec::new(); n],
        finish: vec![Finish::Length; n],
        per_row: vec![Timings::default(); n],
        on_token,
    };
    if opts.max_new_tokens == 0 {
        return Ok(Generation {
            rows: out.rows,
            finish: out.finish,
            timings: Timings::default(),
            per_row: out.per_row,
        });
    }
    let longest = prompts.iter().map(Vec::len).max().unwrap_or(0);
    let mut engine = Engine::new(g, model, max_batch.clamp(1, n), longest + opts.max_new_tokens)?;
    for (i, prompt) in prompts.iter().enumerate() {
        let req = Request { id: i as u64, prompt: prompt.clone(), opts: RequestOptions::from_generate(opts) };
        engine.submit(req).map_err(|e| match e {
            SubmitError::Sampling(e) => DecodeError::Sampling(e),
            other => DecodeError::Request(other.to_string()),
        })?;
    }
    while !engine.is_idle() {
        engine.step(g, &mut out)?;
    }
    Ok(Generation { rows: out.rows, finish: out.finish, timings: engine.timings(), per_row: out.per_row })
}
