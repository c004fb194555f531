//! `vkformers train` / `eval` on encoders against transformers (references written by
//! tools/parity/encoder_train_reference.py under tests/fixtures_train/encoder/): the masked-LM
//! loss of pre-masked rows; two Trainer steps of a sequence classifier (weights within 1e-5,
//! the harness's ill-conditioned rule); the Trainer's step losses for multi-label, regression
//! and token classification; and a masked-LM checkpoint fine-tuned with a new head.

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;

use common::trainer_parity::{check_step_losses, check_two_step_weights, rel, repo, vkformers};
use vkformers_io::ModelWeights;
use vkformers_models::model::Model;
use vkformers_tensor::Graph;
use vkformers_train::{LanguageModel, TokenBatch};
use vkformers_vk::testing::on_every_device;

fn refs() -> PathBuf {
    repo().join("tests/fixtures_train/encoder")
}

fn fixture(name: &str) -> String {
    repo().join("tests/fixtures").join(name).display().to_string()
}

fn json(path: &Path) -> serde_json::Value {
    vkformers_io::read_json(path).unwrap()
}

/// The harness's two steps on `rows` of this folder's references.
fn train_two_steps(model: &str, rows: &str, out: &Path, extra: &[&str]) {
    let rows = refs().join(rows).display().to_string();
    common::trainer_parity::train_two_steps(model, &rows, out, extra);
}

#[test]
fn eval_on_pre_masked_rows_equals_the_transformers_masked_lm_loss() {
    let rows = refs().join("mlm_rows.jsonl").display().to_string();
    let out =
        vkformers(&["eval", "--model", &fixture("bert"), "--data", &rows, "--json", "--batch-size", "3", "--fp32"]);
    let got: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let want = json(&refs().join("bert_mlm_eval.json"));
    let (g, w) = (got["loss"].as_f64().unwrap(), want["loss"].as_f64().unwrap());
    assert!(rel(g, w) <= 1e-5, "masked-LM loss {g} vs transformers {w}");
    for (g, w) in got["rows"].as_array().unwrap().iter().zip(want["rows"].as_array().unwrap()) {
        assert!(rel(g["loss"].as_f64().unwrap(), w["loss"].as_f64().unwrap()) <= 1e-5, "row {g} vs {w}");
        assert_eq!(g["tokens"], w["tokens"]);
    }
}

/// Our first-step gradients (rows 0 and 1 of cls_rows), by stored name.
fn first_step_grads(model_dir: &str) -> std::collections::HashMap<String, Vec<f32>> {
    let grads = std::cell::RefCell::new(std::collections::HashMap::new());
    on_every_device("first-step gradients", |ctx| {
        let g = Graph::new(ctx);
        let m = Model::load(&g, Path::new(model_dir)).unwrap();
        let rows = vkformers_train::pretokenized::read_pretokenized(&[refs().join("cls_rows.jsonl")]).unwrap();
        let batch = TokenBatch::pad(&[&rows[0], &rows[1]], 0);
        let logits = m.logits(&g, &batch).unwrap();
        g.backward(&m.loss(&g, &logits, &batch).unwrap())?;
        *grads.borrow_mut() = m.hf_grads(&g).unwrap().into_iter().map(|h| (h.name, h.data)).collect();
        Ok(())
    });
    grads.into_inner()
}

#[test]
fn two_sequence_classification_steps_equal_the_transformers_trainer() {
    let out = tempfile::tempdir().unwrap();
    let model = fixture("bert_seqcls");
    train_two_steps(&model, "cls_rows.jsonl", out.path(), &["--task", "sequence-classification"]);
    check_two_step_weights("bert_seqcls", &refs().join("bert_seqcls"), out.path(), Some(&first_step_grads(&model)));
    check_step_losses(out.path(), &json(&refs().join("bert_seqcls/eval.json")), "bert_seqcls");
    let config = json(&out.path().join("config.json"));
    assert_eq!(config["architectures"][0], "BertForSequenceClassification");
}

/// LoRA on a classifier as PEFT's SEQ_CLS / TOKEN_CLS wrapper trains it (LoRA pairs on the
/// attention, the `classifier` trained in full and saved whole): from the reference's starting
/// adapter (`<fixture>_lora/init`), two steps equal PEFT + the Trainer's.
/// (`encoder_train_reference.py --check-lora OUT` loads a bert_seqcls one in PEFT and checks
/// its logits.)
fn lora_two_steps_equal_peft(fixture_name: &str, rows: &str, task_type: &str) {
    let out = tempfile::tempdir().unwrap();
    let rows = refs().join(rows).display().to_string();
    let refs = refs().join(format!("{fixture_name}_lora"));
    let init = refs.join("init").display().to_string();
    common::trainer_parity::run_two_steps("finetune", &fixture(fixture_name), &rows, out.path(), &["--adapter", &init]);
    let adapter = out.path().join("adapter_model.safetensors");
    let what = format!("{fixture_name} LoRA");
    check_two_step_weights(&what, &refs, &adapter, None);
    check_step_losses(out.path(), &json(&refs.join("lora.json")), &what);
    let config = json(&out.path().join("adapter_config.json"));
    assert_eq!(config["task_type"], task_type);
    assert_eq!(config["modules_to_save"], serde_json::json!(["classifier", "score"]));
}

#[test]
fn two_lora_sequence_classification_steps_equal_peft_and_the_trainer() {
    lora_two_steps_equal_peft("bert_seqcls", "cls_rows.jsonl", "SEQ_CLS");
}

#[test]
fn two_lora_token_classification_steps_equal_peft_and_the_trainer() {
    lora_two_steps_equal_peft("distilbert_tokcls", "tok_rows.jsonl", "TOKEN_CLS");
}

/// `finetune --task` on a masked-LM checkpoint: PEFT's SEQ_CLS adapter with the new classifier
/// saved whole (modules_to_save), LoRA pairs on the attention, and no pair inside the classifier.
#[test]
fn a_masked_lm_checkpoint_fine_tunes_with_lora_and_a_new_classifier() {
    let out = tempfile::tempdir().unwrap();
    let rows = refs().join("cls_rows.jsonl").display().to_string();
    let args = ["finetune", "--model", &fixture("bert"), "--data", &rows, "--out", out.path().to_str().unwrap()];
    let task = ["--max-steps", "1", "--batch-size", "2", "--task", "sequence-classification", "--num-labels", "3"];
    let o = vkformers(&[&args[..], &task[..]].concat());
    let err = String::from_utf8_lossy(&o.stderr);
    // BertForMaskedLM has no pooler: drawn, frozen as PEFT freezes it, and named.
    assert!(err.contains("bert.pooler.dense.weight") && err.contains("--modules-to-save"), "{err}");
    let config = json(&out.path().join("adapter_config.json"));
    assert_eq!(config["task_type"], "SEQ_CLS");
    let saved = ModelWeights::open_file(out.path().join("adapter_model.safetensors")).unwrap();
    assert_eq!(saved.info("base_model.model.classifier.weight").unwrap().shape, vec![3, 32]);
    assert!(saved.contains("base_model.model.classifier.bias"));
    assert!(saved.contains("base_model.model.bert.encoder.layer.0.attention.self.query.lora_A.weight"));
    assert!(!saved.names().any(|n| n.contains("classifier.lora_")), "no LoRA pair inside modules_to_save");
}

#[test]
fn eval_of_a_sequence_classifier_gives_the_transformers_loss_and_accuracy() {
    let rows = refs().join("cls_rows.jsonl").display().to_string();
    let out = vkformers(&["eval", "--model", &fixture("bert_seqcls"), "--data", &rows, "--json", "--fp32"]);
    let got: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let want = json(&refs().join("bert_seqcls/eval.json"));
    assert!(rel(got["loss"].as_f64().unwrap(), want["loss"].as_f64().unwrap()) <= 1e-5, "{got} vs {want}");
    assert_eq!(got["accuracy"].as_f64(), want["accuracy"].as_f64());
    assert_eq!(got["tokens"], 4, "one target a row");
}

#[test]
fn multi_label_regression_and_token_classification_steps_equal_the_trainer() {
    // Multi-label: bert_seqcls with problem_type multi_label_classification (BCE with logits).
    let multi = tempfile::tempdir().unwrap();
    for f in ["config.json", "model.safetensors"] {
        std::fs::copy(repo().join("tests/fixtures/bert_seqcls").join(f), multi.path().join(f)).unwrap();
    }
    let mut config = json(&multi.path().join("config.json"));
    config["problem_type"] = "multi_label_classification".into();
    std::fs::write(multi.path().join("config.json"), config.to_string()).unwrap();
    let cases = [
        (multi.path().display().to_string(), "multi_rows.jsonl", "multi_label.json"),
        (fixture("roberta_seqcls_regression"), "regression_rows.jsonl", "regression.json"),
        (fixture("distilbert_tokcls"), "tok_rows.jsonl", "tokcls.json"),
    ];
    for (model, rows, reference) in cases {
        let out = tempfile::tempdir().unwrap();
        train_two_steps(&model, rows, out.path(), &[]);
        check_step_losses(out.path(), &json(&refs().join(reference)), reference);
    }
    let rows = refs().join("tok_rows.jsonl").display().to_string();
    let out = vkformers(&["eval", "--model", &fixture("distilbert_tokcls"), "--data", &rows, "--json", "--fp32"]);
    let got: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let want = json(&refs().join("tokcls.json"));
    assert!(rel(got["loss"].as_f64().unwrap(), want["loss"].as_f64().unwrap()) <= 1e-5, "{got} vs {want}");
    // The reference is torch's float32 mean of the hits (2/23 rounded to f32): same hit count.
    let hits = |v: &serde_json::Value| v.as_f64().unwrap() * got["tokens"].as_f64().unwrap();
    assert_eq!(hits(&got["accuracy"]).round(), hits(&want["accuracy"]).round(), "{got} vs {want}");
    assert!((got["accuracy"].as_f64().unwrap() - want["accuracy"].as_f64().unwrap()).abs() < 1e-7);
    assert!(got["f1"].is_number(), "token classification reports F1: {got}");
}

#[test]
fn a_masked_lm_checkpoint_fine_tunes_with_a_new_classifier_head() {
    let out = tempfile::tempdir().unwrap();
    let rows = refs().join("cls_rows.jsonl").display().to_string();
    let o = Command::new(env!("CARGO_BIN_EXE_vkformers"))
        .args(["train", "--model", &fixture("bert"), "--data", &rows, "--out", out.path().to_str().unwrap()])
        .args(["--max-steps", "1", "--batch-size", "2", "--task", "sequence-classification", "--num-labels", "3"])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(o.status.success(), "{err}");
    assert!(err.contains("newly initialised") && err.contains("classifier.weight"), "{err}");
    assert!(err.contains("cls.predictions"), "the MLM head is named as left out: {err}");
    let config = json(&out.path().join("config.json"));
    assert_eq!(config["architectures"][0], "BertForSequenceClassification");
    assert_eq!(config["id2label"].as_object().unwrap().len(), 3);
    let saved = ModelWeights::open(out.path()).unwrap();
    assert_eq!(saved.info("classifier.weight").unwrap().shape, vec![3, 32]);
    assert!(!saved.contains("cls.predictions.bias"), "the old head is not saved");
    // The encoder's weights came from the checkpoint (one step of lr 5e-5 away from them).
    let base = ModelWeights::open(Path::new(&fixture("bert"))).unwrap();
    let name = "bert.encoder.layer.0.attention.self.query.weight";
    let (a, b) = (base.tensor_f32(name).unwrap(), saved.tensor_f32(name).unwrap());
    let d = a.iter().zip(&b).map(|(x, y)| (x - y).abs()).fold(0f32, f32::max);
    assert!(d > 0.0 && d <= 2.0 * 5e-5, "loaded from the checkpoint and trained: max |Δ| {d}");
}

/// The bert fixture with the WordPiece test tokenizer (its ids fit the fixture's vocabulary).
fn bert_with_tokenizer(dir: &Path) {
    for f in ["config.json", "model.safetensors"] {
        std::fs::copy(repo().join("tests/fixtures/bert").join(f), dir.join(f)).unwrap();
    }
    for f in ["tokenizer.json", "tokenizer_config.json"] {
        std::fs::copy(repo().join("tests/fixtures_data/wordpiece").join(f), dir.join(f)).unwrap();
    }
}

const SENTENCES: &str = "{\"text\": \"the cat sat on the mat. the dog ran to the big red house.\"}\n\
{\"text\": \"john lives in paris and was walking to london.\"}\n\
{\"text\": \"a very good movie, a very bad film. the small cat is in the house.\"}\n";

#[test]
fn mlm_probability_masks_text_rows_as_the_seeded_masking_draws_them() {
    let model = tempfile::tempdir().unwrap();
    bert_with_tokenizer(model.path());
    let data = model.path().join("text.jsonl");
    std::fs::write(&data, SENTENCES).unwrap();
    let (m, d) = (model.path().to_str().unwrap(), data.to_str().unwrap());
    let out =
        vkformers(&["eval", "--model", m, "--data", d, "--json", "--fp32", "--mlm-probability", "0.4", "--seed", "3"]);
    let got: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    // The same rows masked here (specials 0..5 never chosen), given pre-masked: the same loss.
    let tok = vkformers_io::HfTokenizer::from_dir(model.path()).unwrap();
    let opts = vkformers_data::ReadOptions { add_eos: false, ..Default::default() };
    let rows = vkformers_data::read_dataset(std::slice::from_ref(&data), &tok, &opts).unwrap().examples;
    let masking = vkformers_train::MlmMasking::new(0.4, 3, tok.vocab_size() as u32, (0..5).collect(), 3).unwrap();
    let masked = masking.mask_all(&rows);
    assert!(masked.iter().all(|r| r.labels.iter().zip(&r.input_ids).all(|(&l, _)| l == -100 || l >= 5)));
    let lines: String = masked
        .iter()
        .map(|r| serde_json::json!({"input_ids": r.input_ids, "labels": r.labels}).to_string() + "\n")
        .collect();
    let pre = model.path().join("masked.jsonl");
    std::fs::write(&pre, lines).unwrap();
    let out = vkformers(&["eval", "--model", m, "--data", pre.to_str().unwrap(), "--json", "--fp32"]);
    let want: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(got["tokens"], want["tokens"]);
    assert!(rel(got["loss"].as_f64().unwrap(), want["loss"].as_f64().unwrap()) <= 1e-6, "{got} vs {want}");
    // Training masks each batch as it is drawn: two steps run and say so.
    let trained = tempfile::tempdir().unwrap();
    let o = Command::new(env!("CARGO_BIN_EXE_vkformers"))
        .args(["train", "--model", m, "--data", d, "--out", trained.path().to_str().unwrap(), "--max-steps", "2"])
        .args(["--batch-size", "3", "--mlm-probability", "0.3", "--fp32"])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(o.status.success() && err.contains("0.3 of the tokens masked"), "{err}");
    assert_eq!(json(&trained.path().join("config.json"))["architectures"][0], "BertForMaskedLM");
}

#[test]
fn classify_gives_the_text_classification_pipeline_scores() {
    let want = json(&refs().join("classify.json"));
    for (variant, problem) in [("single", None), ("multi", Some("multi_label_classification"))] {
        let model = tempfile::tempdir().unwrap();
        for f in ["config.json", "model.safetensors"] {
            std::fs::copy(repo().join("tests/fixtures/bert_seqcls").join(f), model.path().join(f)).unwrap();
        }
        for f in ["tokenizer.json", "tokenizer_config.json"] {
            std::fs::copy(repo().join("tests/fixtures_data/wordpiece").join(f), model.path().join(f)).unwrap();
        }
        if let Some(p) = problem {
            let mut config = json(&model.path().join("config.json"));
            config["problem_type"] = p.into();
            std::fs::write(model.path().join("config.json"), config.to_string()).unwrap();
        }
        let inputs = want["inputs"].as_array().unwrap();
        for (input, expected) in inputs.iter().zip(want[variant].as_array().unwrap()) {
            let mut args = vec!["classify", "--model", model.path().to_str().unwrap(), "--json", "--dtype", "float32"];
            args.extend(["--text", input[0].as_str().unwrap()]);
            if let Some(pair) = input[1].as_str() {
                args.extend(["--text-pair", pair]);
            }
            let out = vkformers(&args);
            let got: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
            let (got, expected) = (got[0].as_array().unwrap(), expected.as_array().unwrap());
            assert_eq!(got.len(), expected.len(), "{variant}: every label");
            for (g, w) in got.iter().zip(expected) {
                assert_eq!(g["label"], w["label"], "{variant} {input}: order of the labels");
                let (a, b) = (g["score"].as_f64().unwrap(), w["score"].as_f64().unwrap());
                assert!(rel(a, b) <= 1e-5, "{variant} {input}: {} score {a} vs the pipeline's {b}", g["label"]);
            }
        }
    }
}

/// A token classifier: the token-classification pipeline's entities (tools/parity/
/// token_classify_reference.py: `distilbert_tokcls` with the WordPiece tokenizer, labels O and
/// B-/I-PER/LOC, tokens labelled O and special tokens left out).
#[test]
fn classify_gives_the_token_classification_pipeline_entities() {
    let want = json(&refs().join("classify_tokens.json"));
    let model = tempfile::tempdir().unwrap();
    std::fs::copy(
        repo().join("tests/fixtures/distilbert_tokcls/model.safetensors"),
        model.path().join("model.safetensors"),
    )
    .unwrap();
    for f in ["tokenizer.json", "tokenizer_config.json"] {
        std::fs::copy(repo().join("tests/fixtures_data/wordpiece").join(f), model.path().join(f)).unwrap();
    }
    let mut config = json(&repo().join("tests/fixtures/distilbert_tokcls/config.json"));
    config["id2label"] = want["id2label"].clone();
    config["label2id"] = serde_json::Value::Object(
        want["id2label"]
            .as_object()
            .unwrap()
            .iter()
            .map(|(k, v)| (v.as_str().unwrap().to_string(), k.parse::<u64>().unwrap().into()))
            .collect(),
    );
    std::fs::write(model.path().join("config.json"), config.to_string()).unwrap();
    let mut args = vec!["classify", "--model", model.path().to_str().unwrap(), "--json", "--dtype", "float32"];
    for t in want["texts"].as_array().unwrap() {
        args.extend(["--text", t.as_str().unwrap()]);
    }
    let out = vkformers(&args);
    let got: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    for (g, w) in got.as_array().unwrap().iter().zip(want["entities"].as_array().unwrap()) {
        let (g, w) = (g.as_array().unwrap(), w.as_array().unwrap());
        assert_eq!(g.len(), w.len(), "entities {g:?} vs the pipeline's {w:?}");
        for (a, b) in g.iter().zip(w) {
            for k in ["entity", "index", "word", "start", "end"] {
                assert_eq!(a[k], b[k], "{k} of {a} vs the pipeline's {b}");
            }
            let (x, y) = (a["score"].as_f64().unwrap(), b["score"].as_f64().unwrap());
            assert!(rel(x, y) <= 1e-5, "{} score {x} vs the pipeline's {y}", a["word"]);
        }
    }
}

#[test]
fn lora_finetunes_an_encoder_on_its_masked_lm_loss() {
    let out = tempfile::tempdir().unwrap();
    let rows = refs().join("mlm_rows.jsonl").display().to_string();
    vkformers(&[
        "finetune",
        "--model",
        &fixture("bert"),
        "--data",
        &rows,
        "--out",
        out.path().to_str().unwrap(),
        "--max-steps",
        "2",
        "--batch-size",
        "2",
        "--no-shuffle",
        "--lora-rank",
        "4",
        "--target-modules",
        "query,value,dense",
        "--fp32",
    ]);
    let adapter = ModelWeights::open_file(out.path().join("adapter_model.safetensors")).unwrap();
    let names: Vec<&str> = adapter.names().collect();
    for module in ["attention.self.query", "attention.self.value", "cls.predictions.transform.dense"] {
        assert!(names.iter().any(|n| n.contains(module) && n.contains("lora_A")), "{module} adapted: {names:?}");
    }
    // B starts at zero: the first step's loss is the base model's masked-LM loss of rows 0 and 1.
    let want = json(&refs().join("bert_mlm_eval.json"));
    let r = want["rows"].as_array().unwrap();
    let l = |i: usize| r[i]["loss"].as_f64().unwrap();
    let n = |i: usize| r[i]["tokens"].as_f64().unwrap();
    let first = (l(0) * n(0) + l(1) * n(1)) / (n(0) + n(1));
    let metrics = std::fs::read_to_string(out.path().join("metrics.jsonl")).unwrap();
    let step1: serde_json::Value = serde_json::from_str(metrics.lines().next().unwrap()).unwrap();
    assert!(rel(step1["loss"].as_f64().unwrap(), first) <= 1e-5, "step 1 loss {step1} vs {first}");
}

#[test]
fn roberta_rows_are_cut_to_the_positions_its_offset_ids_leave() {
    // max_position_embeddings 66 and padding_idx 1: position ids 2..=65, so 64 tokens fit.
    let tmp = tempfile::tempdir().unwrap();
    let ids: Vec<u32> = (0..70).map(|i| 5 + i % 100).collect();
    let mut labels = vec![-100i64; 70];
    labels[3] = 9;
    let rows = tmp.path().join("long.jsonl");
    std::fs::write(&rows, serde_json::json!({"input_ids": ids, "labels": labels}).to_string() + "\n").unwrap();
    let o = Command::new(env!("CARGO_BIN_EXE_vkformers"))
        .args(["eval", "--model", &fixture("roberta"), "--data", rows.to_str().unwrap(), "--json", "--fp32"])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(o.status.success(), "{err}");
    assert!(err.contains("--seq-len 64"), "cut to 64 tokens: {err}");
}
