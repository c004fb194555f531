//! Training the demo's byte-level BPE tokenizer: loadable, round-tripping, deterministic.

use std::path::{Path, PathBuf};

use vkformers_data::{train_bpe_tokenizer, DataError};
use vkformers_io::HfTokenizer;

/// This crate's own sources: a small corpus that is always there.
fn corpus() -> Vec<PathBuf> {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files: Vec<PathBuf> = std::fs::read_dir(src).unwrap().map(|e| e.unwrap().path()).collect();
    files.sort();
    files
}

#[test]
fn trained_tokenizer_loads_and_round_trips() {
    let dir = tempfile::tempdir().unwrap();
    train_bpe_tokenizer(&corpus(), 600, dir.path()).unwrap();
    let tok = HfTokenizer::from_dir(dir.path()).unwrap();
    assert_eq!(tok.vocab_size(), 600);
    assert_eq!(tok.bos().unwrap().id, 0);
    assert_eq!(tok.eos().unwrap().id, 1);
    assert_eq!(tok.pad().unwrap().id, 2);
    assert_eq!(tok.unk().unwrap().id, 3);
    let text = "pub fn read_dataset(files: &[PathBuf]) -> Result<Dataset> { ünïcode ✓ }";
    let ids = tok.encode(text, true).unwrap();
    assert_eq!(ids[0], 0, "BOS first: {ids:?}");
    let code = "pub fn read_dataset(files: &[PathBuf], tok: &HfTokenizer) -> Result<Dataset>";
    let n = tok.encode(code, false).unwrap().len();
    assert!(n * 2 < code.len(), "merges learned from the corpus shorten its code: {n} ids for {} bytes", code.len());
    assert_eq!(tok.decode(&ids, true).unwrap(), text);
    // Special tokens written in text are single tokens.
    assert_eq!(tok.encode("a</s>", false).unwrap().last(), Some(&1));
    assert!(tok.config().chat_template.is_some());
    assert_eq!(tok.config().raw["model_max_length"], 2048);
}

#[test]
fn training_is_deterministic() {
    let (a, b) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    train_bpe_tokenizer(&corpus(), 500, a.path()).unwrap();
    train_bpe_tokenizer(&corpus(), 500, b.path()).unwrap();
    for name in ["tokenizer.json", "tokenizer_config.json"] {
        let x = std::fs::read(a.path().join(name)).unwrap();
        let y = std::fs::read(b.path().join(name)).unwrap();
        assert!(x == y, "{name} differs between two trainings on the same files");
    }
}

#[test]
fn bad_inputs_are_errors() {
    let dir = tempfile::tempdir().unwrap();
    let e = train_bpe_tokenizer(&corpus(), 100, dir.path()).unwrap_err();
    assert!(matches!(e, DataError::TrainTokenizer(_)) && e.to_string().contains("260"), "{e}");
    let e = train_bpe_tokenizer(&[dir.path().join("nope.txt")], 300, dir.path()).unwrap_err();
    assert!(matches!(e, DataError::FileNotFound { .. }), "{e}");
    assert!(!dir.path().join("tokenizer.json").exists());
}
