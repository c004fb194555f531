//! Two profiled steps of `vkformers train` on a tiny fixture, for the tests that count a step's
//! dispatches in `--profile`'s per-kernel table (train_casts, train_packed).

use std::path::Path;
use std::process::Command;

use super::trainer_parity::repo;

/// Runs `vkformers train` on `tests/fixtures_train/rows.jsonl` for two steps (batch 2, in
/// order, constant lr 1e-3, no clipping) with `--profile`, the model `source` names
/// (`--model DIR` or `--init-from-config FILE`), then `args`, into `out`, every product on the
/// GEMM as in a real batch (`VKFORMERS_GEMV_MAX_ROWS=0`: a few rows take the GEMV) and the
/// extra environment `env`. Fails the test, naming the run `what`, unless it succeeds; returns
/// its stdout and stderr.
pub fn train_two_profiled_steps(
    source: &[&str],
    args: &[&str],
    env: &[(&str, &str)],
    out: &Path,
    what: &str,
) -> String {
    let data = repo().join("tests/fixtures_train/rows.jsonl");
    let o = Command::new(env!("CARGO_BIN_EXE_vkformers"))
        .arg("train")
        .args(source)
        .args(["--data", &data.display().to_string()])
        .args(["--out", &out.display().to_string(), "--max-steps", "2", "--batch-size", "2", "--no-shuffle"])
        .args(["--schedule", "constant", "--lr", "1e-3", "--max-grad-norm", "0", "--profile"])
        .args(args)
        .env("VKFORMERS_GEMV_MAX_ROWS", "0")
        .envs(env.iter().copied())
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&o.stdout).to_string() + &String::from_utf8_lossy(&o.stderr);
    assert!(o.status.success(), "vkformers train {what}: {text}");
    text
}

/// The rows of `--profile`'s per-kernel table in `text` whose kernel starts with one of
/// `prefixes`: (kernel, calls a step), in the table's order.
pub fn profile_rows(text: &str, prefixes: &[&str]) -> Vec<(String, f64)> {
    text.lines()
        .filter(|l| prefixes.iter().any(|p| l.starts_with(p)))
        .map(|l| {
            let mut cols = l.split_whitespace();
            let name = cols.next().unwrap().to_string();
            (name, cols.next().unwrap().parse().unwrap())
        })
        .collect()
}
