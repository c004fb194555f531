//! Incremental detokenization: a request's text as its tokens arrive, each step decoding only a
//! short window of recent ids instead of every id generated so far (which costs O(n) a token,
//! O(n²) a request).
//!
//! A stream keeps two offsets into the ids, `prefix <= read`: the text of `ids[..read]` has been
//! handed out, and `ids[prefix..read]` is context decoded again with each new id, so that what a
//! decoder does at the start of a text (SentencePiece's dropped leading `▁`, `Strip`, WordPiece's
//! first piece without a space) happens inside the context and not to the new ids. The new text is
//! `decode(ids[prefix..])` minus `decode(ids[prefix..read])`. It is handed out (settled) only when
//! it cannot change with later ids: it does not end in U+FFFD (a multi-byte character split over
//! byte-level tokens decodes as U+FFFD until its last byte arrives), and on byte-fallback
//! tokenizers the last token decoded is not a `<0xNN>` byte token (`ByteFallback` decodes a run of
//! byte tokens as one string, or as one U+FFFD per byte when the run is not UTF-8, so a run's text
//! is final only once a non-byte token closes it). A context whose text is empty (skipped special
//! tokens only) is widened back one id at a time, so that the decoder's start-of-text rules always
//! apply to context, never to new ids.
//!
//! This equals the full decode only for decoders whose text of later ids depends on a bounded
//! stretch before them: per-token decoders (Metaspace, WordPiece, the BPE suffix decoder, Replace,
//! ByteFallback, Strip) ahead of the step that fuses the tokens into one string (`Fuse`,
//! `ByteLevel`), and `Strip` after it. Any other decoder (CTC, a Replace or Metaspace after the
//! fuse, an unknown one) is decoded in full at every step ([`DetokMode::Full`]); so is every
//! tokenizer when `VKFORMERS_DETOK=full` (the previous behaviour, for comparison).

use std::collections::HashSet;

use serde_json::Value;
use vkformers_io::{HfTokenizer, IoError};

/// Re-anchor the context once the decoded window holds more ids than this (each step decodes the
/// whole window once; re-anchoring costs one decode more).
const MAX_WINDOW: usize = 4;

/// How a tokenizer's text is streamed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DetokMode {
    /// Decode a window of recent ids; `byte_fallback`: hold text while the last token decoded is
    /// a `<0xNN>` byte token.
    Window { byte_fallback: bool },
    /// Decode every id at every step.
    Full,
}

/// What one step of a stream gives.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Decoded {
    /// Window mode: `settled` extends the settled text so far and will never change; `tail` is the
    /// current text of the ids after it (may still change: an incomplete character, an open byte
    /// run). Settled text so far + `settled` + `tail` is the full decode of the ids.
    Append { settled: String, tail: String },
    /// Full mode: the full decode of the ids.
    Whole(String),
}

/// A tokenizer's streaming decoder (one per tokenizer; the per-request state is [`DetokStream`]).
/// Decodes without special tokens, as the generated text is decoded.
pub struct Detokenizer<'t> {
    tok: &'t HfTokenizer,
    mode: DetokMode,
    /// The special tokens' text (the decode leaves them out).
    special: HashSet<String>,
    /// The decoder has `BPEDecoder`, whose decode of no tokens underflows (a panic in debug builds
    /// of `tokenizers`): ids that decode to no token are not handed to it.
    guard_empty: bool,
}

/// One request's place in its ids (see the module docs).
#[derive(Debug, Clone, Default)]
pub struct DetokStream {
    prefix: usize,
    read: usize,
    /// `decode(ids[prefix..read])`.
    context: String,
    /// The context's text changed with later ids (a decoder less local than its configuration
    /// says): this stream decodes every id from then on.
    whole: bool,
}

impl<'t> Detokenizer<'t> {
    /// The decoder's mode from its configuration (see the module docs), or `Full` when
    /// `VKFORMERS_DETOK=full`.
    pub fn new(tok: &'t HfTokenizer) -> Self {
        let forced_full = std::env::var("VKFORMERS_DETOK").is_ok_and(|v| v == "full");
        let mode = if forced_full { DetokMode::Full } else { mode_of(tok) };
        Self::with_mode(tok, mode)
    }

    /// A decoder in `mode` (tests compare the modes).
    pub fn with_mode(tok: &'t HfTokenizer, mode: DetokMode) -> Self {
        let added = tok.inner().get_added_tokens_decoder();
        let special = added.into_values().filter(|t| t.special).map(|t| t.content).collect();
        let guard_empty = tok
            .inner()
            .get_decoder()
            .and_then(|d| serde_json::to_string(d).ok())
            .is_some_and(|d| d.contains("\"BPEDecoder\""));
        Detokenizer { tok, mode, special, guard_empty }
    }

    pub fn mode(&self) -> DetokMode {
        self.mode
    }

    /// The text of `ids` without special tokens (what a finished request's text is).
    pub fn decode(&self, ids: &[u32]) -> Result<String, IoError> {
        if self.guard_empty && !ids.iter().any(|&id| self.kept(id).is_some()) {
            return Ok(String::new());
        }
        self.tok.decode(ids, true)
    }

    /// The token of `id` when the decode keeps it (known, and not a special token).
    fn kept(&self, id: u32) -> Option<String> {
        self.tok.id_to_token(id).filter(|t| !self.special.contains(t))
    }

    /// The next step of `stream` over `ids`: every id so far (those of the previous step and
    /// more).
    pub fn step(&self, stream: &mut DetokStream, ids: &[u32]) -> Result<Decoded, IoError> {
        let DetokMode::Window { byte_fallback } = self.mode else {
            return Ok(Decoded::Whole(self.decode(ids)?));
        };
        if stream.whole {
            return Ok(Decoded::Whole(self.decode(ids)?));
        }
        let text = self.decode(&ids[stream.prefix..])?;
        let Some(new) = text.strip_prefix(stream.context.as_str()) else {
            stream.whole = true;
            return Ok(Decoded::Whole(self.decode(ids)?));
        };
        let held = new.is_empty() || new.ends_with('\u{FFFD}') || (byte_fallback && self.ends_in_byte(ids));
        if held {
            return Ok(Decoded::Append { settled: String::new(), tail: new.to_string() });
        }
        let settled = new.to_string();
        let last_read = std::mem::replace(&mut stream.read, ids.len());
        if ids.len() - stream.prefix <= MAX_WINDOW {
            stream.context = text;
        } else {
            stream.prefix = last_read;
            self.anchor(stream, ids)?;
        }
        Ok(Decoded::Append { settled, tail: String::new() })
    }

    /// Decodes the context `ids[prefix..read]`, widened back until its text is not empty.
    fn anchor(&self, stream: &mut DetokStream, ids: &[u32]) -> Result<(), IoError> {
        loop {
            stream.context = self.decode(&ids[stream.prefix..stream.read])?;
            if stream.prefix == 0 || !stream.context.is_empty() {
                return Ok(());
            }
            stream.prefix -= 1;
        }
    }

    /// Whether the last token the decode keeps is a `<0xNN>` byte token (its run may go on).
    fn ends_in_byte(&self, ids: &[u32]) -> bool {
        ids.iter().rev().find_map(|&id| self.kept(id)).is_some_and(|t| is_byte_token(&t))
    }
}

/// `ByteFallback`'s byte token: `<0xNN>`.
fn is_byte_token(token: &str) -> bool {
    token.len() == 6 && token.starts_with("<0x") && token.ends_with('>') && u8::from_str_radix(&token[3..5], 16).is_ok()
}

/// The streaming mode of `tok`'s decoder (see the module docs).
pub fn mode_of(tok: &HfTokenizer) -> DetokMode {
    let Some(decoder) = tok.inner().get_decoder() else {
        // No decoder: the tokens joined with spaces.
        return DetokMode::Window { byte_fallback: false };
    };
    let Ok(config) = serde_json::to_value(decoder) else { return DetokMode::Full };
    let mut walk = Walk::default();
    if walk.visit(&config) {
        DetokMode::Window { byte_fallback: walk.byte_fallback }
    } else {
        DetokMode::Full
    }
}

/// A pass over a decoder's configuration in the order its steps run.
#[derive(Default)]
struct Walk {
    /// A step before this one joined the tokens into one string.
    fused: bool,
    byte_fallback: bool,
}

impl Walk {
    /// Whether the window decode of this step (and those it holds) equals the full decode.
    fn visit(&mut self, decoder: &Value) -> bool {
        match decoder.get("type").and_then(Value::as_str) {
            Some("Sequence") => {
                let steps = decoder.get("decoders").and_then(Value::as_array);
                steps.is_some_and(|steps| steps.iter().all(|d| self.visit(d)))
            }
            Some("Fuse") | Some("ByteLevel") => {
                self.fused = true;
                true
            }
            // Per token, or at the start and end of the fused text: local either way.
            Some("Strip") => true,
            Some("ByteFallback") => {
                self.byte_fallback = true;
                !self.fused
            }
            // Per token; after the fuse they would act on the window's whole text.
            Some("Metaspace") | Some("WordPiece") | Some("BPEDecoder") | Some("Replace") => !self.fused,
            _ => false,
        }
    }
}
