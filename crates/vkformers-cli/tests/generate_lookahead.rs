//! `generate --max-batch` runs the continuous-batching engine one decode step ahead of the host by
//! default; `VKFORMERS_DECODE_LOOKAHEAD=0` switches that off. Both give every row the same tokens
//! and finish reasons, greedy and seeded sampling with a repetition penalty, for prompts of
//! different lengths through fewer slots than prompts.

use std::path::PathBuf;
use std::process::Command;

use serde_json::Value;

fn cli_model() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures_generate/cli_model")
}

/// `generate --json` over `prompts` (an ids file) with `extra` flags; `lookahead` false sets
/// `VKFORMERS_DECODE_LOOKAHEAD=0`.
fn generate(prompts: &std::path::Path, extra: &[&str], lookahead: bool) -> Value {
    let m = cli_model();
    let mut args = vec!["generate", "--model", m.to_str().unwrap(), "--json", "--max-batch", "2"];
    args.extend(["--prompt-ids-file", prompts.to_str().unwrap()]);
    args.extend(extra);
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_vkformers"));
    cmd.args(&args).env_remove("VKFORMERS_DECODE_LOOKAHEAD");
    if !lookahead {
        cmd.env("VKFORMERS_DECODE_LOOKAHEAD", "0");
    }
    let out = cmd.output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    serde_json::from_slice(&out.stdout).unwrap()
}

#[test]
fn lookahead_on_and_off_give_the_same_rows() {
    let prompts = tempfile::NamedTempFile::new().unwrap();
    let rows = [
        "[1, 40, 50, 60]",
        "[1, 70]",
        "[1, 41, 42, 43, 44, 45, 46]",
        "[1, 9, 33]",
        "[1, 80, 81, 82, 83, 84, 85, 86, 87, 88, 89]",
    ];
    let text: String = rows.iter().map(|r| format!("{{\"input_ids\": {r}}}\n")).collect();
    std::fs::write(prompts.path(), text).unwrap();
    let rows_of = |v: &Value| -> Vec<(Value, Value)> {
        v["rows"].as_array().unwrap().iter().map(|r| (r["token_ids"].clone(), r["finish_reason"].clone())).collect()
    };
    let greedy = ["--max-new-tokens", "9", "--greedy"];
    let sampled = ["--max-new-tokens", "9", "--do-sample", "--temperature", "1.3", "--repetition-penalty", "1.3"];
    for extra in [&greedy[..], &sampled[..], &[&sampled[..], &["--seed", "7"]].concat()] {
        let (on, off) = (generate(prompts.path(), extra, true), generate(prompts.path(), extra, false));
        assert_eq!(rows_of(&on), rows_of(&off), "{extra:?}: lookahead on vs off");
        assert_eq!(rows_of(&on).len(), 5);
    }
}
