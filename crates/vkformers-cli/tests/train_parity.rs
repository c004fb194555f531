//! `vkformers train` and `vkformers eval` against transformers (references written by
//! tools/parity/train_reference.py): two Trainer steps (batch 2, no shuffle, constant lr 1e-3,
//! eps 1e-6, no weight decay, no clipping) give transformers' weights within 1e-5, and eval
//! gives its token-weighted loss and per-row losses (relative <= 1e-5).

mod common;

use std::process::Command;

use common::trainer_parity::{check_eval as check_eval_json, check_step_losses, check_two_step_weights, repo};
use common::trainer_parity::{decoder_first_step_grads, train_two_steps, vkformers};

fn rows_path() -> String {
    repo().join("tests/fixtures_train/rows.jsonl").display().to_string()
}

fn check_two_steps(name: &str) {
    let out = tempfile::tempdir().unwrap();
    let dir = repo().join("tests/fixtures").join(name);
    train_two_steps(dir.to_str().unwrap(), &rows_path(), out.path(), &[]);
    let refs = repo().join("tests/fixtures_train").join(name);
    let grads = decoder_first_step_grads(&dir, std::path::Path::new(&rows_path()));
    check_two_step_weights(name, &refs, out.path(), Some(&grads));
    // The metrics log the Trainer's losses.
    let eval: serde_json::Value = vkformers_io::read_json(refs.join("eval.json")).unwrap();
    check_step_losses(out.path(), &eval, name);
    // The output is a Hugging Face folder.
    for f in ["config.json", "model.safetensors", "generation_config.json"] {
        assert!(out.path().join(f).exists(), "{name}: {f} in the output");
    }
}

#[test]
fn two_train_steps_give_the_transformers_trainer_weights_llama() {
    check_two_steps("llama");
}

#[test]
fn two_train_steps_give_the_transformers_trainer_weights_gpt2() {
    check_two_steps("gpt2");
}

fn check_eval(name: &str) {
    let dir = repo().join("tests/fixtures").join(name);
    let args = ["eval", "--model", dir.to_str().unwrap(), "--data", &rows_path(), "--json", "--batch-size", "3"];
    let out = vkformers(&[&args[..], &["--fp32"]].concat());
    let got: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let want: serde_json::Value =
        vkformers_io::read_json(repo().join("tests/fixtures_train").join(name).join("eval.json")).unwrap();
    check_eval_json(name, &got, &want);
    assert!((got["perplexity"].as_f64().unwrap() - got["loss"].as_f64().unwrap().exp()).abs() < 1e-9 * 1e3);
}

#[test]
fn eval_loss_equals_transformers() {
    check_eval("llama");
    check_eval("gpt2");
}

/// `vkformers eval` of the llama fixture on a data file `name` holding `rows`: its error, after
/// checking it failed.
fn eval_error(name: &str, rows: &str) -> String {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join(name);
    std::fs::write(&data, rows).unwrap();
    let model = repo().join("tests/fixtures/llama");
    let out = Command::new(env!("CARGO_BIN_EXE_vkformers"))
        .args(["eval", "--model", model.to_str().unwrap(), "--data", data.to_str().unwrap()])
        .output()
        .unwrap();
    assert!(!out.status.success());
    String::from_utf8_lossy(&out.stderr).into_owned()
}

#[test]
fn a_bad_data_line_names_its_file_and_line() {
    let err = eval_error("bad.jsonl", "{\"input_ids\": [5, 6, 7]}\n{\"input_ids\": [5, \"x\"]}\n");
    assert!(err.contains("bad.jsonl:2"), "{err}");
}

#[test]
fn a_label_outside_the_vocabulary_is_an_error_naming_the_row() {
    let rows =
        "{\"input_ids\": [5, 6, 7], \"labels\": [5, 6, 7]}\n{\"input_ids\": [5, 6, 7], \"labels\": [-100, 6, 99999]}\n";
    let err = eval_error("labels.jsonl", rows);
    assert!(err.contains("row 2") && err.contains("label 99999"), "{err}");
}

#[test]
fn training_stops_when_the_loss_stops_being_finite() {
    let out = tempfile::tempdir().unwrap();
    let model = repo().join("tests/fixtures/llama");
    let o = Command::new(env!("CARGO_BIN_EXE_vkformers"))
        .args(["train", "--model", model.to_str().unwrap(), "--data", &rows_path(), "--out"])
        .args([out.path().to_str().unwrap(), "--max-steps", "4", "--batch-size", "2", "--lr", "1e30"])
        .args(["--schedule", "constant", "--max-grad-norm", "0", "--fp32"])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(!o.status.success(), "a diverged run must fail: {err}");
    assert!(err.contains("not finite"), "{err}");
    assert!(!out.path().join("model.safetensors").exists(), "no model saved from a diverged run");
}
