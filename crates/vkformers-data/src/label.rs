//! Labels of classification rows: a class id (an integer, or a class name looked up in the
//! model's `label2id`), or float values (a regression target, or a multi-label 0/1 vector).

use std::collections::BTreeMap;

use serde_json::Value;

/// Class names to ids (`label2id` of a config).
pub type LabelMap = BTreeMap<String, i64>;

/// A sequence-classification row's label.
#[derive(Clone, Debug, PartialEq)]
pub enum SeqLabel {
    /// A class id (single-label classification; a regression target when the model has one label).
    Class(i64),
    /// A regression target (one value) or a multi-label vector (one 0/1 value per label).
    Values(Vec<f32>),
}

/// One label as a row gives it: an integer class id, a class name of `label2id`, a float
/// (regression), or a list of numbers (multi-label).
pub fn parse_label(v: &Value, label2id: &LabelMap, key: &str) -> Result<SeqLabel, String> {
    match v {
        Value::Number(n) => match n.as_i64() {
            Some(i) => Ok(SeqLabel::Class(i)),
            None => Ok(SeqLabel::Values(vec![n.as_f64().unwrap_or(f64::NAN) as f32])),
        },
        Value::Bool(b) => Ok(SeqLabel::Class(i64::from(*b))),
        Value::String(name) => class_id(name, label2id, key).map(SeqLabel::Class),
        Value::Array(items) => items
            .iter()
            .map(|x| x.as_f64().map(|f| f as f32).ok_or_else(|| format!("`{key}` lists {x}, not a number")))
            .collect::<Result<Vec<f32>, String>>()
            .map(SeqLabel::Values),
        other => Err(format!("`{key}` is {other}: give a class id, a class name, a number or a list of numbers")),
    }
}

/// A token's class: an integer id or a name of `label2id`.
pub(crate) fn token_class(v: &Value, label2id: &LabelMap, key: &str) -> Result<i64, String> {
    match v {
        Value::Number(n) => n.as_i64().ok_or_else(|| format!("`{key}` holds {n}, not a class id")),
        Value::String(name) => class_id(name, label2id, key),
        other => Err(format!("`{key}` holds {other}: give class ids or class names")),
    }
}

fn class_id(name: &str, label2id: &LabelMap, key: &str) -> Result<i64, String> {
    if let Some(&id) = label2id.get(name) {
        return Ok(id);
    }
    if label2id.is_empty() {
        return Err(format!(
            "`{key}` is the name {name:?} but the model's config has no label2id: give class ids, or \
             add id2label and label2id to config.json"
        ));
    }
    let known: Vec<&str> = label2id.keys().map(String::as_str).collect();
    Err(format!("`{key}` is {name:?}, not one of the model's labels ({})", known.join(", ")))
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn ids_names_floats_and_lists() {
        let map: LabelMap = [("neg".to_string(), 0), ("pos".to_string(), 1)].into();
        assert_eq!(parse_label(&json!(2), &map, "label"), Ok(SeqLabel::Class(2)));
        assert_eq!(parse_label(&json!("pos"), &map, "label"), Ok(SeqLabel::Class(1)));
        assert_eq!(parse_label(&json!(0.5), &map, "label"), Ok(SeqLabel::Values(vec![0.5])));
        assert_eq!(parse_label(&json!([1, 0, 1]), &map, "label"), Ok(SeqLabel::Values(vec![1.0, 0.0, 1.0])));
        let e = parse_label(&json!("meh"), &map, "label").unwrap_err();
        assert!(e.contains("neg, pos"), "{e}");
        assert!(parse_label(&json!("pos"), &LabelMap::new(), "label").unwrap_err().contains("label2id"));
    }
}
