//! `olmoe`: Llama-shaped pre-norm layers with RMSNorm over the whole q and k projections
//! (OLMo 2 style, before RoPE) and a routed MoE in every layer (softmax top-k, renormalised
//! only with `norm_topk_prob`). `clip_qkv` is not supported yet.

use serde::Deserialize;
use serde_json::Value;

use super::common::{parse, BaseConfig};
use super::moe_common::{expert_names, MoeConfig};
use crate::error::{ModelError, Result};
use crate::spec::ModelSpec;

#[derive(Deserialize)]
struct Config {
    #[serde(flatten)]
    base: BaseConfig,
    #[serde(flatten)]
    moe: MoeConfig,
    clip_qkv: Option<f64>,
}

pub fn spec(cfg: &Value) -> Result<ModelSpec> {
    let c: Config = parse(cfg)?;
    if let Some(clip) = c.clip_qkv {
        return Err(ModelError::Unsupported(format!("olmoe clip_qkv {clip}")));
    }
    let glu = c.base.glu("silu")?;
    let mut spec = c.base.llama_spec("olmoe", glu, false, true, c.base.attention_bias)?;
    // olmoe's config class defaults pad_token_id to 1.
    spec.padding_idx = crate::spec::padding_idx_or(cfg, 1, spec.vocab);
    for l in &mut spec.layers {
        l.attn.qk_norm_at = crate::spec::QkNormAt::Projection;
        l.attn.sliding_window = None;
    }
    let names = expert_names("mlp", ("gate_proj", "up_proj", "down_proj"));
    let block = c.moe.block(c.base.intermediate_size, glu, c.moe.norm_topk_prob, names, None, 0.01)?;
    // Every layer is sparse (no decoder_sparse_step in OLMoE).
    c.moe.apply(&mut spec, block)?;
    Ok(spec)
}
