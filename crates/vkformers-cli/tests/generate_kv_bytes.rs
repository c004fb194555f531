//! `generate --json` reports the KV cache's size: for a multi-head latent attention model the
//! latent cache, `layers × (kv_lora_rank + qk_rope_head_dim)` values a token; for Llama the full
//! keys and values, `2 × layers × kv_heads × head_dim`; times the storage type's bytes, and the
//! total over the positions the rows hold (prompt and new tokens but the last of each row).

mod common;

use std::path::{Path, PathBuf};

use serde_json::Value;

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn config(model: &Path) -> Value {
    serde_json::from_str(&std::fs::read_to_string(model.join("config.json")).unwrap()).unwrap()
}

fn field(c: &Value, name: &str) -> u64 {
    c[name].as_u64().unwrap_or_else(|| panic!("config has no `{name}`"))
}

/// `generate --json` over two id prompts (3 and 5 tokens), 4 new tokens each, greedy.
fn generate(model: &Path, extra: &[&str]) -> Value {
    common::generate::greedy_ids_json(
        model,
        "{\"input_ids\": [1, 40, 50]}\n{\"input_ids\": [1, 70, 9, 17, 42]}\n",
        extra,
    )
}

/// Checks `r["kv_cache"]` against `values` per token in `bytes`-wide values, and its total
/// against the rows' prompt and token ids.
fn check(r: &Value, values: u64, dtype: &str, bytes: u64) {
    let kv = &r["kv_cache"];
    assert_eq!(kv["values_per_token"], values, "{kv}");
    assert_eq!(kv["dtype"], dtype, "{kv}");
    assert_eq!(kv["bytes_per_token"], values * bytes, "{kv}");
    let tokens: u64 = r["rows"]
        .as_array()
        .unwrap()
        .iter()
        .map(|row| {
            let n = |k: &str| row[k].as_array().unwrap().len() as u64;
            n("prompt_ids") + n("token_ids") - 1
        })
        .sum();
    assert!(tokens > 0);
    assert_eq!(kv["tokens"], tokens, "{kv}");
    assert_eq!(kv["bytes"], values * bytes * tokens, "{kv}");
}

#[test]
fn an_mla_model_reports_the_latent_cache_bytes() {
    let model = root().join("tests/fixtures/deepseek_v3");
    let c = config(&model);
    let latent = field(&c, "kv_lora_rank") + field(&c, "qk_rope_head_dim");
    let values = field(&c, "num_hidden_layers") * latent;
    check(&generate(&model, &["--dtype", "float32"]), values, "f32", 4);
    check(&generate(&model, &["--dtype", "bfloat16"]), values, "bf16", 2);
    // The full keys and values would take 2 × heads × (nope + rope | v) a layer: far more.
    let full = 2 * field(&c, "num_attention_heads") * (field(&c, "qk_nope_head_dim") + field(&c, "qk_rope_head_dim"));
    assert!(latent < full, "latent {latent} vs full {full}");
}

/// A latent row wider than the paged decode kernel's 256 values (kv_lora_rank 272 + rope 16) is
/// cached as the latent too.
#[test]
fn a_wide_mla_model_reports_the_latent_cache_bytes() {
    let model = root().join("tests/fixtures/deepseek_v3_wide");
    let c = config(&model);
    let latent = field(&c, "kv_lora_rank") + field(&c, "qk_rope_head_dim");
    assert!(latent > 256, "latent {latent}: not wider than the paged decode kernel's rows");
    let values = field(&c, "num_hidden_layers") * latent;
    check(&generate(&model, &["--dtype", "float32"]), values, "f32", 4);
    check(&generate(&model, &["--dtype", "bfloat16"]), values, "bf16", 2);
}

#[test]
fn a_llama_model_reports_full_key_and_value_bytes() {
    let model = root().join("tests/fixtures_generate/cli_model");
    let c = config(&model);
    let values = 2 * field(&c, "num_hidden_layers") * field(&c, "num_key_value_heads") * field(&c, "head_dim");
    check(&generate(&model, &["--dtype", "float32"]), values, "f32", 4);
}
