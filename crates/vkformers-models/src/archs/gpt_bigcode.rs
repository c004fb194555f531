//! `gpt_bigcode` (SantaCoder, StarCoder 1): GPT-2's layout (learned positions, LayerNorm with
//! bias, plain GELU-tanh MLP, tied head) with `nn.Linear` weights (`[out, in]`, no transpose) and
//! one fused `c_attn`: with `multi_query` (the default) q rows then one head's k and v rows
//! (a single key/value head); without it per head `[heads, 3, head_dim]`.
//! `gpt-sw3`: GPT-2 itself under another name (transformers maps it to `GPT2Config`).

use serde_json::Value;

use crate::error::Result;
use crate::spec::{MapEntry, ModelSpec};

/// `c_attn` (weight and bias) into q, k, v.
fn weight_map(layers: usize, q_rows: usize, kv_rows: usize, groups: usize) -> Vec<MapEntry> {
    let parts = [("q", q_rows), ("k", kv_rows), ("v", kv_rows)];
    MapEntry::fused_qkv(layers, "transformer.h.{i}.attn", "c_attn", parts, groups, &["weight", "bias"])
}

pub fn gpt_bigcode(cfg: &Value) -> Result<ModelSpec> {
    // GPTBigCodeConfig shares GPT-2's field names; its activation default (gelu_pytorch_tanh)
    // is the same function as GPT-2's gelu_new.
    let mut spec = super::gpt2::spec(cfg)?;
    spec.model_type = "gpt_bigcode".into();
    let multi_query = cfg.get("multi_query").and_then(Value::as_bool).unwrap_or(true);
    let (hidden, heads) = (spec.hidden, spec.layers[0].attn.heads);
    let head_dim = hidden / heads;
    for l in &mut spec.layers {
        l.attn.kv_heads = if multi_query { 1 } else { heads };
    }
    spec.weight_map = if multi_query {
        weight_map(spec.layers.len(), hidden, head_dim, 1)
    } else {
        weight_map(spec.layers.len(), hidden, hidden, heads)
    };
    Ok(spec)
}

pub fn gpt_sw3(cfg: &Value) -> Result<ModelSpec> {
    let mut spec = super::gpt2::spec(cfg)?;
    spec.model_type = "gpt-sw3".into();
    Ok(spec)
}
