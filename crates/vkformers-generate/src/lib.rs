//! Text generation for `vkformers generate` and `vkformers chat`:
//! - [`generation::generate`]: a batch of prompts, left-padded, prefilled once, then one token per
//!   row per step against the KV cache on the device (`vkformers_models::decoder::KvCache`: position
//!   ids from the mask, rolling sliding-window layers, LongRoPE's switch), with EOS ids, a per-token
//!   callback (streaming, stop strings: [`stop`], each token decoding a few recent ids: [`detok`])
//!   and timings; [`generation::generate_cached`] continues an existing cache (chat turns); both
//!   run the device one step ahead of the host (`lookahead`); [`config`] reads
//!   `generation_config.json`;
//! - [`engine::Engine`]: the step-wise batching engine over the paged KV cache (requests join and
//!   leave the running batch at every decode step; a finished or cancelled request's blocks go
//!   back at once; a base and LoRA adapters of it in one engine; requests admitted together
//!   prefill together, [`prefill_plan`]; each row's token chosen on the device with its own
//!   options, [`row_choice`]), and [`continuous::generate_continuous`], continuous batching of a
//!   fixed list of prompts through it;
//! - the logits processors of Hugging Face `transformers` (repetition penalty, temperature, top-k,
//!   top-p, min-p) on one row of f32 logits, applied in the order `generate` applies them, and a
//!   sampler (greedy argmax, or seeded multinomial sampling with a counter-based Philox4x32-10 RNG
//!   so that a seeded run repeats exactly).
//!
//! The processors and sampler here run on the CPU over one row `[V]`; filtered entries become
//! `-inf`, exactly as transformers' `filter_value`. The generation loop chooses each token on the
//! device instead ([`device_choice`], kernels `vkformers_kernels::sample`: the same processors and
//! the same Philox draw, so each step reads back only the chosen ids); these host versions are the
//! reference it is tested against (`tests/device_sampling.rs`, and for the engine's per-row
//! kernel `tests/row_sampling.rs`). Parity with transformers 5.24 is checked by
//! `tests/processors_parity.rs` against `tests/fixtures_generate/processors.json`, written by
//! `tools/parity/processors_reference.py`.
//!
//! ```
//! use vkformers_generate::{SamplingParams, Sampler};
//! let params = SamplingParams { temperature: 0.7, top_k: 50, top_p: 0.9, ..SamplingParams::sampling() };
//! let pipeline = params.processors().unwrap();
//! let mut logits = vec![0.5_f32, 2.0, -1.0, 2.0];
//! pipeline.apply(&mut logits, &[1, 3]);
//! let token = Sampler::Seeded { seed: 42 }.sample(&logits, 0).unwrap();
//! assert!(token == 1 || token == 3);
//! ```

pub mod beam;
pub mod config;
pub mod continuous;
pub mod decode;
pub mod decoder_beam;
pub mod detok;
pub mod device_choice;
pub mod engine;
mod error;
pub mod generation;
mod lookahead;
mod penalties;
pub mod prefill_plan;
pub mod prefill_rows;
mod processors;
pub mod prompt_file;
mod replay;
mod rng;
pub mod row_choice;
mod sampler;
pub mod seq2seq;
pub mod seq2seq_beam;
mod softmax;
pub mod stop;

pub use error::GenerateError;
pub use penalties::{log_probs, Penalties, TokenLogprob};
pub use processors::{LogitsProcessor, Pipeline, SamplingParams};
pub use rng::{philox4x32_10, uniform_f64};
pub use sampler::{argmax, sample_at, Sampler};
pub use softmax::softmax;
