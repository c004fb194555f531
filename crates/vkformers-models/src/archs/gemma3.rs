//! `gemma3_text`: Gemma 2's layout (sandwich norms, (1 + w) RMSNorm, softcaps when configured,
//! `query_pre_attn_scalar`, sliding and global layers) plus per-head QK-norm ((1 + w) RMSNorm)
//! and a RoPE per layer type: `rope_parameters` keyed by `sliding_attention` / `full_attention`,
//! or in older configs `rope_local_base_freq` for sliding layers and `rope_theta` + `rope_scaling`
//! for global ones.

use serde_json::{json, Value};
use vkformers_kernels::rope::RopeLayout;

use super::common::parse;
use super::gemma2::GemmaConfig;
use super::layer_types::set_ropes;
use crate::error::Result;
use crate::spec::ModelSpec;

/// `(sliding, full)` RoPE parameter dicts.
fn rope_dicts(cfg: &Value) -> (Value, Value) {
    let params = cfg.get("rope_parameters").filter(|v| v.is_object());
    if let Some(p) = params.filter(|p| p.get("full_attention").is_some() || p.get("sliding_attention").is_some()) {
        let get = |k: &str, theta: f64| {
            let mut d = p.get(k).cloned().filter(Value::is_object).unwrap_or_else(|| json!({"rope_type": "default"}));
            if d.get("rope_theta").is_none() {
                d["rope_theta"] = json!(theta);
            }
            d
        };
        return (get("sliding_attention", 10_000.0), get("full_attention", 1_000_000.0));
    }
    let mut full = params.or_else(|| cfg.get("rope_scaling")).cloned().filter(Value::is_object).unwrap_or(json!({}));
    if full.get("rope_theta").is_none() {
        full["rope_theta"] = json!(cfg.get("rope_theta").and_then(Value::as_f64).unwrap_or(1_000_000.0));
    }
    let local = cfg.get("rope_local_base_freq").and_then(Value::as_f64).unwrap_or(10_000.0);
    (json!({"rope_type": "default", "rope_theta": local}), full)
}

pub fn spec(cfg: &Value) -> Result<ModelSpec> {
    let mut c: GemmaConfig = parse(cfg)?;
    c.base.tie_word_embeddings = super::common::tied_by_default(cfg);
    if cfg.get("sliding_window").is_none() {
        c.base.sliding_window = Some(4096);
    }
    let pattern = cfg.get("sliding_window_pattern").and_then(Value::as_u64).unwrap_or(6) as usize;
    let sliding = c.sliding(pattern)?;
    let (local, global) = rope_dicts(cfg);
    let local_rope = c.base.rope_of(local, RopeLayout::HalfSplit)?;
    let global_rope = c.base.rope_of(global, RopeLayout::HalfSplit)?;
    let mut spec = c.gemma2_spec("gemma3_text", pattern, true)?;
    // Gemma3TextConfig defaults pad_token_id to 0.
    spec.padding_idx = crate::spec::padding_idx_or(cfg, 0, spec.vocab);
    set_ropes(&mut spec, &sliding, &local_rope, &global_rope);
    Ok(spec)
}
