//! Training data: rows of JSONL or Parquet files (text, instruction, prompt/completion, Q&A,
//! chat `messages`, or pre-tokenized ids) tokenized into input ids and loss labels.

/// One tokenized row: `labels[i]` is `input_ids[i]` where the token is trained on, or -100
/// where it is masked from the loss (prompt tokens). Labels are not shifted: position `i`'s
/// logits predict `labels[i + 1]`, as in transformers.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Example {
    pub input_ids: Vec<u32>,
    pub labels: Vec<i32>,
}

/// Every row of a dataset, tokenized.
#[derive(Clone, Debug, Default)]
pub struct Dataset {
    pub examples: Vec<Example>,
    /// True when every row is plain text (`text`/`content`): packing is then on by default.
    pub plain_text: bool,
}
