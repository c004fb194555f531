//! The registry's config checks (`archs/check.rs`): a bad `config.json` is an error naming the
//! field, never a panic, a division by zero or a huge allocation.

use serde_json::{json, Value};
use vkformers_models::{spec_from_config, ModelSpec, Result};

fn llama(edit: impl Fn(&mut Value)) -> Result<ModelSpec> {
    let mut c = json!({
        "model_type": "llama", "vocab_size": 64, "hidden_size": 32, "num_hidden_layers": 2,
        "num_attention_heads": 4, "num_key_value_heads": 2, "intermediate_size": 48
    });
    edit(&mut c);
    spec_from_config(&c)
}

#[test]
fn a_valid_config_passes() {
    llama(|_| {}).unwrap();
}

#[test]
fn zero_heads_is_an_error_naming_the_field_not_a_panic() {
    let e = llama(|c| c["num_attention_heads"] = 0.into()).unwrap_err().to_string();
    assert!(e.contains("num_attention_heads"), "{e}");
}

#[test]
fn negative_fractional_or_huge_sizes_are_errors_naming_the_field() {
    for (key, v) in [("hidden_size", json!(-4)), ("vocab_size", json!(6.5)), ("intermediate_size", json!(1u64 << 40))] {
        let e = llama(|c| c[key] = v.clone()).unwrap_err().to_string();
        assert!(e.contains(key), "{key}={v}: {e}");
    }
}

#[test]
fn heads_that_do_not_group_are_an_error() {
    let e = llama(|c| c["num_key_value_heads"] = 3.into()).unwrap_err().to_string();
    assert!(e.contains("num_key_value_heads (3)"), "{e}");
}

#[test]
fn a_quantized_checkpoint_is_refused_naming_the_method() {
    let e = llama(|c| c["quantization_config"] = json!({"quant_method": "gptq", "bits": 4})).unwrap_err();
    assert!(e.to_string().contains("gptq"), "{e}");
}

#[test]
fn sizes_that_would_size_a_huge_host_allocation_are_errors() {
    // Found by the config fuzz target: the RoPE frequencies of a 1e300 rotary fraction
    // aborted the process on a 16 TiB allocation.
    for (key, v) in [
        ("partial_rotary_factor", json!(1e300)),
        ("head_dim", json!(1u64 << 40)),
        ("num_hidden_layers", json!(1u64 << 31)),
    ] {
        let e = llama(|c| c[key] = v.clone()).unwrap_err().to_string();
        assert!(e.contains(key), "{key}={v}: {e}");
    }
}

#[test]
fn a_bad_epsilon_is_an_error() {
    let e = llama(|c| c["rms_norm_eps"] = json!(-1.0)).unwrap_err().to_string();
    assert!(e.contains("rms_norm_eps"), "{e}");
}

#[test]
fn encoder_decoder_sizes_are_bounded_before_any_allocation() {
    // A t5 / bart fixture config with one size made hostile: an error naming that field.
    let fixture = |name: &str| -> Value {
        let path = std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures").join(name);
        serde_json::from_str(&std::fs::read_to_string(path.join("config.json")).unwrap()).unwrap()
    };
    for (name, field) in
        [("t5", "num_layers"), ("t5", "num_decoder_layers"), ("t5", "d_kv"), ("bart", "encoder_layers")]
    {
        let mut c = fixture(name);
        assert!(spec_from_config(&c).is_ok(), "{name} as written");
        c[field] = serde_json::json!(1u64 << 40);
        let err = spec_from_config(&c).unwrap_err().to_string();
        assert!(err.contains(field), "{name}.{field}: {err}");
    }
}

#[test]
fn t5gemma_stack_sizes_are_bounded_before_any_allocation() {
    // The sizes live in the `encoder` / `decoder` sub-configs: a hostile one names its field.
    let path = std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures/t5gemma/config.json");
    let base: Value = serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    assert!(spec_from_config(&base).is_ok(), "t5gemma as written");
    for (stack, field) in
        [("encoder", "num_hidden_layers"), ("decoder", "head_dim"), ("decoder", "num_attention_heads")]
    {
        let mut c = base.clone();
        c[stack][field] = serde_json::json!(1u64 << 40);
        let err = spec_from_config(&c).unwrap_err().to_string();
        assert!(err.contains(field), "{stack}.{field}: {err}");
    }
}

#[test]
fn a_decoder_classifier_is_refused_by_its_head_not_by_its_weights() {
    // transformers' LlamaForSequenceClassification stores `score.weight` and no lm_head: the
    // decoder graph builds only the LM head, so the folder is refused naming the head.
    for head in ["LlamaForSequenceClassification", "LlamaForTokenClassification", "LlamaForQuestionAnswering"] {
        let e = llama(|c| c["architectures"] = json!([head])).unwrap_err().to_string();
        assert!(e.contains(&format!("the `{head}` head on the `llama` model")), "{e}");
    }
    llama(|c| c["architectures"] = json!(["LlamaForCausalLM"])).unwrap();
}
