//! config.json -> ModelSpec: old and new spellings, family specifics, clear errors.

use serde_json::json;
use vkformers_kernels::glu::Glu;
use vkformers_models::spec::Norm;
use vkformers_models::{spec_from_config, ModelError};

fn llama_cfg() -> serde_json::Value {
    json!({
        "model_type": "llama", "vocab_size": 128, "hidden_size": 32, "num_hidden_layers": 2,
        "num_attention_heads": 4, "num_key_value_heads": 2, "intermediate_size": 64,
        "rms_norm_eps": 1e-5, "rope_theta": 500000.0, "torch_dtype": "float32",
        "max_position_embeddings": 64, "hidden_act": "silu"
    })
}

#[test]
fn llama_old_and_new_rope_spellings_agree() {
    let old = spec_from_config(&llama_cfg()).unwrap();
    let mut new = llama_cfg();
    let obj = new.as_object_mut().unwrap();
    obj.remove("rope_theta");
    obj.remove("torch_dtype");
    obj.insert("dtype".into(), json!("float32"));
    obj.insert("rope_parameters".into(), json!({"rope_type": "default", "rope_theta": 500000.0}));
    let new = spec_from_config(&new).unwrap();
    assert_eq!(old, new);
    let a = &old.layers[0].attn;
    assert_eq!((a.heads, a.kv_heads, a.head_dim, old.layers.len()), (4, 2, 8, 2));
    assert_eq!(a.rope.as_ref().unwrap().inv_freq.len(), 4);
    assert!(!old.tied_head && a.sliding_window.is_none());
}

#[test]
fn family_specifics() {
    let mut c = llama_cfg();
    c["model_type"] = json!("gemma");
    c["head_dim"] = json!(16);
    c["hidden_act"] = json!("gelu");
    c["hidden_activation"] = json!("gelu_pytorch_tanh");
    let g = spec_from_config(&c).unwrap();
    assert_eq!(g.final_norm, Norm::Rms { eps: 1e-5, unit_offset: true });
    assert!(g.tied_head && (g.embed_scale - 32f32.sqrt()).abs() < 1e-6);
    assert!(matches!(g.layers[0].mlp, vkformers_models::spec::MlpSpec::Gated { glu: Glu::GeGluTanh, .. }));
    assert_eq!(g.layers[0].attn.head_dim, 16);
    c["hidden_act"] = json!("silu");
    c["model_type"] = json!("qwen3");
    assert!(spec_from_config(&c).unwrap().layers[0].attn.qk_norm.is_some());
    c["model_type"] = json!("qwen2");
    assert!(spec_from_config(&c).unwrap().layers[0].attn.qkv_bias);
    c["model_type"] = json!("mistral");
    c["sliding_window"] = json!(4);
    assert_eq!(spec_from_config(&c).unwrap().layers[1].attn.sliding_window, Some(4));
}

#[test]
fn unknown_model_type_and_bad_options_are_named() {
    let mut c = llama_cfg();
    c["model_type"] = json!("mamba");
    let e = spec_from_config(&c).unwrap_err();
    assert!(matches!(&e, ModelError::UnknownModelType(t) if t == "mamba"), "{e}");
    assert!(e.to_string().contains("vkformers architectures"));
    let mut c = llama_cfg();
    c["rope_scaling"] = json!({"rope_type": "wibble", "factor": 2.0});
    assert!(spec_from_config(&c).unwrap_err().to_string().contains("wibble"));
    let mut c = llama_cfg();
    c["hidden_act"] = json!("softplus");
    assert!(spec_from_config(&c).unwrap_err().to_string().contains("softplus"));
    let mut c = llama_cfg();
    c.as_object_mut().unwrap().remove("hidden_size");
    assert!(spec_from_config(&c).unwrap_err().to_string().contains("hidden_size"));
}
