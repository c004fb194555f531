//! Chat rows: a conversation rendered with the tokenizer's chat template exactly as
//! `apply_chat_template(messages, tokenize=True)` renders and tokenizes it (the template's text,
//! tokenized without the post-processor's special tokens, since templates write their own BOS),
//! with only the assistant turns trained.
//!
//! Finding each assistant turn: the full conversation is rendered once; for the assistant
//! message `i`, the conversation before it is rendered with `add_generation_prompt=True` (ending
//! where the model starts to write: after the assistant header) and the conversation up to and
//! including it is rendered without. The turn is the bytes of the full text between where each of
//! those two renderings stops agreeing with it, less trailing whitespace (so ChatML's `\n` after
//! `<|im_end|>` is not trained but the end-of-turn token is). This needs no `{% generation %}`
//! markers, which few templates have, and works on character positions in the text, so the
//! tokens come from one tokenization of the whole conversation (see `encode`). A template that
//! renders a past turn differently from a last one (e.g. dropping its reasoning) still works: the
//! common prefix stops where the renderings part.

use std::ops::Range;

use vkformers_chat::{render, Message, SpecialTokens};
use vkformers_io::HfTokenizer;

use crate::encode::{encode_spans, Spans};
use crate::error::{DataError, Location, Result};
use crate::Example;

/// A tokenizer's default chat template and the special tokens it sees.
pub(crate) struct ChatTemplate {
    pub template: String,
    pub special: SpecialTokens,
}

impl ChatTemplate {
    /// The default template of `tok`, if it has one.
    pub(crate) fn of(tok: &HfTokenizer) -> Option<Self> {
        let config = tok.config();
        let template = vkformers_chat::select_template(config, None).ok()?.to_string();
        Some(ChatTemplate { template, special: SpecialTokens::from_config(config) })
    }

    fn render(&self, messages: &[Message], add_generation_prompt: bool, location: &Location) -> Result<String> {
        render(&self.template, messages, add_generation_prompt, &self.special, &serde_json::Value::Null)
            .map_err(|e| DataError::Chat { location: location.clone(), reason: e.to_string() })
    }
}

/// The example of a conversation whose assistant messages at index `trained_from` or later are
/// trained (every token with `train_all`).
pub(crate) fn chat_example(
    tok: &HfTokenizer,
    chat: &ChatTemplate,
    messages: &[Message],
    trained_from: usize,
    train_all: bool,
    location: &Location,
) -> Result<Example> {
    let text = chat.render(messages, false, location)?;
    let mut trained = Vec::new();
    for (i, message) in messages.iter().enumerate().skip(trained_from) {
        if message.role == "assistant" {
            trained.push(assistant_span(chat, &text, messages, i, location)?);
        }
    }
    if trained.is_empty() && !train_all {
        return Err(DataError::bad_row(location, "the conversation has no `assistant` message to train on"));
    }
    let spans = Spans { text: &text, trained, add_special_tokens: false, add_eos: false, train_all };
    encode_spans(tok, &spans, location)
}

/// Byte range of `full` (the whole conversation rendered) holding assistant message `i`.
fn assistant_span(
    chat: &ChatTemplate,
    full: &str,
    messages: &[Message],
    i: usize,
    location: &Location,
) -> Result<Range<usize>> {
    let before = chat.render(&messages[..i], true, location)?;
    let through = chat.render(&messages[..=i], false, location)?;
    let start = common_prefix(&before, full);
    let end = start + full[start..common_prefix(&through, full)].trim_end().len();
    if end <= start {
        let reason = format!(
            "cannot find assistant message {} in the chat template's rendering of the conversation \
             (rendering the conversation up to it does not give a prefix of the whole); \
             use `prompt`/`completion` or pre-tokenized `input_ids`/`labels` rows for this template",
            i + 1
        );
        return Err(DataError::Chat { location: location.clone(), reason });
    }
    Ok(start..end)
}

/// Length in bytes of the longest common prefix of `a` and `b`, on a character boundary.
fn common_prefix(a: &str, b: &str) -> usize {
    let mut n = a.bytes().zip(b.bytes()).take_while(|(x, y)| x == y).count();
    while !b.is_char_boundary(n) {
        n -= 1;
    }
    n
}

#[cfg(test)]
mod tests {
    use super::common_prefix;

    #[test]
    fn common_prefix_stops_on_a_char_boundary() {
        assert_eq!(common_prefix("abc", "abd"), 2);
        assert_eq!(common_prefix("abc", "abc"), 3);
        assert_eq!(common_prefix("", "abc"), 0);
        // "é" is 0xC3 0xA9 and "è" is 0xC3 0xA8: they share a first byte but not a character.
        assert_eq!(common_prefix("xé", "xè"), 1);
    }
}
