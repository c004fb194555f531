//! Resolves what a user names with `--model`, `--adapter` or `--data`: a local path, or a
//! Hugging Face Hub id `org/name[@revision]` fetched into (or found in) the Python cache
//! (`HF_HUB_CACHE`, else `HF_HOME/hub`, else `~/.cache/huggingface/hub`), so models downloaded by
//! `transformers` are reused and ours are usable from Python.

mod cache;
mod client;
mod config;
mod dataset_files;
mod error;
mod model_files;
mod repo_id;
mod resolve;

pub use config::{HubConfig, Token, DEFAULT_ENDPOINT};
pub use error::HubError;
pub use model_files::Want;
pub use repo_id::{RepoKind, RepoRef};

use std::path::PathBuf;

/// The local folder for `--model` (or `--adapter`: an adapter repo is recognised by its
/// `adapter_config.json`): `arg` itself when it exists on disk, else the Hub id's cache snapshot.
pub fn resolve_model(arg: &str) -> Result<PathBuf, HubError> {
    resolve_model_with(arg, Want::Auto, &HubConfig::from_env())
}

/// The local folder for `--adapter`: a PEFT adapter (`adapter_config.json` + `adapter_model.safetensors`).
pub fn resolve_adapter(arg: &str) -> Result<PathBuf, HubError> {
    resolve_model_with(arg, Want::Adapter, &HubConfig::from_env())
}

/// [`resolve_model`] with an explicit Hub configuration instead of the environment's.
pub fn resolve_model_with(arg: &str, want: Want, config: &HubConfig) -> Result<PathBuf, HubError> {
    let p = PathBuf::from(arg);
    if p.exists() {
        return Ok(p);
    }
    let repo = RepoRef::parse(arg, RepoKind::Model).ok_or_else(|| HubError::NotFound(arg.to_string()))?;
    resolve::model(&repo, want, config)
}

/// What of a dataset repo `--data` names (`--data-config`, `--data-split`, `--data-files`).
#[derive(Clone, Debug, Default)]
pub struct DatasetQuery {
    /// A config (subset): a top-level folder of the repo, or of its Parquet conversion.
    pub config: Option<String>,
    /// The split to read; `train` when unset.
    pub split: Option<String>,
    /// A glob over the repo's file names.
    pub files: Option<String>,
}

/// The local data files for `--data`: the file itself, the files of a local folder (sorted), or
/// the selected JSONL/JSON/Parquet files of a Hub dataset repo in the cache.
pub fn resolve_dataset(arg: &str, query: &DatasetQuery) -> Result<Vec<PathBuf>, HubError> {
    resolve_dataset_with(arg, query, &HubConfig::from_env())
}

/// [`resolve_dataset`] with an explicit Hub configuration instead of the environment's.
pub fn resolve_dataset_with(arg: &str, query: &DatasetQuery, config: &HubConfig) -> Result<Vec<PathBuf>, HubError> {
    let p = PathBuf::from(arg);
    if p.is_file() {
        return Ok(vec![p]);
    }
    if p.is_dir() {
        let mut files: Vec<PathBuf> = std::fs::read_dir(&p)
            .map_err(HubError::io(&p))?
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|f| f.is_file())
            .collect();
        files.sort();
        return Ok(files);
    }
    let repo = RepoRef::parse(arg, RepoKind::Dataset).ok_or_else(|| HubError::NotFound(arg.to_string()))?;
    resolve::dataset(&repo, query, config)
}
