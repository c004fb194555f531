//! File formats of Hugging Face model folders, so that vkformers reads what `transformers`
//! saves and saves what it loads:
//!
//! - safetensors weights, memory-mapped, single-file or sharded ([`ModelWeights`]), and saved
//!   deterministically and atomically with the same sharding and index ([`save_safetensors`]);
//! - JSON files ([`read_json`], [`write_json_atomic`]) and crash-safe writing ([`write_atomic`]);
//! - tokenizers: `tokenizer.json` through the `tokenizers` library, `tokenizer_config.json`
//!   with its special tokens and chat templates ([`HfTokenizer`], [`TokenizerConfig`]), and
//!   [`copy_tokenizer_files`].
//!
//! Every error is an [`IoError`] naming the file, and the tensor or field, it is about.

mod atomic;
mod copy;
mod dtype;
mod error;
mod json;
mod read;
pub mod spm;
mod suggest;
mod tokenizer;
mod tokenizer_config;
mod write;

pub use atomic::write_atomic;
pub use copy::{copy_tokenizer_files, TOKENIZER_FILES};
pub use dtype::{byte_size, is_float, numel, Dtype};
pub use error::{IoError, Result};
pub use json::{check_json_size, read_json, to_json_text, write_json_atomic, MAX_JSON_BYTES};
pub use read::{ModelWeights, RawTensor, TensorInfo, INDEX_NAME, WEIGHTS_NAME};
pub use tokenizer::{HfTokenizer, SpecialToken};
pub use tokenizer_config::{ChatTemplates, TokenizerConfig, SPECIAL_TOKEN_ROLES};
pub use write::{
    save_safetensors, save_safetensors_failing_after, SaveTensor, SavedWeights, TensorData, DEFAULT_MAX_SHARD_BYTES,
};

/// The `tokenizers` library this crate wraps, for building tokenizers in code.
pub use tokenizers;
