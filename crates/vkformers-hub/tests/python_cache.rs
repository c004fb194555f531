//! A cache folder laid out the way Python's `huggingface_hub` writes it is used as-is, through
//! the public functions that read the environment (`HF_HUB_CACHE`, `HF_HUB_OFFLINE`, ...).
//! Tests here change process-wide variables, so they take `ENV` first.

use std::path::{Path, PathBuf};
use std::sync::Mutex;
use vkformers_hub::{resolve_adapter, resolve_dataset, resolve_model, DatasetQuery, HubConfig, HubError, Token};

static ENV: Mutex<()> = Mutex::new(());

const VARS: [&str; 10] = [
    "HF_HOME",
    "HF_HUB_CACHE",
    "HUGGINGFACE_HUB_CACHE",
    "HF_HUB_OFFLINE",
    "HF_ENDPOINT",
    "HF_TOKEN",
    "HUGGING_FACE_HUB_TOKEN",
    "HF_TOKEN_PATH",
    "XDG_CACHE_HOME",
    "HOME",
];

/// Runs `f` with exactly `vars` set among the Hub variables, restoring them afterwards.
fn with_env<T>(vars: &[(&str, &str)], f: impl FnOnce() -> T) -> T {
    let _guard = ENV.lock().unwrap_or_else(|e| e.into_inner());
    let saved: Vec<(&str, Option<String>)> = VARS.iter().map(|k| (*k, std::env::var(k).ok())).collect();
    for k in VARS {
        std::env::remove_var(k);
    }
    for (k, v) in vars {
        std::env::set_var(k, v);
    }
    let out = f();
    for (k, v) in saved {
        match v {
            Some(v) => std::env::set_var(k, v),
            None => std::env::remove_var(k),
        }
    }
    out
}

fn sha256_hex(data: &[u8]) -> String {
    use sha2::Digest;
    sha2::Sha256::digest(data).iter().map(|b| format!("{b:02x}")).collect()
}

const COMMIT: &str = "0123456789abcdef0123456789abcdef01234567";

/// Writes `files` into `{cache}/{folder}` as huggingface_hub does: content in `blobs/{etag}`
/// (sha256 for LFS files, the git blob id otherwise), `snapshots/{commit}/{name}` as relative
/// symlinks, `refs/{branch}` holding the commit.
fn python_layout(cache: &Path, folder: &str, branch: &str, files: &[(&str, Vec<u8>)]) -> PathBuf {
    let repo = cache.join(folder);
    let snapshot = repo.join("snapshots").join(COMMIT);
    std::fs::create_dir_all(repo.join("blobs")).unwrap();
    for (name, data) in files {
        let etag = if name.ends_with(".safetensors") { sha256_hex(data) } else { sha256_hex(data)[..40].to_string() };
        std::fs::write(repo.join("blobs").join(&etag), data).unwrap();
        let entry = snapshot.join(name);
        std::fs::create_dir_all(entry.parent().unwrap()).unwrap();
        let up = "../".repeat(name.split('/').count() + 1);
        std::os::unix::fs::symlink(format!("{up}blobs/{etag}"), &entry).unwrap();
    }
    let refs = repo.join("refs").join(branch);
    std::fs::create_dir_all(refs.parent().unwrap()).unwrap();
    std::fs::write(refs, COMMIT).unwrap();
    // huggingface_hub also keeps `.no_exist/` markers for files it looked for and did not find.
    std::fs::create_dir_all(repo.join(".no_exist").join(COMMIT)).unwrap();
    std::fs::write(repo.join(".no_exist").join(COMMIT).join("tokenizer.model"), b"").unwrap();
    snapshot
}

fn fixture(name: &str) -> Vec<u8> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures/llama");
    std::fs::read(dir.join(name)).unwrap()
}

#[test]
fn a_python_downloaded_model_is_used_as_is_with_hf_hub_offline() {
    let dir = tempfile::tempdir().unwrap();
    let cache = dir.path().join("hub");
    let files = ["config.json", "generation_config.json", "model.safetensors"].map(|n| (n, fixture(n))).to_vec();
    let snapshot = python_layout(&cache, "models--org--llama-tiny", "main", &files);
    let adapter = vec![
        ("adapter_config.json", b"{\"peft_type\": \"LORA\"}".to_vec()),
        ("adapter_model.safetensors", fixture("model.safetensors")),
    ];
    let adapter_snapshot = python_layout(&cache, "models--org--lora", "main", &adapter);
    let data = vec![("data/train-0.jsonl", b"{\"text\": \"hello\"}\n".to_vec())];
    let data_snapshot = python_layout(&cache, "datasets--org--rows", "main", &data);

    let cache_var = cache.to_str().unwrap();
    // An endpoint nothing listens on: any network use would fail the test.
    let env = [("HF_HUB_CACHE", cache_var), ("HF_HUB_OFFLINE", "1"), ("HF_ENDPOINT", "http://127.0.0.1:9")];
    let (model, lora, rows, missing) = with_env(&env, || {
        (
            resolve_model("org/llama-tiny"),
            resolve_adapter("org/lora"),
            resolve_dataset("org/rows", &DatasetQuery::default()),
            resolve_model("org/llama-tiny@v2"),
        )
    });
    let model = model.unwrap();
    assert_eq!(model, snapshot);
    let bytes = std::fs::read(model.join("model.safetensors")).unwrap();
    assert_eq!(bytes, fixture("model.safetensors"));
    let tensors = safetensors::SafeTensors::deserialize(&bytes).unwrap();
    assert!(!tensors.names().is_empty());
    assert_eq!(lora.unwrap(), adapter_snapshot);
    assert_eq!(rows.unwrap(), vec![data_snapshot.join("data/train-0.jsonl")]);
    assert!(matches!(missing.unwrap_err(), HubError::NotCached { .. }));
}

#[test]
fn hf_home_locates_cache_and_token_file() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("token"), "hf_from_token_file\n").unwrap();
    let home = dir.path().to_str().unwrap();
    let config = with_env(&[("HF_HOME", home), ("HF_ENDPOINT", "http://mirror.local/")], HubConfig::from_env);
    assert_eq!(config.cache_dir, dir.path().join("hub"));
    assert_eq!(config.endpoint, "http://mirror.local");
    assert_eq!(config.token, Token::new("hf_from_token_file"));
    assert!(!config.offline);
    let config =
        with_env(&[("HF_HOME", home), ("HF_TOKEN", "hf_env"), ("HF_HUB_OFFLINE", "true")], HubConfig::from_env);
    assert_eq!(config.token, Token::new("hf_env"));
    assert!(config.offline);
    assert!(!format!("{config:?}").contains("hf_env"));
}
