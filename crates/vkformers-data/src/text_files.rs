//! A corpus of plain text files (documentation, source code) as a dataset for pre-training:
//! each file is one document, tokenized as a `text` row.

use std::path::PathBuf;

use vkformers_io::HfTokenizer;

use crate::error::{DataError, Location, Place, Result};
use crate::tokenize::Tokenize;
use crate::{Dataset, ReadOptions};

/// Reads each of `files` as one plain-text document (BOS per the tokenizer, EOS appended per
/// `opts.add_eos`, every token trained) in order; files with only whitespace are skipped. For
/// JSONL or Parquet datasets use [`read_dataset`](crate::read_dataset).
pub fn read_text_files(files: &[PathBuf], tok: &HfTokenizer, opts: &ReadOptions) -> Result<Dataset> {
    if files.is_empty() {
        return Err(DataError::NoFiles);
    }
    let tokenize = Tokenize { tok, chat: None, opts };
    let limit = opts.max_rows.unwrap_or(usize::MAX);
    let (mut examples, mut sources) = (Vec::new(), Vec::new());
    for path in files {
        if examples.len() >= limit {
            break;
        }
        if !path.is_file() {
            return Err(DataError::FileNotFound { path: path.clone() });
        }
        let bytes = std::fs::read(path).map_err(|source| DataError::Io { path: path.clone(), source })?;
        let text = String::from_utf8(bytes).map_err(|_| DataError::NotText { path: path.clone() })?;
        let location = Location { file: path.clone(), place: Place::Line(1) };
        if !text.trim().is_empty() {
            examples.push(tokenize.text(&text, &location)?);
            sources.push(location);
        }
    }
    if examples.is_empty() {
        let names: Vec<String> = files.iter().map(|f| f.display().to_string()).collect();
        return Err(DataError::Empty { files: names.join(", ") });
    }
    Ok(Dataset { examples, plain_text: true, sources })
}
