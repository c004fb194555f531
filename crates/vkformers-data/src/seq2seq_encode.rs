//! One side of a text pair as `tokenizer(source, max_length=.., truncation=True)` /
//! `tokenizer(text_target=target, ...)` make it: the text's tokens cut first, so the special
//! tokens (EOS, language tokens) always stay. A sequence of `n` text tokens and `k` special ones
//! with `max_len` keeps `min(n, max_len - k)` text tokens.

use tokenizers::{PostProcessor, TruncationDirection};
use vkformers_io::HfTokenizer;

use crate::lang_tokens::LangTokens;

/// Encodes sources and targets of one tokenizer.
pub struct PairEncoder<'a> {
    tok: &'a HfTokenizer,
    /// Language tokens placed around each side (mBART, NLLB, ...), instead of the post-processor.
    langs: Option<LangTokens>,
    /// Append EOS when the post-processor does not (ignored with language tokens, which end
    /// with their own EOS).
    add_eos: bool,
    max_source: Option<usize>,
    max_target: Option<usize>,
}

impl<'a> PairEncoder<'a> {
    /// The encoder of `tok` with the languages of `read` (see `LangTokens::resolve`).
    pub fn new(tok: &'a HfTokenizer, read: &crate::Seq2SeqRead) -> Result<Self, String> {
        let langs = LangTokens::resolve(tok, read.source_lang.as_deref(), read.target_lang.as_deref())?;
        Ok(PairEncoder {
            tok,
            langs,
            add_eos: read.add_eos,
            max_source: read.max_source_len,
            max_target: read.max_target_len,
        })
    }

    /// The language tokens in use, if the tokenizer places any.
    pub fn langs(&self) -> Option<&LangTokens> {
        self.langs.as_ref()
    }

    /// The source's ids (the encoder's input).
    pub fn source(&self, text: &str) -> Result<Vec<u32>, String> {
        self.side(text, false)
    }

    /// The target's ids (the labels).
    pub fn target(&self, text: &str) -> Result<Vec<u32>, String> {
        self.side(text, true)
    }

    fn side(&self, text: &str, target: bool) -> Result<Vec<u32>, String> {
        let max = if target { self.max_target } else { self.max_source };
        let inner = self.tok.inner();
        let e = inner.encode(text, false).map_err(|e| e.to_string())?;
        let Some(langs) = &self.langs else { return self.plain(e, max) };
        let (before, after) = langs.around(target);
        let mut ids = e.get_ids().to_vec();
        if let Some(m) = max {
            ids.truncate(keep(m, before.len() + after.len())?);
        }
        Ok([before, ids, after].concat())
    }

    /// The tokenizer's own post-processor adds the special tokens; EOS appended when asked.
    fn plain(&self, mut e: tokenizers::Encoding, max: Option<usize>) -> Result<Vec<u32>, String> {
        let inner = self.tok.inner();
        let added = inner.get_post_processor().map_or(0, |p| p.added_tokens(false));
        let eos = self.tok.eos().map(|t| t.id).filter(|_| self.add_eos);
        if let Some(m) = max {
            e.truncate(keep(m, added)?, 0, TruncationDirection::Right);
        }
        let mut ids = inner.post_process(e, None, true).map_err(|e| e.to_string())?.get_ids().to_vec();
        if let Some(eos) = eos.filter(|&eos| ids.last() != Some(&eos)) {
            // EOS replaces the last token when the sequence is already at its maximum.
            if max.is_some_and(|m| ids.len() >= m) {
                ids.truncate(max.unwrap_or(0).saturating_sub(1));
            }
            ids.push(eos);
        }
        Ok(ids)
    }
}

/// Text tokens kept under `max_len` with `special` tokens around them; at least one.
fn keep(max_len: usize, special: usize) -> Result<usize, String> {
    match max_len.checked_sub(special) {
        Some(n) if n > 0 => Ok(n),
        _ => Err(format!("a maximum length of {max_len} leaves no room for text beside {special} special tokens")),
    }
}
