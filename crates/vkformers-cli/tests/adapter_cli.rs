//! `--adapter` on `generate` and `eval`: a PEFT adapter (the llama LoRA parity fixture, whose B
//! is non-zero) kept unmerged gives the tokens and the loss the library computes with the adapter
//! attached, and not those of the bare model; so do beams on a decoder (`--num-beams`).

use std::path::PathBuf;
use std::process::Command;

use serde_json::Value;
use vkformers_generate::decode::greedy_cached;
use vkformers_generate::decoder_beam::{beam_search, BeamIds, BeamOptions, EarlyStopping};
use vkformers_models::decoder::{causal_lm_loss, forward, Batch};
use vkformers_models::lora::load_with_adapter;
use vkformers_tensor::Graph;
use vkformers_vk::testing::on_every_device;

fn tests_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../tests")
}

fn json(args: &[&str]) -> Value {
    let out = Command::new(env!("CARGO_BIN_EXE_vkformers")).args(args).output().unwrap();
    assert!(out.status.success(), "vkformers {args:?}: {}", String::from_utf8_lossy(&out.stderr));
    serde_json::from_slice(&out.stdout).unwrap()
}

#[test]
fn generate_and_eval_apply_an_unmerged_adapter() {
    let model = tests_dir().join("fixtures/llama");
    let adapter = tests_dir().join("fixtures_lora/llama");
    let rows = tests_dir().join("fixtures_train/rows.jsonl");
    let (m, a, r) = (model.display().to_string(), adapter.display().to_string(), rows.display().to_string());
    let prompt = [1u32, 17, 42, 99, 5];
    let ids = "1,17,42,99,5";

    let gen = |extra: &[&str]| {
        let mut args = vec!["generate", "--model", &m, "--prompt-ids", ids, "--max-new-tokens", "12", "--json"];
        args.extend_from_slice(extra);
        json(&args)["rows"][0]["token_ids"].clone()
    };
    let eval = |extra: &[&str]| {
        let mut args = vec!["eval", "--model", &m, "--data", &r, "--json", "--fp32"];
        args.extend_from_slice(extra);
        json(&args)["loss"].as_f64().unwrap()
    };
    let (with, without) = (gen(&["--adapter", &a]), gen(&[]));
    let (loss_with, loss_without) = (eval(&["--adapter", &a]), eval(&[]));
    assert_ne!(loss_with, loss_without, "the adapter must change the model");

    on_every_device("adapter in the CLI", |ctx| {
        let g = Graph::new(ctx);
        let (lora_model, _params) = load_with_adapter(&g, &model, &adapter).unwrap();
        let want = greedy_cached(&g, &lora_model, &prompt, 12).unwrap();
        assert_eq!(with, serde_json::json!(want), "generate --adapter vs the library");
        eprintln!("tokens with adapter {with}, without {without}");

        // The token-weighted loss over all rows: one right-padded batch, labels -100 on padding.
        let text = std::fs::read_to_string(&rows).unwrap();
        let ints =
            |v: &Value| -> Vec<i32> { v.as_array().unwrap().iter().map(|x| x.as_i64().unwrap() as i32).collect() };
        let rows: Vec<(Vec<i32>, Vec<i32>)> = text
            .lines()
            .map(|l| {
                let v: Value = serde_json::from_str(l).unwrap();
                (ints(&v["input_ids"]), ints(&v["labels"]))
            })
            .collect();
        let t = rows.iter().map(|r| r.0.len()).max().unwrap();
        let (mut ids, mut mask, mut labels) = (vec![], vec![], vec![]);
        for (r, l) in &rows {
            for i in 0..t {
                ids.push(r.get(i).copied().unwrap_or(0));
                mask.push(i32::from(i < r.len()));
                labels.push(l.get(i).copied().unwrap_or(-100));
            }
        }
        let batch = Batch { ids: &ids, mask: &mask, batch: rows.len(), seq: t };
        let loss = g.no_grad(|| {
            let logits = forward(&g, &lora_model.spec, &lora_model.weights, &batch).unwrap();
            let loss = causal_lm_loss(&g, &logits, &labels, rows.len(), t).unwrap();
            g.read(&loss).unwrap()[0]
        });
        let rel = (f64::from(loss) - loss_with).abs() / loss_with.abs();
        assert!(rel < 1e-5, "eval --adapter {loss_with} vs library {loss} (rel {rel:e})");
        Ok(())
    });
}

/// `generate --num-beams --adapter` on a decoder: the beams of the library's search on the model
/// with the adapter attached (eos 2 and pad 0 from the fixture's generation config), not those
/// of the bare model.
#[test]
fn decoder_beams_apply_an_unmerged_adapter() {
    let model = tests_dir().join("fixtures/llama");
    let adapter = tests_dir().join("fixtures_lora/llama");
    let (m, a) = (model.display().to_string(), adapter.display().to_string());
    let prompt = vec![1u32, 17, 42, 99, 5];
    let beams = |extra: &[&str]| -> Vec<Value> {
        let mut args = vec!["generate", "--model", &m, "--prompt-ids", "1,17,42,99,5", "--max-new-tokens", "6"];
        args.extend(["--num-beams", "3", "--num-return-sequences", "2", "--dtype", "f32", "--json"]);
        args.extend_from_slice(extra);
        json(&args)["rows"].as_array().unwrap().iter().map(|r| r["token_ids"].clone()).collect()
    };
    let (with, without) = (beams(&["--adapter", &a]), beams(&[]));
    assert_ne!(with, without, "the adapter must change the beams");
    on_every_device("decoder beams with an adapter in the CLI", |ctx| {
        let g = Graph::new(ctx);
        let (lora_model, _params) = load_with_adapter(&g, &model, &adapter).unwrap();
        let ids = BeamIds { eos: vec![2], pad: 0, forced_bos: None, forced_eos: None, max_new_tokens: 6 };
        let bo = BeamOptions {
            num_beams: 3,
            length_penalty: 1.0,
            early_stopping: EarlyStopping::False,
            no_repeat_ngram_size: 0,
            num_return_sequences: 2,
        };
        let hyps = beam_search(&g, &lora_model, std::slice::from_ref(&prompt), &ids, &bo).unwrap().remove(0);
        let want: Vec<Value> = hyps
            .iter()
            .map(|h| {
                // The new tokens cut after the first EOS, as the CLI prints them.
                let new = &h.tokens[prompt.len()..];
                let end = new.iter().position(|&t| t == 2).map_or(new.len(), |i| i + 1);
                serde_json::json!(new[..end])
            })
            .collect();
        assert_eq!(with, want, "generate --num-beams --adapter vs the library");
        Ok(())
    });
}
