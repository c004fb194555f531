//! Paths and tokenizers shared by the tests.
#![allow(dead_code)]

use std::path::{Path, PathBuf};

use vkformers_io::HfTokenizer;

/// The repository root.
pub fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// A committed test data file of this crate.
pub fn data(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data").join(name)
}

/// A tokenizer of tests/fixtures_data (`bpe`, `chatml`, `plain`).
pub fn tokenizer(name: &str) -> HfTokenizer {
    HfTokenizer::from_dir(root().join("tests/fixtures_data").join(name)).unwrap()
}

/// Writes `text` to `dir/name` and returns the path.
pub fn write(dir: &Path, name: &str, text: &str) -> PathBuf {
    let path = dir.join(name);
    std::fs::write(&path, text).unwrap();
    path
}
