//! `deepseek_v2`: multi-head latent attention (`mla_common`, interleaved RoPE pairs as its
//! complex rotation) and DeepSeek's MoE: softmax router scores, greedy or group-limited top-k
//! (`topk_method`), no renormalisation, weights times `routed_scaling_factor`, shared experts of
//! `n_shared_experts · moe_intermediate_size` added unscaled, dense MLPs in the first
//! `first_k_dense_replace` layers. No load-balancing loss (transformers adds none).
//! `deepseek_v3`: the same MLA (interleaved pairs with `rope_interleave`, else half-split) and
//! MoE layout with DeepSeek-V3's router: sigmoid scores, the choice by score plus the stored
//! `e_score_correction_bias` within the `topk_group` best of `n_group` groups, weights
//! renormalised with `norm_topk_prob`, times `routed_scaling_factor`.
//! `sarvam_mla`: DeepSeek-V3 under another name (see `sarvam_mla`).
//! `glm4_moe_lite`: the same on the sparse layers of `mlp_layer_types`.
//! `axk1` (A.X-K1): DeepSeek-V3 with an RMSNorm (`post_mlp_layernorm`, stored per layer) on the
//! MoE block's output and the sparse layers listed in `mlp_layer_types`.

use serde::Deserialize;
use serde_json::Value;
use vkformers_kernels::glu::Glu;
use vkformers_kernels::rope::RopeLayout;

use super::common::parse;
use super::deepseek_moe::DeepseekMoe;
use super::mla_common::{q_lora_rank, rope_layout, set_attn, LlamaMlaConfig};
use super::moe_common::apply_where;
use crate::error::{ModelError, Result};
use crate::spec::{AttnSpec, ModelSpec, Norm};

/// The fields of DeepSeek-V2/V3's config (and Mistral 4's, the same class's).
#[derive(Deserialize)]
pub(super) struct DeepseekConfig {
    #[serde(flatten)]
    pub(super) lm: LlamaMlaConfig,
    #[serde(flatten)]
    pub(super) moe: DeepseekMoe,
    pub(super) rope_interleave: Option<bool>,
}

pub fn deepseek_v2(cfg: &Value) -> Result<ModelSpec> {
    let c: DeepseekConfig = parse(cfg)?;
    let (mut spec, glu) = c.lm.llama_spec("deepseek_v2")?;
    let attn = c.lm.mla.attn(&c.lm.base, RopeLayout::Interleaved, 128, q_lora_rank(cfg, Some(1536))?)?;
    set_attn(&mut spec, &attn);
    let block = c.moe.block(glu, c.moe.v2_router()?)?;
    c.moe.apply(&mut spec, block)?;
    Ok(spec)
}

pub fn deepseek_v3(cfg: &Value) -> Result<ModelSpec> {
    let mut spec = v3_like("deepseek_v3", cfg)?;
    // transformers' DeepseekV3Config defaults `num_mtp_layers` to 1.
    skip_mtp_layers(&mut spec, cfg, 1)?;
    Ok(spec)
}

/// DeepSeek-V3-style checkpoints store `num_nextn_predict_layers` multi-token-prediction layers
/// after the last decoder layer, as `model.layers.{N + i}.*` (N = num_hidden_layers).
/// `*ForCausalLM` builds no module for them: transformers lists them as unexpected keys (silenced
/// by `_keys_to_ignore_on_load_unexpected`, e.g. `model\.layers\.61.*` for DeepSeek-V3) and
/// `save_pretrained` does not write them. Loading skips them the same way; other extra layers
/// stay an error. `default` is the config class's `num_mtp_layers` when the field is absent.
fn skip_mtp_layers(spec: &mut ModelSpec, cfg: &Value, default: u64) -> Result<()> {
    let field =
        ["num_nextn_predict_layers", "num_mtp_layers"].into_iter().find_map(|k| cfg.get(k).filter(|v| !v.is_null()));
    let n = match field {
        None => default,
        Some(v) => v.as_u64().filter(|&n| n <= 64).ok_or_else(|| {
            ModelError::Config(format!("`num_nextn_predict_layers` is {v}; it must be an integer from 0 to 64"))
        })?,
    };
    let first = spec.layers.len();
    // The trailing dot keeps `model.layers.2.` from matching `model.layers.20.`.
    spec.skipped.extend((0..n as usize).map(|i| format!("model.layers.{}.", first + i)));
    Ok(())
}

/// `sarvam_mla`: DeepSeek-V3 (transformers builds `DeepseekV3ForCausalLM` from its config). The
/// original Sarvam config's spellings are read too: `num_experts` / `num_shared_experts`, and
/// `rope_scaling.type = "deepseek_yarn"`, which is YaRN (its `head_dim`, the cached width, is
/// not the rotary one and is ignored as transformers does).
pub fn sarvam_mla(cfg: &Value) -> Result<ModelSpec> {
    let mut cfg = cfg.clone();
    for (alias, name) in [("num_experts", "n_routed_experts"), ("num_shared_experts", "n_shared_experts")] {
        if cfg.get(name).is_none_or(Value::is_null) {
            if let Some(v) = cfg.get(alias).cloned() {
                cfg[name] = v;
            }
        }
    }
    if let Some(scaling) = cfg.get_mut("rope_scaling").and_then(Value::as_object_mut) {
        for key in ["type", "rope_type"] {
            if scaling.get(key).and_then(Value::as_str) == Some("deepseek_yarn") {
                scaling.insert(key.into(), "yarn".into());
            }
        }
    }
    let mut spec = v3_like("sarvam_mla", &cfg)?;
    // SarvamMLAConfig defaults `num_mtp_layers` to 0.
    skip_mtp_layers(&mut spec, &cfg, 0)?;
    Ok(spec)
}

/// DeepSeek-V3's config of `cfg`, the Llama-shaped spec of `model_type`, its activation and
/// the MLA attention (values 128 wide, query rank 1536 by default).
fn v3_parts(model_type: &str, cfg: &Value) -> Result<(DeepseekConfig, ModelSpec, Glu, AttnSpec)> {
    let c: DeepseekConfig = parse(cfg)?;
    let (spec, glu) = c.lm.llama_spec(model_type)?;
    let layout = rope_layout(c.rope_interleave);
    let attn = c.lm.mla.attn(&c.lm.base, layout, 128, q_lora_rank(cfg, Some(1536))?)?;
    Ok((c, spec, glu, attn))
}

fn v3_like(model_type: &str, cfg: &Value) -> Result<ModelSpec> {
    let (c, mut spec, glu, attn) = v3_parts(model_type, cfg)?;
    set_attn(&mut spec, &attn);
    let block = c.moe.block(glu, c.moe.v3_router()?)?;
    c.moe.apply(&mut spec, block)?;
    Ok(spec)
}

/// The sparse layers of `mlp_layer_types` ("sparse" / "dense"), else of the legacy
/// `first_k_dense_replace` (default 1) and `moe_layer_freq` (default 1), as A.X-K1's and
/// GLM-4.7-Flash's configs derive them.
pub(super) fn layer_types(cfg: &Value, layers: usize) -> Result<Vec<bool>> {
    if let Some(types) = cfg.get("mlp_layer_types").filter(|v| !v.is_null()) {
        let types: Vec<String> = parse(types)?;
        if types.len() != layers || types.iter().any(|t| t != "sparse" && t != "dense") {
            return Err(ModelError::Config(format!(
                "mlp_layer_types {types:?}: one \"sparse\" or \"dense\" per layer ({layers} layers)"
            )));
        }
        return Ok(types.iter().map(|t| t == "sparse").collect());
    }
    let first = cfg.get("first_k_dense_replace").and_then(Value::as_u64).unwrap_or(1) as usize;
    let freq = cfg.get("moe_layer_freq").and_then(Value::as_u64).unwrap_or(1).max(1) as usize;
    Ok((0..layers).map(|i| i >= first && i.is_multiple_of(freq)).collect())
}

pub fn axk1(cfg: &Value) -> Result<ModelSpec> {
    if cfg.get("q_lora_rank").is_some_and(Value::is_null) {
        return Err(ModelError::Config("axk1 needs a q_lora_rank (its attention is always low-rank)".into()));
    }
    layer_typed("axk1", cfg, true)
}

/// `glm4_moe_lite` (GLM-4.7-Flash): DeepSeek-V3's MLA and router (GLM-4-MoE's is the same
/// sigmoid + correction bias group-limited top-k) with the sparse layers of `mlp_layer_types`
/// (default: all but the first).
pub fn glm4_moe_lite(cfg: &Value) -> Result<ModelSpec> {
    layer_typed("glm4_moe_lite", cfg, false)
}

/// DeepSeek-V3's MLA and router on the sparse layers of `mlp_layer_types`; with `post_mlp_norm`,
/// an RMSNorm on each MoE block's output (A.X-K1, `post_mlp_layernorm`).
fn layer_typed(model_type: &str, cfg: &Value, post_mlp_norm: bool) -> Result<ModelSpec> {
    let (c, mut spec, glu, attn) = v3_parts(model_type, cfg)?;
    let sparse = layer_types(cfg, spec.layers.len())?;
    // AXK1MoE: y = RMSNorm(routed + shared), stored as the layer's `post_mlp_layernorm`.
    spec.layer_names.post_mlp_norm = "model.layers.{i}.post_mlp_layernorm".into();
    let norm = Norm::Rms { eps: c.lm.base.rms_norm_eps as f32, unit_offset: false };
    for (l, s) in spec.layers.iter_mut().zip(&sparse) {
        l.attn = attn.clone();
        l.post_mlp_norm = (post_mlp_norm && *s).then(|| norm.clone());
    }
    let block = c.moe.block(glu, c.moe.v3_router()?)?;
    apply_where(&mut spec, &sparse, block)?;
    // GLM-4.7-Flash stores one MTP layer (transformers ignores `model\.layers\.47.*`); the
    // config classes define no default, so only a config that names the count skips layers.
    skip_mtp_layers(&mut spec, cfg, 0)?;
    Ok(spec)
}
