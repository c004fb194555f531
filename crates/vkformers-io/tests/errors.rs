//! Every error case gives its typed error, with a message naming what is wrong and where.

mod common;

use std::path::Path;

use vkformers_io::{read_json, save_safetensors, Dtype, IoError, ModelWeights, SaveTensor, DEFAULT_MAX_SHARD_BYTES};

fn save_small(dir: &Path) {
    let data = common::values(8, 5);
    let ids: Vec<u8> = (0..4i64).flat_map(|v| v.to_le_bytes()).collect();
    let tensors = [
        SaveTensor::f32("model.embed_tokens.weight", Dtype::F32, &[2, 4], &data),
        SaveTensor::f32("model.norm.weight", Dtype::BF16, &[8], &data),
        SaveTensor::raw("model.position_ids", Dtype::I64, &[4], &ids),
    ];
    save_safetensors(dir, &tensors, DEFAULT_MAX_SHARD_BYTES).unwrap();
}

fn message(e: &IoError) -> String {
    let m = e.to_string();
    println!("{m}");
    m
}

#[test]
fn missing_folder() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("no-such-model");
    let e = ModelWeights::open(&path).unwrap_err();
    assert!(matches!(&e, IoError::FolderNotFound { path: p } if *p == path), "{e:?}");
    let m = message(&e);
    assert!(m.contains("no-such-model") && m.contains("does not exist") && m.contains("model.safetensors"));
}

#[test]
fn a_file_instead_of_a_folder() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("config.json");
    std::fs::write(&file, "{}").unwrap();
    let e = ModelWeights::open(&file).unwrap_err();
    assert!(matches!(e, IoError::NotAFolder { .. }), "{e:?}");
    assert!(message(&e).contains("not a folder"));
}

#[test]
fn folder_without_weights() {
    let dir = tempfile::tempdir().unwrap();
    let e = ModelWeights::open(dir.path()).unwrap_err();
    assert!(matches!(e, IoError::NoWeights { .. }), "{e:?}");
    let m = message(&e);
    assert!(m.contains("model.safetensors") && m.contains("model.safetensors.index.json"));

    std::fs::write(dir.path().join("pytorch_model.bin"), "x").unwrap();
    let m = message(&ModelWeights::open(dir.path()).unwrap_err());
    assert!(m.contains("PyTorch") && m.contains("convert"), "{m}");
}

#[test]
fn missing_file() {
    let dir = tempfile::tempdir().unwrap();
    let e = ModelWeights::open_file(dir.path().join("model.safetensors")).unwrap_err();
    assert!(matches!(e, IoError::FileNotFound { .. }), "{e:?}");
    assert!(message(&e).contains("model.safetensors"));
}

#[test]
fn truncated_file() {
    let dir = tempfile::tempdir().unwrap();
    save_small(dir.path());
    let path = dir.path().join("model.safetensors");
    let bytes = std::fs::read(&path).unwrap();
    std::fs::write(&path, &bytes[..bytes.len() - 3]).unwrap();
    let e = ModelWeights::open(dir.path()).unwrap_err();
    assert!(matches!(&e, IoError::CorruptSafetensors { path: p, .. } if *p == path), "{e:?}");
    let m = message(&e);
    assert!(m.contains("model.safetensors") && m.contains("truncated"));
}

#[test]
fn corrupt_files() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("model.safetensors");
    // Empty, shorter than a header, header length beyond the file, header not JSON.
    let mut not_json = 8u64.to_le_bytes().to_vec();
    not_json.extend_from_slice(b"{{{{{{{{");
    for bytes in [vec![], vec![1, 2, 3], 1000u64.to_le_bytes().to_vec(), not_json] {
        std::fs::write(&path, &bytes).unwrap();
        let e = ModelWeights::open(dir.path()).unwrap_err();
        assert!(matches!(e, IoError::CorruptSafetensors { .. }), "{bytes:?}: {e:?}");
        assert!(message(&e).contains("model.safetensors"));
    }
}

#[test]
fn index_naming_a_missing_shard() {
    let dir = tempfile::tempdir().unwrap();
    let data = common::values(30, 6);
    let t =
        [SaveTensor::f32("a", Dtype::F32, &[15], &data[..15]), SaveTensor::f32("b", Dtype::F32, &[15], &data[15..])];
    save_safetensors(dir.path(), &t, 60).unwrap();
    std::fs::remove_file(dir.path().join("model-00002-of-00002.safetensors")).unwrap();
    let e = ModelWeights::open(dir.path()).unwrap_err();
    match &e {
        IoError::MissingShard { shard, tensor, .. } => {
            assert_eq!(shard, "model-00002-of-00002.safetensors");
            assert_eq!(tensor, "b");
        }
        other => panic!("{other:?}"),
    }
    let m = message(&e);
    assert!(m.contains("model-00002-of-00002.safetensors") && m.contains("model.safetensors.index.json"));
}

#[test]
fn index_not_matching_its_shards() {
    let dir = tempfile::tempdir().unwrap();
    let data = common::values(30, 6);
    let t =
        [SaveTensor::f32("a", Dtype::F32, &[15], &data[..15]), SaveTensor::f32("b", Dtype::F32, &[15], &data[15..])];
    save_safetensors(dir.path(), &t, 60).unwrap();
    let index = dir.path().join("model.safetensors.index.json");
    let text = std::fs::read_to_string(&index).unwrap().replace("\"b\": \"model-00002", "\"b\": \"model-00001");
    std::fs::write(&index, text).unwrap();
    let e = ModelWeights::open(dir.path()).unwrap_err();
    assert!(matches!(&e, IoError::IndexMismatch { tensor, .. } if tensor == "b"), "{e:?}");
    assert!(message(&e).contains("model-00001-of-00002.safetensors"));
}

#[test]
fn malformed_index() {
    let dir = tempfile::tempdir().unwrap();
    let index = dir.path().join("model.safetensors.index.json");
    std::fs::write(&index, r#"{"metadata": {}}"#).unwrap();
    let e = ModelWeights::open(dir.path()).unwrap_err();
    assert!(matches!(e, IoError::BadIndex { .. }), "{e:?}");
    assert!(message(&e).contains("weight_map"));

    std::fs::write(&index, "{\n  \"weight_map\": {\n    \"a\": \"x.safetensors\",,\n  }\n}").unwrap();
    let e = ModelWeights::open(dir.path()).unwrap_err();
    assert!(matches!(e, IoError::Json { line: 3, .. }), "{e:?}");

    std::fs::write(&index, r#"{"weight_map": {"a": "../elsewhere.safetensors"}}"#).unwrap();
    assert!(matches!(ModelWeights::open(dir.path()).unwrap_err(), IoError::BadIndex { .. }));
}

#[test]
fn unsupported_dtype_as_f32() {
    let dir = tempfile::tempdir().unwrap();
    save_small(dir.path());
    let w = ModelWeights::open(dir.path()).unwrap();
    let e = w.tensor_f32("model.position_ids").unwrap_err();
    match &e {
        IoError::UnsupportedDtype { tensor, dtype, path } => {
            assert_eq!(tensor, "model.position_ids");
            assert_eq!(dtype, "I64");
            assert_eq!(*path, dir.path().join("model.safetensors"));
        }
        other => panic!("{other:?}"),
    }
    let m = message(&e);
    assert!(m.contains("model.position_ids") && m.contains("I64") && m.contains("tensor_bytes"));
    // Its raw bytes are still readable.
    assert_eq!(w.tensor_bytes("model.position_ids").unwrap().data.len(), 32);
}

#[test]
fn tensor_not_found_suggests_close_names() {
    let dir = tempfile::tempdir().unwrap();
    save_small(dir.path());
    let w = ModelWeights::open(dir.path()).unwrap();

    let e = w.tensor_f32("model.embed_token.weight").unwrap_err();
    match &e {
        IoError::TensorNotFound { name, suggestions, .. } => {
            assert_eq!(name, "model.embed_token.weight");
            assert_eq!(suggestions, &["model.embed_tokens.weight"]);
        }
        other => panic!("{other:?}"),
    }
    let m = message(&e);
    assert!(m.contains("did you mean `model.embed_tokens.weight`?"), "{m}");

    // A missing `model.` prefix is found too; a wholly different name gets no suggestion.
    let e = w.info("norm.weight").unwrap_err();
    assert!(matches!(&e, IoError::TensorNotFound { suggestions, .. } if suggestions == &["model.norm.weight"]));
    let m = message(&w.tensor_bytes("lm_head.weight").unwrap_err());
    assert!(m.contains("no tensor named `lm_head.weight`") && !m.contains("did you mean"), "{m}");
}

#[test]
fn invalid_tensors_are_refused_before_anything_is_written() {
    let dir = tempfile::tempdir().unwrap();
    let data = [1.0f32; 6];
    let cases = [
        (vec![SaveTensor::f32("w", Dtype::F32, &[2, 4], &data)], "8 elements but 6"),
        (vec![SaveTensor::raw("w", Dtype::F16, &[4], &[0u8; 6])], "takes 8 bytes but 6"),
        (vec![SaveTensor::f32("w", Dtype::I32, &[6], &data)], "not I32"),
        (
            vec![SaveTensor::f32("w", Dtype::F32, &[6], &data), SaveTensor::f32("w", Dtype::F16, &[6], &data)],
            "appears twice",
        ),
    ];
    for (tensors, want) in cases {
        let e = save_safetensors(dir.path(), &tensors, DEFAULT_MAX_SHARD_BYTES).unwrap_err();
        assert!(matches!(&e, IoError::InvalidTensor { tensor, .. } if tensor == "w"), "{e:?}");
        let m = message(&e);
        assert!(m.contains(want), "{m}");
        assert!(common::file_names(dir.path()).is_empty());
    }
}

#[test]
fn json_errors_name_file_line_and_column() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("config.json");
    std::fs::write(&path, "{\n  \"a\": 1,\n  \"b\": tru,\n  \"c\": 2\n}\n").unwrap();
    let e = read_json(&path).unwrap_err();
    match &e {
        IoError::Json { path: p, line, column, .. } => {
            assert_eq!(p, &path);
            assert_eq!(*line, 3);
            assert!(*column > 0);
        }
        other => panic!("{other:?}"),
    }
    let m = message(&e);
    assert!(m.contains("config.json") && m.contains("line 3"));

    let e = read_json(dir.path().join("missing.json")).unwrap_err();
    assert!(matches!(e, IoError::FileNotFound { .. }), "{e:?}");
    assert!(message(&e).contains("missing.json"));
}
