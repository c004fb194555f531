//! JSON files of a model folder (config.json, generation_config.json, indexes ...).

use std::path::Path;

use serde_json::Value;

use crate::atomic::write_atomic;
use crate::error::{IoError, Result};

/// The largest JSON file [`read_json`] reads: configs, indexes and adapter configs are a few KiB
/// to a few MiB, while parsing a corrupt or hostile 69 MB one took 3.4 GB of memory.
/// (`tokenizer.json`, which can be tens of MiB, is read by the `tokenizers` library instead.)
pub const MAX_JSON_BYTES: u64 = 16 << 20;

/// Reads and parses a JSON file. A missing file, an unreadable one, one over
/// [`MAX_JSON_BYTES`] and a syntax error each give an error naming the file; a syntax error
/// also gives its line and column.
pub fn read_json(path: impl AsRef<Path>) -> Result<Value> {
    let path = path.as_ref();
    check_json_size(path)?;
    let text = std::fs::read_to_string(path).map_err(|e| match e.kind() {
        std::io::ErrorKind::NotFound => {
            IoError::FileNotFound { path: path.to_path_buf(), expected: "a JSON file".to_string() }
        }
        _ => IoError::io(path, e),
    })?;
    parse_json(path, &text)
}

/// Refuses a JSON file over [`MAX_JSON_BYTES`] before anything reads it, naming the file, its
/// size and the limit. A missing file passes (the reader reports it in its own words).
pub fn check_json_size(path: impl AsRef<Path>) -> Result<()> {
    let path = path.as_ref();
    let Ok(meta) = std::fs::metadata(path) else { return Ok(()) };
    if meta.len() <= MAX_JSON_BYTES {
        return Ok(());
    }
    let msg = format!(
        "{} bytes ({:.1} MiB) is over the {} MiB limit for a JSON file of a model folder; \
         is it the right file?",
        meta.len(),
        meta.len() as f64 / 1048576.0,
        MAX_JSON_BYTES >> 20
    );
    Err(IoError::io(path, std::io::Error::new(std::io::ErrorKind::InvalidData, msg)))
}

/// Parses JSON text read from `path` (used for error messages).
pub(crate) fn parse_json(path: &Path, text: &str) -> Result<Value> {
    serde_json::from_str(text).map_err(|e| {
        let full = e.to_string();
        let position = format!(" at line {} column {}", e.line(), e.column());
        let message = full.strip_suffix(&position).unwrap_or(&full).to_string();
        IoError::Json { path: path.to_path_buf(), line: e.line(), column: e.column(), message }
    })
}

/// The text [`write_json_atomic`] writes: pretty-printed with two-space indentation, keys in
/// sorted order (serde_json's map order), and a trailing newline — the same text as Python's
/// `json.dumps(value, indent=2, sort_keys=True) + "\n"` for ASCII content.
pub fn to_json_text(value: &Value) -> String {
    // Serializing a `Value` cannot fail: its keys are always strings.
    let mut text = serde_json::to_string_pretty(&sorted(value)).unwrap_or_default();
    text.push('\n');
    text
}

/// Writes a JSON file atomically (see [`write_atomic`]) as [`to_json_text`] formats it.
pub fn write_json_atomic(path: impl AsRef<Path>, value: &Value) -> Result<()> {
    let text = to_json_text(value);
    write_atomic(path, |w| w.write_all(text.as_bytes()))
}

/// A copy of `value` whose objects have their keys inserted in sorted order, so the output is
/// sorted even if serde_json's `preserve_order` feature gets enabled somewhere in the build.
fn sorted(value: &Value) -> Value {
    match value {
        Value::Object(map) => {
            let mut keys: Vec<&String> = map.keys().collect();
            keys.sort();
            let mut out = serde_json::Map::new();
            for k in keys {
                out.insert(k.clone(), sorted(&map[k]));
            }
            Value::Object(out)
        }
        Value::Array(items) => Value::Array(items.iter().map(sorted).collect()),
        other => other.clone(),
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn an_oversized_json_file_is_refused_before_reading() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("config.json");
        // Sparse: the size is there, the bytes are not, so the test costs nothing.
        std::fs::File::create(&path).unwrap().set_len(super::MAX_JSON_BYTES + 1).unwrap();
        let e = super::read_json(&path).unwrap_err().to_string();
        assert!(e.contains("config.json") && e.contains("16777217 bytes") && e.contains("16 MiB limit"), "{e}");
        std::fs::write(&path, "{}").unwrap();
        assert!(super::read_json(&path).is_ok());
    }
}
