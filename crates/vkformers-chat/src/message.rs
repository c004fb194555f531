//! Conversation messages and the special tokens templates read.

use serde::{Deserialize, Serialize};
use vkformers_io::TokenizerConfig;

/// One turn of a conversation, as the `messages` list of a chat template sees it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Message {
    /// `system`, `user`, `assistant`, `tool`, ... (whatever the template understands).
    pub role: String,
    /// The text of the turn.
    pub content: String,
}

impl Message {
    /// A message with any role.
    pub fn new(role: impl Into<String>, content: impl Into<String>) -> Self {
        Message { role: role.into(), content: content.into() }
    }

    /// A `system` message.
    pub fn system(content: impl Into<String>) -> Self {
        Message::new("system", content)
    }

    /// A `user` message.
    pub fn user(content: impl Into<String>) -> Self {
        Message::new("user", content)
    }

    /// An `assistant` message.
    pub fn assistant(content: impl Into<String>) -> Self {
        Message::new("assistant", content)
    }
}

/// The tokenizer's special tokens, passed to the template as `bos_token`, `eos_token`, ...
///
/// A token that is `None` is not defined in the template, as in `transformers`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SpecialTokens {
    /// Beginning of sequence, e.g. `<s>` or `<|begin_of_text|>`.
    pub bos_token: Option<String>,
    /// End of sequence, e.g. `</s>` or `<|eot_id|>`.
    pub eos_token: Option<String>,
    /// Padding.
    pub pad_token: Option<String>,
    /// Unknown token.
    pub unk_token: Option<String>,
}

impl SpecialTokens {
    /// The special tokens configured in a `tokenizer_config.json`.
    pub fn from_config(config: &TokenizerConfig) -> Self {
        SpecialTokens {
            bos_token: config.bos_token.clone(),
            eos_token: config.eos_token.clone(),
            pad_token: config.pad_token.clone(),
            unk_token: config.unk_token.clone(),
        }
    }

    /// `(variable name, token)` for every token that is set.
    pub(crate) fn variables(&self) -> impl Iterator<Item = (&'static str, &str)> {
        [
            ("bos_token", &self.bos_token),
            ("eos_token", &self.eos_token),
            ("pad_token", &self.pad_token),
            ("unk_token", &self.unk_token),
        ]
        .into_iter()
        .filter_map(|(name, token)| token.as_deref().map(|t| (name, t)))
    }
}
