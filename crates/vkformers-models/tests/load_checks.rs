//! A folder is loaded against the parameters its config's graph reads, as transformers reports
//! missing and unexpected keys: a missing norm weight or bias, a config with fewer layers than
//! the checkpoint, or a vocabulary that disagrees with the embedding is an error naming the
//! tensor and both shapes, never a model that runs with a default.

use std::path::{Path, PathBuf};

use vkformers_io::{ModelWeights, SaveTensor};
use vkformers_models::model::Model;
use vkformers_tensor::Graph;
use vkformers_vk::testing::on_every_device;

fn fixture(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures").join(name)
}

/// A copy of fixture `name` in `out` without the tensor `drop`, with `edit` applied to its config.
fn altered(name: &str, out: &Path, drop: Option<&str>, edit: impl Fn(&mut serde_json::Value)) {
    let src = ModelWeights::open(fixture(name)).unwrap();
    let kept: Vec<(String, Vec<usize>, Vec<f32>)> = src
        .names()
        .filter(|n| Some(*n) != drop)
        .map(|n| (n.to_string(), src.info(n).unwrap().shape, src.tensor_f32(n).unwrap()))
        .collect();
    let save: Vec<SaveTensor<'_>> =
        kept.iter().map(|(n, s, d)| SaveTensor::f32(n.clone(), vkformers_io::Dtype::F32, s, d)).collect();
    vkformers_io::save_safetensors(out, &save, u64::MAX).unwrap();
    let mut config = vkformers_io::read_json(fixture(name).join("config.json")).unwrap();
    edit(&mut config);
    vkformers_io::write_json_atomic(out.join("config.json"), &config).unwrap();
}

fn load_error(dir: &Path) -> String {
    let msg = std::cell::RefCell::new(String::new());
    on_every_device("load checks", |ctx| {
        let g = Graph::new(ctx);
        *msg.borrow_mut() = Model::load(&g, dir).err().map(|e| e.to_string()).unwrap_or_default();
        Ok(())
    });
    msg.into_inner()
}

#[test]
fn a_missing_norm_weight_or_bias_is_an_error_naming_it() {
    for (fixture_name, tensor) in [
        ("llama", "model.norm.weight"),
        ("llama", "model.layers.0.input_layernorm.weight"),
        ("gpt2", "transformer.ln_f.bias"),
        ("gpt2", "transformer.h.0.attn.c_attn.bias"),
        ("stablelm_qknorm", "model.layers.1.self_attn.k_layernorm.norms.0.weight"),
    ] {
        let dir = tempfile::tempdir().unwrap();
        altered(fixture_name, dir.path(), Some(tensor), |_| {});
        let e = load_error(dir.path());
        assert!(e.contains("missing tensor") && e.contains(tensor), "{fixture_name} without {tensor}: `{e}`");
    }
}

#[test]
fn fewer_layers_in_the_config_than_in_the_checkpoint_is_an_error() {
    let dir = tempfile::tempdir().unwrap();
    altered("llama", dir.path(), None, |c| c["num_hidden_layers"] = 1.into());
    let e = load_error(dir.path());
    assert!(e.contains("unexpected tensor `model.layers.1."), "{e}");
}

#[test]
fn a_vocabulary_that_disagrees_with_the_embedding_is_an_error_naming_both() {
    let dir = tempfile::tempdir().unwrap();
    altered("llama", dir.path(), None, |c| {
        let v = c["vocab_size"].as_u64().unwrap();
        c["vocab_size"] = (v + 7).into();
    });
    let e = load_error(dir.path());
    assert!(e.contains("model.embed_tokens.weight") && e.contains("the config gives"), "{e}");
}

#[test]
fn key_value_heads_that_disagree_with_the_weights_are_an_error_naming_the_field() {
    let dir = tempfile::tempdir().unwrap();
    // The fixture has 4 heads in 2 key/value groups; 4 groups give k_proj 32 rows instead of 16.
    altered("llama", dir.path(), None, |c| c["num_key_value_heads"] = 4.into());
    let e = load_error(dir.path());
    assert!(e.contains("model.layers.0.self_attn.k_proj.weight") && e.contains("num_key_value_heads"), "{e}");
}

#[test]
fn a_tensor_the_config_has_no_place_for_is_an_error() {
    let dir = tempfile::tempdir().unwrap();
    // An RMSNorm has no bias: a stored `model.norm.bias` has no parameter to go to.
    altered("llama", dir.path(), None, |_| {});
    let src = ModelWeights::open(dir.path()).unwrap();
    let mut kept: Vec<(String, Vec<usize>, Vec<f32>)> =
        src.names().map(|n| (n.to_string(), src.info(n).unwrap().shape, src.tensor_f32(n).unwrap())).collect();
    drop(src);
    kept.push(("model.norm.bias".into(), vec![32], vec![0.0; 32]));
    let save: Vec<SaveTensor<'_>> =
        kept.iter().map(|(n, s, d)| SaveTensor::f32(n.clone(), vkformers_io::Dtype::F32, s, d)).collect();
    vkformers_io::save_safetensors(dir.path(), &save, u64::MAX).unwrap();
    let e = load_error(dir.path());
    assert!(e.contains("unexpected tensor `model.norm.bias`"), "{e}");
}

#[test]
fn a_config_with_zero_heads_or_a_quantization_is_an_error_not_a_panic() {
    for (edit, needle) in [
        (
            Box::new(|c: &mut serde_json::Value| c["num_attention_heads"] = 0.into()) as Box<dyn Fn(&mut _)>,
            "num_attention_heads",
        ),
        (
            Box::new(|c: &mut serde_json::Value| c["quantization_config"] = serde_json::json!({"quant_method": "awq"})),
            "awq",
        ),
    ] {
        let dir = tempfile::tempdir().unwrap();
        altered("llama", dir.path(), None, edit);
        let e = load_error(dir.path());
        assert!(e.contains(needle), "{e}");
    }
}

#[test]
fn the_fixtures_themselves_load() {
    on_every_device("fixtures load", |ctx| {
        let g = Graph::new(ctx);
        for name in ["llama", "gpt2", "cohere_qknorm", "stablelm_qknorm", "falcon", "opt", "bloom"] {
            Model::load(&g, &fixture(name)).unwrap_or_else(|e| panic!("{name}: {e}"));
        }
        Ok(())
    });
}

/// A folder whose header honestly declares a huge embedding and head (`[2^30, 32]` f32, 128 GiB
/// each, in a sparse file) in a config that agrees: refused from the headers with the numbers,
/// before any host or device allocation (it used to abort on the host allocation).
#[test]
fn weights_larger_than_the_device_are_refused_before_any_allocation() {
    let dir = tempfile::tempdir().unwrap();
    let vocab: usize = 1 << 30;
    let src = ModelWeights::open(fixture("llama")).unwrap();
    let mut header = serde_json::Map::new();
    let mut at = 0u64;
    let mut names: Vec<String> = src.names().map(String::from).collect();
    names.sort();
    for n in &names {
        let mut shape = src.info(n).unwrap().shape;
        if n == "model.embed_tokens.weight" || n == "lm_head.weight" {
            shape[0] = vocab;
        }
        let bytes = shape.iter().product::<usize>() as u64 * 4;
        header.insert(n.clone(), serde_json::json!({"dtype": "F32", "shape": shape, "data_offsets": [at, at + bytes]}));
        at += bytes;
    }
    let mut text = serde_json::to_string(&header).unwrap();
    while !text.len().is_multiple_of(8) {
        text.push(' ');
    }
    let path = dir.path().join("model.safetensors");
    let mut bytes = (text.len() as u64).to_le_bytes().to_vec();
    bytes.extend(text.as_bytes());
    std::fs::write(&path, &bytes).unwrap();
    std::fs::OpenOptions::new().write(true).open(&path).unwrap().set_len(bytes.len() as u64 + at).unwrap();
    let mut config = vkformers_io::read_json(fixture("llama").join("config.json")).unwrap();
    config["vocab_size"] = vocab.into();
    vkformers_io::write_json_atomic(dir.path().join("config.json"), &config).unwrap();
    let e = load_error(dir.path());
    assert!(e.contains("the model needs") && e.contains("GiB"), "{e}");
}

/// `init_from_config` of a 13B-shaped config sizes the run from the plan and fails at once.
#[test]
fn a_config_too_large_to_train_on_the_device_fails_at_once_with_the_numbers() {
    let config = serde_json::json!({
        "model_type": "llama", "vocab_size": 32000, "hidden_size": 5120, "num_hidden_layers": 40,
        "num_attention_heads": 40, "intermediate_size": 13824, "max_position_embeddings": 4096
    });
    let msg = std::cell::RefCell::new(String::new());
    on_every_device("init too large", |ctx| {
        let g = Graph::new(ctx);
        *msg.borrow_mut() = vkformers_models::init::init_from_config(&g, config.clone(), 0)
            .err()
            .map(|e| e.to_string())
            .unwrap_or_default();
        Ok(())
    });
    let e = msg.into_inner();
    assert!(e.contains("trainable parameters") && e.contains("LoRA"), "{e}");
}
