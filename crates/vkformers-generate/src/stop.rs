//! Stop strings and streamed text. A row stops when its decoded text contains a stop string; the
//! text is cut before it. While streaming, the tail that could still become a stop string (or an
//! incomplete UTF-8 character, which tokenizers decode as U+FFFD) is held back until it is settled.

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

/// Turns successive decodings of one row's tokens into the chunks to print.
#[derive(Debug, Default)]
pub struct TextStream {
    printed: usize,
}

impl TextStream {
    /// The part of `text` (the decoding of all tokens so far) not printed yet and settled: no
    /// stop string (text after one is never printed), no possible start of one at the end, no
    /// trailing U+FFFD. With `done`, everything up to the first stop string.
    pub fn next_chunk(&mut self, text: &str, stops: &StopStrings, done: bool) -> String {
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

    #[test]
    fn stream_holds_back_a_possible_stop_and_never_prints_it() {
        let s = stops(&["END"]);
        let mut t = TextStream::default();
        assert_eq!(t.next_chunk("hello E", &s, false), "hello ");
        assert_eq!(t.next_chunk("hello EN", &s, false), "");
        assert_eq!(t.next_chunk("hello ENx", &s, false), "ENx");
        assert_eq!(t.next_chunk("hello ENx E", &s, false), " ");
        assert_eq!(t.next_chunk("hello ENx END tail", &s, true), "");
        let mut u = TextStream::default();
        assert_eq!(u.next_chunk("caf\u{FFFD}", &s, false), "caf");
        assert_eq!(u.next_chunk("café", &s, false), "é");
        assert_eq!(u.next_chunk("café E", &s, true), " E");
    }
}
