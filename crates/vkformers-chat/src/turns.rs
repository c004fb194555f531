//! A conversation as the prompt of the assistant's next turn, and the ids that end that turn:
//! shared by `vkformers generate --chat`, `vkformers chat` and `vkformers serve`.

use vkformers_io::HfTokenizer;

use crate::{render, select_template, Message, Result, SpecialTokens};

/// `messages` rendered by the tokenizer's default chat template, with the assistant prompt.
pub fn assistant_prompt(tok: &HfTokenizer, messages: &[Message]) -> Result<String> {
    let template = select_template(tok.config(), None)?;
    render(template, messages, true, &SpecialTokens::from_config(tok.config()), &serde_json::Value::Null)
}

/// Tokens that end an assistant turn in common templates (besides the tokenizer's EOS).
const END_OF_TURN: [&str; 6] = ["<|im_end|>", "<|eot_id|>", "<end_of_turn>", "<|end|>", "<|endoftext|>", "</s>"];

/// The tokenizer's EOS and any end-of-turn token its vocabulary has (sorted, distinct).
pub fn end_of_turn_ids(tok: &HfTokenizer) -> Vec<u32> {
    let mut ids: Vec<u32> = tok.eos().map(|t| t.id).into_iter().collect();
    ids.extend(END_OF_TURN.iter().filter_map(|t| tok.token_to_id(t)));
    ids.sort_unstable();
    ids.dedup();
    ids
}
