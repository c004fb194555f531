//! Chat-template rendering equal to `transformers`' `apply_chat_template`.
//!
//! Hugging Face tokenizers ship a Jinja chat template in `tokenizer_config.json`; `transformers`
//! renders it with Jinja2 in a sandboxed environment with `trim_blocks`, `lstrip_blocks`, a
//! `raise_exception` global and its own `tojson` filter. [`render`] does the same with
//! `minijinja`, plus Python string/dict methods (`.strip()`, `.items()`, ...) through
//! `minijinja-contrib`'s pycompat layer, so that the bytes come out identical.
//!
//! ```
//! use vkformers_chat::{render, Message, SpecialTokens};
//! let template = "{{ bos_token }}{% for m in messages %}<{{ m.role }}>{{ m.content | trim }}{% endfor %}\
//!                 {% if add_generation_prompt %}<assistant>{% endif %}";
//! let special = SpecialTokens { bos_token: Some("<s>".into()), ..Default::default() };
//! let text = render(template, &[Message::user(" hi ")], true, &special, &serde_json::Value::Null).unwrap();
//! assert_eq!(text, "<s><user>hi<assistant>");
//! ```

mod config;
mod environment;
mod error;
mod json;
mod message;
mod nesting;
mod render;
mod turns;

pub use config::{select_template, special_tokens_from_config};
pub use error::{ChatError, Result};
pub use message::{Message, SpecialTokens};
pub use render::render;
pub use turns::{assistant_prompt, end_of_turn_ids};
