//! Sharded saving and loading: `transformers`' shard split, file names and index format.

mod common;

use serde_json::{json, Value};
use vkformers_io::{read_json, save_safetensors, Dtype, ModelWeights, SaveTensor};

/// Tensors a(40 B) b(80 B) c(20 B) d(400 B) e(20 B), saved with a 100-byte shard limit, split as
/// `huggingface_hub` splits them: [a] [d] [b c] [e] (d is over the limit: a shard of its own,
/// appended while [b c] is still being filled).
fn save_five(dir: &std::path::Path, data: &[f32]) -> vkformers_io::SavedWeights {
    let tensors = [
        SaveTensor::f32("e", Dtype::F16, &[10], &data[..10]),
        SaveTensor::f32("d", Dtype::F32, &[10, 10], &data[..100]),
        SaveTensor::f32("c", Dtype::F32, &[5], &data[..5]),
        SaveTensor::f32("b", Dtype::F32, &[4, 5], &data[..20]),
        SaveTensor::f32("a", Dtype::F32, &[10], &data[..10]),
    ];
    save_safetensors(dir, &tensors, 100).unwrap()
}

#[test]
fn sharded_save_matches_transformers_layout_and_loads_back() {
    let dir = tempfile::tempdir().unwrap();
    let data = common::values(100, 7);
    let saved = save_five(dir.path(), &data);

    let shard = |i: usize| format!("model-{i:05}-of-00004.safetensors");
    assert_eq!(saved.files, (1..=4).map(|i| dir.path().join(shard(i))).collect::<Vec<_>>());
    assert_eq!(saved.index, Some(dir.path().join("model.safetensors.index.json")));
    assert_eq!(saved.total_size, 40 + 80 + 20 + 400 + 20);
    assert_eq!(saved.total_parameters, 10 + 20 + 5 + 100 + 10);
    let mut want_files: Vec<String> = (1..=4).map(shard).collect();
    want_files.push("model.safetensors.index.json".to_string());
    assert_eq!(common::file_names(dir.path()), want_files);

    // The index, field by field.
    let index = read_json(dir.path().join("model.safetensors.index.json")).unwrap();
    let top: Vec<&String> = index.as_object().unwrap().keys().collect();
    assert_eq!(top, ["metadata", "weight_map"]);
    assert_eq!(index["metadata"], json!({"total_parameters": 145, "total_size": 560}));
    assert_eq!(index["metadata"]["total_size"].as_u64(), Some(560));
    let weight_map = index["weight_map"].as_object().unwrap();
    assert_eq!(weight_map.len(), 5);
    for (tensor, file) in [("a", 1), ("b", 3), ("c", 3), ("d", 2), ("e", 4)] {
        assert_eq!(weight_map[tensor], Value::String(shard(file)), "{tensor}");
    }

    // The exact text: json.dumps(index, indent=2, sort_keys=True) + "\n".
    let text = std::fs::read_to_string(dir.path().join("model.safetensors.index.json")).unwrap();
    let want = "{\n  \"metadata\": {\n    \"total_parameters\": 145,\n    \"total_size\": 560\n  },\n  \"weight_map\": {\n    \
                \"a\": \"model-00001-of-00004.safetensors\",\n    \"b\": \"model-00003-of-00004.safetensors\",\n    \
                \"c\": \"model-00003-of-00004.safetensors\",\n    \"d\": \"model-00002-of-00004.safetensors\",\n    \
                \"e\": \"model-00004-of-00004.safetensors\"\n  }\n}\n";
    assert_eq!(text, want);

    // Each shard is a standalone safetensors file holding exactly its tensors.
    let s3 = ModelWeights::open_file(dir.path().join(shard(3))).unwrap();
    assert_eq!(s3.names().collect::<Vec<_>>(), ["b", "c"]);

    // Loading the folder goes through the index.
    let w = ModelWeights::open(dir.path()).unwrap();
    assert_eq!(w.files().len(), 4);
    assert_eq!(w.names().collect::<Vec<_>>(), ["a", "b", "c", "d", "e"]);
    assert_eq!(w.info("d").unwrap().file, dir.path().join(shard(2)));
    assert_eq!(w.info("d").unwrap().shape, [10, 10]);
    assert_eq!(w.info("e").unwrap().dtype, Dtype::F16);
    assert_eq!(w.tensor_f32("d").unwrap(), data);
    assert_eq!(w.tensor_f32("b").unwrap(), &data[..20]);
    let e: Vec<f32> = data[..10].iter().map(|&x| half::f16::from_f32(x).to_f32()).collect();
    assert_eq!(w.tensor_f32("e").unwrap(), e);
}

#[test]
fn one_shard_means_no_index() {
    let dir = tempfile::tempdir().unwrap();
    let data = common::values(10, 8);
    let saved = save_safetensors(dir.path(), &[SaveTensor::f32("x", Dtype::F32, &[10], &data)], 40).unwrap();
    assert_eq!(saved.index, None);
    assert_eq!(common::file_names(dir.path()), ["model.safetensors"]);
}

#[test]
fn resaving_removes_stale_weight_files_and_keeps_the_rest() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("config.json"), "{}\n").unwrap();
    std::fs::write(dir.path().join("adapter_model.safetensors"), "x").unwrap();
    let data = common::values(100, 9);
    save_five(dir.path(), &data);

    // Unsharded over sharded: shards and index go.
    let saved = save_safetensors(dir.path(), &[SaveTensor::f32("x", Dtype::F32, &[4], &data[..4])], 1000).unwrap();
    assert_eq!(saved.index, None);
    assert_eq!(common::file_names(dir.path()), ["adapter_model.safetensors", "config.json", "model.safetensors"]);

    // Sharded over unsharded: model.safetensors goes (transformers would prefer it).
    save_five(dir.path(), &data);
    assert!(!dir.path().join("model.safetensors").exists());
    // Fewer shards over more: the extra shards go.
    let t =
        [SaveTensor::f32("p", Dtype::F32, &[20], &data[..20]), SaveTensor::f32("q", Dtype::F32, &[20], &data[..20])];
    save_safetensors(dir.path(), &t, 100).unwrap();
    assert_eq!(
        common::file_names(dir.path()),
        [
            "adapter_model.safetensors",
            "config.json",
            "model-00001-of-00002.safetensors",
            "model-00002-of-00002.safetensors",
            "model.safetensors.index.json"
        ]
    );
    let w = ModelWeights::open(dir.path()).unwrap();
    assert_eq!(w.names().collect::<Vec<_>>(), ["p", "q"]);
}
