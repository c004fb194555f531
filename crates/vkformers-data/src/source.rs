//! Reading dataset files into rows: JSON lines, a JSON array of objects, or Parquet. Each row
//! comes with its [`Location`] so that errors can point at it.

use std::fs::File;
use std::io::{BufRead, BufReader, ErrorKind, Read};
use std::path::Path;

use serde_json::Value;

use crate::error::{DataError, Location, Place, Result};
use crate::parquet_rows;

/// One row as read from a file, before its shape is known.
pub(crate) type RawRow = (Location, Value);

/// The rows of `path`, in file order. The format comes from the extension: `.jsonl`/`.ndjson`
/// are JSON lines; `.json` is one array of objects when its first non-blank character is `[`,
/// JSON lines otherwise (as the `datasets` library reads it); `.parquet` is Parquet.
pub(crate) fn rows(path: &Path) -> Result<Box<dyn Iterator<Item = Result<RawRow>>>> {
    if !path.is_file() {
        return Err(DataError::FileNotFound { path: path.to_path_buf() });
    }
    let ext = path.extension().and_then(|e| e.to_str()).map(str::to_ascii_lowercase).unwrap_or_default();
    match ext.as_str() {
        "jsonl" | "ndjson" => json_lines(path),
        "json" if starts_with_bracket(path)? => json_array(path),
        "json" => json_lines(path),
        "parquet" => parquet_rows::rows(path),
        _ => Err(DataError::UnknownFormat { path: path.to_path_buf() }),
    }
}

fn open(path: &Path) -> Result<File> {
    File::open(path).map_err(|source| DataError::Io { path: path.to_path_buf(), source })
}

/// Whether the first non-whitespace byte of the file is `[`.
fn starts_with_bracket(path: &Path) -> Result<bool> {
    let mut reader = BufReader::new(open(path)?);
    loop {
        let buf = reader.fill_buf().map_err(|source| DataError::Io { path: path.to_path_buf(), source })?;
        if buf.is_empty() {
            return Ok(false);
        }
        if let Some(b) = buf.iter().find(|b| !b.is_ascii_whitespace()) {
            return Ok(*b == b'[');
        }
        let n = buf.len();
        reader.consume(n);
    }
}

/// One row per line; blank lines are skipped (a trailing newline or a blank separator line is
/// not a row), every other line must be a JSON value.
fn json_lines(path: &Path) -> Result<Box<dyn Iterator<Item = Result<RawRow>>>> {
    let reader = BufReader::new(open(path)?);
    let file = path.to_path_buf();
    let iter = reader.lines().enumerate().filter_map(move |(i, line)| {
        let location = Location { file: file.clone(), place: Place::Line(i + 1) };
        let line = match line {
            Ok(line) => line,
            Err(e) if e.kind() == ErrorKind::InvalidData => {
                return Some(Err(DataError::bad_row(&location, "the line is not valid UTF-8")))
            }
            Err(source) => return Some(Err(DataError::Io { path: file.clone(), source })),
        };
        // A byte-order mark some editors put at the start of a file is not part of the row.
        let line = if i == 0 { line.trim_start_matches('\u{feff}') } else { &line };
        if line.trim().is_empty() {
            return None;
        }
        Some(match serde_json::from_str::<Value>(line) {
            Ok(value) => Ok((location, value)),
            Err(e) => Err(DataError::bad_row(
                &location,
                format!("not valid JSON at column {}: {}", e.column(), json_reason(&e)),
            )),
        })
    });
    Ok(Box::new(iter))
}

/// A `.json` file holding one array: each item is a row.
fn json_array(path: &Path) -> Result<Box<dyn Iterator<Item = Result<RawRow>>>> {
    let mut text = String::new();
    open(path)?.read_to_string(&mut text).map_err(|source| DataError::Io { path: path.to_path_buf(), source })?;
    let value: Value = serde_json::from_str(&text).map_err(|e| DataError::BadJsonFile {
        path: path.to_path_buf(),
        line: e.line(),
        column: e.column(),
        message: e.to_string(),
    })?;
    let Value::Array(items) = value else { unreachable!("the file starts with `[`, so it parsed as an array") };
    let file = path.to_path_buf();
    let iter = items
        .into_iter()
        .enumerate()
        .map(move |(i, item)| Ok((Location { file: file.clone(), place: Place::Item(i + 1) }, item)));
    Ok(Box::new(iter))
}

/// serde_json's message without its " at line L column C" suffix (the location is given apart).
fn json_reason(e: &serde_json::Error) -> String {
    let full = e.to_string();
    let suffix = format!(" at line {} column {}", e.line(), e.column());
    full.strip_suffix(&suffix).unwrap_or(&full).to_string()
}
