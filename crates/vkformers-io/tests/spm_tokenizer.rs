//! A DeBERTa-v3 folder with only `spm.model` (tests/fixtures_data/deberta_v3_spm, a tiny Unigram
//! model from tools/parity/make_spm_fixture.py): the tokenizer built from the proto gives the
//! ids of transformers' DebertaV2TokenizerFast (`expected.json`) for single texts with and
//! without special tokens and for pairs (ids and token types): unicode, runs of spaces, tabs
//! and newlines, unknown characters, special tokens inside the text.

use std::path::PathBuf;

use vkformers_io::spm::SpmModel;
use vkformers_io::HfTokenizer;

fn dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures_data/deberta_v3_spm")
}

fn ids(v: &serde_json::Value) -> Vec<u32> {
    v.as_array().unwrap().iter().map(|x| x.as_u64().unwrap() as u32).collect()
}

#[test]
fn spm_model_tokenizer_equals_transformers_deberta_v2() {
    assert!(!dir().join("tokenizer.json").exists(), "the fixture must ship spm.model alone");
    let tok = HfTokenizer::from_dir(dir()).unwrap();
    let want = vkformers_io::read_json(dir().join("expected.json")).unwrap();
    for (key, special) in [("single", true), ("no_special", false)] {
        for case in want[key].as_array().unwrap() {
            let text = case["text"].as_str().unwrap();
            assert_eq!(tok.encode(text, special).unwrap(), ids(&case["ids"]), "{key}: {text:?}");
        }
    }
    for case in want["pairs"].as_array().unwrap() {
        let (a, b) = (case["text"].as_str().unwrap(), case["text_pair"].as_str().unwrap());
        let e = tok.inner().encode((a, b), true).unwrap();
        assert_eq!(e.get_ids(), ids(&case["ids"]).as_slice(), "pair {a:?} / {b:?}");
        assert_eq!(e.get_type_ids(), ids(&case["token_type_ids"]).as_slice(), "pair types {a:?} / {b:?}");
    }
    // The special tokens resolve to the model's pieces (DeBERTa-v3's layout).
    assert_eq!(tok.token_to_id("[PAD]"), Some(0));
    assert_eq!(tok.token_to_id("[CLS]"), Some(1));
    assert_eq!(tok.token_to_id("[UNK]"), Some(3));
}

#[test]
fn the_proto_reader_finds_every_piece_and_the_unknown_id() {
    let m = SpmModel::read(&dir().join("spm.model")).unwrap();
    assert_eq!(m.model_type, 1, "Unigram");
    assert_eq!(m.unk_id, 3);
    assert_eq!(m.pieces[3].kind, 2, "[UNK] is the unknown piece");
    assert_eq!(m.pieces[4].piece, "[MASK]");
    assert_eq!(m.pieces[4].kind, 4, "[MASK] is user-defined");
    assert!(m.pieces[5..].iter().all(|p| p.kind == 1 && p.score < 0.0), "normal pieces carry log-probabilities");
    assert!(SpmModel::parse(b"\x0a\xff").is_err(), "a truncated proto is an error");
}
