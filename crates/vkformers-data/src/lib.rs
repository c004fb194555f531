//! Training data: rows of JSONL or Parquet files (text, instruction, prompt/completion, Q&A,
//! chat `messages`, or pre-tokenized ids) tokenized into input ids and loss labels.
//!
//! ```no_run
//! use std::path::PathBuf;
//! use vkformers_data::{read_dataset, ReadOptions};
//! use vkformers_io::HfTokenizer;
//! let tok = HfTokenizer::from_dir("model").unwrap();
//! let data = read_dataset(&[PathBuf::from("train.jsonl")], &tok, &ReadOptions::default()).unwrap();
//! println!("{} rows, plain text: {}", data.examples.len(), data.plain_text);
//! ```
//!
//! Row shapes and how each is tokenized:
//!
//! - `text` / `content`: `encode(text, add_special_tokens=True)` (BOS where the tokenizer's
//!   post-processor adds it), EOS appended unless already last; every token trained.
//! - `prompt` + `completion` (strings): the completion follows the prompt literally (as TRL does
//!   for non-conversational data); BOS, EOS appended; the prompt is masked.
//! - `instruction` (+ `input`) + `output`, `question` + `answer`: through the chat template as a
//!   user and an assistant message when the tokenizer has one, else a fixed plain layout
//!   (`### Instruction:` / `### Input:` / `### Response:` sections; `Question: ...\nAnswer: ...`);
//!   the prompt is masked.
//! - `messages`, and `prompt` + `completion` given as lists of messages: the chat template renders
//!   the conversation as `apply_chat_template` does; only assistant turns (of the completion)
//!   are trained; no EOS is appended (the template ends turns its own way).
//! - `input_ids` (+ `labels`): used as they are; labels default to the ids.
//!
//! `train_on_prompt` trains every token of every row. Prompt and response are always tokenized
//! as one text, so the ids equal the tokenization of the full text.

mod bpe;
mod chat;
mod cut;
mod encode;
mod error;
mod label;
mod lang_tokens;
mod parquet_rows;
mod prompt;
mod seq2seq;
mod seq2seq_encode;
mod shape;
mod source;
mod text_files;
mod tokenize;

use std::path::PathBuf;

use vkformers_io::HfTokenizer;

pub use bpe::{train_bpe_tokenizer, train_bpe_tokenizer_with, BpeOptions, CHAT_TEMPLATE};
pub use cut::CutReport;
pub use error::{DataError, Location, Place, Result, ACCEPTED_SHAPES};
pub use label::{parse_label, LabelMap, SeqLabel};
pub use lang_tokens::{LangLayout, LangTokens};
pub use seq2seq::{read_seq2seq_dataset, Seq2SeqRead, SEQ2SEQ_SHAPES};
pub use seq2seq_encode::PairEncoder;
pub use text_files::read_text_files;

use crate::chat::ChatTemplate;
use crate::shape::{parse_row, Row};
use crate::tokenize::Tokenize;

/// The label of a token that is not trained on, as PyTorch's cross-entropy `ignore_index`.
pub const IGNORE_INDEX: i32 = -100;

/// One tokenized row: `labels[i]` is `input_ids[i]` where the token is trained on, or -100
/// where it is masked from the loss (prompt tokens). Labels are not shifted: position `i`'s
/// logits predict `labels[i + 1]`, as in transformers. Encoder rows also carry token types
/// (segment ids of a text pair; empty when the tokenizer gives none) and, for sequence
/// classification, the row's label (`labels` is then all -100; token classification puts its
/// per-token class ids in `labels`). Encoder-decoder rows put the source in `input_ids`
/// (`labels` all -100) and the decoder's targets in `decoder_labels` (any length, not shifted:
/// the model shifts them into its decoder inputs); it is empty for every other row.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Example {
    pub input_ids: Vec<u32>,
    pub labels: Vec<i32>,
    pub token_types: Vec<u32>,
    pub target: Option<SeqLabel>,
    pub decoder_labels: Vec<i32>,
}

impl Example {
    /// A row of ids and per-token labels only (causal LM, masked LM).
    pub fn new(input_ids: Vec<u32>, labels: Vec<i32>) -> Example {
        Example { input_ids, labels, ..Default::default() }
    }
}

/// Every row of a dataset, tokenized.
#[derive(Clone, Debug, Default)]
pub struct Dataset {
    pub examples: Vec<Example>,
    /// True when every row is plain text (`text`/`content`): packing is then on by default.
    pub plain_text: bool,
    /// Where each example was read (file and line, item or row), one per example; empty when
    /// unknown (rows are then named by their index).
    pub sources: Vec<Location>,
}

/// How rows are turned into examples.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ReadOptions {
    /// Train on the prompt part of prompt/response and chat rows too (no -100 labels).
    pub train_on_prompt: bool,
    /// Append the tokenizer's EOS token (trained) to text, prompt/completion, instruction and Q&A
    /// rows unless their ids already end with it; nothing is appended when the tokenizer has no
    /// EOS token. Chat rows end as their template ends them; pre-tokenized rows are used as they are.
    /// On by default (training rows should teach the model to stop); `transformers`' plain
    /// `model(input_ids, labels=input_ids)` loss has no EOS, so `vkformers eval` turns it off.
    pub add_eos: bool,
    /// Read at most this many rows (over all files, in order).
    pub max_rows: Option<usize>,
    /// Class names of classification rows (`label2id` of the model's config), for string labels.
    pub label2id: LabelMap,
}

impl Default for ReadOptions {
    fn default() -> Self {
        ReadOptions { train_on_prompt: false, add_eos: true, max_rows: None, label2id: LabelMap::default() }
    }
}

/// Reads and tokenizes every row of `files` (JSON lines `.jsonl`/`.json`, a `.json` array of
/// objects, or `.parquet`), in order. A malformed row fails the whole read with its file and
/// line (or row), and the accepted shapes; a dataset without rows is an error.
pub fn read_dataset(files: &[PathBuf], tok: &HfTokenizer, opts: &ReadOptions) -> Result<Dataset> {
    if files.is_empty() {
        return Err(DataError::NoFiles);
    }
    let tokenize = Tokenize { tok, chat: ChatTemplate::of(tok), opts };
    let limit = opts.max_rows.unwrap_or(usize::MAX);
    let mut dataset = Dataset { examples: Vec::new(), plain_text: true, sources: Vec::new() };
    'files: for file in files {
        for raw in source::rows(file)? {
            if dataset.examples.len() >= limit {
                break 'files;
            }
            let (location, value) = raw?;
            let row = parse_row(&value).map_err(|reason| DataError::bad_row(&location, reason))?;
            dataset.plain_text &= matches!(row, Row::Text(_));
            dataset.examples.push(tokenize.example(&row, &location)?);
            dataset.sources.push(location);
        }
    }
    if dataset.examples.is_empty() {
        let names: Vec<String> = files.iter().map(|f| f.display().to_string()).collect();
        return Err(DataError::Empty { files: names.join(", ") });
    }
    Ok(dataset)
}
