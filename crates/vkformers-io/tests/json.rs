//! JSON helpers: deterministic pretty output, atomic writes, round trips.

use serde_json::json;
use vkformers_io::{read_json, to_json_text, write_json_atomic};

#[test]
fn pretty_sorted_with_trailing_newline() {
    let value = json!({"zeta": 1, "alpha": {"b": [1, 2.5, null], "a": "x"}, "mid": true, "empty": {}});
    let text = to_json_text(&value);
    let want = "{\n  \"alpha\": {\n    \"a\": \"x\",\n    \"b\": [\n      1,\n      2.5,\n      null\n    ]\n  },\n  \
                \"empty\": {},\n  \"mid\": true,\n  \"zeta\": 1\n}\n";
    assert_eq!(text, want);
}

#[test]
fn write_then_read_round_trips_and_is_deterministic() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("config.json");
    let value = json!({"architectures": ["LlamaForCausalLM"], "hidden_size": 64, "rope_theta": 10000.0,
                       "torch_dtype": "bfloat16", "eos_token_id": [1, 2]});
    write_json_atomic(&path, &value).unwrap();
    let first = std::fs::read(&path).unwrap();
    assert_eq!(read_json(&path).unwrap(), value);
    write_json_atomic(&path, &read_json(&path).unwrap()).unwrap();
    assert_eq!(std::fs::read(&path).unwrap(), first);
    assert!(first.ends_with(b"}\n"));
    let names: Vec<_> = std::fs::read_dir(dir.path()).unwrap().map(|e| e.unwrap().file_name()).collect();
    assert_eq!(names, ["config.json"]);
}
