//! Stop strings and streamed text. A row stops when its decoded text contains a stop string; the
//! text is cut before it. While streaming, the tail that could still become a stop string (or an
//! incomplete UTF-8 character, which tokenizers decode as U+FFFD) is held back until it is settled.

use vkformers_io::IoError;

use crate::detok::{Decoded, DetokStream, Detokenizer};

/// The `--stop` strings of a generation.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct StopStrings {
    stops: Vec<String>,
}

impl StopStrings {
    /// Empty strings are ignored (they would stop at once).
    pub fn new(stops: impl IntoIterator<Item = String>) -> Self {
        Self { stops: stops.into_iter().filter(|s| !s.is_empty()).collect() }
    }

    pub fn is_empty(&self) -> bool {
        self.stops.is_empty()
    }

    /// Byte index of the earliest stop string in `text`.
    pub fn find(&self, text: &str) -> Option<usize> {
        self.stops.iter().filter_map(|s| text.find(s.as_str())).min()
    }

    /// `text` cut before its earliest stop string (all of it when none occurs).
    pub fn trim<'a>(&self, text: &'a str) -> &'a str {
        &text[..self.find(text).unwrap_or(text.len())]
    }

    /// The longest stop string's length in bytes (0 when none).
    pub fn longest(&self) -> usize {
        self.stops.iter().map(String::len).max().unwrap_or(0)
    }

    /// Bytes at the end of `text` that begin some stop string (and so may still become one).
    fn pending(&self, text: &str) -> usize {
        let mut longest = 0;
        for s in &self.stops {
            for (i, _) in s.char_indices().skip(1) {
                if i > longest && text.ends_with(&s[..i]) {
                    longest = i;
                }
            }
        }
        longest
    }
}

/// What one token gives a stream: the text to print now (possibly empty: held back until a stop
/// string or a whole character is certain) and whether the text now holds a stop string.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Chunk {
    pub text: String,
    pub stop: bool,
}

/// One row's streamed text: its tokens decoded a few at a time ([`crate::detok`]), stop strings
/// searched in the new text and the longest stop's length before it, and the text to print.
#[derive(Debug, Default)]
pub struct TextStream {
    detok: DetokStream,
    /// The settled text so far (window mode), or the last full decode (full mode, and a window
    /// stream fallen back to it).
    text: String,
    /// Bytes of `text` printed.
    printed: usize,
    /// Bytes of `text` searched for stop strings (none found).
    searched: usize,
    /// A stop string was found: nothing more is printed before `finish`.
    stopped: bool,
}

impl TextStream {
    /// The step for `ids` (every token of the row so far): the part of the text not printed yet
    /// and settled (no stop string, and text after one is never printed; no possible start of one
    /// at the end; no incomplete character), and whether a stop string occurs in the text.
    pub fn push(&mut self, detok: &Detokenizer<'_>, ids: &[u32], stops: &StopStrings) -> Result<Chunk, IoError> {
        if self.stopped {
            return Ok(Chunk { text: String::new(), stop: true });
        }
        let chunk = match detok.step(&mut self.detok, ids)? {
            Decoded::Append { settled, tail } => self.append(&settled, &tail, stops),
            Decoded::Whole(text) => {
                self.text = text;
                let stop = stops.find(&self.text).is_some();
                Chunk { text: self.next_whole(stops, false), stop }
            }
        };
        self.stopped = chunk.stop;
        Ok(chunk)
    }

    /// The rest of the row's text once it finished: `text` (the full decode of every token) cut
    /// before its first stop string, less what was printed.
    pub fn finish(&mut self, text: &str, stops: &StopStrings) -> String {
        self.text = text.to_string();
        self.next_whole(stops, true)
    }

    /// Window mode: `settled` joins the text; `tail` follows it for now (it is searched, never
    /// printed).
    fn append(&mut self, settled: &str, tail: &str, stops: &StopStrings) -> Chunk {
        self.text.push_str(settled);
        // A stop string not found in `text[..searched]` ends after it: it starts at most the
        // longest stop's length, less one byte, before.
        let mut from = self.searched.saturating_sub(stops.longest().saturating_sub(1));
        while !self.text.is_char_boundary(from) {
            from -= 1;
        }
        self.searched = self.text.len();
        let recent: std::borrow::Cow<'_, str> =
            if tail.is_empty() { self.text[from..].into() } else { format!("{}{tail}", &self.text[from..]).into() };
        let found = stops.find(&recent);
        // Held back: a possible start of a stop string at the end of the text with its tail, and
        // at the end of the settled text (the tail may still change into one).
        let end = match found {
            Some(at) => (from + at).min(self.text.len()),
            None => {
                (from + recent.len() - stops.pending(&recent)).min(self.text.len() - stops.pending(&self.text[from..]))
            }
        };
        let text = if end > self.printed { self.text[self.printed..end].to_string() } else { String::new() };
        self.printed = self.printed.max(end);
        Chunk { text, stop: found.is_some() }
    }

    /// The part of `text` (a whole decode) not printed yet and settled; with `done`, everything up
    /// to the first stop string.
    fn next_whole(&mut self, stops: &StopStrings, done: bool) -> String {
        let text = &self.text;
        let mut end = stops.find(text).unwrap_or(text.len());
        if !done && end == text.len() {
            end -= stops.pending(text);
            end = text[..end].trim_end_matches('\u{FFFD}').len();
        }
        if end <= self.printed || !text.is_char_boundary(self.printed) {
            return String::new();
        }
        let chunk = text[self.printed..end].to_string();
        self.printed = end;
        chunk
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stops(s: &[&str]) -> StopStrings {
        StopStrings::new(s.iter().map(|s| s.to_string()))
    }

    #[test]
    fn finds_and_trims_the_earliest_stop() {
        let s = stops(&["\n\n", "END", ""]);
        assert_eq!(s.find("abc END x\n\n"), Some(4));
        assert_eq!(s.trim("abc END"), "abc ");
        assert_eq!(s.trim("no stop"), "no stop");
    }
}
