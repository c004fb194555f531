//! Image-text wrappers through the CLI: `vkformers train` on a `gemma3` folder trains its text
//! backbone and saves a folder whose vision tower and projector are the source's, byte for
//! byte, beside the trained text weights (transformers loads it as the wrapper:
//! `tools/parity/make_fixtures.py --check-reload` checks the text logits of such a folder).

use std::path::PathBuf;
use std::process::Command;

use vkformers_io::ModelWeights;

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..")
}

#[test]
fn training_a_wrapper_keeps_its_vision_tower_and_trains_the_text_model() {
    let model = repo().join("tests/fixtures/gemma3");
    let data = repo().join("tests/fixtures_train/rows.jsonl");
    let out = tempfile::tempdir().unwrap();
    let saved = out.path().join("trained");
    let r = Command::new(env!("CARGO_BIN_EXE_vkformers"))
        .args(["train", "--model", model.to_str().unwrap(), "--data", data.to_str().unwrap()])
        .args(["--out", saved.to_str().unwrap(), "--max-steps", "2", "--batch-size", "2", "--lr", "1e-3"])
        .output()
        .unwrap();
    assert!(r.status.success(), "{}", String::from_utf8_lossy(&r.stderr));
    let (src, got) = (ModelWeights::open(&model).unwrap(), ModelWeights::open(&saved).unwrap());
    let names: Vec<String> = src.names().map(String::from).collect();
    assert_eq!(got.names().map(String::from).collect::<Vec<_>>(), names, "stored tensors");
    let (mut carried, mut trained) = (0, 0);
    for n in &names {
        let same = src.tensor_bytes(n).unwrap().data == got.tensor_bytes(n).unwrap().data;
        if n.starts_with("vision_tower.") || n.starts_with("multi_modal_projector.") {
            assert!(same, "{n}: the vision tower is carried unchanged");
            carried += 1;
        } else {
            assert!(!same, "{n}: a text weight is trained");
            trained += 1;
        }
    }
    assert!(carried >= 10 && trained >= 10, "{carried} carried, {trained} trained");
    let config = vkformers_io::read_json(saved.join("config.json")).unwrap();
    assert_eq!(config["model_type"], "gemma3");
    assert!(config["vision_config"].is_object());
}

/// `finetune` on a wrapper writes PEFT's keys for the text modules (`model.language_model.*`,
/// which PEFT loads onto `Gemma3ForConditionalGeneration`: checked by hand, merged logits within
/// 1.5e-6 of PEFT's), and `merge-lora` keeps the vision tower byte for byte.
#[test]
fn finetuning_a_wrapper_writes_peft_keys_and_merging_keeps_its_vision_tower() {
    let model = repo().join("tests/fixtures/gemma3");
    let data = repo().join("tests/fixtures_train/rows.jsonl");
    let out = tempfile::tempdir().unwrap();
    let (adapter, merged) = (out.path().join("adapter"), out.path().join("merged"));
    let run = |args: &[&str]| {
        let r = Command::new(env!("CARGO_BIN_EXE_vkformers")).args(args).output().unwrap();
        assert!(r.status.success(), "{args:?}: {}", String::from_utf8_lossy(&r.stderr));
    };
    run(&[
        "finetune",
        "--model",
        model.to_str().unwrap(),
        "--data",
        data.to_str().unwrap(),
        "--out",
        adapter.to_str().unwrap(),
        "--max-steps",
        "2",
        "--batch-size",
        "2",
        "--target-modules",
        "q_proj,v_proj",
    ]);
    let keys: Vec<String> =
        ModelWeights::open_file(adapter.join("adapter_model.safetensors")).unwrap().names().map(String::from).collect();
    assert_eq!(keys.len(), 8, "q and v of 2 layers, A and B: {keys:?}");
    assert!(
        keys.iter().all(|k| k.starts_with("base_model.model.model.language_model.layers.")),
        "PEFT's module paths: {keys:?}"
    );
    run(&[
        "merge-lora",
        "--model",
        model.to_str().unwrap(),
        "--adapter",
        adapter.to_str().unwrap(),
        "--out",
        merged.to_str().unwrap(),
    ]);
    let (src, got) = (ModelWeights::open(&model).unwrap(), ModelWeights::open(&merged).unwrap());
    let mut changed = 0;
    for n in src.names() {
        let same = src.tensor_bytes(n).unwrap().data == got.tensor_bytes(n).unwrap().data;
        if n.starts_with("vision_tower.") || n.starts_with("multi_modal_projector.") {
            assert!(same, "{n}: carried unchanged");
        } else if !same {
            assert!(n.ends_with("q_proj.weight") || n.ends_with("v_proj.weight"), "{n} changed");
            changed += 1;
        }
    }
    assert_eq!(changed, 4, "the adapted q and v weights of 2 layers");
}

/// `train --init-from-config` on a wrapper's config (mistral3, with a BPE tokenizer trained on the
/// data, whose vocabulary — not the config's 128 — the text model then takes): the folder has every tensor transformers stores for the wrapper,
/// the vision tower and projector of the config's shapes (drawn as transformers does: see the
/// models crate's init tests), and a text_config that matches the trained embedding.
#[test]
fn a_wrapper_from_its_config_trains_and_saves_its_vision_tower() {
    let fixture = repo().join("tests/fixtures/mistral3");
    let data = repo().join("tests/fixtures_train/rows.jsonl");
    let out = tempfile::tempdir().unwrap();
    let saved = out.path().join("new");
    let r = Command::new(env!("CARGO_BIN_EXE_vkformers"))
        .args(["train", "--init-from-config", fixture.join("config.json").to_str().unwrap()])
        .args(["--train-tokenizer", "300", "--data", data.to_str().unwrap()])
        .args(["--out", saved.to_str().unwrap(), "--max-steps", "2", "--batch-size", "2", "--lr", "1e-3"])
        .output()
        .unwrap();
    assert!(r.status.success(), "{}", String::from_utf8_lossy(&r.stderr));
    let (src, got) = (ModelWeights::open(&fixture).unwrap(), ModelWeights::open(&saved).unwrap());
    let sorted = |w: &ModelWeights| {
        let mut v: Vec<String> = w.names().map(String::from).collect();
        v.sort();
        v
    };
    assert_eq!(sorted(&got), sorted(&src), "stored tensors");
    for n in sorted(&src).iter().filter(|n| !n.starts_with("language_model.")) {
        assert_eq!(got.info(n).unwrap().shape, src.info(n).unwrap().shape, "{n}");
    }
    let config = vkformers_io::read_json(saved.join("config.json")).unwrap();
    let vocab = got.info("language_model.model.embed_tokens.weight").unwrap().shape[0];
    assert_ne!(vocab, 128, "the tokenizer's vocabulary");
    assert_eq!(config["text_config"]["vocab_size"], vocab, "text_config follows the tokenizer");
    assert_eq!(config["model_type"], "mistral3");
}
