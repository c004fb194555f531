//! Tokenizing a whole row text once and labelling its tokens from byte spans of that text.
//!
//! Every prompt/response shape is built as one text plus the byte ranges that are trained (the
//! response, or each assistant turn). The text is tokenized in one piece, so the ids are exactly
//! the tokenization of the full text (tokenizing the prompt and the response apart and joining
//! the ids can differ where a merge crosses the boundary). A token is trained when the bytes it
//! came from overlap a trained range: this is what `transformers` does with `char_to_token` for
//! `return_assistant_tokens_mask` (a token straddling the boundary counts as response).

use std::ops::Range;

use vkformers_io::HfTokenizer;

use crate::error::{DataError, Location, Result};
use crate::{Example, IGNORE_INDEX};

/// What to tokenize and train for one row.
pub(crate) struct Spans<'a> {
    /// The full text of the row.
    pub text: &'a str,
    /// Byte ranges of `text` whose tokens are trained.
    pub trained: Vec<Range<usize>>,
    /// Let the tokenizer's post-processor add its special tokens (BOS); these are masked unless
    /// `train_all`.
    pub add_special_tokens: bool,
    /// Append the EOS token (trained) unless the ids already end with it.
    pub add_eos: bool,
    /// Train every token (plain text, or `train_on_prompt`).
    pub train_all: bool,
}

pub(crate) fn encode_spans(tok: &HfTokenizer, spans: &Spans, location: &Location) -> Result<Example> {
    let encoding = tok
        .inner()
        .encode(spans.text, spans.add_special_tokens)
        .map_err(|e| DataError::Tokenize { location: location.clone(), message: e.to_string() })?;
    let ids = encoding.get_ids();
    let offsets = encoding.get_offsets();
    let added = encoding.get_special_tokens_mask();
    let mut labels: Vec<i32> = ids
        .iter()
        .zip(offsets)
        .zip(added)
        .map(|((&id, &(start, end)), &added)| {
            let trained = spans.train_all || (added == 0 && overlaps(start, end, &spans.trained));
            if trained {
                id as i32
            } else {
                IGNORE_INDEX
            }
        })
        .collect();
    let mut input_ids = ids.to_vec();
    if spans.add_eos {
        if let Some(eos) = tok.eos() {
            if input_ids.last() != Some(&eos.id) {
                input_ids.push(eos.id);
                labels.push(eos.id as i32);
            }
        }
    }
    Ok(Example::new(input_ids, labels))
}

/// Whether a token from bytes `start..end` overlaps a trained range. A token with empty offsets
/// (some tokenizers trim whitespace out of offsets) counts where it starts.
fn overlaps(start: usize, end: usize, trained: &[Range<usize>]) -> bool {
    trained.iter().any(|r| if start == end { r.contains(&start) } else { start < r.end && end > r.start })
}
