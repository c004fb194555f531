//! Hugging Face models on vkformers: `config.json` -> `ModelSpec` (`archs/`), the generic
//! decoder graph over `vkformers-tensor` ops (`decoder.rs`), and the registry.

pub mod archs;
pub mod budget;
pub mod decoder;
pub mod encoder;
pub mod error;
pub mod init;
mod kv_cache;
pub mod lm_loss;
pub mod lora;
pub mod model;
pub mod moe;
pub mod packed;
mod packed_train;
pub mod parity;
pub mod rope;
pub mod seq2seq;
pub mod spec;
pub mod weights;
mod wrapper_init;

pub use archs::{spec_from_config, ARCHS};
pub use error::{ModelError, Result};
pub use spec::ModelSpec;
