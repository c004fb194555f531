//! Recognizing the shape of a row (DESIGN §1). A row is a JSON object (or a Parquet row read as
//! one); the first shape whose key is present wins, in this order: `input_ids`, `tokens`
//! (+ `labels`), `label` (with `text`, + `text_pair`), `messages`,
//! `prompt`+`completion`, `instruction`+`output`, `question`+`answer`, `text`, `content`. A null
//! value counts as absent, since a Parquet file holding several shapes has nulls in the columns
//! a row does not use. Other keys are ignored.

use serde_json::{Map, Value};
use vkformers_chat::Message;

use crate::IGNORE_INDEX;

/// A row whose shape is known, with its fields checked.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Row {
    /// `text` or `content`: plain text, every token trained.
    Text(String),
    /// `instruction` (+ `input`) + `output`.
    Instruction { instruction: String, input: String, output: String },
    /// `prompt` + `completion` as strings: the completion follows the prompt literally.
    Completion { prompt: String, completion: String },
    /// `prompt` + `completion` as lists of messages (a conversation and its continuation).
    ChatCompletion { prompt: Vec<Message>, completion: Vec<Message> },
    /// `question` + `answer`.
    Qa { question: String, answer: String },
    /// `messages`: a conversation.
    Chat(Vec<Message>),
    /// `input_ids` (+ `labels`), used as they are.
    Tokens { input_ids: Vec<u32>, labels: Option<Vec<i32>> },
    /// `text` (+ `text_pair`) + `label`: sequence classification.
    Classify { text: String, text_pair: Option<String>, label: Value },
    /// `tokens` (words) + `labels` (one per word): token classification.
    Tagged { words: Vec<String>, labels: Vec<Value> },
}

/// The shape of `value`, or why it has none (the caller adds the location and accepted shapes).
pub(crate) fn parse_row(value: &Value) -> Result<Row, String> {
    let Value::Object(obj) = value else {
        return Err(format!("the row is {}, not a JSON object", kind(value)));
    };
    let has = |key: &str| field(obj, key).is_some();
    if has("input_ids") {
        return tokens(obj);
    }
    if has("tokens") {
        return tagged(obj);
    }
    if has("label") {
        let text = string(obj, "text", "`label`")?;
        let text_pair = optional_string(obj, "text_pair")?;
        return Ok(Row::Classify { text, text_pair, label: obj["label"].clone() });
    }
    if has("messages") {
        return Ok(Row::Chat(messages(obj, "messages")?));
    }
    if has("prompt") || has("completion") {
        return completion(obj);
    }
    if has("instruction") || has("output") {
        let instruction = string(obj, "instruction", "`output`")?;
        let input = optional_string(obj, "input")?.unwrap_or_default();
        let output = string(obj, "output", "`instruction`")?;
        return Ok(Row::Instruction { instruction, input, output });
    }
    if has("question") || has("answer") {
        let question = string(obj, "question", "`answer`")?;
        let answer = string(obj, "answer", "`question`")?;
        return Ok(Row::Qa { question, answer });
    }
    for key in ["text", "content"] {
        if has(key) {
            return Ok(Row::Text(string(obj, key, "nothing else")?));
        }
    }
    let keys: Vec<String> = obj.keys().map(|k| format!("`{k}`")).collect();
    Err(if keys.is_empty() {
        "the row is empty (`{}`)".to_string()
    } else {
        format!("no known row shape; the row has {}", keys.join(", "))
    })
}

/// A present, non-null field.
fn field<'a>(obj: &'a Map<String, Value>, key: &str) -> Option<&'a Value> {
    obj.get(key).filter(|v| !v.is_null())
}

fn kind(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "a list",
        Value::Object(_) => "an object",
    }
}

/// A required, non-empty string field; `partner` names the field it goes with, for the message.
fn string(obj: &Map<String, Value>, key: &str, partner: &str) -> Result<String, String> {
    match field(obj, key) {
        None => Err(format!("the row has {partner} but no `{key}`")),
        Some(Value::String(s)) if s.is_empty() => Err(format!("`{key}` is empty")),
        Some(Value::String(s)) => Ok(s.clone()),
        Some(v) => Err(format!("`{key}` must be a string, not {}", kind(v))),
    }
}

/// An optional string field (may be empty).
fn optional_string(obj: &Map<String, Value>, key: &str) -> Result<Option<String>, String> {
    match field(obj, key) {
        None => Ok(None),
        Some(Value::String(s)) => Ok(Some(s.clone())),
        Some(v) => Err(format!("`{key}` must be a string, not {}", kind(v))),
    }
}

/// `prompt` + `completion`: both strings, or both lists of messages.
fn completion(obj: &Map<String, Value>) -> Result<Row, String> {
    match (field(obj, "prompt"), field(obj, "completion")) {
        (Some(Value::Array(_)), Some(Value::Array(_))) => {
            Ok(Row::ChatCompletion { prompt: messages(obj, "prompt")?, completion: messages(obj, "completion")? })
        }
        (Some(Value::Array(_)), _) | (_, Some(Value::Array(_))) => {
            Err("`prompt` and `completion` must both be strings or both be lists of messages".to_string())
        }
        _ => Ok(Row::Completion {
            prompt: string(obj, "prompt", "`completion`")?,
            completion: string(obj, "completion", "`prompt`")?,
        }),
    }
}

/// A non-empty list of `{"role": string, "content": string}` objects (other keys ignored).
fn messages(obj: &Map<String, Value>, key: &str) -> Result<Vec<Message>, String> {
    let list = match field(obj, key) {
        Some(Value::Array(list)) => list,
        Some(v) => return Err(format!("`{key}` must be a list of {{\"role\", \"content\"}} objects, not {}", kind(v))),
        None => return Err(format!("the row has no `{key}`")),
    };
    if list.is_empty() {
        return Err(format!("`{key}` is an empty list"));
    }
    list.iter()
        .enumerate()
        .map(|(i, m)| {
            let role = m.get("role").and_then(Value::as_str);
            let content = m.get("content").and_then(Value::as_str);
            match (role, content) {
                (Some(role), Some(content)) => Ok(Message::new(role, content)),
                _ => Err(format!("`{key}[{i}]` must be an object with string `role` and `content`, got {m}")),
            }
        })
        .collect()
}

/// `input_ids` (non-negative integers) and optional `labels` (integers, -100 for masked) of the
/// same length.
fn tokens(obj: &Map<String, Value>) -> Result<Row, String> {
    let input_ids: Vec<u32> = int_list(obj, "input_ids", |n| u32::try_from(n).ok())?;
    if input_ids.is_empty() {
        return Err("`input_ids` is an empty list".to_string());
    }
    let labels = match field(obj, "labels") {
        None => None,
        Some(_) => Some(int_list(obj, "labels", |n| i32::try_from(n).ok().filter(|&l| l >= 0 || l == IGNORE_INDEX))?),
    };
    if let Some(labels) = &labels {
        if labels.len() != input_ids.len() {
            return Err(format!("`labels` has {} entries but `input_ids` has {}", labels.len(), input_ids.len()));
        }
    }
    Ok(Row::Tokens { input_ids, labels })
}

/// `tokens` (a list of words) and `labels` (one class id or name per word).
fn tagged(obj: &Map<String, Value>) -> Result<Row, String> {
    let words = match field(obj, "tokens") {
        Some(Value::Array(list)) if !list.is_empty() => list
            .iter()
            .map(|w| w.as_str().map(str::to_string).ok_or_else(|| format!("`tokens` holds {w}, not a word")))
            .collect::<Result<Vec<_>, _>>()?,
        _ => return Err("`tokens` must be a non-empty list of words".to_string()),
    };
    let labels = match field(obj, "labels") {
        Some(Value::Array(list)) => list.clone(),
        _ => return Err("a `tokens` row needs `labels`: a list with one class id or name per word".to_string()),
    };
    if labels.len() != words.len() {
        return Err(format!("`labels` has {} entries but `tokens` has {} words", labels.len(), words.len()));
    }
    Ok(Row::Tagged { words, labels })
}

fn int_list<T>(obj: &Map<String, Value>, key: &str, convert: impl Fn(i64) -> Option<T>) -> Result<Vec<T>, String> {
    let Some(Value::Array(list)) = field(obj, key) else {
        return Err(format!("`{key}` must be a list of integers"));
    };
    list.iter()
        .enumerate()
        .map(|(i, v)| {
            v.as_i64().and_then(&convert).ok_or_else(|| format!("`{key}[{i}]` is {v}, not a valid token id or label"))
        })
        .collect()
}
