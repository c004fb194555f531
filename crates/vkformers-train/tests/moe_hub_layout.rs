//! A Mixtral checkpoint in the Hub's layout, written here (not by transformers): the original
//! `config.json` spelling (`rope_theta`, `torch_dtype`, no `head_dim`) and bf16 tensors under the
//! per-expert names `block_sparse_moe.experts.{e}.w1/w2/w3` and router `block_sparse_moe.gate`.
//! It loads, trains two AdamW steps through the router (gradients reach every expert a token
//! chose), and saves under the names transformers 5.24's `save_pretrained` writes (those of the
//! `mixtral` fixture, which it wrote). The trained logits go next to the saved folder as a
//! fixture-shaped `reference.safetensors`, so transformers' reload of the folder is checked by
//!
//! ```text
//! VKFORMERS_SAVE_DIR=/tmp/hub cargo test -p vkformers-train --test moe_hub_layout
//! /tmp/parity-venv/bin/python tools/parity/make_fixtures.py --check-reload /tmp/hub/saved \
//!     --fixtures /tmp/hub --fixture trained
//! ```
//!
//! which the test also runs when `VKFORMERS_PARITY_PYTHON` names that interpreter.

mod common;

use std::path::{Path, PathBuf};

use serde_json::json;
use vkformers_data::Example;
use vkformers_io::{Dtype, ModelWeights, SaveTensor};
use vkformers_kernels::testutil::Rng;
use vkformers_models::decoder::{forward, Batch};
use vkformers_models::model::Model;
use vkformers_tensor::Graph;
use vkformers_train::{full_model_params, sequences, Loader, Trainer};
use vkformers_vk::testing::on_every_device;

use common::plain_steps;

// Hidden, expert intermediate, experts, layers, vocab, KV width (2 of 4 heads of 8): the
// `mixtral` fixture's sizes, so the saved names and shapes can be compared with what
// transformers saved for it.
const H: usize = 32;
const I: usize = 64;
const E: usize = 4;
const L: usize = 2;
const V: usize = 128;
const KV: usize = 16;

fn fixture(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures").join(name)
}

/// Mixtral's Hub config.json, shrunk.
fn hub_config() -> serde_json::Value {
    json!({
        "architectures": ["MixtralForCausalLM"], "attention_dropout": 0.0, "bos_token_id": 1,
        "eos_token_id": 2, "hidden_act": "silu", "hidden_size": H, "initializer_range": 0.02,
        "intermediate_size": I, "max_position_embeddings": 64, "model_type": "mixtral",
        "num_attention_heads": 4, "num_experts_per_tok": 2, "num_hidden_layers": L,
        "num_key_value_heads": 2, "num_local_experts": E, "output_router_logits": false,
        "rms_norm_eps": 1e-5, "rope_theta": 1e6, "router_aux_loss_coef": 0.02, "sliding_window": null,
        "tie_word_embeddings": false, "torch_dtype": "bfloat16", "transformers_version": "4.36.0.dev0",
        "use_cache": true, "vocab_size": V
    })
}

/// The Hub checkpoint's tensors (name, shape), per-expert names.
fn hub_tensors() -> Vec<(String, Vec<usize>)> {
    let mut t = vec![("model.embed_tokens.weight".to_string(), vec![V, H])];
    for i in 0..L {
        let p = format!("model.layers.{i}");
        t.push((format!("{p}.input_layernorm.weight"), vec![H]));
        t.push((format!("{p}.post_attention_layernorm.weight"), vec![H]));
        for (n, rows) in [("q_proj", H), ("k_proj", KV), ("v_proj", KV)] {
            t.push((format!("{p}.self_attn.{n}.weight"), vec![rows, H]));
        }
        t.push((format!("{p}.self_attn.o_proj.weight"), vec![H, H]));
        t.push((format!("{p}.block_sparse_moe.gate.weight"), vec![E, H]));
        for e in 0..E {
            let x = format!("{p}.block_sparse_moe.experts.{e}");
            t.push((format!("{x}.w1.weight"), vec![I, H]));
            t.push((format!("{x}.w2.weight"), vec![H, I]));
            t.push((format!("{x}.w3.weight"), vec![I, H]));
        }
    }
    t.push(("model.norm.weight".into(), vec![H]));
    t.push(("lm_head.weight".into(), vec![V, H]));
    t
}

/// Writes the Hub checkpoint to `dir`: matrices uniform in ±0.3, norm weights around 1, in bf16.
fn write_hub_checkpoint(dir: &Path) {
    std::fs::create_dir_all(dir).unwrap();
    let mut rng = Rng::new(2024);
    let tensors: Vec<(String, Vec<usize>, Vec<f32>)> = hub_tensors()
        .into_iter()
        .map(|(n, s)| {
            let numel = s.iter().product();
            let mut d = rng.vec(numel, 0.3);
            if s.len() == 1 {
                d.iter_mut().for_each(|v| *v += 1.0);
            }
            (n, s, d)
        })
        .collect();
    let save: Vec<SaveTensor<'_>> =
        tensors.iter().map(|(n, s, d)| SaveTensor::f32(n.clone(), Dtype::BF16, s, d)).collect();
    vkformers_io::save_safetensors(dir, &save, u64::MAX).unwrap();
    std::fs::write(dir.join("config.json"), serde_json::to_string_pretty(&hub_config()).unwrap()).unwrap();
}

/// Two rows of 8 tokens, the second padded after 5.
fn batch_ids() -> (Vec<i32>, Vec<i32>) {
    let ids = vec![5, 9, 17, 3, 44, 100, 7, 8, 31, 2, 60, 61, 12, 0, 0, 0];
    let mask = [vec![1; 8], vec![1, 1, 1, 1, 1, 0, 0, 0]].concat();
    (ids, mask)
}

fn train_two_steps(g: &Graph<'_>, m: &Model, out_dir: &Path) {
    let rows: Vec<Example> = [vec![5u32, 9, 17, 3, 44, 100, 7, 8], vec![31, 2, 60, 61, 12]]
        .into_iter()
        .map(|ids| Example::new(ids.clone(), ids.iter().map(|&t| t as i32).collect()))
        .collect();
    let seqs = sequences(&rows, 16, false).unwrap();
    let o = plain_steps(out_dir, 1e-2, 2);
    let loader = Loader::new(seqs, 2, false, 0, 0).unwrap();
    let mut t = Trainer::new(g, full_model_params(m), loader, o).unwrap();
    for _ in 0..2 {
        let s = t.step(m).unwrap();
        assert!(s.record.loss.is_finite());
    }
}

/// Writes `trained/reference.safetensors` under `root` (the fixture keys check_reload reads).
fn write_reference(root: &Path, logits: &[f32]) {
    let (ids, mask) = batch_ids();
    let dir = root.join("trained");
    std::fs::create_dir_all(&dir).unwrap();
    let bytes = |v: &[i32]| v.iter().flat_map(|x| x.to_le_bytes()).collect::<Vec<u8>>();
    let (ids, mask) = (bytes(&ids), bytes(&mask));
    let save = [
        SaveTensor::raw("input_ids", Dtype::I32, &[2, 8], &ids),
        SaveTensor::raw("attention_mask", Dtype::I32, &[2, 8], &mask),
        SaveTensor::f32("logits", Dtype::F32, &[2, 8, V], logits),
    ];
    vkformers_io::save_safetensors(&dir, &save, u64::MAX).unwrap();
    std::fs::rename(dir.join("model.safetensors"), dir.join("reference.safetensors")).unwrap();
}

#[test]
fn a_hub_layout_mixtral_loads_trains_and_saves_in_the_transformers_5_layout() {
    let keep = std::env::var_os("VKFORMERS_SAVE_DIR").map(PathBuf::from);
    let tmp = tempfile::tempdir().unwrap();
    let root = keep.clone().unwrap_or_else(|| tmp.path().to_path_buf());
    let (hub, saved) = (root.join("hub"), root.join("saved"));
    write_hub_checkpoint(&hub);
    on_every_device("moe hub layout", |ctx| {
        let g = Graph::new(ctx);
        let m = Model::load(&g, &hub).unwrap();
        let before = m.hf_params(&g).unwrap();
        train_two_steps(&g, &m, &tmp.path().join("run"));
        let after = m.hf_params(&g).unwrap();
        // Every expert weight moved (each expert has tokens here), the router too.
        for (a, b) in before.iter().zip(&after) {
            assert_eq!(a.name, b.name);
            if b.name.contains("block_sparse_moe") {
                assert!(a.data != b.data, "{} did not train", b.name);
            }
        }
        m.save(&g, &saved, Some(&hub), u64::MAX).unwrap();
        // The names (and shapes) transformers 5.24 writes for Mixtral: those of the fixture.
        let (ours, theirs) = (ModelWeights::open(&saved).unwrap(), ModelWeights::open(fixture("mixtral")).unwrap());
        let names = |w: &ModelWeights| {
            w.names().map(|n| (n.to_string(), w.info(n).unwrap().shape)).collect::<std::collections::BTreeSet<_>>()
        };
        assert_eq!(names(&ours), names(&theirs), "saved tensor names and shapes");
        // It reloads here to the trained model's logits.
        let (ids, mask) = batch_ids();
        let batch = Batch { ids: &ids, mask: &mask, batch: 2, seq: 8 };
        let logits = g.read(&g.no_grad(|| forward(&g, &m.spec, &m.weights, &batch)).unwrap()).unwrap();
        let again = Model::load(&g, &saved).unwrap();
        let reloaded = g.read(&g.no_grad(|| forward(&g, &again.spec, &again.weights, &batch)).unwrap()).unwrap();
        assert_eq!(logits, reloaded, "vkformers reload of the saved folder");
        write_reference(&root, &logits);
        Ok(())
    });
    if let Some(py) = std::env::var_os("VKFORMERS_PARITY_PYTHON") {
        let script = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../tools/parity/make_fixtures.py");
        let status = std::process::Command::new(py)
            .arg(script)
            .args(["--check-reload".as_ref(), saved.as_os_str(), "--fixtures".as_ref(), root.as_os_str()])
            .args(["--fixture", "trained"])
            .status()
            .unwrap();
        assert!(status.success(), "transformers' reload of {} gives other logits", saved.display());
    }
}
