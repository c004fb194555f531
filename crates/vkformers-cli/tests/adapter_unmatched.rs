//! Adapters that do not fit the model are refused with the tensors named and what to do, on a
//! decoder (llama) and an encoder-decoder (t5): `generate --adapter` and `finetune --adapter`
//! with a tensor no module reads (a layer the model lacks), and `finetune --resume` from a
//! checkpoint of other LoRA target modules.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use vkformers_models::lora::adapter::write_safetensors;
use vkformers_models::lora::{Adapter, ADAPTER_CONFIG, ADAPTER_WEIGHTS};
use vkformers_models::weights::HostTensor;

fn tests_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../tests")
}

fn vkformers(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_vkformers")).args(args).output().unwrap()
}

fn s(p: &Path) -> &str {
    p.to_str().unwrap()
}

/// The PEFT fixture adapter of `name` plus a tensor of a layer the model lacks, in `dir`;
/// returns that tensor's key.
fn bad_adapter(name: &str, layer_prefix: &str, dir: &Path) -> String {
    let src = tests_dir().join("fixtures_lora").join(name);
    let mut adapter = Adapter::load(&src).unwrap();
    let key = format!("base_model.model.{layer_prefix}.41.mlp.lora_A.weight");
    adapter.tensors.insert(key.clone(), HostTensor { name: key.clone(), shape: vec![4, 16], data: vec![0.1; 64] });
    std::fs::copy(src.join(ADAPTER_CONFIG), dir.join(ADAPTER_CONFIG)).unwrap();
    write_safetensors(&dir.join(ADAPTER_WEIGHTS), adapter.tensors.values()).unwrap();
    key
}

fn assert_refused(out: &Output, names: &[&str], advice: &str, what: &str) {
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{what}: accepted");
    for n in names {
        assert!(err.contains(n), "{what}: `{n}` not named in: {err}");
    }
    assert!(err.contains(advice), "{what}: no `{advice}` in: {err}");
}

/// A model folder with the fixture's weights and the text-pair tokenizer (`finetune` on pairs).
fn t5_with_tokenizer(dir: &Path) {
    let (fixture, tok) = (tests_dir().join("fixtures/t5"), tests_dir().join("fixtures_train/seq2seq/t5_tokenizer"));
    for f in ["config.json", "model.safetensors", "generation_config.json"] {
        std::fs::copy(fixture.join(f), dir.join(f)).unwrap();
    }
    for f in ["tokenizer.json", "tokenizer_config.json"] {
        std::fs::copy(tok.join(f), dir.join(f)).unwrap();
    }
}

#[test]
fn generate_and_finetune_refuse_adapter_tensors_of_no_module() {
    let advice = "load it on the model it was trained for";
    for (name, prefix) in [("llama", "model.layers"), ("t5", "decoder.block")] {
        let tmp = tempfile::tempdir().unwrap();
        let key = bad_adapter(name, prefix, tmp.path());
        let model = tests_dir().join("fixtures").join(name);
        let gen = ["generate", "--model", s(&model), "--adapter", s(tmp.path()), "--prompt-ids", "3,4,5"];
        let out = vkformers(&[&gen[..], &["--max-new-tokens", "2"]].concat());
        assert_refused(&out, &[&key], advice, &format!("{name}: generate --adapter"));
        if name == "llama" {
            let out_dir = tmp.path().join("out");
            let data = tests_dir().join("fixtures_train/rows.jsonl");
            let args = ["finetune", "--model", s(&model), "--adapter", s(tmp.path()), "--data", s(&data)];
            let out = vkformers(&[&args[..], &["--out", s(&out_dir), "--seq-len", "16", "--max-steps", "1"]].concat());
            assert_refused(&out, &[&key], advice, "llama: finetune --adapter");
        }
    }
}

#[test]
fn finetune_resume_names_the_parameters_a_checkpoint_does_not_fit() {
    let tmp = tempfile::tempdir().unwrap();
    let advice = "or start a new run without --resume";
    // A decoder on token rows, an encoder-decoder on text pairs.
    let t5 = tmp.path().join("t5");
    std::fs::create_dir_all(&t5).unwrap();
    t5_with_tokenizer(&t5);
    let llama = tests_dir().join("fixtures/llama");
    let (rows, pairs) =
        (tests_dir().join("fixtures_train/rows.jsonl"), tests_dir().join("fixtures_train/seq2seq/t5_pairs.jsonl"));
    for (name, model, data, both, one, dropped) in
        [("llama", &llama, &rows, "q_proj,v_proj", "q_proj", "v_proj"), ("t5", &t5, &pairs, "q,v", "q", ".v.")]
    {
        let first = tmp.path().join(format!("{name}_first"));
        let run = |targets: &str, out: &Path, extra: &[&str]| {
            let mut args = vec!["finetune", "--model", s(model), "--data", s(data), "--out", s(out)];
            args.extend(["--batch-size", "2", "--max-steps", "2", "--save-every", "2", "--fp32"]);
            args.extend(["--target-modules", targets]);
            if name == "llama" {
                args.extend(["--seq-len", "16"]);
            }
            args.extend(extra);
            vkformers(&args)
        };
        let out = run(both, &first, &[]);
        assert!(out.status.success(), "{name}: {}", String::from_utf8_lossy(&out.stderr));
        let cp = first.join("checkpoint-2");
        let out = run(one, &tmp.path().join(format!("{name}_resumed")), &["--resume", s(&cp)]);
        assert_refused(&out, &[dropped, "match no trainable parameter"], advice, &format!("{name}: --resume"));
    }
}
