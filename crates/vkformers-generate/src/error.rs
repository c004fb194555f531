//! Errors: invalid sampling parameters (rejected as transformers rejects them) and empty rows.

/// What can go wrong when building processors or sampling.
#[derive(Debug, thiserror::Error, PartialEq)]
pub enum GenerateError {
    /// A parameter outside the range transformers accepts.
    #[error("invalid sampling parameter `{name}` = {value}: {why}")]
    InvalidParam {
        /// Parameter name as in transformers' `GenerationConfig`.
        name: &'static str,
        /// The value given.
        value: f64,
        /// The accepted range.
        why: &'static str,
    },
    /// Nothing to sample from: an empty row, or every entry `-inf` / NaN.
    #[error("no token can be sampled: the row is empty or every logit is -inf or NaN")]
    NothingToSample,
}
