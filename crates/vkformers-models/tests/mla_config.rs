//! Config errors of the multi-head latent attention families name the field to fix.

use std::path::PathBuf;

use serde_json::{json, Value};
use vkformers_models::spec_from_config;

mod common;

fn config(name: &str) -> Value {
    let p = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures").join(name).join("config.json");
    vkformers_io::read_json(p).unwrap()
}

/// The error of `name`'s config with `changes` merged in.
fn error_with(name: &str, changes: Value) -> String {
    let mut cfg = config(name);
    for (k, v) in changes.as_object().unwrap() {
        cfg[k] = v.clone();
    }
    match spec_from_config(&cfg) {
        Ok(_) => panic!("{name} with {changes} was accepted"),
        Err(e) => e.to_string(),
    }
}

#[test]
fn every_mla_fixture_config_parses() {
    for name in common::MLA_FIXTURES {
        let spec = spec_from_config(&config(name)).unwrap();
        assert!(spec.layers.iter().all(|l| l.attn.mla.is_some()), "{name}: every layer is MLA");
    }
}

/// PEFT keys adapters by module path: A.X-K2's `q_gate_proj` (stored as `q_b_proj`), and
/// LongCat-Flash's sublayer modules under their layer (`self_attn.{s}`, `mlps.{s}`).
#[test]
fn peft_module_paths_of_axk2_and_longcat_flash() {
    let axk2 = spec_from_config(&config("axk2")).unwrap();
    assert_eq!(axk2.module_path("model.layers.1.self_attn.q_b_proj"), "model.layers.1.self_attn.q_gate_proj");
    assert_eq!(axk2.module_path("model.layers.1.self_attn.kv_b_proj"), "model.layers.1.self_attn.kv_b_proj");
    let longcat = spec_from_config(&config("longcat_flash")).unwrap();
    let stored = |internal: &str| {
        let e = longcat.weight_map.iter().find(|e| e.parts.iter().any(|p| p.0 == internal)).unwrap();
        longcat.module_path(&e.hf)
    };
    assert_eq!(stored("model.sublayers.1.self_attn.q_b_proj.weight"), "model.layers.0.self_attn.1.q_b_proj.weight");
    assert_eq!(stored("model.sublayers.0.mlp.down_proj.weight"), "model.layers.0.mlps.0.down_proj.weight");
}

/// The original Sarvam config's spellings (remote-code era) give the spec its saved config gives.
#[test]
fn sarvam_legacy_spellings_parse_as_the_saved_config() {
    let saved = config("sarvam_mla");
    let mut legacy = saved.clone();
    let obj = legacy.as_object_mut().unwrap();
    for (name, alias) in [("n_routed_experts", "num_experts"), ("n_shared_experts", "num_shared_experts")] {
        let v = obj.remove(name).unwrap();
        obj.insert(alias.into(), v);
    }
    let rope = obj.remove("rope_parameters").unwrap();
    obj.insert("rope_scaling".into(), json!({"type": "deepseek_yarn", "factor": 4.0, "original_max_position_embeddings": 16, "mscale": 1.0, "mscale_all_dim": 1.0}));
    obj.insert("rope_theta".into(), rope["rope_theta"].clone());
    let (a, b) = (spec_from_config(&saved).unwrap(), spec_from_config(&legacy).unwrap());
    assert_eq!(a.layers[1].mlp, b.layers[1].mlp, "the MoE block from the legacy names");
    let rope = b.layers[0].attn.rope.as_ref().unwrap();
    assert!(
        rope.mscale == 1.0 && rope.inv_freq != a.layers[0].attn.rope.as_ref().unwrap().inv_freq,
        "deepseek_yarn is YaRN"
    );
}

#[test]
fn bad_mla_configs_are_errors_naming_the_field() {
    let cases = [
        ("deepseek_v3", json!({"num_key_value_heads": 2}), "num_key_value_heads"),
        ("deepseek_v3", json!({"n_group": 3}), "n_group"),
        ("deepseek_v3", json!({"topk_group": 5}), "topk_group"),
        ("deepseek_v3", json!({"topk_group": 1, "num_experts_per_tok": 3}), "num_experts_per_tok"),
        ("deepseek_v2_qlora", json!({"n_group": null}), "n_group"),
        ("deepseek_v2", json!({"topk_method": "noaux_tc"}), "topk_method"),
        ("deepseek_v2", json!({"q_lora_rank": 0}), "q_lora_rank"),
        ("minicpm3", json!({"qk_rope_head_dim": 3}), "qk_rope_head_dim"),
        ("minicpm3", json!({"kv_lora_rank": 0}), "kv_lora_rank"),
        ("minicpm3", json!({"qk_nope_head_dim": 1u64 << 40}), "qk_nope_head_dim"),
        ("axk1", json!({"mlp_layer_types": ["dense"]}), "mlp_layer_types"),
        ("axk1", json!({"q_lora_rank": null}), "q_lora_rank"),
        ("glm4_moe_lite", json!({"partial_rotary_factor": 0.5}), "partial_rotary_factor"),
        ("axk2", json!({"q_lora_rank": null}), "q_lora_rank"),
        ("axk2", json!({"n_group": 2}), "topk_group"),
        ("axk2", json!({"gated_norm_rank": 0}), "gated_norm_rank"),
        // The rotary embedding is sized by head_dim, the rotary part by qk_rope_head_dim.
        ("longcat_flash", json!({"head_dim": 6}), "head_dim"),
        ("longcat_flash", json!({"router_bias": true}), "router_bias"),
        ("longcat_flash", json!({"moe_topk": 5}), "moe_topk"),
        ("longcat_flash", json!({"q_lora_rank": null}), "q_lora_rank"),
        ("longcat_flash", json!({"zero_expert_num": -1}), "zero_expert_num"),
        // Mistral 4's group-limited softmax router (topk_group < n_group) is not implemented.
        ("mistral4", json!({"n_routed_experts": 4, "n_group": 2, "topk_group": 1}), "topk_group"),
        (
            "mistral4",
            json!({"rope_parameters": {"rope_type": "default", "partial_rotary_factor": 0.5}}),
            "partial_rotary_factor",
        ),
        (
            "mistral4",
            json!({"rope_parameters": {"rope_type": "default", "llama_4_scaling_beta": 0.1}}),
            "original_max_position_embeddings",
        ),
    ];
    for (name, changes, field) in cases {
        let e = error_with(name, changes.clone());
        assert!(e.contains(field), "{name} with {changes}: `{e}` does not name {field}");
    }
}
