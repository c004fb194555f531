//! LoRA (low-rank adaptation), interchangeable with PEFT.
//!
//! For each targeted projection `y = x Wᵀ + b` the model computes
//! `y = x Wᵀ + b + scale · dropout(x) Aᵀ Bᵀ` with `A [r, in]`, `B [out, r]` trained in f32 and
//! `W` frozen (a graph constant: backward computes no weight gradient, the optimizer keeps no
//! state for it); `scale = alpha / r` (or `alpha / sqrt(r)` with rsLoRA).
//!
//! - [`config`]: `adapter_config.json` (PEFT's fields; unsupported options refused);
//! - [`modules`]: the model's linear modules under HF names and PEFT's target matching;
//! - [`adapter`]: the adapter tensors on the host, PEFT's init, `adapter_model.safetensors`;
//! - [`attach`]: the adapter on the device, the decoder's LoRA term, gradients back to PEFT keys;
//! - [`merge`]: `W + scale · B A` into a merged model folder;
//! - [`parity`]: the checks against PEFT fixtures.
//!
//! Typical use (inference with an unmerged adapter):
//! `let (model, lora) = lora::load_with_adapter(&g, model_dir, adapter_dir)?;` then
//! `decoder::forward(&g, &model.spec, &model.weights, &batch)` as for any model.

pub mod adapter;
pub mod attach;
pub mod config;
pub mod dropout_keys;
pub mod merge;
pub mod modules;
pub mod parity;

pub use adapter::{Adapter, ADAPTER_CONFIG, ADAPTER_WEIGHTS};
pub use attach::{
    attach, linear, load_frozen, load_with_adapter, load_with_adapter_as, new_adapter, target_modules, LoraParams,
    Terms,
};
pub use config::{LoraConfig, Targets, CLASSIFIER_MODULES, SEQ_CLS, TOKEN_CLS};
pub use dropout_keys::{RowLayout, SampleKeys};
pub use merge::merge_to_folder;
pub use modules::{linear_modules, LinearModule};
