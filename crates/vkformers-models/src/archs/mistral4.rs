//! `mistral4` (Mistral Small 4): DeepSeek-V3's multi-head latent attention and MoE layout
//! (`Mistral4ForCausalLM` is `DeepseekV3ForCausalLM`) with Mistral's differences:
//! - the router scores by softmax (no correction bias), renormalised with `norm_topk_prob`, times
//!   `routed_scaling_factor`; its group-limited choice (groups ranked by their top-2 sum) is
//!   supported where it chooses nothing (`topk_group == n_group`, the default 1 of 1);
//! - the query `[B, T, H, Dn + Dr]` is multiplied by Llama 4's position scale
//!   `1 + beta · ln(1 + floor(pos / original_max_position_embeddings))` (`llama_4_scaling_beta`);
//! - `rope_parameters` default to YaRN (factor 128 over 8192 positions) and carry
//!   `partial_rotary_factor = Dr / (Dn + Dr)` for the config's `head_dim = Dn + Dr`: the rotary
//!   width is `qk_rope_head_dim` either way.

use serde_json::{json, Value};

use super::common::{parse, BaseConfig};
use super::deepseek::DeepseekConfig;
use super::mla_common::{q_lora_rank, rope_layout, set_attn};
use crate::error::{ModelError, Result};
use crate::moe::Router;
use crate::spec::ModelSpec;

/// `cfg` with Mistral4Config's default `rope_parameters` when it has none, and their
/// `partial_rotary_factor` removed once checked to give `qk_rope_head_dim` rotary values of
/// `head_dim = qk_nope_head_dim + qk_rope_head_dim`.
fn normalised(cfg: &Value) -> Result<Value> {
    let mut cfg = cfg.clone();
    let dim = |k: &str| cfg.get(k).and_then(Value::as_u64).unwrap_or(64) as f64;
    let (dn, dr) = (dim("qk_nope_head_dim"), dim("qk_rope_head_dim"));
    if cfg.get("rope_parameters").is_none_or(Value::is_null) && cfg.get("rope_scaling").is_none_or(Value::is_null) {
        cfg["rope_parameters"] = json!({
            "rope_type": "yarn", "rope_theta": 10000.0, "factor": 128.0, "original_max_position_embeddings": 8192,
            "beta_fast": 32.0, "beta_slow": 1.0, "mscale_all_dim": 1.0, "mscale": 1.0, "llama_4_scaling_beta": 0.1
        });
    }
    let params = if cfg["rope_parameters"].is_object() { "rope_parameters" } else { "rope_scaling" };
    if let Some(map) = cfg[params].as_object_mut() {
        if let Some(f) = map.remove("partial_rotary_factor").filter(|f| !f.is_null()) {
            let f = f.as_f64().unwrap_or(f64::NAN);
            if ((dn + dr) * f - dr).abs() > 1e-6 {
                return Err(ModelError::Unsupported(format!(
                    "mistral4 partial_rotary_factor {f}: only qk_rope_head_dim / (qk_nope_head_dim + \
                     qk_rope_head_dim) = {} (all of the rotary part rotated) is supported",
                    dr / (dn + dr)
                )));
            }
        }
    }
    Ok(cfg)
}

/// Llama 4's query scale `(beta, original_max_position_embeddings)`, if the RoPE parameters ask.
fn q_position_scale(base: &BaseConfig) -> Result<Option<(f32, usize)>> {
    let params = base.rope_params()?;
    let Some(beta) = params.scaling.get("llama_4_scaling_beta").filter(|v| !v.is_null()) else { return Ok(None) };
    let original = params.scaling.get("original_max_position_embeddings").and_then(Value::as_u64);
    match (beta.as_f64(), original) {
        (Some(beta), Some(original)) if original > 0 => Ok(Some((beta as f32, original as usize))),
        _ => Err(ModelError::Config(format!(
            "mistral4 llama_4_scaling_beta {beta} needs a number and a positive \
             rope_parameters.original_max_position_embeddings"
        ))),
    }
}

pub fn mistral4(cfg: &Value) -> Result<ModelSpec> {
    let cfg = normalised(cfg)?;
    let c: DeepseekConfig = parse(&cfg)?;
    let b = &c.lm.base;
    let (mut spec, glu) = c.lm.llama_spec("mistral4")?;
    let mut attn = c.lm.mla.attn(b, rope_layout(c.rope_interleave), 128, q_lora_rank(&cfg, Some(1024))?)?;
    attn.q_position_scale = q_position_scale(b)?;
    set_attn(&mut spec, &attn);
    let (groups, top_groups) = (c.moe.n_group.unwrap_or(1), c.moe.topk_group.unwrap_or(1));
    if top_groups != groups {
        return Err(ModelError::Unsupported(format!(
            "mistral4 with topk_group {top_groups} of n_group {groups}: its group-limited softmax router \
             (groups ranked by their top-2 sum) is not implemented; topk_group == n_group is"
        )));
    }
    let router = Router::SoftmaxTopK { renormalize: c.moe.norm_topk_prob.unwrap_or(true) };
    let block = c.moe.block(glu, router)?;
    c.moe.apply(&mut spec, block)?;
    // transformers 5.24's Mistral4 saves its experts packed (no per-expert conversion).
    crate::moe::packed_layout(&mut spec);
    Ok(spec)
}
