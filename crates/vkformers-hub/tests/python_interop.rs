//! The cache is shared with Python's `huggingface_hub` both ways, checked against the real
//! library: it downloads from the fake Hub and we find its files offline; we download and it
//! finds ours with `local_files_only=True` and lists them with `scan_cache_dir` without warnings.
//! Needs a Python with huggingface_hub (the parity venv has it through transformers), so it is
//! ignored by default: `VKFORMERS_HF_PYTHON=/tmp/parity-venv/bin/python cargo test -p
//! vkformers-hub --test python_interop -- --ignored`.

mod common;

use common::{FakeFile, FakeHub, FakeRepo};
use vkformers_hub::{resolve_model_with, HubConfig, Want};

const CHECK: &str = r#"
import sys
from huggingface_hub import hf_hub_download, scan_cache_dir
cache = sys.argv[1]
for f in ["config.json", "model.safetensors"]:
    hf_hub_download("org/theirs", f, cache_dir=cache)
mine = hf_hub_download("org/ours", "model.safetensors", cache_dir=cache, local_files_only=True)
assert open(mine, "rb").read() == bytes([7]) * 100000, "our blob reads back wrong"
info = scan_cache_dir(cache)
assert not info.warnings, info.warnings
repos = {r.repo_id: r for r in info.repos}
ours = list(repos["org/ours"].revisions)[0]
assert ours.commit_hash == "a" * 40 and ours.refs == frozenset({"main"}), ours
assert sorted(f.file_name for f in ours.files) == ["config.json", "model.safetensors"], ours.files
print("python ok")
"#;

#[test]
#[ignore = "needs VKFORMERS_HF_PYTHON, a Python with huggingface_hub"]
fn python_and_vkformers_share_the_cache_both_ways() {
    let python =
        std::env::var("VKFORMERS_HF_PYTHON").expect("set VKFORMERS_HF_PYTHON to a Python with huggingface_hub");
    let files = vec![
        FakeFile::new("config.json", b"{\"a\": 1}"),
        FakeFile::new("model.safetensors", &[7u8; 100_000]),
        FakeFile::new("README.md", b"not needed"),
    ];
    let hub = FakeHub::start(vec![
        FakeRepo::new("models", "org/ours").commit("main", &"a".repeat(40), files.clone()),
        FakeRepo::new("models", "org/theirs").commit("main", &"b".repeat(40), files),
    ]);
    let dir = tempfile::tempdir().unwrap();
    let cache = dir.path().join("hub");
    resolve_model_with("org/ours", Want::Model, &HubConfig::new(&hub.endpoint, &cache)).unwrap();

    let out = std::process::Command::new(python)
        .args(["-c", CHECK, cache.to_str().unwrap()])
        .env("HF_ENDPOINT", &hub.endpoint)
        .env("HF_HUB_DISABLE_TELEMETRY", "1")
        .output()
        .unwrap();
    let log = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success() && log.contains("python ok"), "{log}");

    let mut offline = HubConfig::new("http://127.0.0.1:9", &cache);
    offline.offline = true;
    let theirs = resolve_model_with("org/theirs", Want::Model, &offline).unwrap();
    assert_eq!(std::fs::read(theirs.join("model.safetensors")).unwrap(), vec![7u8; 100_000]);
}
