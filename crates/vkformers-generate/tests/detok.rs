//! Incremental detokenization (`detok`) and the streamed text with stop strings (`stop`) against
//! the full decode they replace, over the repository's fixture tokenizers and tokenizers built
//! here for the decoders the fixtures lack (Llama's SentencePiece with byte fallback, WordPiece with
//! cleanup, the BPE suffix decoder, CTC): random id sequences (special tokens, ids outside the
//! vocabulary, byte tokens that split characters or form invalid UTF-8) and encoded texts with
//! multi-byte characters, with stop strings spanning tokens.

use std::path::PathBuf;

use serde_json::{json, Value};
use vkformers_generate::detok::{mode_of, Decoded, DetokMode, DetokStream, Detokenizer};
use vkformers_generate::stop::{StopStrings, TextStream};
use vkformers_io::{tokenizers, HfTokenizer, TokenizerConfig};
use vkformers_kernels::testutil::Rng;

fn fixture_tokenizers() -> Vec<(String, HfTokenizer)> {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../tests");
    [
        "fixtures_generate/cli_model",
        "fixtures_embed/qwen3_embedding",
        "fixtures_data/llama3",
        "fixtures_data/chatml",
        "fixtures_data/wordpiece",
        "fixtures_data/bpe",
        "fixtures_train/seq2seq/t5_tokenizer",
        "fixtures_train/seq2seq/lang/nllb_tokenizer",
        "fixtures_train/seq2seq/lang/mbart50_tokenizer",
    ]
    .iter()
    .map(|dir| (dir.to_string(), HfTokenizer::from_file(root.join(dir).join("tokenizer.json")).expect(dir)))
    .collect()
}

fn from_json(value: Value) -> HfTokenizer {
    let inner: tokenizers::Tokenizer = value.to_string().parse().expect("a valid tokenizer.json");
    HfTokenizer::new(inner, TokenizerConfig::default()).expect("a tokenizer")
}

fn added(id: u32, content: &str, special: bool) -> Value {
    json!({"id": id, "content": content, "single_word": false, "lstrip": false, "rstrip": false,
           "normalized": false, "special": special})
}

/// Llama-2's layout: SentencePiece BPE with byte fallback (`<0x00>`..`<0xFF>`), `▁` for spaces,
/// the decoder Replace / ByteFallback / Fuse / Strip.
fn llama_sentencepiece() -> HfTokenizer {
    let mut vocab = serde_json::Map::new();
    let mut push = |t: &str| {
        let id = vocab.len();
        vocab.insert(t.to_string(), json!(id));
    };
    for t in ["<unk>", "<s>", "</s>"] {
        push(t);
    }
    for b in 0..=255u8 {
        push(&format!("<0x{b:02X}>"));
    }
    let merges = [("▁", "t"), ("h", "e"), ("▁t", "he"), ("▁", "a"), ("l", "l"), ("▁", "w"), ("o", "r"), ("é", "t")];
    for c in "▁abcdefghijklmnopqrstuvwxyzé.,!?'".chars() {
        push(&c.to_string());
    }
    for (a, b) in merges {
        push(&format!("{a}{b}"));
    }
    let merges: Vec<String> = merges.iter().map(|(a, b)| format!("{a} {b}")).collect();
    from_json(json!({
        "version": "1.0",
        "truncation": null,
        "padding": null,
        "added_tokens": [added(0, "<unk>", true), added(1, "<s>", true), added(2, "</s>", true)],
        "normalizer": {"type": "Sequence", "normalizers": [
            {"type": "Prepend", "prepend": "▁"},
            {"type": "Replace", "pattern": {"String": " "}, "content": "▁"}]},
        "pre_tokenizer": null,
        "post_processor": null,
        "decoder": {"type": "Sequence", "decoders": [
            {"type": "Replace", "pattern": {"String": "▁"}, "content": " "},
            {"type": "ByteFallback"},
            {"type": "Fuse"},
            {"type": "Strip", "content": " ", "start": 1, "stop": 0}]},
        "model": {"type": "BPE", "dropout": null, "unk_token": "<unk>", "continuing_subword_prefix": null,
                  "end_of_word_suffix": null, "fuse_unk": true, "byte_fallback": true, "ignore_merges": false,
                  "vocab": vocab, "merges": merges}
    }))
}

/// BERT's layout: WordPiece with `##` pieces and the decoder's cleanup (" ." to ".", " n't", ...).
fn bert_wordpiece() -> HfTokenizer {
    let words = [
        "[PAD]", "[UNK]", "[CLS]", "[SEP]", "the", "cat", "##s", ".", ",", "?", "!", "'", "s", "n", "##'t", "do",
        "not", "don", "##n", "t", "##t", "ve", "re", "m", "##ing", "run", "é", "##é",
    ];
    let vocab: serde_json::Map<String, Value> =
        words.iter().enumerate().map(|(i, w)| (w.to_string(), json!(i))).collect();
    from_json(json!({
        "version": "1.0",
        "added_tokens": [added(0, "[PAD]", true), added(1, "[UNK]", true), added(2, "[CLS]", true), added(3, "[SEP]", true)],
        "normalizer": null,
        "pre_tokenizer": {"type": "BertPreTokenizer"},
        "post_processor": null,
        "decoder": {"type": "WordPiece", "prefix": "##", "cleanup": true},
        "model": {"type": "WordPiece", "unk_token": "[UNK]", "continuing_subword_prefix": "##",
                  "max_input_chars_per_word": 100, "vocab": vocab}
    }))
}

/// A word-level model under `decoder` (the decoders the window must refuse or handle alone).
fn word_level(decoder: Value) -> HfTokenizer {
    let words = ["<pad>", "|", "a", "b", "a</w>", "b</w>", "ab</w>", "▁", "▁a", "c", " ", "é"];
    let vocab: serde_json::Map<String, Value> =
        words.iter().enumerate().map(|(i, w)| (w.to_string(), json!(i))).collect();
    from_json(json!({
        "version": "1.0",
        "added_tokens": [added(0, "<pad>", true)],
        "normalizer": null,
        "pre_tokenizer": {"type": "Whitespace"},
        "post_processor": null,
        "decoder": decoder,
        "model": {"type": "WordLevel", "vocab": vocab, "unk_token": "<pad>"}
    }))
}

fn bpe_suffix() -> HfTokenizer {
    word_level(json!({"type": "BPEDecoder", "suffix": "</w>"}))
}

fn ctc() -> HfTokenizer {
    word_level(json!({"type": "CTC", "pad_token": "<pad>", "word_delimiter_token": "|", "cleanup": true}))
}

/// Every tokenizer of the test with its name.
fn all_tokenizers() -> Vec<(String, HfTokenizer)> {
    let mut all = fixture_tokenizers();
    all.push(("llama sentencepiece (byte fallback)".into(), llama_sentencepiece()));
    all.push(("bert wordpiece (cleanup)".into(), bert_wordpiece()));
    all.push(("bpe suffix decoder".into(), bpe_suffix()));
    all.push(("ctc".into(), ctc()));
    // Strips up to two leading spaces of the fused text: a context that is all spaces must be
    // widened, else the strip would reach into the new ids.
    let strip_two = json!({"type": "Sequence", "decoders": [
        {"type": "Replace", "pattern": {"String": "▁"}, "content": " "},
        {"type": "Fuse"},
        {"type": "Strip", "content": " ", "start": 2, "stop": 0}]});
    all.push(("strip two".into(), word_level(strip_two)));
    all
}

const TEXTS: [&str; 4] = [
    "the cat's wört: héllo, 你好 🙂 don't stop. Ça va? ok!",
    "é😀😀 a  b\tthe\n\nwhere ∑x² ≤ 3€",
    "  leading spaces and trailing  ",
    "wörd ünïcode ñ 日本語テキスト 🙂🙃",
];

/// Random ids: ordinary and special tokens, some outside the vocabulary (the decode skips them),
/// and pieces of encoded multi-byte texts (characters split over byte tokens).
fn id_sequences(tok: &HfTokenizer, rng: &mut Rng, count: usize) -> Vec<Vec<u32>> {
    let vocab = tok.vocab_size();
    let encoded: Vec<Vec<u32>> = TEXTS.iter().map(|t| tok.encode(t, false).expect("encode")).collect();
    let mut out: Vec<Vec<u32>> = encoded.clone();
    let specials: Vec<u32> = [tok.bos(), tok.eos(), tok.pad(), tok.unk()].iter().flatten().map(|t| t.id).collect();
    for _ in 0..count {
        let len = 1 + rng.below(48);
        let mut ids = Vec::with_capacity(len);
        while ids.len() < len {
            match rng.below(10) {
                0 => ids.push((vocab + rng.below(3)) as u32),
                1 if !specials.is_empty() => ids.push(specials[rng.below(specials.len())]),
                2 | 3 => {
                    let text = &encoded[rng.below(encoded.len())];
                    if !text.is_empty() {
                        let from = rng.below(text.len());
                        ids.extend(&text[from..(from + 1 + rng.below(6)).min(text.len())]);
                    }
                }
                _ => ids.push(rng.below(vocab) as u32),
            }
        }
        out.push(ids);
    }
    out
}

/// Stop strings for `text`: pieces of it (so they occur, often across tokens), their first
/// characters (prefixes that begin a stop), and strings that never occur.
fn stop_sets(text: &str, rng: &mut Rng) -> Vec<StopStrings> {
    let chars: Vec<char> = text.chars().collect();
    let piece = |rng: &mut Rng| -> String {
        if chars.is_empty() {
            return "zz".into();
        }
        let from = rng.below(chars.len());
        chars[from..(from + 1 + rng.below(5)).min(chars.len())].iter().collect()
    };
    let (a, b) = (piece(rng), piece(rng));
    let first: String = a.chars().take(1).collect();
    vec![
        StopStrings::default(),
        StopStrings::new([a.clone()]),
        StopStrings::new([b, "never occurs \u{1F9CA}".into()]),
        StopStrings::new([first, a]),
        StopStrings::new(["\n\n".to_string(), "é".to_string(), " ".to_string()]),
    ]
}

/// What a row's stream gives: the step its text first held a stop string (or none), and the text
/// printed (its chunks, then the finished row's tail).
fn run_stream(detok: &Detokenizer<'_>, ids: &[u32], stops: &StopStrings) -> (Option<usize>, String) {
    let mut stream = TextStream::default();
    let mut printed = String::new();
    for k in 1..=ids.len() {
        let chunk = stream.push(detok, &ids[..k], stops).expect("decode");
        printed.push_str(&chunk.text);
        if chunk.stop {
            printed.push_str(&stream.finish(&detok.decode(&ids[..k]).expect("decode"), stops));
            return (Some(k), printed);
        }
    }
    printed.push_str(&stream.finish(&detok.decode(ids).expect("decode"), stops));
    (None, printed)
}

#[test]
fn decoders_are_classified() {
    let modes: Vec<(String, DetokMode)> = all_tokenizers().iter().map(|(n, t)| (n.clone(), mode_of(t))).collect();
    let window = DetokMode::Window { byte_fallback: false };
    for (name, mode) in &modes {
        let want = match name.as_str() {
            "ctc" => DetokMode::Full,
            "llama sentencepiece (byte fallback)" => DetokMode::Window { byte_fallback: true },
            _ => window,
        };
        assert_eq!(*mode, want, "{name}");
    }
    let after_fuse = |d: Value| mode_of(&word_level(json!({"type": "Sequence", "decoders": [{"type": "Fuse"}, d]})));
    assert_eq!(after_fuse(json!({"type": "Replace", "pattern": {"String": "ab"}, "content": "x"})), DetokMode::Full);
    assert_eq!(
        after_fuse(json!({"type": "Metaspace", "replacement": "▁", "prepend_scheme": "always", "split": true})),
        DetokMode::Full
    );
    assert_eq!(after_fuse(json!({"type": "Strip", "content": " ", "start": 1, "stop": 1})), window);
}

/// At every step, the settled text so far and the step's tail are the full decode of the ids so
/// far; the settled text only grows.
#[test]
fn window_steps_rebuild_the_full_decode_at_every_step() {
    let mut rng = Rng::new(7);
    for (name, tok) in all_tokenizers() {
        let detok = Detokenizer::new(&tok);
        if detok.mode() == DetokMode::Full {
            continue;
        }
        for ids in id_sequences(&tok, &mut rng, 300) {
            let mut stream = DetokStream::default();
            let mut settled = String::new();
            for k in 1..=ids.len() {
                let Decoded::Append { settled: more, tail } = detok.step(&mut stream, &ids[..k]).expect("decode")
                else {
                    panic!("{name}: a window step gave a whole text");
                };
                settled.push_str(&more);
                let full = detok.decode(&ids[..k]).expect("decode");
                assert_eq!(format!("{settled}{tail}"), full, "{name}: ids {:?}", &ids[..k]);
            }
        }
    }
}

/// The window stream and the full-decode stream (the previous behaviour) stop at the same token,
/// and what the window stream prints is the finished text: the full decode cut before its first
/// stop string. (The full-decode stream may print text it later contradicts: a character before
/// a split one, later completing a stop string; a byte run whose text changes as it grows.)
#[test]
fn streams_print_the_full_decode_and_stop_where_the_full_decode_does() {
    let mut rng = Rng::new(11);
    let (mut compared, mut previous_differs) = (0, 0);
    for (name, tok) in all_tokenizers() {
        let window = Detokenizer::new(&tok);
        let full = Detokenizer::with_mode(&tok, DetokMode::Full);
        for ids in id_sequences(&tok, &mut rng, 150) {
            let text = full.decode(&ids).expect("decode");
            for stops in stop_sets(&text, &mut rng) {
                let (stop_w, printed_w) = run_stream(&window, &ids, &stops);
                let (stop_f, printed_f) = run_stream(&full, &ids, &stops);
                assert_eq!(stop_w, stop_f, "{name}: stop step, ids {ids:?}, {stops:?}");
                let end = stop_w.unwrap_or(ids.len());
                let finished = full.decode(&ids[..end]).expect("decode");
                assert_eq!(printed_w, stops.trim(&finished), "{name}: ids {ids:?}, {stops:?}");
                compared += 1;
                previous_differs += usize::from(printed_f != printed_w);
            }
        }
    }
    eprintln!("{compared} streams; the previous full-decode stream printed other text in {previous_differs}");
    assert!(compared > 5000, "only {compared} streams compared");
}

/// Hand-made cases: a character split over byte tokens prints only once whole; a stop string
/// spanning tokens stops at the token that completes it and is never printed; a held possible
/// start of a stop is printed once it cannot become one.
#[test]
fn split_characters_and_spanning_stops() {
    let tok = llama_sentencepiece();
    let detok = Detokenizer::new(&tok);
    let id = |t: &str| tok.token_to_id(t).expect(t);
    // "▁the" "▁" <0xE4> <0xBD> <0xA0> "!" : " the 你!" decoded "the 你!".
    let ids = [id("▁the"), id("▁"), id("<0xE4>"), id("<0xBD>"), id("<0xA0>"), id("!")];
    let none = StopStrings::default();
    let mut stream = TextStream::default();
    let chunks: Vec<String> = (1..=ids.len()).map(|k| stream.push(&detok, &ids[..k], &none).unwrap().text).collect();
    assert_eq!(chunks, ["the", " ", "", "", "", "你!"]);
    let stops = StopStrings::new(["e 你".to_string()]);
    let (stop, printed) = run_stream(&detok, &ids, &stops);
    assert_eq!((stop, printed.as_str()), (Some(5), "th"));
    // Once stopped, a stream prints nothing more (whatever tokens still come).
    let mut stream = TextStream::default();
    let stopped: Vec<_> = (1..=ids.len()).map(|k| stream.push(&detok, &ids[..k], &stops).unwrap()).collect();
    assert_eq!(stopped.iter().map(|c| c.stop).collect::<Vec<_>>(), [false, false, false, false, true, true]);
    assert_eq!(stopped.iter().map(|c| c.text.as_str()).collect::<String>(), "th");
    // An invalid byte run decodes as one U+FFFD per byte, and only once closed.
    let bad = [id("▁a"), id("<0xE4>"), id("<0x41>"), id("b")];
    assert_eq!(run_stream(&detok, &bad, &none).1, "a\u{FFFD}\u{FFFD}b");
    // Byte-level: the 4 bytes of an emoji over several tokens.
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures_data/llama3/tokenizer.json");
    let bl = HfTokenizer::from_file(root).unwrap();
    let ids = bl.encode("ok 🙂 ok", false).unwrap();
    let bl_detok = Detokenizer::new(&bl);
    let mut stream = TextStream::default();
    let mut printed = Vec::new();
    for k in 1..=ids.len() {
        let chunk = stream.push(&bl_detok, &ids[..k], &none).unwrap().text;
        assert!(!chunk.contains('\u{FFFD}'), "{chunk:?}");
        printed.push(chunk);
    }
    assert_eq!(printed.concat(), bl.decode(&ids, true).unwrap());
}

/// A stream over a decoder less local than the window assumes (here forced to the window: a
/// Replace across tokens after the fuse) notices its context's text changing and decodes every id
/// from then on: it still stops at the token the full decode stops at.
#[test]
fn a_stream_whose_context_changes_falls_back_to_the_full_decode() {
    let replace_across = json!({"type": "Sequence", "decoders": [
        {"type": "Fuse"},
        {"type": "Replace", "pattern": {"String": "ab"}, "content": "X"}]});
    let tok = word_level(replace_across);
    assert_eq!(mode_of(&tok), DetokMode::Full);
    let window = Detokenizer::with_mode(&tok, DetokMode::Window { byte_fallback: false });
    let full = Detokenizer::with_mode(&tok, DetokMode::Full);
    let mut rng = Rng::new(5);
    let mut fell_back = 0;
    for ids in id_sequences(&tok, &mut rng, 300) {
        let text = full.decode(&ids).expect("decode");
        for stops in stop_sets(&text, &mut rng) {
            assert_eq!(
                run_stream(&window, &ids, &stops).0,
                run_stream(&full, &ids, &stops).0,
                "ids {ids:?}, {stops:?}"
            );
        }
        let mut stream = DetokStream::default();
        let whole = (1..=ids.len()).any(|k| matches!(window.step(&mut stream, &ids[..k]), Ok(Decoded::Whole(_))));
        fell_back += usize::from(whole);
    }
    assert!(fell_back > 50, "only {fell_back} streams fell back");
}
