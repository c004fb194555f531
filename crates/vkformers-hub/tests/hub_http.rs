//! Resolving Hub ids against a fake Hub on loopback (see `common`): downloads into the Python
//! cache layout, offline cache hits, revisions, resume, hostile names, pickle refusal, tokens.

mod common;

use common::{sha256_hex, FakeFile, FakeHub, FakeRepo};
use std::path::{Path, PathBuf};
use vkformers_hub::{resolve_dataset_with, resolve_model_with, DatasetQuery, HubConfig, HubError, Token, Want};

const SHA_A: &str = "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa";
const SHA_B: &str = "bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb";
const SHA_P: &str = "cccccccccccccccccccccccccccccccccccccccc";
const SECRET: &str = "hf_S3cretTokenValue42";

/// Bytes that are not all alike, so a wrong offset on resume shows up in the sha256.
fn weights(n: usize, seed: u8) -> Vec<u8> {
    (0..n).map(|i| (i as u32).wrapping_mul(2654435761).rotate_left(seed as u32) as u8).collect()
}

fn tiny_model_files(config: &str) -> Vec<FakeFile> {
    vec![
        FakeFile::new("config.json", config.as_bytes()),
        FakeFile::new("generation_config.json", b"{\"do_sample\": false}"),
        FakeFile::new("tokenizer.json", b"{\"model\": {}}"),
        FakeFile::new("model.safetensors", &weights(300_000, 3)),
        FakeFile::new("pytorch_model.bin", b"pickle bytes never fetched"),
        FakeFile::new("README.md", b"# tiny"),
    ]
}

fn config_for(hub: &FakeHub, cache: &Path) -> HubConfig {
    HubConfig::new(&hub.endpoint, cache)
}

fn cache_dir() -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let cache = dir.path().join("hub");
    (dir, cache)
}

fn file_requests(hub: &FakeHub) -> Vec<String> {
    hub.seen().into_iter().map(|s| s.path).filter(|p| !p.starts_with("/api/")).collect()
}

#[test]
fn downloads_a_model_into_the_python_cache_layout() {
    let hub = FakeHub::start(vec![FakeRepo::new("models", "org/tiny").commit("main", SHA_A, tiny_model_files("{}"))]);
    let (_dir, cache) = cache_dir();
    let snap = resolve_model_with("org/tiny", Want::Model, &config_for(&hub, &cache)).unwrap();

    let repo = cache.join("models--org--tiny");
    assert_eq!(snap, repo.join("snapshots").join(SHA_A));
    assert_eq!(std::fs::read_to_string(repo.join("refs/main")).unwrap(), SHA_A);
    let weights_bytes = weights(300_000, 3);
    let blob = sha256_hex(&weights_bytes);
    assert_eq!(
        std::fs::read_link(snap.join("model.safetensors")).unwrap(),
        PathBuf::from(format!("../../blobs/{blob}"))
    );
    assert_eq!(std::fs::read(snap.join("model.safetensors")).unwrap(), weights_bytes);
    let config_blob = FakeFile::new("config.json", b"{}").etag();
    assert_eq!(std::fs::read(repo.join("blobs").join(config_blob)).unwrap(), b"{}");
    for wanted in ["config.json", "generation_config.json", "tokenizer.json"] {
        assert!(snap.join(wanted).is_file(), "{wanted}");
    }
    for unwanted in ["pytorch_model.bin", "README.md"] {
        assert!(!snap.join(unwanted).exists(), "{unwanted} fetched");
    }
    assert!(file_requests(&hub).iter().all(|p| !p.ends_with(".bin") && !p.ends_with("README.md")));
    // The weights went through the CDN redirect, the small files straight from /resolve/.
    assert!(file_requests(&hub).iter().any(|p| p == &format!("/cdn/{blob}")));
}

#[test]
fn sharded_weights_come_from_the_index() {
    let index = r#"{"metadata": {}, "weight_map": {"a": "model-00001-of-00002.safetensors",
        "b": "model-00002-of-00002.safetensors", "c": "model-00001-of-00002.safetensors"}}"#;
    let files = vec![
        FakeFile::new("config.json", b"{}"),
        FakeFile::new("model.safetensors.index.json", index.as_bytes()),
        FakeFile::new("model-00001-of-00002.safetensors", &weights(1000, 1)),
        FakeFile::new("model-00002-of-00002.safetensors", &weights(1000, 2)),
        FakeFile::new("model-00003-of-00003.safetensors", &weights(10, 3)),
    ];
    let hub = FakeHub::start(vec![FakeRepo::new("models", "org/sharded").commit("main", SHA_A, files)]);
    let (_dir, cache) = cache_dir();
    let snap = resolve_model_with("org/sharded", Want::Auto, &config_for(&hub, &cache)).unwrap();
    assert_eq!(std::fs::read(snap.join("model-00002-of-00002.safetensors")).unwrap(), weights(1000, 2));
    assert!(snap.join("model-00001-of-00002.safetensors").is_file());
    assert!(!snap.join("model-00003-of-00003.safetensors").exists(), "a shard the index does not name");
}

#[test]
fn a_cached_model_resolves_offline_and_when_the_hub_is_down() {
    let hub = FakeHub::start(vec![FakeRepo::new("models", "org/tiny").commit("main", SHA_A, tiny_model_files("{}"))]);
    let (_dir, cache) = cache_dir();
    let online = resolve_model_with("org/tiny", Want::Model, &config_for(&hub, &cache)).unwrap();
    let requests = hub.seen().len();

    let mut offline = config_for(&hub, &cache);
    offline.offline = true;
    assert_eq!(resolve_model_with("org/tiny", Want::Model, &offline).unwrap(), online);
    assert_eq!(hub.seen().len(), requests, "offline mode made a request");

    // Online again: one listing, no file downloads, since the snapshot is complete.
    assert_eq!(resolve_model_with("org/tiny", Want::Model, &config_for(&hub, &cache)).unwrap(), online);
    assert_eq!(hub.seen().len(), requests + 1);

    // An unreachable Hub falls back to the complete cached copy.
    let down = HubConfig::new("http://127.0.0.1:9", &cache);
    assert_eq!(resolve_model_with("org/tiny", Want::Model, &down).unwrap(), online);

    // Offline and not cached: a clear error naming the cache and the way out.
    let err = resolve_model_with("org/other", Want::Model, &offline).unwrap_err();
    assert!(matches!(err, HubError::NotCached { .. }), "{err}");
    assert!(err.to_string().contains("HF_HUB_OFFLINE"), "{err}");
}

#[test]
fn revisions_pin_branches_tags_and_commits() {
    let repo = FakeRepo::new("models", "org/rev").commit("v1", SHA_B, tiny_model_files("{\"version\": 1}")).commit(
        "main",
        SHA_A,
        tiny_model_files("{\"version\": 2}"),
    );
    let hub = FakeHub::start(vec![repo]);
    let (_dir, cache) = cache_dir();
    let config = config_for(&hub, &cache);
    let read = |p: PathBuf| std::fs::read_to_string(p.join("config.json")).unwrap();

    assert_eq!(read(resolve_model_with("org/rev", Want::Model, &config).unwrap()), "{\"version\": 2}");
    let v1 = resolve_model_with("org/rev@v1", Want::Model, &config).unwrap();
    assert!(v1.ends_with(SHA_B));
    assert_eq!(read(v1), "{\"version\": 1}");
    let by_sha = resolve_model_with(&format!("org/rev@{SHA_B}"), Want::Model, &config).unwrap();
    assert_eq!(read(by_sha), "{\"version\": 1}");

    let refs = cache.join("models--org--rev/refs");
    assert_eq!(std::fs::read_to_string(refs.join("v1")).unwrap(), SHA_B);
    assert_eq!(std::fs::read_to_string(refs.join("main")).unwrap(), SHA_A);
    assert!(!refs.join(SHA_B).exists(), "Python writes no ref for a commit sha");
    // The weights blob is shared by both commits: downloaded once.
    let blob = sha256_hex(&weights(300_000, 3));
    assert_eq!(file_requests(&hub).iter().filter(|p| p.ends_with(&blob)).count(), 1);

    let mut offline = config.clone();
    offline.offline = true;
    assert_eq!(read(resolve_model_with("org/rev@v1", Want::Model, &offline).unwrap()), "{\"version\": 1}");
    let err = resolve_model_with("org/rev@v9", Want::Model, &config).unwrap_err();
    assert!(matches!(err, HubError::RepoNotFound { .. }), "{err}");
}

#[test]
fn a_cut_off_download_resumes_where_it_stopped() {
    let hub = FakeHub::start(vec![FakeRepo::new("models", "org/tiny").commit("main", SHA_A, tiny_model_files("{}"))]);
    let (_dir, cache) = cache_dir();
    let data = weights(300_000, 3);
    let blob = sha256_hex(&data);
    hub.cut_next_download(&blob);

    let err = resolve_model_with("org/tiny", Want::Model, &config_for(&hub, &cache)).unwrap_err();
    assert!(matches!(err, HubError::Interrupted { .. }), "{err}");
    assert!(err.to_string().contains("run again to resume"), "{err}");
    let partial = cache.join("models--org--tiny/blobs").join(format!("{blob}.incomplete"));
    let got = std::fs::metadata(&partial).unwrap().len();
    assert_eq!(got, data.len() as u64 / 2);
    assert!(!cache.join("models--org--tiny/refs/main").exists(), "ref written before the snapshot was complete");

    let snap = resolve_model_with("org/tiny", Want::Model, &config_for(&hub, &cache)).unwrap();
    assert_eq!(std::fs::read(snap.join("model.safetensors")).unwrap(), data);
    assert!(!partial.exists());
    let resumed = hub.seen().into_iter().filter(|s| s.path == format!("/cdn/{blob}")).collect::<Vec<_>>();
    assert_eq!(resumed.len(), 2);
    assert_eq!(resumed[0].range, None);
    assert_eq!(resumed[1].range.as_deref(), Some(format!("bytes={got}-").as_str()));
}

#[test]
fn a_corrupt_download_is_rejected_and_removed() {
    let mut files = tiny_model_files("{}");
    let mut bad = weights(300_000, 3);
    bad[1234] ^= 1;
    files[3].served = Some(bad);
    let hub = FakeHub::start(vec![FakeRepo::new("models", "org/bad").commit("main", SHA_A, files)]);
    let (_dir, cache) = cache_dir();
    let err = resolve_model_with("org/bad", Want::Model, &config_for(&hub, &cache)).unwrap_err();
    assert!(matches!(err, HubError::Corrupt { .. }), "{err}");
    assert!(err.to_string().contains("sha256"), "{err}");
    let blobs = cache.join("models--org--bad/blobs");
    let left: Vec<_> = std::fs::read_dir(&blobs).unwrap().flatten().map(|e| e.file_name()).collect();
    let blob = sha256_hex(&weights(300_000, 3));
    assert!(left.iter().all(|n| !n.to_string_lossy().starts_with(&blob)), "{left:?}");
    assert!(!cache.join("models--org--bad/snapshots").join(SHA_A).join("model.safetensors").exists());
}

#[test]
fn names_that_climb_out_of_the_cache_are_rejected() {
    let index = r#"{"weight_map": {"a": "../../../../escape.safetensors"}}"#;
    let climbing = vec![
        FakeFile::new("config.json", b"{}"),
        FakeFile::new("model.safetensors.index.json", index.as_bytes()),
        FakeFile::new("../../../../escape.safetensors", b"evil"),
    ];
    let mut hostile_blob = tiny_model_files("{}");
    hostile_blob[0].listed_blob = Some("../../../../escape".into());
    // An absolute name: `..` components already count as hidden files, which data selection skips.
    let dataset = vec![FakeFile::new("/evil/train.jsonl", b"{\"text\": \"x\"}\n")];
    let hub = FakeHub::start(vec![
        FakeRepo::new("models", "org/climb").commit("main", SHA_A, climbing),
        FakeRepo::new("models", "org/etag").commit("main", SHA_A, hostile_blob),
        FakeRepo::new("datasets", "org/climb").commit("main", SHA_A, dataset),
    ]);
    let (dir, cache) = cache_dir();
    let config = config_for(&hub, &cache);
    for id in ["org/climb", "org/etag"] {
        let err = resolve_model_with(id, Want::Model, &config).unwrap_err();
        assert!(matches!(err, HubError::UnsafePath { .. }), "{id}: {err}");
    }
    let err = resolve_dataset_with("org/climb", &DatasetQuery::default(), &config).unwrap_err();
    assert!(matches!(err, HubError::UnsafePath { .. }), "{err}");
    let outside: Vec<_> = std::fs::read_dir(dir.path()).unwrap().flatten().map(|e| e.file_name()).collect();
    assert_eq!(outside, vec![std::ffi::OsString::from("hub")], "something was written outside the cache");
    assert!(!Path::new("/escape.safetensors").exists() && !cache.join("escape").exists());
}

#[test]
fn a_pickle_only_repo_is_refused() {
    let files = vec![FakeFile::new("config.json", b"{}"), FakeFile::new("pytorch_model.bin", b"pickle")];
    let hub = FakeHub::start(vec![FakeRepo::new("models", "org/pickle").commit("main", SHA_A, files)]);
    let (_dir, cache) = cache_dir();
    let err = resolve_model_with("org/pickle", Want::Model, &config_for(&hub, &cache)).unwrap_err();
    assert!(matches!(err, HubError::PickleOnly { .. }), "{err}");
    let message = err.to_string();
    assert!(message.contains("pytorch_model.bin") && message.contains("safetensors"), "{message}");
    assert!(file_requests(&hub).is_empty(), "downloaded from a refused repo: {:?}", file_requests(&hub));
}

#[test]
fn a_gated_repo_needs_the_token_and_it_is_never_shown() {
    let mut private = FakeRepo::new("models", "org/gated").commit("main", SHA_A, tiny_model_files("{}"));
    private.token = Some(SECRET.into());
    // Gated: the listing is public, only the files need the token.
    let mut gated = FakeRepo::new("models", "org/gated-files").commit("main", SHA_A, tiny_model_files("{}"));
    gated.token = Some(SECRET.into());
    gated.private = false;
    let hub = FakeHub::start(vec![private, gated]);
    let (_dir, cache) = cache_dir();
    let mut shown = Vec::new();

    for id in ["org/gated", "org/gated-files"] {
        let err = resolve_model_with(id, Want::Model, &config_for(&hub, &cache)).unwrap_err();
        assert!(matches!(err, HubError::Unauthorized { status: 401, .. }), "{id}: {err}");
        assert!(err.to_string().contains("HF_TOKEN"), "{err}");
        let partials = std::fs::read_dir(cache.join("models--org--gated-files/blobs")).map(|d| d.count()).unwrap_or(0);
        assert_eq!(partials, 0, "a refused download left files behind");
    }

    let mut wrong = config_for(&hub, &cache);
    wrong.token = Token::new("hf_wrong");
    let err = resolve_model_with("org/gated", Want::Model, &wrong).unwrap_err();
    assert!(matches!(err, HubError::Unauthorized { .. }), "{err}");

    let mut right = config_for(&hub, &cache);
    right.token = Token::new(SECRET);
    for id in ["org/gated", "org/gated-files"] {
        let snap = resolve_model_with(id, Want::Model, &right).unwrap();
        assert!(snap.join("model.safetensors").is_file());
    }
    shown.push(format!("{right:?}"));
    shown.push(format!("{:?}", right.token));

    // A failure with the right token (a missing revision) must not show it either.
    let err = resolve_model_with("org/gated@nope", Want::Model, &right).unwrap_err();
    shown.push(format!("{err} {err:?}"));
    for text in &shown {
        assert!(!text.contains(SECRET) && !text.contains("S3cret"), "token shown: {text}");
    }
    let bearer = format!("Bearer {SECRET}");
    let seen = hub.seen();
    assert!(seen.iter().any(|s| s.path.starts_with("/api/") && s.authorization.as_deref() == Some(&bearer)));
    assert!(seen.iter().any(|s| s.path.contains("/resolve/") && s.authorization.as_deref() == Some(&bearer)));
    let cdn: Vec<_> = seen.iter().filter(|s| s.path.starts_with("/cdn/")).collect();
    assert!(!cdn.is_empty() && cdn.iter().all(|s| s.authorization.is_none()), "token sent off the Hub: {cdn:?}");
}

fn dataset_repo() -> FakeRepo {
    let main = vec![
        FakeFile::new("README.md", b"---\nlicense: mit\n---\n"),
        FakeFile::new("data/train-00000-of-00001.jsonl", b"{\"text\": \"train row\"}\n"),
        FakeFile::new("data/test-00000-of-00001.jsonl", b"{\"text\": \"test row\"}\n"),
        FakeFile::new("extra/notes.csv", b"a,b\n"),
    ];
    FakeRepo::new("datasets", "org/ds").commit("main", SHA_A, main)
}

fn scripted_dataset_repo() -> FakeRepo {
    let main =
        vec![FakeFile::new("scripted.py", b"import os; os.system('never run')"), FakeFile::new("README.md", b"x")];
    let parquet = vec![
        FakeFile::new("default/train/0000.parquet", b"PAR1 train PAR1"),
        FakeFile::new("default/validation/0000.parquet", b"PAR1 validation PAR1"),
    ];
    FakeRepo::new("datasets", "org/scripted").commit("main", SHA_A, main).commit("refs/convert/parquet", SHA_P, parquet)
}

#[test]
fn dataset_files_by_split_and_glob() {
    let hub = FakeHub::start(vec![dataset_repo()]);
    let (_dir, cache) = cache_dir();
    let config = config_for(&hub, &cache);
    let snap = cache.join("datasets--org--ds/snapshots").join(SHA_A);

    let train = resolve_dataset_with("org/ds", &DatasetQuery::default(), &config).unwrap();
    assert_eq!(train, vec![snap.join("data/train-00000-of-00001.jsonl")]);
    assert_eq!(std::fs::read_to_string(&train[0]).unwrap(), "{\"text\": \"train row\"}\n");
    let query = DatasetQuery { split: Some("test".into()), ..DatasetQuery::default() };
    assert_eq!(
        resolve_dataset_with("org/ds", &query, &config).unwrap(),
        vec![snap.join("data/test-00000-of-00001.jsonl")]
    );
    let query = DatasetQuery { files: Some("data/*.jsonl".into()), ..DatasetQuery::default() };
    assert_eq!(resolve_dataset_with("org/ds", &query, &config).unwrap().len(), 2);
    let query = DatasetQuery { files: Some("extra/*".into()), ..DatasetQuery::default() };
    let err = resolve_dataset_with("org/ds", &query, &config).unwrap_err();
    assert!(err.to_string().contains("not JSONL, JSON or Parquet"), "{err}");
    assert!(file_requests(&hub).iter().all(|p| !p.ends_with("README.md") && !p.ends_with(".csv")));

    let mut offline = config.clone();
    offline.offline = true;
    let query = DatasetQuery { split: Some("test".into()), ..DatasetQuery::default() };
    assert_eq!(
        resolve_dataset_with("org/ds", &query, &offline).unwrap(),
        vec![snap.join("data/test-00000-of-00001.jsonl")]
    );
}

#[test]
fn a_script_dataset_comes_from_the_parquet_branch_and_its_script_is_never_fetched() {
    let hub = FakeHub::start(vec![scripted_dataset_repo()]);
    let (_dir, cache) = cache_dir();
    let config = config_for(&hub, &cache);
    let repo = cache.join("datasets--org--scripted");

    let train = resolve_dataset_with("org/scripted", &DatasetQuery::default(), &config).unwrap();
    assert_eq!(train, vec![repo.join("snapshots").join(SHA_P).join("default/train/0000.parquet")]);
    assert_eq!(std::fs::read(&train[0]).unwrap(), b"PAR1 train PAR1");
    assert_eq!(std::fs::read_to_string(repo.join("refs/refs/convert/parquet")).unwrap(), SHA_P);
    assert!(hub.seen().iter().all(|s| !s.path.ends_with(".py")), "the builder script was requested");
    assert!(hub.seen().iter().any(|s| s.path.contains("/revision/refs%2Fconvert%2Fparquet")));

    let query = DatasetQuery { split: Some("validation".into()), config: Some("default".into()), files: None };
    let val = resolve_dataset_with("org/scripted", &query, &config).unwrap();
    assert_eq!(std::fs::read(&val[0]).unwrap(), b"PAR1 validation PAR1");

    let mut offline = config.clone();
    offline.offline = true;
    assert_eq!(resolve_dataset_with("org/scripted", &DatasetQuery::default(), &offline).unwrap(), train);
    let query = DatasetQuery { config: Some("nope".into()), ..DatasetQuery::default() };
    let err = resolve_dataset_with("org/scripted", &query, &config).unwrap_err();
    assert!(err.to_string().contains("--data-config") || err.to_string().contains("configs: default"), "{err}");
}

#[test]
fn concurrent_resolutions_download_each_blob_once() {
    let hub = FakeHub::start(vec![FakeRepo::new("models", "org/tiny").commit("main", SHA_A, tiny_model_files("{}"))]);
    let (_dir, cache) = cache_dir();
    let config = config_for(&hub, &cache);
    // Like the ranks of a multi-GPU launch, all resolving one model into one cache at once.
    let snaps: Vec<PathBuf> = std::thread::scope(|s| {
        let runs: Vec<_> = (0..4).map(|_| s.spawn(|| resolve_model_with("org/tiny", Want::Model, &config))).collect();
        runs.into_iter().map(|r| r.join().unwrap().unwrap()).collect()
    });
    assert!(snaps.iter().all(|s| s == &snaps[0]));
    let data = weights(300_000, 3);
    assert_eq!(std::fs::read(snaps[0].join("model.safetensors")).unwrap(), data);
    let blob = sha256_hex(&data);
    assert_eq!(file_requests(&hub).iter().filter(|p| p.ends_with(&blob)).count(), 1, "{:?}", file_requests(&hub));
    assert!(cache.join(".locks/models--org--tiny").join(format!("{blob}.lock")).is_file());
}
