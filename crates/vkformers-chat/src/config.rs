//! Picking a chat template out of a tokenizer configuration.

use vkformers_io::TokenizerConfig;

use crate::{ChatError, Result, SpecialTokens};

/// The chat template of `config` called `name`, or its default template for `None`.
///
/// Fails, naming the templates there are, when the configuration has no such template.
pub fn select_template<'a>(config: &'a TokenizerConfig, name: Option<&str>) -> Result<&'a str> {
    let Some(templates) = &config.chat_template else {
        return Err(ChatError::NoTemplate("the tokenizer configuration has no chat_template".to_string()));
    };
    templates.get(name).ok_or_else(|| {
        let names: Vec<&str> = templates.named.keys().map(String::as_str).collect();
        let wanted = match name {
            Some(n) => format!("no chat template named `{n}`"),
            None => "no default chat template".to_string(),
        };
        ChatError::NoTemplate(format!("{wanted}; the tokenizer configuration has: {}", names.join(", ")))
    })
}

/// The special tokens of `config` ([`SpecialTokens::from_config`]).
pub fn special_tokens_from_config(config: &TokenizerConfig) -> SpecialTokens {
    SpecialTokens::from_config(config)
}
