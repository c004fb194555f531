//! The Trainer-parity harness shared by the CLI's training tests (train_parity, encoder_train,
//! seq2seq_train): `vkformers train` for two steps with the settings the references ran the
//! transformers Trainer with, then the weights against the Trainer's and the logged losses
//! against its.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::Command;

use vkformers_data::{read_seq2seq_dataset, Seq2SeqRead};
use vkformers_io::ModelWeights;
use vkformers_models::decoder::{causal_lm_loss, forward, Batch};
use vkformers_models::model::Model;
use vkformers_tensor::{DType, Graph};
use vkformers_train::{LanguageModel, TokenBatch};
use vkformers_vk::testing::on_every_device;

pub fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// Runs the CLI, failing the test with its stderr when it fails.
pub fn vkformers(args: &[&str]) -> std::process::Output {
    let out = Command::new(env!("CARGO_BIN_EXE_vkformers")).args(args).output().unwrap();
    assert!(out.status.success(), "vkformers {args:?}: {}", String::from_utf8_lossy(&out.stderr));
    out
}

pub fn rel(a: f64, b: f64) -> f64 {
    (a - b).abs() / b.abs()
}

/// AdamW's eps and the learning rate of the references' two steps.
pub const EPS: f64 = 1e-6;
pub const LR: f64 = 1e-3;

/// `train` for two steps as the Trainer ran them (batch 2, in order, constant lr 1e-3, eps
/// 1e-6, no decay, no clipping, f32), into `out`.
pub fn train_two_steps(model: &str, rows: &str, out: &Path, extra: &[&str]) {
    run_two_steps("train", model, rows, out, extra);
}

/// [`train_two_steps`] with another subcommand taking train's options (`finetune`).
pub fn run_two_steps(command: &str, model: &str, rows: &str, out: &Path, extra: &[&str]) {
    let mut args = vec![command, "--model", model, "--data", rows, "--out", out.to_str().unwrap()];
    args.extend(["--max-steps", "2", "--batch-size", "2", "--no-shuffle", "--schedule", "constant", "--lr", "1e-3"]);
    args.extend(["--eps", "1e-6", "--weight-decay", "0", "--max-grad-norm", "0", "--fp32"]);
    args.extend(extra);
    vkformers(&args);
}

/// The weights of `got` (a folder `train` wrote, or a safetensors file) against the Trainer's
/// after two steps (`refs/step2.safetensors`): within 1e-5, except elements whose first-step
/// gradient (`refs/grad1.safetensors`, or ours where the reference's is exactly 0, when given) is
/// non-zero but below AdamW's eps: that gradient is rounding noise which AdamW scales by 1/eps,
/// so those are held to Adam's step bound (|Δ| <= 2 steps of 2·lr), as the parity harness does.
pub fn check_two_step_weights(what: &str, refs: &Path, got: &Path, ours_grad: Option<&HashMap<String, Vec<f32>>>) {
    let want = ModelWeights::open_file(refs.join("step2.safetensors")).unwrap();
    let ref_grad = ModelWeights::open_file(refs.join("grad1.safetensors")).unwrap();
    let got = if got.is_file() { ModelWeights::open_file(got) } else { ModelWeights::open(got) }.unwrap();
    let gap = weight_gap(what, &want, &got, |n| {
        let gr = ref_grad.tensor_f32(n).unwrap();
        let go = ours_grad.map(|m| m.get(n).unwrap_or_else(|| panic!("{what}: no gradient of ours for {n}")));
        (0..gr.len()).map(|i| below_eps(gr[i]) || (gr[i] == 0.0 && go.is_some_and(|go| below_eps(go[i])))).collect()
    });
    let WeightGap { worst, ill, ill_worst } = gap;
    eprintln!("{what}: two train steps: max |Δ| {worst:.3e}; {ill} ill-conditioned elements, max |Δ| {ill_worst:.3e}");
    assert!(worst <= 1e-5, "{what}: weights after two steps differ by {worst}");
    assert!(ill_worst <= 2.0 * 2.0 * LR, "{what}: ill-conditioned elements beyond two Adam steps: {ill_worst}");
}

/// Whether a first-step gradient is non-zero but below AdamW's eps: rounding noise that AdamW
/// scales by 1/eps, so its element is held to Adam's step bound only.
pub fn below_eps(g: f32) -> bool {
    g != 0.0 && f64::from(g.abs()) < EPS
}

/// How far two sets of weights are apart: the largest |Δ| of the well-conditioned elements, and
/// the count and largest |Δ| of the ill-conditioned ones.
pub struct WeightGap {
    pub worst: f64,
    pub ill: usize,
    pub ill_worst: f64,
}

/// [`WeightGap`] of `got` against `want`, tensor by tensor of `want`; `ill(name)` marks the
/// ill-conditioned elements of a tensor.
pub fn weight_gap(what: &str, want: &ModelWeights, got: &ModelWeights, ill: impl Fn(&str) -> Vec<bool>) -> WeightGap {
    let mut gap = WeightGap { worst: 0.0, ill: 0, ill_worst: 0.0 };
    for n in want.names() {
        let (w, o, ill) = (want.tensor_f32(n).unwrap(), got.tensor_f32(n).unwrap(), ill(n));
        assert_eq!(w.len(), o.len(), "{what}: {n}");
        for i in 0..w.len() {
            let d = (f64::from(w[i]) - f64::from(o[i])).abs();
            if ill[i] {
                gap.ill += 1;
                gap.ill_worst = gap.ill_worst.max(d);
            } else {
                gap.worst = gap.worst.max(d);
            }
        }
    }
    gap
}

/// The step losses of `out/metrics.jsonl` against the Trainer's (`trainer_step_losses`).
pub fn check_step_losses(out: &Path, want: &serde_json::Value, what: &str) {
    let metrics = std::fs::read_to_string(out.join("metrics.jsonl")).unwrap();
    let want = want["trainer_step_losses"].as_array().unwrap();
    assert_eq!(metrics.lines().count(), want.len(), "{what}: steps");
    for (line, w) in metrics.lines().zip(want) {
        let v: serde_json::Value = serde_json::from_str(line).unwrap();
        let (a, b) = (v["loss"].as_f64().unwrap(), w.as_f64().unwrap());
        assert!(rel(a, b) <= 1e-5, "{what}: step loss {a} vs transformers {b}");
    }
}

/// `eval --json` against a reference's `loss`, `tokens` and `rows` (relative 1e-5).
pub fn check_eval(what: &str, got: &serde_json::Value, want: &serde_json::Value) {
    let f = |v: &serde_json::Value| v.as_f64().unwrap();
    assert!(rel(f(&got["loss"]), f(&want["loss"])) <= 1e-5, "{what}: eval loss {} vs {}", got["loss"], want["loss"]);
    assert_eq!(got["tokens"], want["tokens"], "{what}");
    let (g_rows, w_rows) = (got["rows"].as_array().unwrap(), want["rows"].as_array().unwrap());
    assert_eq!(g_rows.len(), w_rows.len(), "{what}");
    for (g, w) in g_rows.iter().zip(w_rows) {
        assert!(rel(f(&g["loss"]), f(&w["loss"])) <= 1e-5, "{what}: row loss {} vs {}", g["loss"], w["loss"]);
        assert_eq!(g["tokens"], w["tokens"], "{what}");
    }
}

/// Our gradient of the first step's batch (rows 0 and 1 of `rows`) of the decoder folder `dir`,
/// by stored name.
pub fn decoder_first_step_grads(dir: &Path, rows: &Path) -> HashMap<String, Vec<f32>> {
    let grads = std::cell::RefCell::new(HashMap::new());
    on_every_device("first-step gradients", |ctx| {
        let g = Graph::new(ctx);
        let m = Model::load(&g, dir).unwrap();
        let text = std::fs::read_to_string(rows).unwrap();
        let rows: Vec<serde_json::Value> = text.lines().take(2).map(|l| serde_json::from_str(l).unwrap()).collect();
        let t = rows.iter().map(|r| r["input_ids"].as_array().unwrap().len()).max().unwrap();
        let (mut ids, mut mask, mut labels) = (vec![], vec![], vec![]);
        for r in &rows {
            let n = r["input_ids"].as_array().unwrap().len();
            ids.extend(r["input_ids"].as_array().unwrap().iter().map(|v| v.as_i64().unwrap() as i32));
            labels.extend(r["labels"].as_array().unwrap().iter().map(|v| v.as_i64().unwrap() as i32));
            mask.extend(std::iter::repeat_n(1, n));
            ids.extend(std::iter::repeat_n(0, t - n));
            labels.extend(std::iter::repeat_n(-100, t - n));
            mask.extend(std::iter::repeat_n(0, t - n));
        }
        let logits = forward(&g, &m.spec, &m.weights, &Batch { ids: &ids, mask: &mask, batch: 2, seq: t }).unwrap();
        let loss = causal_lm_loss(&g, &logits, &labels, 2, t).unwrap();
        g.backward(&loss)?;
        *grads.borrow_mut() = m.hf_grads(&g).unwrap().into_iter().map(|h| (h.name, h.data)).collect();
        Ok(())
    });
    grads.into_inner()
}

/// Our gradient of the first step's batch (rows 0 and 1 of the tokenized pairs `rows`, padded
/// with the model's pad id) of the encoder-decoder folder `dir`, by stored name; under
/// `autocast` when given. `what` names the run.
pub fn seq2seq_first_step_grads(
    what: &str,
    dir: &Path,
    rows: &Path,
    autocast: Option<DType>,
) -> HashMap<String, Vec<f32>> {
    let grads = std::cell::RefCell::new(HashMap::new());
    on_every_device(what, |ctx| {
        let g = Graph::new(ctx);
        let m = Model::load(&g, dir).unwrap();
        if autocast.is_some() {
            g.set_autocast(autocast);
        }
        let rows = read_seq2seq_dataset(&[rows.to_path_buf()], None, &Seq2SeqRead::default()).unwrap().examples;
        let pad = m.config["pad_token_id"].as_u64().unwrap() as u32;
        let batch = TokenBatch::pad(&[&rows[0], &rows[1]], pad);
        let logits = m.logits(&g, &batch).unwrap();
        g.backward(&m.loss(&g, &logits, &batch).unwrap())?;
        *grads.borrow_mut() = m.hf_grads(&g).unwrap().into_iter().map(|h| (h.name, h.data)).collect();
        Ok(())
    });
    grads.into_inner()
}
