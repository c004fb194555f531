//! The cast dispatches of a mixed-precision training step, from `vkformers train --profile`'s
//! per-kernel table: the tiny Llama (2 layers) under `--bf16` / `--fp16`, its products on the
//! GEMM (`VKFORMERS_GEMV_MAX_ROWS=0`, as every product of a real batch runs; the GEMV of a
//! few rows reads f32 activations). Attention hands 16-bit tensors to its neighbours (o to
//! o_proj, dq / dk to RoPE's backward, dv to v's product): no widening cast is left in a step,
//! and the trained weights are bit for bit those of `VKFORMERS_ATTN_CASTS=1` (the casts as
//! before: 4 widenings a layer).

use std::path::{Path, PathBuf};
use std::process::Command;

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// Runs two steps of `vkformers train --profile` in `dtype` with the extra environment `env`;
/// returns the profile's `cast/` rows (kernel, calls a step) and the saved weights' bytes.
fn train(dtype: &str, env: &[(&str, &str)], out: &Path) -> (Vec<(String, f64)>, Vec<u8>) {
    let (model, data) = (repo().join("tests/fixtures/llama"), repo().join("tests/fixtures_train/rows.jsonl"));
    let o = Command::new(env!("CARGO_BIN_EXE_vkformers"))
        .args(["train", "--model", &model.display().to_string(), "--data", &data.display().to_string()])
        .args(["--out", &out.display().to_string(), "--max-steps", "2", "--batch-size", "2", "--no-shuffle"])
        .args(["--schedule", "constant", "--lr", "1e-3", "--max-grad-norm", "0", &format!("--{dtype}"), "--profile"])
        .env("VKFORMERS_GEMV_MAX_ROWS", "0")
        .envs(env.iter().copied())
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&o.stdout).to_string() + &String::from_utf8_lossy(&o.stderr);
    assert!(o.status.success(), "vkformers train --{dtype}: {text}");
    let mut casts: Vec<(String, f64)> = text
        .lines()
        .filter(|l| l.starts_with("cast/"))
        .map(|l| {
            let mut cols = l.split_whitespace();
            let name = cols.next().unwrap().to_string();
            (name, cols.next().unwrap().parse().unwrap())
        })
        .collect();
    casts.sort_by(|a, b| a.0.cmp(&b.0)); // the table is ordered by time
    (casts, std::fs::read(out.join("model.safetensors")).unwrap())
}

#[test]
fn a_mixed_precision_step_widens_nothing_around_attention() {
    for (dtype, short) in [("bf16", "bf16"), ("fp16", "f16")] {
        let (direct, before) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
        let (casts, weights) = train(dtype, &[], direct.path());
        let (casts_before, weights_before) = train(dtype, &[("VKFORMERS_ATTN_CASTS", "1")], before.path());
        assert!(weights == weights_before, "--{dtype}: trained weights differ from VKFORMERS_ATTN_CASTS=1's");
        // To 16 bits, a step on average (the first casts the weights): per layer v for
        // attention, and the 16-bit copies of the products' incoming gradients (dO among them).
        let to = format!("cast/cast4:to_{short}");
        assert_eq!(casts, vec![(to.clone(), 12.5)], "--{dtype}: the cast dispatches of a step");
        // Before: o widened after attention, dq, dk and dv after its backward, in each layer.
        let from = format!("cast/cast4:from_{short}");
        assert_eq!(casts_before, vec![(from, 8.0), (to, 12.5)], "--{dtype}: the casts with VKFORMERS_ATTN_CASTS=1");
    }
}
