//! `tokenizer_config.json` (with `special_tokens_map.json` and `chat_template.jinja` as
//! fallbacks, as `transformers` reads them): special tokens, chat templates, `add_bos_token`.

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};

use serde_json::Value;

use crate::error::{IoError, Result};
use crate::json::read_json;

/// The special-token roles read from the configuration.
pub const SPECIAL_TOKEN_ROLES: [&str; 4] = ["bos_token", "eos_token", "pad_token", "unk_token"];

/// Chat templates: `chat_template` is either one template (a string) or a list of
/// `{"name", "template"}`, of which the one named `default` is the default.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ChatTemplates {
    /// The template used when none is named.
    pub default: Option<String>,
    /// Every named template (including `default` when given as a list).
    pub named: BTreeMap<String, String>,
}

impl ChatTemplates {
    /// The template called `name`, or the default for `None`.
    pub fn get(&self, name: Option<&str>) -> Option<&str> {
        match name {
            None => self.default.as_deref(),
            Some(n) => self.named.get(n).map(String::as_str),
        }
    }
}

/// The parts of a tokenizer configuration vkformers uses; `raw` keeps the whole file.
#[derive(Debug, Clone, Default)]
pub struct TokenizerConfig {
    pub bos_token: Option<String>,
    pub eos_token: Option<String>,
    pub pad_token: Option<String>,
    pub unk_token: Option<String>,
    pub add_bos_token: Option<bool>,
    pub add_eos_token: Option<bool>,
    pub chat_template: Option<ChatTemplates>,
    /// `tokenizer_config.json` as read (`Null` when there was none).
    pub raw: Value,
    /// File each special token was read from, by role, for error messages.
    origin: HashMap<&'static str, PathBuf>,
}

impl TokenizerConfig {
    /// Parses one `tokenizer_config.json`.
    pub fn from_file(path: impl AsRef<Path>) -> Result<Self> {
        let path = path.as_ref();
        let raw = read_json(path)?;
        Self::from_value(path, raw)
    }

    /// Parses a configuration already read from `path` (the path is for error messages).
    pub fn from_value(path: &Path, raw: Value) -> Result<Self> {
        let mut config = TokenizerConfig { raw, ..Default::default() };
        if !config.raw.is_object() {
            return Err(bad(path, "(top level)", "is not a JSON object"));
        }
        config.fill_tokens(path, &config.raw.clone())?;
        config.add_bos_token = opt_bool(path, &config.raw, "add_bos_token")?;
        config.add_eos_token = opt_bool(path, &config.raw, "add_eos_token")?;
        config.chat_template = match config.raw.get("chat_template") {
            None | Some(Value::Null) => None,
            Some(v) => Some(parse_chat_template(path, v)?),
        };
        Ok(config)
    }

    /// Reads the configuration of a tokenizer folder as `transformers` does:
    /// `tokenizer_config.json`, then special tokens it lacks from `special_tokens_map.json`, and a
    /// chat template it lacks from `chat_template.jinja` (or `chat_template.json`). Missing
    /// files are skipped; with none, the configuration is empty.
    pub fn from_dir(dir: impl AsRef<Path>) -> Result<Self> {
        let dir = dir.as_ref();
        let path = dir.join("tokenizer_config.json");
        let mut config = if path.is_file() { Self::from_file(&path)? } else { Self::default() };

        let map_path = dir.join("special_tokens_map.json");
        if map_path.is_file() {
            let map = read_json(&map_path)?;
            config.fill_tokens(&map_path, &map)?;
        }

        if config.chat_template.is_none() {
            let jinja = dir.join("chat_template.jinja");
            let json = dir.join("chat_template.json");
            if jinja.is_file() {
                let text = std::fs::read_to_string(&jinja).map_err(|e| IoError::io(&jinja, e))?;
                config.chat_template = Some(ChatTemplates { default: Some(text), named: BTreeMap::new() });
            } else if json.is_file() {
                let value = read_json(&json)?;
                let template = value.get("chat_template").ok_or_else(|| bad(&json, "chat_template", "is missing"))?;
                config.chat_template = Some(parse_chat_template(&json, template)?);
            }
        }
        Ok(config)
    }

    /// The configured token of a role (`bos_token`, `eos_token`, `pad_token`, `unk_token`).
    pub fn token(&self, role: &str) -> Option<&str> {
        match role {
            "bos_token" => self.bos_token.as_deref(),
            "eos_token" => self.eos_token.as_deref(),
            "pad_token" => self.pad_token.as_deref(),
            "unk_token" => self.unk_token.as_deref(),
            _ => None,
        }
    }

    /// The file a role's token was read from.
    pub(crate) fn origin(&self, role: &str) -> Option<&Path> {
        self.origin.get(role).map(PathBuf::as_path)
    }

    /// Sets each special token not yet set from `value` (a config or special_tokens_map).
    fn fill_tokens(&mut self, path: &Path, value: &Value) -> Result<()> {
        for role in SPECIAL_TOKEN_ROLES {
            if self.token(role).is_some() {
                continue;
            }
            let Some(token) = parse_token(path, role, value.get(role))? else { continue };
            let slot = match role {
                "bos_token" => &mut self.bos_token,
                "eos_token" => &mut self.eos_token,
                "pad_token" => &mut self.pad_token,
                _ => &mut self.unk_token,
            };
            *slot = Some(token);
            self.origin.insert(role, path.to_path_buf());
        }
        Ok(())
    }
}

/// A special token given as a string, an `AddedToken` object (`{"content": ...}`), or null.
fn parse_token(path: &Path, role: &str, value: Option<&Value>) -> Result<Option<String>> {
    match value {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) => Ok(Some(s.clone())),
        Some(Value::Object(o)) => match o.get("content") {
            Some(Value::String(s)) => Ok(Some(s.clone())),
            _ => Err(bad(path, role, "is an object without a string `content`; expected a string or an AddedToken")),
        },
        Some(_) => Err(bad(path, role, "must be a string, an AddedToken object `{\"content\": ...}` or null")),
    }
}

fn parse_chat_template(path: &Path, value: &Value) -> Result<ChatTemplates> {
    match value {
        Value::String(s) => Ok(ChatTemplates { default: Some(s.clone()), named: BTreeMap::new() }),
        Value::Array(items) => {
            let mut named = BTreeMap::new();
            for (i, item) in items.iter().enumerate() {
                let name = item.get("name").and_then(Value::as_str);
                let template = item.get("template").and_then(Value::as_str);
                let (Some(name), Some(template)) = (name, template) else {
                    let field = format!("chat_template[{i}]");
                    return Err(bad(path, &field, "must be an object with string `name` and `template`"));
                };
                named.insert(name.to_string(), template.to_string());
            }
            Ok(ChatTemplates { default: named.get("default").cloned(), named })
        }
        _ => Err(bad(path, "chat_template", "must be a string or a list of {\"name\", \"template\"} objects")),
    }
}

fn opt_bool(path: &Path, raw: &Value, field: &str) -> Result<Option<bool>> {
    match raw.get(field) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::Bool(b)) => Ok(Some(*b)),
        Some(_) => Err(bad(path, field, "must be true, false or null")),
    }
}

fn bad(path: &Path, field: &str, reason: &str) -> IoError {
    IoError::BadField { path: path.to_path_buf(), field: field.to_string(), reason: reason.to_string() }
}
