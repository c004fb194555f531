//! Errors of training and evaluation.

use std::path::PathBuf;

/// What went wrong while training or evaluating.
#[derive(Debug, thiserror::Error)]
pub enum TrainError {
    #[error(transparent)]
    Device(#[from] vkformers_vk::VkError),
    #[error(transparent)]
    Model(#[from] vkformers_models::ModelError),
    #[error(transparent)]
    Io(#[from] vkformers_io::IoError),
    #[error("{path}: {message}")]
    File { path: PathBuf, message: String },
    #[error("{path}:{line}: {message}")]
    Data { path: PathBuf, line: usize, message: String },
    #[error("checkpoint {path}: {message}")]
    Checkpoint { path: PathBuf, message: String },
    #[error("{0}")]
    Config(String),
    #[error(
        "step {step}: the loss is {loss} and the gradient norm {grad_norm} (not finite); the last \
         checkpoint is intact: resume from it with a lower --lr, --max-grad-norm 1, or --fp32"
    )]
    NonFinite { step: u64, loss: f64, grad_norm: f64 },
}

pub type Result<T> = std::result::Result<T, TrainError>;

impl TrainError {
    pub(crate) fn file(path: impl Into<PathBuf>, e: impl std::fmt::Display) -> Self {
        TrainError::File { path: path.into(), message: e.to_string() }
    }
    pub(crate) fn checkpoint(path: impl Into<PathBuf>, message: impl Into<String>) -> Self {
        TrainError::Checkpoint { path: path.into(), message: message.into() }
    }
}
