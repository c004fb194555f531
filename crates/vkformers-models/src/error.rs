//! Errors of model building: what is wrong with the config or weights, and what to do.

/// Result alias of this crate.
pub type Result<T> = std::result::Result<T, ModelError>;

#[derive(Debug, thiserror::Error)]
pub enum ModelError {
    #[error("unsupported model_type `{0}`; `vkformers architectures` lists the supported ones")]
    UnknownModelType(String),
    #[error("unsupported configuration: {0} (vkformers does not approximate it; please open an issue)")]
    Unsupported(String),
    #[error("config.json: {0}")]
    Config(String),
    #[error("weights: {0}")]
    Weights(String),
    #[error(transparent)]
    Device(#[from] vkformers_vk::VkError),
}
