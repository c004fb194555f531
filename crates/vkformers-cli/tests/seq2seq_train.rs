//! `vkformers train` / `eval` on encoder-decoders against transformers (references written by
//! tools/parity/seq2seq_train_reference.py under tests/fixtures_train/seq2seq/): text pairs
//! tokenized as `tokenizer(source, text_target=target)`, two `Seq2SeqTrainer` steps on them for
//! the `t5` and `marian` fixtures (weights within 1e-5, the harness's ill-conditioned rule), and
//! eval on `{input_ids, labels}` rows equal to transformers' loss.

mod common;

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use common::trainer_parity::{
    check_eval, check_step_losses, check_two_step_weights, repo, seq2seq_first_step_grads, train_two_steps, vkformers,
};
use vkformers_data::{read_seq2seq_dataset, Seq2SeqRead};
use vkformers_io::HfTokenizer;

fn refs() -> PathBuf {
    repo().join("tests/fixtures_train/seq2seq")
}

fn fixture(name: &str) -> PathBuf {
    repo().join("tests/fixtures").join(name)
}

fn json(path: &Path) -> serde_json::Value {
    vkformers_io::read_json(path).unwrap()
}

/// The fixture's model folder with the reference's tokenizer beside it (as a Hub folder has).
fn model_with_tokenizer(name: &str) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    for f in ["config.json", "model.safetensors", "generation_config.json"] {
        std::fs::copy(fixture(name).join(f), dir.path().join(f)).unwrap();
    }
    for f in ["tokenizer.json", "tokenizer_config.json"] {
        std::fs::copy(refs().join(format!("{name}_tokenizer")).join(f), dir.path().join(f)).unwrap();
    }
    dir
}

fn langs(name: &str) -> Seq2SeqRead {
    match name {
        "marian" => {
            Seq2SeqRead { source_lang: Some("en".into()), target_lang: Some("de".into()), ..Default::default() }
        }
        _ => Seq2SeqRead::default(),
    }
}

/// Our first-step gradients (tokenized rows 0 and 1), by stored name.
fn first_step_grads(name: &str) -> HashMap<String, Vec<f32>> {
    seq2seq_first_step_grads("first-step gradients", &fixture(name), &tokenized_file(name), None)
}

/// The reference's tokenized rows (`{input_ids, labels}`, read without a tokenizer).
fn tokenized_file(name: &str) -> PathBuf {
    refs().join(format!("{name}_tokenized.jsonl"))
}

fn tokenized_rows(name: &str) -> Vec<vkformers_data::Example> {
    read_seq2seq_dataset(&[tokenized_file(name)], None, &Seq2SeqRead::default()).unwrap().examples
}

#[test]
fn text_pairs_tokenize_as_tokenizer_with_text_target() {
    for name in ["t5", "marian"] {
        let tok = HfTokenizer::from_dir(refs().join(format!("{name}_tokenizer"))).unwrap();
        let pairs = refs().join(format!("{name}_pairs.jsonl"));
        let ours = read_seq2seq_dataset(&[pairs], Some(&tok), &langs(name)).unwrap().examples;
        let want = tokenized_rows(name);
        assert_eq!(ours.len(), want.len(), "{name}");
        for (o, w) in ours.iter().zip(&want) {
            assert_eq!(o.input_ids, w.input_ids, "{name}: source ids");
            assert_eq!(o.decoder_labels, w.decoder_labels, "{name}: labels");
            assert!(o.labels.iter().all(|&l| l == -100), "{name}: the encoder has no targets");
        }
    }
}

fn check_text_pair_training(name: &str, extra: &[&str]) {
    let model = model_with_tokenizer(name);
    let out = tempfile::tempdir().unwrap();
    let pairs = refs().join(format!("{name}_pairs.jsonl"));
    train_two_steps(model.path().to_str().unwrap(), pairs.to_str().unwrap(), out.path(), extra);
    check_two_step_weights(name, &refs().join(name), out.path(), Some(&first_step_grads(name)));
    check_step_losses(out.path(), &json(&refs().join(name).join("eval.json")), name);
    for f in ["config.json", "model.safetensors", "generation_config.json", "tokenizer.json"] {
        assert!(out.path().join(f).exists(), "{name}: {f} in the output");
    }
}

#[test]
fn two_t5_steps_on_text_pairs_equal_the_seq2seq_trainer() {
    check_text_pair_training("t5", &[]);
}

#[test]
fn two_marian_steps_on_translation_rows_equal_the_seq2seq_trainer() {
    check_text_pair_training("marian", &["--source-lang", "en", "--target-lang", "de"]);
}

/// LoRA: `finetune --adapter` continuing the PEFT t5 adapter of tests/fixtures_lora/t5 for two
/// steps on the text pairs gives the adapter `Seq2SeqTrainer` trains on a `PeftModel` (PEFT's
/// saved names; the ill-conditioned rule reads the reference's first-step gradients only).
#[test]
fn two_lora_steps_on_text_pairs_equal_the_seq2seq_trainer_with_peft() {
    let model = model_with_tokenizer("t5");
    let out = tempfile::tempdir().unwrap();
    let pairs = refs().join("t5_pairs.jsonl");
    let adapter = repo().join("tests/fixtures_lora/t5");
    let mut args = vec!["finetune", "--model", model.path().to_str().unwrap(), "--adapter", adapter.to_str().unwrap()];
    args.extend(["--data", pairs.to_str().unwrap(), "--out", out.path().to_str().unwrap()]);
    args.extend(["--max-steps", "2", "--batch-size", "2", "--no-shuffle", "--schedule", "constant", "--lr", "1e-3"]);
    args.extend(["--eps", "1e-6", "--weight-decay", "0", "--max-grad-norm", "0", "--fp32"]);
    vkformers(&args);
    let got = out.path().join("adapter_model.safetensors");
    check_two_step_weights("t5 LoRA", &refs().join("t5_lora"), &got, None);
    check_step_losses(out.path(), &json(&refs().join("t5_lora/eval.json")), "t5 LoRA");
}

#[test]
fn eval_on_token_rows_equals_the_transformers_loss() {
    for name in ["t5", "marian"] {
        let rows = refs().join(format!("{name}_tokenized.jsonl"));
        let dir = fixture(name);
        let args = ["eval", "--model", dir.to_str().unwrap(), "--data", rows.to_str().unwrap(), "--json"];
        let out = vkformers(&[&args[..], &["--batch-size", "3", "--fp32"]].concat());
        let got: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        check_eval(name, &got, &json(&refs().join(name).join("eval.json")));
    }
}

#[test]
fn translation_rows_without_languages_are_refused_naming_the_flags() {
    let model = model_with_tokenizer("marian");
    let pairs = refs().join("marian_pairs.jsonl");
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_vkformers"))
        .args(["eval", "--model", model.path().to_str().unwrap(), "--data", pairs.to_str().unwrap()])
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("marian_pairs.jsonl:1") && err.contains("--source-lang"), "{err}");
}
