//! Helpers shared by the generate crate's integration tests (each test binary uses only some).
#![allow(dead_code)]

use std::path::{Path, PathBuf};

use vkformers_generate::beam::{BeamOptions, EarlyStopping};

/// The model fixtures: `$VKFORMERS_FIXTURES`, else the repository's `tests/fixtures`.
pub fn fixtures_root() -> PathBuf {
    std::env::var_os("VKFORMERS_FIXTURES")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures"))
}

/// A JSON reference file, parsed (a missing one panics naming it).
pub fn json(path: &Path) -> serde_json::Value {
    serde_json::from_str(&std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))).unwrap()
}

/// A JSON array of token ids.
pub fn ids(v: &serde_json::Value) -> Vec<u32> {
    v.as_array().unwrap().iter().map(|t| t.as_u64().unwrap() as u32).collect()
}

/// The beam options of a reference run's `options` (`early_stopping` true, false or "never").
pub fn beam_options(o: &serde_json::Value) -> BeamOptions {
    let early = match &o["early_stopping"] {
        serde_json::Value::Bool(true) => EarlyStopping::True,
        serde_json::Value::Bool(false) => EarlyStopping::False,
        _ => EarlyStopping::Never,
    };
    let u = |k: &str| o[k].as_u64().unwrap() as usize;
    BeamOptions {
        num_beams: u("num_beams"),
        length_penalty: o["length_penalty"].as_f64().unwrap(),
        early_stopping: early,
        no_repeat_ngram_size: u("no_repeat_ngram_size"),
        num_return_sequences: u("num_return_sequences"),
    }
}
