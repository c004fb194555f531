//! Inverse frequencies and attention factors of every rope_type against transformers' own
//! (`tools/parity/rope_reference.py` wrote them).

use vkformers_models::spec_from_config;

#[test]
fn rope_types_match_transformers() {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../../tests/fixtures_rope/inv_freq.json");
    let cases: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    for (name, case) in cases.as_object().unwrap() {
        let mut cfg = case["config"].clone();
        let extra = serde_json::json!({"model_type": "llama", "vocab_size": 32, "num_hidden_layers": 1, "intermediate_size": 32});
        for (k, v) in extra.as_object().unwrap() {
            cfg[k] = v.clone();
        }
        let spec = spec_from_config(&cfg).unwrap_or_else(|e| panic!("{name}: {e}"));
        let rope = spec.layers[0].attn.rope.as_ref().unwrap();
        let want: Vec<f64> = case["inv_freq"].as_array().unwrap().iter().map(|v| v.as_f64().unwrap()).collect();
        assert_eq!(rope.inv_freq.len(), want.len(), "{name}");
        for (i, (g, w)) in rope.inv_freq.iter().zip(&want).enumerate() {
            let rel = (f64::from(*g) - w).abs() / w.abs();
            assert!(rel <= 1e-6, "{name}: inv_freq[{i}] {g} vs {w}");
        }
        let af = case["attention_factor"].as_f64().unwrap();
        assert!((f64::from(rope.mscale) - af).abs() <= 1e-6, "{name}: attention factor {} vs {af}", rope.mscale);
    }
}
