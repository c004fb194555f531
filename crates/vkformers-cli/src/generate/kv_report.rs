//! The KV cache's size in `generate --json`: values per token from the model's cache layout
//! (`KvCache::values_per_token`: `2 · Hkv · D` per full-attention layer, `kv_lora_rank +
//! qk_rope_head_dim` per latent-cached MLA layer), times the storage type's bytes.

use serde_json::{json, Value};
use vkformers_generate::generation::Generation;
use vkformers_models::decoder::KvCache;
use vkformers_models::model::Model;
use vkformers_tensor::Graph;

/// `{dtype, values_per_token, bytes_per_token, tokens, bytes}`. `tokens` counts the real
/// positions the rows hold at the end: each row's prompt and new tokens but the last (it is
/// sampled, never fed); left padding and block rounding are not counted, and sliding-window
/// layers are counted as if they kept every position.
pub fn kv_cache_report(g: &Graph<'_>, model: &Model, prompts: &[Vec<u32>], gen: &Generation) -> anyhow::Result<Value> {
    // An empty cache allocates no pools (they are made on first store): only its layout is read.
    let values = KvCache::new(g, &model.spec, 1)?.values_per_token();
    // The pools are stored in autocast's type (`generate_in_weight_type`), else the weights'.
    let dtype = g.autocast().unwrap_or(model.weight_dtype());
    let bytes_per_token = values as u64 * dtype.bytes();
    let tokens: u64 = prompts.iter().zip(&gen.rows).map(|(p, r)| (p.len() + r.len()).saturating_sub(1) as u64).sum();
    Ok(json!({
        "dtype": format!("{dtype:?}").to_lowercase(),
        "values_per_token": values,
        "bytes_per_token": bytes_per_token,
        "tokens": tokens,
        "bytes": bytes_per_token * tokens,
    }))
}
