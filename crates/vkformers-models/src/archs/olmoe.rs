//! `olmoe`: Llama-shaped pre-norm layers with RMSNorm over the whole q and k projections
//! (OLMo 2 style, before RoPE) and a routed MoE in every layer (softmax top-k, renormalised
//! only with `norm_topk_prob`). `clip_qkv` is not supported yet.

use serde::Deserialize;
use serde_json::Value;

use super::common::parse;
use super::moe_common::{mlp_expert_names, LlamaMoeConfig};
use crate::error::{ModelError, Result};
use crate::spec::ModelSpec;

#[derive(Deserialize)]
struct Config {
    #[serde(flatten)]
    lm: LlamaMoeConfig,
    clip_qkv: Option<f64>,
}

pub fn spec(cfg: &Value) -> Result<ModelSpec> {
    let c: Config = parse(cfg)?;
    if let Some(clip) = c.clip_qkv {
        return Err(ModelError::Unsupported(format!("olmoe clip_qkv {clip}")));
    }
    let (base, moe) = (&c.lm.base, &c.lm.moe);
    let glu = base.glu("silu")?;
    let mut spec = base.llama_spec("olmoe", glu, false, true, base.attention_bias)?;
    // olmoe's config class defaults pad_token_id to 1.
    spec.padding_idx = crate::spec::padding_idx_or(cfg, 1, spec.vocab);
    for l in &mut spec.layers {
        l.attn.qk_norm_at = crate::spec::QkNormAt::Projection;
        l.attn.sliding_window = None;
    }
    let block = moe.block(base.intermediate_size, glu, moe.norm_topk_prob, mlp_expert_names(), None, 0.01)?;
    // Every layer is sparse (no decoder_sparse_step in OLMoE).
    moe.apply(&mut spec, block)?;
    Ok(spec)
}
