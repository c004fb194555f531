//! Training: batches from a tokenized dataset, learning-rate schedules, AdamW steps with
//! gradient accumulation, checkpoints with exact resume, and evaluation.
//!
//! The trainer is model-agnostic: it takes a list of [`TrainableParam`]s (name, device tensor,
//! decay flag) and a [`LanguageModel`] (a batch -> logits forward). Full training passes every
//! parameter of a `Model` ([`full_model_params`]); LoRA passes its adapter matrices and a
//! forward that adds them.

pub mod batching;
pub mod checkpoint;
pub mod checksum;
pub mod decay;
pub mod dist;
pub mod error;
pub mod eval;
pub mod memory;
pub mod metrics;
mod metrics_cls;
pub mod mlm;
pub mod model;
pub mod precision;
pub mod pretokenized;
pub mod rng;
pub mod schedule;
pub mod trainer;

pub use batching::{sequences, DataPosition, Loader, Objective, TokenBatch};
pub use dist::{DataParallel, SingleProcess};
pub use error::{Result, TrainError};
pub use eval::{evaluate, EvalReport};
pub use mlm::MlmMasking;
pub use model::{full_model_params, ForwardLoss, LanguageModel, TrainableParam};
pub use precision::{GradScaler, Precision};
pub use schedule::{Schedule, ScheduleKind};
pub use trainer::{steps_for_epochs, Observer, OptimOptions, Silent, StepStats, TrainOptions, Trainer};
