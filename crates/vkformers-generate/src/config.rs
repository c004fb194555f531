//! Defaults from a model folder's `generation_config.json` (else `config.json`), as transformers'
//! `GenerationConfig.from_pretrained` reads them: sampling fields, length limits, EOS and pad ids.

use std::path::Path;

use serde_json::Value;

use crate::processors::SamplingParams;

/// What a model folder says about generation. Fields it leaves out keep transformers' defaults.
#[derive(Debug, Clone, PartialEq)]
pub struct GenerationDefaults {
    pub params: SamplingParams,
    /// `max_new_tokens`, if set.
    pub max_new_tokens: Option<usize>,
    /// `max_length` (prompt + new tokens), if set.
    pub max_length: Option<usize>,
    /// `eos_token_id`: one id or a list.
    pub eos: Vec<u32>,
    pub pad: Option<u32>,
    /// The model's context (`max_position_embeddings`, `n_positions`, ...), if config.json has one.
    pub context: Option<usize>,
}

/// Errors reading the files.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("cannot read {path}: {source}")]
    Read { path: String, source: std::io::Error },
    #[error("{path} is not valid JSON: {source}")]
    Json { path: String, source: serde_json::Error },
}

fn read_json(path: &Path) -> Result<Option<Value>, ConfigError> {
    match std::fs::read_to_string(path) {
        Ok(text) => serde_json::from_str(&text)
            .map(Some)
            .map_err(|source| ConfigError::Json { path: path.display().to_string(), source }),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(source) => Err(ConfigError::Read { path: path.display().to_string(), source }),
    }
}

/// A token id: a non-negative integer that fits u32. A larger one names no token of any
/// vocabulary (the model can never produce it), so it is no id rather than another id wrapped
/// into u32 (`2^32 + 2` was read as 2, and generation stopped on token 2).
pub fn token_id(v: &Value) -> Option<u32> {
    v.as_u64().and_then(|i| u32::try_from(i).ok())
}

/// `eos_token_id` as a list (an int, a list of ints, or absent).
fn ids(v: Option<&Value>) -> Vec<u32> {
    match v {
        Some(Value::Array(a)) => a.iter().filter_map(token_id).collect(),
        Some(v) => token_id(v).into_iter().collect(),
        None => Vec::new(),
    }
}

impl GenerationDefaults {
    /// Reads `dir/generation_config.json`, falling back to `dir/config.json` for the ids.
    pub fn from_dir(dir: &Path) -> Result<Self, ConfigError> {
        let gen = read_json(&dir.join("generation_config.json"))?.unwrap_or(Value::Null);
        let cfg = read_json(&dir.join("config.json"))?.unwrap_or(Value::Null);
        Ok(Self::from_values(&gen, &cfg))
    }

    /// The defaults from parsed `generation_config.json` (`gen`) and `config.json` (`cfg`).
    pub fn from_values(gen: &Value, cfg: &Value) -> Self {
        let f = |k: &str| gen.get(k).and_then(Value::as_f64);
        let u = |k: &str| gen.get(k).and_then(Value::as_u64).map(|v| v as usize);
        let base = SamplingParams::greedy();
        let params = SamplingParams {
            do_sample: gen.get("do_sample").and_then(Value::as_bool).unwrap_or(false),
            temperature: f("temperature").unwrap_or(base.temperature),
            top_k: u("top_k").unwrap_or(base.top_k),
            top_p: f("top_p").unwrap_or(base.top_p),
            min_p: f("min_p"),
            repetition_penalty: f("repetition_penalty").unwrap_or(base.repetition_penalty),
            min_tokens_to_keep: 1,
        };
        let text_cfg = cfg.get("text_config").unwrap_or(cfg);
        let mut eos = ids(gen.get("eos_token_id"));
        if eos.is_empty() {
            eos = ids(text_cfg.get("eos_token_id"));
        }
        let pad = gen.get("pad_token_id").or_else(|| text_cfg.get("pad_token_id")).and_then(token_id);
        let context = ["max_position_embeddings", "n_positions", "seq_length", "max_seq_len"]
            .iter()
            .find_map(|k| text_cfg.get(*k).and_then(Value::as_u64))
            .map(|v| v as usize);
        Self { params, max_new_tokens: u("max_new_tokens"), max_length: u("max_length"), eos, pad, context }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn reads_sampling_fields_and_eos_lists() {
        let gen =
            json!({"do_sample": true, "temperature": 0.6, "top_p": 0.9, "eos_token_id": [2, 7], "max_new_tokens": 5});
        let d = GenerationDefaults::from_values(&gen, &json!({"eos_token_id": 3, "max_position_embeddings": 64}));
        assert!(d.params.do_sample);
        assert_eq!((d.params.temperature, d.params.top_p, d.params.top_k), (0.6, 0.9, 50));
        assert_eq!((d.eos, d.max_new_tokens, d.context), (vec![2, 7], Some(5), Some(64)));
    }

    /// Found by the fuzz target generation_config: `eos_token_id` 2^64 - 1 was read as u32::MAX.
    #[test]
    fn ids_past_u32_are_no_ids_not_wrapped_ones() {
        let gen = json!({"eos_token_id": [2, 4294967298u64], "pad_token_id": 4294967296u64});
        let d = GenerationDefaults::from_values(&gen, &json!({"pad_token_id": 1}));
        assert_eq!((d.eos, d.pad), (vec![2], None));
        let d = GenerationDefaults::from_values(&json!({"eos_token_id": u64::MAX}), &json!({"eos_token_id": 3}));
        assert_eq!(d.eos, vec![3], "an id past u32 is as absent: config.json's id is used");
    }

    #[test]
    fn falls_back_to_config_ids() {
        let d = GenerationDefaults::from_values(&Value::Null, &json!({"eos_token_id": 3, "pad_token_id": 0}));
        assert_eq!((d.eos, d.pad, d.params.do_sample), (vec![3], Some(0), false));
    }
}
