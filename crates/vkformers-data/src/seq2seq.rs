//! Encoder-decoder rows: a source the encoder reads and a target the decoder learns, as
//! `run_translation` / `run_summarization` feed `Seq2SeqTrainer`.
//!
//! Shapes, first match wins: `input_ids` + `labels` (used as given; `labels` need not be as long
//! as `input_ids`, -100 = not a target); `translation` (`{"en": ..., "de": ...}`, read with the
//! source and target languages); `input` + `output`; `source` + `target`. Text is tokenized as
//! `tokenizer(text, text_target=target)` does with one tokenizer (`PairEncoder`): the
//! post-processor adds T5's and Marian's `</s>`; multilingual tokenizers (mBART, NLLB, ...) place
//! the source and target language tokens; `--max-source-len` / `--max-target-len` cut the text
//! and keep those special tokens. `{input_ids, labels}` rows are used as given.

use serde_json::{Map, Value};
use vkformers_io::HfTokenizer;

use crate::error::{DataError, Result};
use crate::seq2seq_encode::PairEncoder;
use crate::{Dataset, Example, IGNORE_INDEX};

/// The row shapes an encoder-decoder dataset may hold, listed in every error about a row.
pub const SEQ2SEQ_SHAPES: &str = "each row of an encoder-decoder dataset must be a JSON object with one of: \
`input_ids` and `labels` (lists of token ids; -100 = not a target); `translation` (an object of texts by \
language, with --source-lang and --target-lang); `input` and `output`; `source` and `target` (strings)";

/// How encoder-decoder rows are read.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Seq2SeqRead {
    /// The keys of `translation` objects read as source and target (`--source-lang`,
    /// `--target-lang`; `en_XX` also finds `en`, as run_translation.py splits it), and the
    /// language tokens of a multilingual tokenizer.
    pub source_lang: Option<String>,
    pub target_lang: Option<String>,
    /// Append the tokenizer's EOS to source and target unless they already end with it
    /// (for a tokenizer whose post-processor does not).
    pub add_eos: bool,
    /// Tokens at most per source / target of a text row (the tokenizer's `max_length` with
    /// `truncation=True`).
    pub max_source_len: Option<usize>,
    pub max_target_len: Option<usize>,
    /// Read at most this many rows.
    pub max_rows: Option<usize>,
}

/// One row of known shape.
#[derive(Debug, Clone, PartialEq)]
enum Pair {
    Tokens { input_ids: Vec<u32>, labels: Vec<i32> },
    Text { source: String, target: String },
}

/// Reads every row of `files` as a source and a target. Text rows need `tok`; token-id rows
/// do not. The examples carry the source in `input_ids` (`labels` all -100: the encoder has no
/// targets) and the target in `decoder_labels`.
pub fn read_seq2seq_dataset(
    files: &[std::path::PathBuf],
    tok: Option<&HfTokenizer>,
    read: &Seq2SeqRead,
) -> Result<Dataset> {
    if files.is_empty() {
        return Err(DataError::NoFiles);
    }
    let limit = read.max_rows.unwrap_or(usize::MAX);
    let encoder = tok.map(|t| PairEncoder::new(t, read)).transpose().map_err(DataError::Language)?;
    let mut dataset = Dataset::default();
    'files: for file in files {
        for raw in crate::source::rows(file)? {
            if dataset.examples.len() >= limit {
                break 'files;
            }
            let (location, value) = raw?;
            let bad = |reason: String| DataError::BadPair { location: location.clone(), reason };
            let pair = parse_pair(&value, read).map_err(bad)?;
            let (input_ids, decoder_labels) = match pair {
                Pair::Tokens { input_ids, labels } => (input_ids, labels),
                Pair::Text { source, target } => {
                    let Some(enc) = &encoder else {
                        return Err(bad("a text row needs the model's tokenizer (tokenizer.json); give \
                                        `input_ids` and `labels` instead"
                            .into()));
                    };
                    let tokenize = |message| DataError::Tokenize { location: location.clone(), message };
                    let src = enc.source(&source).map_err(tokenize)?;
                    let tgt = enc.target(&target).map_err(tokenize)?;
                    (src, tgt.into_iter().map(|t| t as i32).collect())
                }
            };
            let labels = vec![IGNORE_INDEX; input_ids.len()];
            dataset.examples.push(Example { input_ids, labels, decoder_labels, ..Default::default() });
            dataset.sources.push(location);
        }
    }
    if dataset.examples.is_empty() {
        let names: Vec<String> = files.iter().map(|f| f.display().to_string()).collect();
        return Err(DataError::Empty { files: names.join(", ") });
    }
    Ok(dataset)
}

/// The shape of `value`, or why it has none.
fn parse_pair(value: &Value, read: &Seq2SeqRead) -> std::result::Result<Pair, String> {
    let Value::Object(obj) = value else { return Err("the row is not a JSON object".into()) };
    let has = |k: &str| obj.get(k).is_some_and(|v| !v.is_null());
    if has("input_ids") {
        let input_ids = ints(obj, "input_ids", |n| u32::try_from(n).ok())?;
        if !has("labels") {
            return Err("an encoder-decoder `input_ids` row needs `labels` (the decoder's targets)".into());
        }
        let labels = ints(obj, "labels", |n| i32::try_from(n).ok().filter(|&l| l >= 0 || l == IGNORE_INDEX))?;
        return Ok(Pair::Tokens { input_ids, labels });
    }
    if has("translation") {
        return translation(&obj["translation"], read);
    }
    for (s, t) in [("input", "output"), ("source", "target")] {
        if has(s) || has(t) {
            return Ok(Pair::Text { source: text(obj, s)?, target: text(obj, t)? });
        }
    }
    let keys: Vec<String> = obj.keys().map(|k| format!("`{k}`")).collect();
    Err(format!("no encoder-decoder row shape; the row has {}", keys.join(", ")))
}

/// `{"translation": {lang: text, ...}}` read with `--source-lang` / `--target-lang`.
fn translation(v: &Value, read: &Seq2SeqRead) -> std::result::Result<Pair, String> {
    let Value::Object(langs) = v else { return Err("`translation` must be an object of texts by language".into()) };
    let have = || langs.keys().map(|k| format!("`{k}`")).collect::<Vec<_>>().join(", ");
    let (Some(src), Some(tgt)) = (&read.source_lang, &read.target_lang) else {
        return Err(format!("a `translation` row needs --source-lang and --target-lang (it has {})", have()));
    };
    // run_translation.py reads `translation["en"]` for `--source_lang en_XX`.
    let find = |lang: &str| langs.get(lang).or_else(|| langs.get(lang.split('_').next().unwrap_or(lang)));
    let pick = |lang: &str| match find(lang) {
        Some(Value::String(s)) if !s.is_empty() => Ok(s.clone()),
        Some(_) => Err(format!("`translation.{lang}` must be a non-empty string")),
        None => Err(format!("`translation` has no `{lang}` (it has {})", have())),
    };
    Ok(Pair::Text { source: pick(src)?, target: pick(tgt)? })
}

fn text(obj: &Map<String, Value>, key: &str) -> std::result::Result<String, String> {
    match obj.get(key) {
        Some(Value::String(s)) if !s.is_empty() => Ok(s.clone()),
        Some(Value::String(_)) => Err(format!("`{key}` is empty")),
        None | Some(Value::Null) => Err(format!("the row has no `{key}`")),
        Some(_) => Err(format!("`{key}` must be a string")),
    }
}

/// A non-empty list of integers, each passing `convert`.
fn ints<T>(
    obj: &Map<String, Value>,
    key: &str,
    convert: impl Fn(i64) -> Option<T>,
) -> std::result::Result<Vec<T>, String> {
    let Some(Value::Array(list)) = obj.get(key) else { return Err(format!("`{key}` must be a list of integers")) };
    if list.is_empty() {
        return Err(format!("`{key}` is an empty list"));
    }
    list.iter()
        .enumerate()
        .map(|(i, v)| {
            v.as_i64().and_then(&convert).ok_or_else(|| format!("`{key}[{i}]` is {v}, not a valid id or label"))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn langs() -> Seq2SeqRead {
        Seq2SeqRead { source_lang: Some("en".into()), target_lang: Some("de".into()), ..Default::default() }
    }

    #[test]
    fn shapes() {
        let r = Seq2SeqRead::default();
        let tokens = parse_pair(&json!({"input_ids": [5, 6, 7], "labels": [8, -100]}), &r).unwrap();
        assert_eq!(tokens, Pair::Tokens { input_ids: vec![5, 6, 7], labels: vec![8, -100] });
        let io = parse_pair(&json!({"input": "a", "output": "b"}), &r).unwrap();
        assert_eq!(io, Pair::Text { source: "a".into(), target: "b".into() });
        let st = parse_pair(&json!({"source": "a", "target": "b", "id": 3}), &r).unwrap();
        assert_eq!(st, Pair::Text { source: "a".into(), target: "b".into() });
        let tr = parse_pair(&json!({"translation": {"de": "Hallo", "en": "Hello"}}), &langs()).unwrap();
        assert_eq!(tr, Pair::Text { source: "Hello".into(), target: "Hallo".into() });
    }

    #[test]
    fn malformed_rows_say_what_is_missing() {
        let r = Seq2SeqRead::default();
        let err = parse_pair(&json!({"translation": {"en": "a", "de": "b"}}), &r).unwrap_err();
        assert!(err.contains("--source-lang") && err.contains("`en`"), "{err}");
        let err = parse_pair(&json!({"translation": {"en": "a", "fr": "b"}}), &langs()).unwrap_err();
        assert!(err.contains("no `de`"), "{err}");
        assert!(parse_pair(&json!({"input_ids": [5]}), &r).unwrap_err().contains("needs `labels`"));
        assert!(parse_pair(&json!({"input_ids": [5], "labels": [-5]}), &r).is_err());
        assert!(parse_pair(&json!({"input": "a"}), &r).unwrap_err().contains("no `output`"));
        assert!(parse_pair(&json!({"text": "a"}), &r).unwrap_err().contains("`text`"));
    }
}
