//! What the engine is asked and answers: a request and its options, why one is refused, a
//! finished request, and the sink that receives tokens.

use crate::generation::{Finish, GenerateOptions, Timings};
use crate::penalties::{Penalties, TokenLogprob};
use crate::processors::SamplingParams;
use crate::GenerateError;

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
