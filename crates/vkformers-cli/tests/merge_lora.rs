//! `vkformers merge-lora` writes a folder whose weights equal PEFT's `merge_and_unload` on the
//! LoRA fixtures (within 1e-6), with config and tokenizer files, and refuses a mismatched
//! adapter without writing weights.

use std::path::PathBuf;
use std::process::Command;

use vkformers_io::ModelWeights;

fn tests_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../tests")
}

fn merge(model: &PathBuf, adapter: &PathBuf, out: &std::path::Path) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_vkformers"))
        .args(["merge-lora", "--model"])
        .arg(model)
        .arg("--adapter")
        .arg(adapter)
        .arg("--out")
        .arg(out)
        .output()
        .unwrap()
}

#[test]
fn merged_folder_equals_peft_merge_and_unload() {
    for name in ["llama", "gpt2", "gemma"] {
        let (base, lora) = (tests_dir().join("fixtures").join(name), tests_dir().join("fixtures_lora").join(name));
        let out = tempfile::tempdir().unwrap();
        let o = merge(&base, &lora, out.path());
        assert!(o.status.success(), "{name}: {}", String::from_utf8_lossy(&o.stderr));
        let (ours, want) = (
            ModelWeights::open(out.path()).unwrap(),
            ModelWeights::open_file(lora.join("merged.safetensors")).unwrap(),
        );
        assert_eq!(ours.len(), want.len(), "{name}");
        let mut changed = 0;
        let base_w = ModelWeights::open(&base).unwrap();
        for n in want.names() {
            let (a, b) = (ours.tensor_f32(n).unwrap(), want.tensor_f32(n).unwrap());
            let worst = a.iter().zip(&b).map(|(x, y)| (x - y).abs()).fold(0.0f32, f32::max);
            assert!(worst <= 1e-6, "{name} {n}: {worst:e}");
            changed += usize::from(base_w.tensor_f32(n).unwrap() != a);
        }
        assert!(changed > 0, "{name}: merge changed nothing");
        assert!(out.path().join("config.json").is_file());
        if base.join("tokenizer.json").is_file() {
            assert!(out.path().join("tokenizer.json").is_file());
        }
    }
}

#[test]
fn mismatched_adapter_is_refused() {
    let out = tempfile::tempdir().unwrap();
    let o = merge(&tests_dir().join("fixtures/llama"), &tests_dir().join("fixtures_lora/gpt2"), out.path());
    assert!(!o.status.success());
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("adapter"), "{err}");
    assert!(!out.path().join("model.safetensors").exists());
}
