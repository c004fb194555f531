//! What can go wrong resolving `--model`/`--adapter`/`--data`, each with what to do about it.
//! No variant ever holds the access token.

use std::path::PathBuf;

/// Errors of resolving a model, adapter or dataset argument.
#[derive(Debug, thiserror::Error)]
pub enum HubError {
    #[error("`{0}` is neither an existing local path nor a Hub id like `org/name` or `org/name@revision`")]
    NotFound(String),

    #[error(
        "`{id}` (revision `{revision}`) is not in the Hub cache at {cache} and HF_HUB_OFFLINE is set: {missing}; \
         unset HF_HUB_OFFLINE to download it, or pass a local folder"
    )]
    NotCached { id: String, revision: String, cache: PathBuf, missing: String },

    #[error(
        "`{id}` needs a Hugging Face token with access (gated or private repo, HTTP {status}): accept its terms \
         on the Hub, then set HF_TOKEN or run `huggingface-cli login`"
    )]
    Unauthorized { id: String, status: u16 },

    #[error(
        "`{id}` is not a local path, and the Hub has no repo `{id}` at revision `{revision}` (HTTP 404): \
         check the path, the id and the revision"
    )]
    RepoNotFound { id: String, revision: String },

    #[error("Hub request to {url} failed: {message}")]
    Http { url: String, message: String },

    #[error("`{id}` names a file `{name}` that would land outside the cache folder; refusing it")]
    UnsafePath { id: String, name: String },

    #[error(
        "`{id}` has only pickle weights ({files}); vkformers loads safetensors only and never unpickles. \
         Convert the repo to safetensors (e.g. the Hub's safetensors convert space) or pass a converted local folder"
    )]
    PickleOnly { id: String, files: String },

    #[error("`{id}` has no weights: expected {expected}")]
    NoWeights { id: String, expected: String },

    #[error(
        "downloaded `{name}` of `{id}` is corrupt ({what}); the partial file was removed, run again to re-download"
    )]
    Corrupt { id: String, name: String, what: String },

    #[error("download of `{name}` of `{id}` was cut off after {got} of {size} bytes ({message}); run again to resume")]
    Interrupted { id: String, name: String, got: u64, size: u64, message: String },

    #[error("dataset `{id}`: {message}")]
    Dataset { id: String, message: String },

    #[error("{path}: {source}")]
    Io { path: PathBuf, source: std::io::Error },
}

impl HubError {
    pub(crate) fn io(path: impl Into<PathBuf>) -> impl FnOnce(std::io::Error) -> HubError {
        let path = path.into();
        move |source| HubError::Io { path, source }
    }
}
