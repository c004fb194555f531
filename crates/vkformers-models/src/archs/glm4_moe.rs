//! `glm4_moe` (GLM-4.5 / 4.6) and `dots1` (rednote dots.llm1): Llama-shaped GQA layers with
//! DeepSeek-V3's MoE (sigmoid scores plus the stored `e_score_correction_bias` buffer choose within
//! the best `topk_group` of `n_group` groups; weights the chosen sigmoid scores, renormalised with
//! `norm_topk_prob`, times `routed_scaling_factor`; `n_shared_experts` ungated shared experts)
//! past `first_k_dense_replace` dense layers.
//! - glm4_moe: partial rotary (`partial_rotary_factor`, default 0.5) in the half-split layout on
//!   the first dims, q/k/v biases by `attention_bias` (never on o_proj), per-head QK-norm with
//!   `use_qk_norm`; one dense layer by default.
//! - dots1: Qwen3 attention (per-head QK-norm, biases by `attention_bias`), sliding windows by
//!   `layer_types` (default: from `max_window_layers` on), no dense layer and no
//!   renormalisation by default.

use serde::Deserialize;
use serde_json::Value;

use super::common::{parse, BaseConfig};
use super::deepseek_moe::DeepseekMoe;
use super::layer_types::{apply, sliding, window};
use crate::error::Result;
use crate::moe::Router;
use crate::spec::ModelSpec;

#[derive(Deserialize)]
struct Config {
    #[serde(flatten)]
    base: BaseConfig,
    #[serde(flatten)]
    moe: DeepseekMoe,
    #[serde(default)]
    use_qk_norm: bool,
    max_window_layers: Option<usize>,
}

/// The config with the class defaults transformers fills: one expert group, `first_k_dense`
/// dense layers, renormalisation `norm_default`.
fn parse_moe(cfg: &Value, first_k_dense: usize, norm_default: bool) -> Result<Config> {
    let mut c: Config = parse(cfg)?;
    c.moe.n_group = c.moe.n_group.or(Some(1));
    c.moe.topk_group = c.moe.topk_group.or(Some(1));
    c.moe.norm_topk_prob = c.moe.norm_topk_prob.or(Some(norm_default));
    if cfg.get("first_k_dense_replace").is_none_or(Value::is_null) {
        c.moe.first_k_dense_replace = first_k_dense;
    }
    Ok(c)
}

fn with_moe(c: &Config, mut spec: ModelSpec) -> Result<ModelSpec> {
    let glu = c.base.glu("silu")?;
    let mut router = c.moe.v3_router()?;
    if let Router::SigmoidGroupLimited { renormalize, .. } = &mut router {
        *renormalize = c.moe.norm_topk_prob.unwrap_or(true);
    }
    let block = c.moe.block(glu, router)?;
    c.moe.apply(&mut spec, block)?;
    Ok(spec)
}

pub fn glm4_moe(cfg: &Value) -> Result<ModelSpec> {
    let mut c = parse_moe(cfg, 1, true)?;
    // transformers 5 keeps it in rope_parameters (the config class moves it there), older
    // configs at the top level.
    c.base.partial_rotary_factor = Some(super::ln_common::rotary_factor(cfg, 0.5));
    let glu = c.base.glu("silu")?;
    let b = &c.base;
    let mut spec = b.llama_spec("glm4_moe", glu, false, c.use_qk_norm, b.attention_bias)?;
    // llama_spec's RoPE is already partial and half-split (transformers' GPT-NeoX rotation).
    for l in &mut spec.layers {
        l.attn.out_bias = false;
        l.attn.sliding_window = None;
    }
    with_moe(&c, spec)
}

pub fn dots1(cfg: &Value) -> Result<ModelSpec> {
    let c = parse_moe(cfg, 0, false)?;
    let glu = c.base.glu("silu")?;
    let b = &c.base;
    let spec = b.llama_spec("dots1", glu, false, true, b.attention_bias)?;
    let mut spec = with_moe(&c, spec)?;
    let n = spec.layers.len();
    let win = window(cfg, Some(4096));
    let from = c.max_window_layers.unwrap_or(62);
    let slide = sliding(cfg, n, |i| win.is_some() && i >= from)?;
    apply(&mut spec, &slide, win)?;
    Ok(spec)
}
