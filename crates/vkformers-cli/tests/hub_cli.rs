//! Hub ids through the commands: a model and a dataset laid out in a cache folder the way
//! Python's `huggingface_hub` writes it are used by `vkformers eval` with `HF_HUB_OFFLINE=1`,
//! and give exactly what the same files give as local paths; `--data-split` picks the split.

use std::path::{Path, PathBuf};
use std::process::Command;

const COMMIT: &str = "89abcdef0123456789abcdef0123456789abcdef";

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// `{cache}/{folder}`: `blobs/<name-derived id>`, `snapshots/<commit>/<file>` as relative
/// symlinks into blobs, `refs/main` holding the commit.
fn python_layout(cache: &Path, folder: &str, files: &[(&str, PathBuf)]) {
    let root = cache.join(folder);
    std::fs::create_dir_all(root.join("blobs")).unwrap();
    for (i, (name, src)) in files.iter().enumerate() {
        let blob = format!("{:040x}", i + 1);
        std::fs::copy(src, root.join("blobs").join(&blob)).unwrap();
        let entry = root.join("snapshots").join(COMMIT).join(name);
        std::fs::create_dir_all(entry.parent().unwrap()).unwrap();
        let up = "../".repeat(name.split('/').count() + 1);
        std::os::unix::fs::symlink(format!("{up}blobs/{blob}"), entry).unwrap();
    }
    std::fs::create_dir_all(root.join("refs")).unwrap();
    std::fs::write(root.join("refs/main"), COMMIT).unwrap();
}

fn eval_json(cache: &Path, args: &[&str]) -> serde_json::Value {
    let out = Command::new(env!("CARGO_BIN_EXE_vkformers"))
        .arg("eval")
        .args(args)
        .arg("--json")
        .env("HF_HUB_CACHE", cache)
        .env("HF_HUB_OFFLINE", "1")
        .env_remove("HF_TOKEN")
        .output()
        .unwrap();
    assert!(out.status.success(), "vkformers eval {args:?}: {}", String::from_utf8_lossy(&out.stderr));
    let text = String::from_utf8(out.stdout).unwrap();
    serde_json::from_str(&text).unwrap()
}

#[test]
fn eval_takes_hub_ids_from_the_python_cache_offline() {
    let cache = tempfile::tempdir().unwrap();
    let fixture = repo().join("tests/fixtures/llama");
    python_layout(
        cache.path(),
        "models--tiny--llama",
        &[("config.json", fixture.join("config.json")), ("model.safetensors", fixture.join("model.safetensors"))],
    );
    // Two splits with different rows, so picking the wrong one changes the loss.
    let rows = std::fs::read_to_string(repo().join("tests/fixtures_train/rows.jsonl")).unwrap();
    let lines: Vec<&str> = rows.lines().collect();
    assert!(lines.len() >= 4, "rows.jsonl needs 4 rows");
    let work = tempfile::tempdir().unwrap();
    let (train, valid) = (work.path().join("train.jsonl"), work.path().join("validation.jsonl"));
    std::fs::write(&train, lines[..2].join("\n") + "\n").unwrap();
    std::fs::write(&valid, lines[2..4].join("\n") + "\n").unwrap();
    python_layout(
        cache.path(),
        "datasets--tiny--rows",
        &[("data/train.jsonl", train.clone()), ("data/validation.jsonl", valid.clone())],
    );
    let model = fixture.display().to_string();
    let local_train = eval_json(cache.path(), &["--model", &model, "--data", &train.display().to_string()]);
    let local_valid = eval_json(cache.path(), &["--model", &model, "--data", &valid.display().to_string()]);
    assert_ne!(local_train["loss"], local_valid["loss"], "the two splits must differ for this test to mean anything");

    let hub_train = eval_json(cache.path(), &["--model", "tiny/llama", "--data", "tiny/rows"]);
    assert_eq!(hub_train, local_train);
    let hub_valid =
        eval_json(cache.path(), &["--model", "tiny/llama", "--data", "tiny/rows", "--data-split", "validation"]);
    assert_eq!(hub_valid, local_valid);
    let pinned = eval_json(cache.path(), &["--model", &format!("tiny/llama@{COMMIT}"), "--data", "tiny/rows"]);
    assert_eq!(pinned, local_train);

    // Not in the cache and offline: a clear error, not a crash.
    let out = Command::new(env!("CARGO_BIN_EXE_vkformers"))
        .args(["eval", "--model", "tiny/absent", "--data", "tiny/rows"])
        .env("HF_HUB_CACHE", cache.path())
        .env("HF_HUB_OFFLINE", "1")
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("tiny/absent") && err.to_lowercase().contains("offline"), "unclear error: {err}");
}
