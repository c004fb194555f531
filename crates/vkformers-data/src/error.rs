//! Errors of reading and tokenizing datasets, each naming the file (and line or row) it is about.

use std::fmt;
use std::path::PathBuf;

/// The row shapes a dataset file may hold, listed in every error about a row.
pub const ACCEPTED_SHAPES: &str = "each row must be a JSON object with one of: `text` or `content` (a string); \
`instruction` (+ optional `input`) and `output`; `prompt` and `completion` (strings, or lists of messages); \
`question` and `answer`; `messages` (a list of {\"role\", \"content\"}); \
`input_ids` (a list of token ids, + optional `labels`); `text` (+ `text_pair`) and `label` \
(classification); `tokens` (a list of words) and `labels` (one per word)";

/// Where a row sits in its file: a line of JSONL, an item of a JSON array, or a Parquet row.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Location {
    pub file: PathBuf,
    pub place: Place,
}

/// The position of a row inside its file (all 1-based).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Place {
    /// A line of a JSON-lines file.
    Line(usize),
    /// An item of a JSON file holding one array of rows.
    Item(usize),
    /// A row of a Parquet file.
    Row(usize),
}

impl fmt::Display for Location {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let file = self.file.display();
        match self.place {
            Place::Line(n) => write!(f, "{file}:{n}"),
            Place::Item(n) => write!(f, "{file}: array item {n}"),
            Place::Row(n) => write!(f, "{file}: row {n}"),
        }
    }
}

/// Result of this crate's functions.
pub type Result<T> = std::result::Result<T, DataError>;

/// Why a dataset could not be read, or a tokenizer not trained.
#[derive(Debug, thiserror::Error)]
pub enum DataError {
    /// No files were given.
    #[error("no dataset files were given; pass one or more .jsonl, .json or .parquet files")]
    NoFiles,
    /// A dataset file does not exist.
    #[error("{path}: no such file; give the path of a .jsonl, .json or .parquet dataset file", path = path.display())]
    FileNotFound { path: PathBuf },
    /// The file's extension is not one this crate reads.
    #[error("{path}: unknown dataset format; use JSON lines (.jsonl), JSON (.json) or Parquet (.parquet)", path = path.display())]
    UnknownFormat { path: PathBuf },
    /// The file could not be read.
    #[error("{path}: cannot read: {source}", path = path.display())]
    Io { path: PathBuf, source: std::io::Error },
    /// A plain-text corpus file is not UTF-8.
    #[error("{path}: not UTF-8 text; a text corpus must be UTF-8 files", path = path.display())]
    NotText { path: PathBuf },
    /// A `.json` file that holds one array is not valid JSON.
    #[error("{path}:{line}:{column}: not valid JSON: {message}; a .json dataset is either JSON lines or one array of row objects", path = path.display())]
    BadJsonFile { path: PathBuf, line: usize, column: usize, message: String },
    /// A Parquet file could not be decoded.
    #[error("{path}: cannot read Parquet: {message}", path = path.display())]
    Parquet { path: PathBuf, message: String },
    /// One row is malformed: bad JSON, no known shape, a field of the wrong type, or empty.
    #[error("{location}: {reason}\n  ({ACCEPTED_SHAPES})")]
    BadRow { location: Location, reason: String },
    /// An encoder-decoder row is malformed.
    #[error("{location}: {reason}\n  ({})", crate::SEQ2SEQ_SHAPES)]
    BadPair { location: Location, reason: String },
    /// A chat row could not be rendered through the tokenizer's chat template.
    #[error("{location}: {reason}")]
    Chat { location: Location, reason: String },
    /// The files hold no rows.
    #[error("the dataset is empty: {files} hold no rows")]
    Empty { files: String },
    /// The tokenizer failed on a row's text.
    #[error("{0}")]
    Language(String),

    #[error("{location}: tokenizer failed: {message}")]
    Tokenize { location: Location, message: String },
    /// Training a tokenizer failed.
    #[error("training the BPE tokenizer failed: {0}")]
    TrainTokenizer(String),
    /// Reading or writing model-folder files failed.
    #[error(transparent)]
    Files(#[from] vkformers_io::IoError),
}

impl DataError {
    /// A malformed row.
    pub(crate) fn bad_row(location: &Location, reason: impl Into<String>) -> Self {
        DataError::BadRow { location: location.clone(), reason: reason.into() }
    }
}
