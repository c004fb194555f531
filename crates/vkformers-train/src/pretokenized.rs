//! Pre-tokenized JSONL rows `{"input_ids": [...], "labels": [...]}` (labels optional: the
//! ids), for a model folder that has no tokenizer (`vkformers_data::read_dataset`, which reads
//! every row shape of the design, needs one). Encoder rows may add `token_type_ids` and, for
//! sequence classification, a `label` (class id, float or list of floats).

use std::path::PathBuf;

use serde_json::Value;
use vkformers_data::{Dataset, Example, Location, Place};

use crate::error::{Result, TrainError};

/// Every row of the JSONL files, in order. A malformed line is an error naming its file and line.
pub fn read_pretokenized(files: &[PathBuf]) -> Result<Vec<Example>> {
    Ok(read_pretokenized_dataset(files)?.examples)
}

/// The rows as a [`Dataset`] (not plain text), each with its file and line.
pub fn read_pretokenized_dataset(files: &[PathBuf]) -> Result<Dataset> {
    let mut out = Dataset::default();
    for f in files {
        let text = std::fs::read_to_string(f).map_err(|e| TrainError::file(f, e))?;
        for (i, line) in text.lines().enumerate() {
            if line.trim().is_empty() {
                continue;
            }
            let row = parse_row(line).map_err(|message| TrainError::Data { path: f.clone(), line: i + 1, message })?;
            out.examples.push(row);
            out.sources.push(Location { file: f.clone(), place: Place::Line(i + 1) });
        }
    }
    Ok(out)
}

fn parse_row(line: &str) -> std::result::Result<Example, String> {
    let v: Value = serde_json::from_str(line).map_err(|e| format!("not JSON: {e}"))?;
    let ints = |key: &str| -> std::result::Result<Option<Vec<i64>>, String> {
        match v.get(key) {
            None | Some(Value::Null) => Ok(None),
            Some(Value::Array(a)) => a
                .iter()
                .map(|x| x.as_i64().ok_or_else(|| format!("`{key}` must be a list of integers")))
                .collect::<std::result::Result<Vec<_>, _>>()
                .map(Some),
            Some(_) => Err(format!("`{key}` must be a list of integers")),
        }
    };
    let ids = ints("input_ids")?.ok_or("no `input_ids` (this reader takes pre-tokenized rows only)")?;
    if ids.iter().any(|&t| t < 0 || t > i64::from(u32::MAX)) {
        return Err("`input_ids` must be non-negative token ids".into());
    }
    let input_ids: Vec<u32> = ids.iter().map(|&t| t as u32).collect();
    let labels: Vec<i32> = match ints("labels")? {
        Some(l) => l.iter().map(|&x| x as i32).collect(),
        None => input_ids.iter().map(|&t| t as i32).collect(),
    };
    if labels.len() != input_ids.len() {
        return Err(format!("{} labels for {} input_ids", labels.len(), input_ids.len()));
    }
    let token_types: Vec<u32> = match ints("token_type_ids")? {
        Some(t) if t.len() != input_ids.len() => {
            return Err(format!("{} token_type_ids for {} input_ids", t.len(), input_ids.len()))
        }
        Some(t) => t.iter().map(|&x| x.max(0) as u32).collect(),
        None => Vec::new(),
    };
    let target = match v.get("label") {
        None | Some(Value::Null) => None,
        Some(l) => Some(vkformers_data::parse_label(l, &Default::default(), "label")?),
    };
    // A sequence label replaces per-token targets (none when `labels` is absent).
    let labels = if target.is_some() && v.get("labels").is_none() { vec![-100; labels.len()] } else { labels };
    Ok(Example { input_ids, labels, token_types, target, ..Default::default() })
}
