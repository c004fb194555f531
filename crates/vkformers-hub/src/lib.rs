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

/// What of a dataset repo `--data` names (`--data-config`, `--data-split`, `--data-files`).
#[derive(Clone, Debug, Default)]
pub struct DatasetQuery {
    pub config: Option<String>,
    pub split: Option<String>,
    /// A glob over the repo's file names.
    pub files: Option<String>,
}

/// The local data files for `--data`: the file itself, or the files of a local folder, sorted.
pub fn resolve_dataset(arg: &str, _query: &DatasetQuery) -> Result<Vec<PathBuf>, HubError> {
    let p = PathBuf::from(arg);
    if p.is_file() {
        return Ok(vec![p]);
    }
    if p.is_dir() {
        let mut files: Vec<PathBuf> = std::fs::read_dir(&p)
            .map_err(|_| HubError::NotFound(arg.to_string()))?
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|f| f.is_file())
            .collect();
        files.sort();
        return Ok(files);
    }
    Err(HubError::NotFound(arg.to_string()))
}
