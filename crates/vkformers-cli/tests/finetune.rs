//! `vkformers finetune`: writes a PEFT adapter that differs from its init, leaves the base
//! weights file byte-identical, resumes exactly from a checkpoint (with LoRA dropout on), and
//! continues an existing adapter.

use std::path::{Path, PathBuf};
use std::process::Command;

use vkformers_io::ModelWeights;

fn tests_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../tests")
}

/// A copy of a base fixture (so the test can check nothing wrote into it).
fn base_copy(name: &str, dir: &Path) -> PathBuf {
    let to = dir.join(name);
    std::fs::create_dir_all(&to).unwrap();
    for e in std::fs::read_dir(tests_dir().join("fixtures").join(name)).unwrap() {
        let e = e.unwrap();
        std::fs::copy(e.path(), to.join(e.file_name())).unwrap();
    }
    to
}

fn finetune(model: &Path, out: &Path, extra: &[&str]) -> std::process::Output {
    let data = tests_dir().join("fixtures_train/rows.jsonl");
    let o = Command::new(env!("CARGO_BIN_EXE_vkformers"))
        .args(["finetune", "--model"])
        .arg(model)
        .arg("--data")
        .arg(&data)
        .arg("--out")
        .arg(out)
        .args(["--batch-size", "2", "--seq-len", "16", "--lr", "1e-2", "--lora-rank", "4", "--json"])
        .args(extra)
        .output()
        .unwrap();
    assert!(o.status.success(), "finetune failed: {}", String::from_utf8_lossy(&o.stderr));
    o
}

fn tensors(path: &Path) -> Vec<(String, Vec<f32>)> {
    let w = ModelWeights::open_file(path).unwrap();
    let mut v: Vec<_> = w.names().map(|n| (n.to_string(), w.tensor_f32(n).unwrap())).collect();
    v.sort_by(|a, b| a.0.cmp(&b.0));
    v
}

#[test]
fn finetune_writes_an_adapter_and_leaves_the_base_untouched() {
    let tmp = tempfile::tempdir().unwrap();
    let base = base_copy("llama", tmp.path());
    let before = std::fs::read(base.join("model.safetensors")).unwrap();
    let out = tmp.path().join("out");
    let o = finetune(&base, &out, &["--max-steps", "3", "--target-modules", "q_proj,v_proj,down_proj"]);
    assert_eq!(std::fs::read(base.join("model.safetensors")).unwrap(), before, "base weights changed");
    let summary: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(summary["steps"], 3);
    assert!(summary["peak_device_bytes"].as_u64().unwrap() > 0);
    let cfg: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("adapter_config.json")).unwrap()).unwrap();
    assert_eq!(cfg["peft_type"], "LORA");
    assert_eq!(cfg["r"], 4);
    assert_eq!(cfg["target_modules"], serde_json::json!(["down_proj", "q_proj", "v_proj"]));
    let t = tensors(&out.join("adapter_model.safetensors"));
    assert_eq!(t.len(), 2 * 3 * 2, "A and B of 3 modules in 2 layers");
    let b = t.iter().find(|(n, _)| n == "base_model.model.model.layers.0.self_attn.q_proj.lora_B.weight").unwrap();
    assert!(b.1.iter().any(|x| *x != 0.0), "B is still zero: training did not reach the adapter");
}

#[test]
fn finetune_resumes_exactly_with_dropout() {
    let tmp = tempfile::tempdir().unwrap();
    let base = tests_dir().join("fixtures/gpt2");
    let opts = [
        "--max-steps",
        "4",
        "--save-every",
        "2",
        "--grad-accum",
        "2",
        "--lora-dropout",
        "0.2",
        "--target-modules",
        "all-linear",
    ];
    let straight = tmp.path().join("straight");
    finetune(&base, &straight, &opts);
    assert!(straight.join("checkpoint-2/adapter_model.safetensors").is_file(), "checkpoints hold the adapter");
    let resumed = tmp.path().join("resumed");
    std::fs::create_dir_all(&resumed).unwrap();
    let cp = straight.join("checkpoint-2");
    let mut with_resume = opts.to_vec();
    let cp_arg = cp.to_string_lossy().into_owned();
    with_resume.extend(["--resume", &cp_arg]);
    finetune(&base, &resumed, &with_resume);
    let (a, b) =
        (tensors(&straight.join("adapter_model.safetensors")), tensors(&resumed.join("adapter_model.safetensors")));
    assert_eq!(a, b, "resumed adapter differs from the straight run");
    // The dropout is really on (else the replay above proves nothing about its masks).
    let no_dropout = tmp.path().join("no_dropout");
    let plain: Vec<&str> = opts.iter().map(|o| if *o == "0.2" { "0" } else { o }).collect();
    finetune(&base, &no_dropout, &plain);
    assert_ne!(tensors(&no_dropout.join("adapter_model.safetensors")), a, "--lora-dropout changed nothing");
}

#[test]
fn finetune_continues_an_adapter() {
    let tmp = tempfile::tempdir().unwrap();
    let adapter = tests_dir().join("fixtures_lora/gemma");
    let out = tmp.path().join("out");
    let a = adapter.to_string_lossy().into_owned();
    finetune(&tests_dir().join("fixtures/gemma"), &out, &["--max-steps", "1", "--adapter", &a]);
    let (before, after) =
        (tensors(&adapter.join("adapter_model.safetensors")), tensors(&out.join("adapter_model.safetensors")));
    assert_eq!(before.iter().map(|t| &t.0).collect::<Vec<_>>(), after.iter().map(|t| &t.0).collect::<Vec<_>>());
    assert_ne!(before, after, "one step changed nothing");
    let cfg: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("adapter_config.json")).unwrap()).unwrap();
    assert_eq!(cfg["use_rslora"], true, "the adapter's own config is kept");
}
