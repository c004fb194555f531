//! Typed errors of the file-format layer. Every error names the file (and, where there is one, the
//! tensor or field) it is about, says what was expected, and what to do about it.

use std::path::PathBuf;

/// Result alias of this crate.
pub type Result<T> = std::result::Result<T, IoError>;

/// Everything that can go wrong reading or writing the files of a model folder.
#[derive(Debug, thiserror::Error)]
pub enum IoError {
    #[error(
        "model folder `{path}` does not exist; pass the folder of a Hugging Face model \
         (the one holding config.json and model.safetensors or model.safetensors.index.json)"
    )]
    FolderNotFound { path: PathBuf },

    #[error("`{path}` is not a folder; pass the folder of a Hugging Face model, not a file inside it")]
    NotAFolder { path: PathBuf },

    #[error(
        "no safetensors weights in `{dir}`: expected `model.safetensors`, or \
         `model.safetensors.index.json` with its shards{hint}"
    )]
    NoWeights { dir: PathBuf, hint: String },

    #[error("`{path}` does not exist; expected {expected}")]
    FileNotFound { path: PathBuf, expected: String },

    #[error("`{path}`: {source}")]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },

    #[error(
        "`{path}` is not a valid safetensors file ({reason}); it is probably truncated or corrupt: \
         download or save it again"
    )]
    CorruptSafetensors { path: PathBuf, reason: String },

    #[error(
        "index `{index}` maps tensor `{tensor}` to shard `{shard}`, which is missing; download the \
         missing shard, or save the model again"
    )]
    MissingShard { index: PathBuf, shard: String, tensor: String },

    #[error("index `{index}` is malformed: {reason}; expected `{{\"metadata\": {{...}}, \"weight_map\": {{tensor: file}}}}`")]
    BadIndex { index: PathBuf, reason: String },

    #[error(
        "index `{index}` maps tensor `{tensor}` to `{shard}`, but that shard does not hold it; \
         the index and its shards do not belong together: download or save the model again"
    )]
    IndexMismatch { index: PathBuf, tensor: String, shard: PathBuf },

    #[error(
        "tensor `{tensor}` in `{path}` has dtype {dtype}, which cannot be read as f32 \
         (F32, F16 and BF16 can); read its raw bytes with `ModelWeights::tensor_bytes` instead"
    )]
    UnsupportedDtype { tensor: String, dtype: String, path: PathBuf },

    #[error("no tensor named `{name}` in {location}{}", did_you_mean(.suggestions))]
    TensorNotFound { name: String, location: String, suggestions: Vec<String> },

    #[error("`{path}`, line {line}, column {column}: {message}")]
    Json { path: PathBuf, line: usize, column: usize, message: String },

    #[error("cannot save tensor `{tensor}`: {reason}")]
    InvalidTensor { tensor: String, reason: String },

    #[error("tokenizer `{path}` could not be loaded: {message}; it must be a `tokenizer.json` as the `tokenizers` library saves it")]
    TokenizerLoad { path: PathBuf, message: String },

    #[error("tokenizer failed to {action}: {message}")]
    Tokenizer { action: &'static str, message: String },

    #[error(
        "`{path}`: {role} token `{token}` is not in the tokenizer's vocabulary; fix `{role}` \
         there, or add the token to tokenizer.json"
    )]
    SpecialTokenNotInVocab { path: PathBuf, role: String, token: String },

    #[error("`{path}`: field `{field}` {reason}")]
    BadField { path: PathBuf, field: String, reason: String },
}

impl IoError {
    /// Wraps an I/O error with the path it happened on.
    pub(crate) fn io(path: impl Into<PathBuf>, source: std::io::Error) -> Self {
        IoError::Io { path: path.into(), source }
    }
}

/// `; did you mean `a`, `b`?` or nothing when there are no suggestions.
fn did_you_mean(suggestions: &[String]) -> String {
    if suggestions.is_empty() {
        return String::new();
    }
    let list: Vec<String> = suggestions.iter().map(|s| format!("`{s}`")).collect();
    format!("; did you mean {}?", list.join(", "))
}
