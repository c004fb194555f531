//! Resolves what a user names with `--model`, `--adapter` or `--data`: a local path, or a
//! Hugging Face Hub id `org/name[@revision]` fetched into (or found in) the Python cache.

use std::path::PathBuf;

/// Errors of resolving a model, adapter or dataset argument.
#[derive(Debug, thiserror::Error)]
pub enum HubError {
    #[error("`{0}` is not a local folder or file (Hub ids are not supported yet)")]
    NotFound(String),
}

/// The local folder for `--model`/`--adapter`: `arg` itself when it exists on disk.
pub fn resolve_model(arg: &str) -> Result<PathBuf, HubError> {
    let p = PathBuf::from(arg);
    if p.exists() {
        Ok(p)
    } else {
        Err(HubError::NotFound(arg.to_string()))
    }
}
