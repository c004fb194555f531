//! Running `vkformers generate --json` from a test.

use std::path::Path;
use std::process::Command;

use serde_json::Value;

/// `vkformers generate --json --greedy --max-new-tokens 4` on `model` over the id prompts of
/// `ids_jsonl` (one `{"input_ids": [...]}` a line), with `extra` flags: its JSON, after checking
/// it succeeded.
pub fn greedy_ids_json(model: &Path, ids_jsonl: &str, extra: &[&str]) -> Value {
    let ids = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(ids.path(), ids_jsonl).unwrap();
    let mut args = vec!["generate", "--model", model.to_str().unwrap(), "--json", "--max-new-tokens", "4"];
    args.extend(["--greedy", "--prompt-ids-file", ids.path().to_str().unwrap()]);
    args.extend(extra);
    let out = Command::new(env!("CARGO_BIN_EXE_vkformers")).args(&args).output().unwrap();
    assert!(out.status.success(), "vkformers {args:?}: {}", String::from_utf8_lossy(&out.stderr));
    serde_json::from_slice(&out.stdout).unwrap()
}
