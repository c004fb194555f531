//! Inference in the weights' stored type (`--dtype`): a bf16 copy of the tiny CLI model keeps
//! its projections in bf16 on the device (`auto` follows the folder), uses less device memory
//! than the same model in f32, gives logits within bf16 rounding of the f32 ones, and
//! `--prompt-ids-file` batches id prompts; `generate --json` reports the dtype and the peak.

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::Value;
use vkformers_models::decoder::{forward, Batch};
use vkformers_models::model::Model;
use vkformers_tensor::{DType, Graph};
use vkformers_vk::testing::on_every_device;

fn cli_model() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures_generate/cli_model")
}

/// The CLI model saved with bf16 weights (config `dtype: bfloat16`), with its tokenizer files.
fn bf16_copy(out: &Path) {
    on_every_device("bf16 copy", |ctx| {
        let g = Graph::new(ctx);
        let m = Model::load(&g, &cli_model()).unwrap();
        m.save_as(&g, out, Some(&cli_model()), u64::MAX, DType::BF16).unwrap();
        Ok(())
    });
}

fn generate(model: &Path, extra: &[&str]) -> Value {
    // A blank line between the prompts: the ids file skips it.
    common::generate::greedy_ids_json(model, "{\"input_ids\": [1, 40, 50, 60]}\n\n{\"input_ids\": [1, 70]}\n", extra)
}

#[test]
fn generate_keeps_a_bf16_folder_in_bf16_and_reports_dtype_and_peak() {
    let dir = tempfile::tempdir().unwrap();
    bf16_copy(dir.path());
    let auto = generate(dir.path(), &[]);
    assert_eq!(auto["dtype"], "bf16", "auto follows the folder's dtype");
    let wide = generate(dir.path(), &["--dtype", "float32"]);
    assert_eq!(wide["dtype"], "f32");
    for r in [&auto, &wide] {
        let rows = r["rows"].as_array().unwrap();
        assert_eq!(rows.len(), 2, "one row per line of the ids file");
        assert_eq!(rows[0]["prompt_ids"], serde_json::json!([1, 40, 50, 60]));
        assert!(rows.iter().all(|row| row["token_ids"].as_array().unwrap().len() == 4));
    }
    let peak = |v: &Value| v["timings"]["device_memory_peak_bytes"].as_u64().unwrap();
    assert!(peak(&auto) > 0 && peak(&auto) < peak(&wide), "bf16 {} vs f32 {} bytes", peak(&auto), peak(&wide));
}

#[test]
fn bf16_weights_give_logits_within_bf16_rounding_of_f32() {
    let dir = tempfile::tempdir().unwrap();
    bf16_copy(dir.path());
    on_every_device("bf16 logits", |ctx| {
        let (ids, mask) = ([1, 40, 50, 60, 70, 80], [1; 6]);
        let batch = Batch { ids: &ids, mask: &mask, batch: 1, seq: 6 };
        let g = Graph::new(ctx);
        let narrow = Model::load_for_inference(&g, dir.path(), DType::BF16).unwrap();
        assert_eq!(narrow.weight_dtype(), DType::BF16);
        let got = g.read(&g.no_grad(|| forward(&g, &narrow.spec, &narrow.weights, &batch)).unwrap())?;
        // The same bf16 values held in f32: only activations' rounding before products differs.
        let wide = Model::load(&g, dir.path()).unwrap();
        let want = g.read(&g.no_grad(|| forward(&g, &wide.spec, &wide.weights, &batch)).unwrap())?;
        let scale = want.iter().fold(0f32, |m, v| m.max(v.abs()));
        let worst = got.iter().zip(&want).fold(0f32, |m, (a, b)| m.max((a - b).abs()));
        eprintln!("bf16 vs f32 logits: max |Δ| {worst:.3e} of max |logit| {scale:.3e}");
        assert!(worst <= 0.02 * scale, "logits differ by {worst} (scale {scale})");
        assert!(worst > 0.0, "bf16 activations should move the logits a little");
        Ok(())
    });
}

/// The stored type of every tensor of a saved folder, and its config's `dtype`.
fn saved_types(dir: &Path) -> (Vec<String>, String) {
    let w = vkformers_io::ModelWeights::open(dir).unwrap();
    let types = w.names().map(|n| format!("{:?}", w.info(n).unwrap().dtype)).collect();
    let config = vkformers_io::read_json(dir.join("config.json")).unwrap();
    (types, config["dtype"].as_str().unwrap().to_string())
}

#[test]
fn training_keeps_the_input_dtype_unless_save_dtype_says_otherwise() {
    let dir = tempfile::tempdir().unwrap();
    bf16_copy(dir.path());
    let rows = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures_train/rows.jsonl");
    for (extra, want) in [(None, ("BF16", "bfloat16")), (Some("float32"), ("F32", "float32"))] {
        let out = tempfile::tempdir().unwrap();
        let mut args = vec!["train", "--model", dir.path().to_str().unwrap(), "--data", rows.to_str().unwrap()];
        args.extend(["--out", out.path().to_str().unwrap(), "--max-steps", "1", "--batch-size", "2"]);
        if let Some(d) = extra {
            args.extend(["--save-dtype", d]);
        }
        let o = Command::new(env!("CARGO_BIN_EXE_vkformers")).args(&args).output().unwrap();
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        let (types, config) = saved_types(out.path());
        assert!(types.iter().all(|t| t == want.0), "{extra:?}: {types:?}");
        assert_eq!(config, want.1);
    }
}

#[test]
fn continuous_batching_gives_each_row_its_tokens() {
    let (m, prompts) = (cli_model(), tempfile::NamedTempFile::new().unwrap());
    let rows =
        "{\"input_ids\": [1, 40, 50, 60]}\n{\"input_ids\": [1, 70]}\n{\"input_ids\": [1, 41, 42, 43, 44, 45, 46]}\n";
    std::fs::write(prompts.path(), rows).unwrap();
    let run = |extra: &[&str]| -> Value {
        let mut args = vec!["generate", "--model", m.to_str().unwrap(), "--json", "--max-new-tokens", "6", "--greedy"];
        args.extend(["--prompt-ids-file", prompts.path().to_str().unwrap()]);
        args.extend(extra);
        let out = Command::new(env!("CARGO_BIN_EXE_vkformers")).args(&args).output().unwrap();
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        serde_json::from_slice(&out.stdout).unwrap()
    };
    let lockstep = run(&[]);
    let continuous = run(&["--max-batch", "2"]);
    let ids =
        |v: &Value| -> Vec<Value> { v["rows"].as_array().unwrap().iter().map(|r| r["token_ids"].clone()).collect() };
    assert_eq!(ids(&continuous), ids(&lockstep), "two slots for three prompts give every row its tokens");
    assert_eq!(continuous["per_row"].as_array().unwrap().len(), 3);
}
