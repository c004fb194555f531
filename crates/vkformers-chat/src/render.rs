//! Rendering a conversation through a chat template.

use minijinja::{Error, ErrorKind};
use serde::Deserialize;
use serde_json::{Map, Value};

use crate::environment::{chat_environment, Raised};
use crate::{ChatError, Message, Result, SpecialTokens};

/// Renders `messages` through the Jinja chat `template` as `transformers`' `apply_chat_template`
/// (with `tokenize=False`) does.
///
/// The template sees `messages`, `add_generation_prompt`, `tools` and `documents` (both `none`
/// unless given in `extra`), each special token that is set, and every key of `extra` (a JSON
/// object or null), which win over the special tokens as keyword arguments do in Python.
pub fn render(
    template: &str,
    messages: &[Message],
    add_generation_prompt: bool,
    special: &SpecialTokens,
    extra: &Value,
) -> Result<String> {
    let context = context(messages, add_generation_prompt, special, extra)?;
    let env = chat_environment().map_err(|e| render_error(template, e))?;
    let context = minijinja::Value::deserialize(Value::Object(context)).map_err(|e| ChatError::Render {
        message: format!("cannot pass the variables to the template: {e}"),
        line: None,
    })?;
    let rendered = engine_guard(|| env.template_from_str(template).and_then(|compiled| compiled.render(context)))?;
    rendered.map_err(|e| render_error(template, e))
}

/// Runs the template engine, its panics made render errors: the template is user input and the
/// engine a dependency (minijinja 3.1's lexer overflows a u16 column when a syntax error lies
/// past column 65,535 of a line, a panic where overflow checks are on).
fn engine_guard<T>(run: impl FnOnce() -> T) -> Result<T> {
    std::panic::catch_unwind(std::panic::AssertUnwindSafe(run)).map_err(|payload| {
        let why = payload
            .downcast_ref::<&str>()
            .map(|s| s.to_string())
            .or_else(|| payload.downcast_ref::<String>().cloned())
            .unwrap_or_default();
        ChatError::Render { message: format!("the template engine failed on this template ({why})"), line: None }
    })
}

/// The variables the template sees.
fn context(
    messages: &[Message],
    add_generation_prompt: bool,
    special: &SpecialTokens,
    extra: &Value,
) -> Result<Map<String, Value>> {
    let extra = match extra {
        Value::Null => Map::new(),
        Value::Object(map) => map.clone(),
        other => return Err(ChatError::ExtraNotObject(other.to_string())),
    };
    let mut vars = Map::new();
    for (name, token) in special.variables() {
        vars.insert(name.to_string(), Value::from(token));
    }
    vars.insert("tools".to_string(), Value::Null);
    vars.insert("documents".to_string(), Value::Null);
    for (key, value) in extra {
        if key == "messages" || key == "add_generation_prompt" {
            return Err(ChatError::ReservedVariable(key));
        }
        vars.insert(key, value);
    }
    let messages = messages.iter().map(|m| serde_json::json!({"role": m.role, "content": m.content})).collect();
    vars.insert("messages".to_string(), Value::Array(messages));
    vars.insert("add_generation_prompt".to_string(), Value::Bool(add_generation_prompt));
    Ok(vars)
}

/// A minijinja error as a [`ChatError`], with the template line it happened on.
fn render_error(template: &str, err: Error) -> ChatError {
    let line = err.line();
    if let Some(raised) = find_raised(&err) {
        return ChatError::Raised { message: raised.0.clone(), line };
    }
    let message = err.detail().map_or_else(|| err.kind().to_string(), |d| format!("{}: {d}", err.kind()));
    match (err.kind(), line) {
        (ErrorKind::SyntaxError, Some(line)) => ChatError::Syntax {
            line,
            message,
            line_text: template.lines().nth(line.saturating_sub(1)).unwrap_or_default().to_string(),
        },
        _ => ChatError::Render { message, line },
    }
}

/// The `raise_exception` marker in `err`'s chain of causes.
fn find_raised(err: &Error) -> Option<&Raised> {
    let mut source: Option<&(dyn std::error::Error + 'static)> = std::error::Error::source(err);
    while let Some(e) = source {
        if let Some(raised) = e.downcast_ref::<Raised>() {
            return Some(raised);
        }
        source = e.source();
    }
    None
}
