//! `granite`: Llama with four multipliers: the embedding output (`embedding_multiplier`), each
//! sublayer output before its residual add (`residual_multiplier`), the attention scores
//! (`attention_multiplier`, instead of head_dim^-0.5), and the logits (divided by
//! `logits_scaling`).

use serde::Deserialize;
use serde_json::Value;

use super::common::{parse, BaseConfig};
use crate::error::Result;
use crate::spec::ModelSpec;

#[derive(Deserialize)]
struct Config {
    #[serde(flatten)]
    base: BaseConfig,
    #[serde(default = "one")]
    embedding_multiplier: f64,
    #[serde(default = "one")]
    residual_multiplier: f64,
    #[serde(default = "one")]
    attention_multiplier: f64,
    #[serde(default = "one")]
    logits_scaling: f64,
}

fn one() -> f64 {
    1.0
}

/// Granite's four multipliers on `spec`: `embedding`, `residual` and `attention` scale the
/// embedding output, each sublayer output and the attention scores; the logits are divided by
/// `logits_scaling`. No sliding window.
pub(super) fn multipliers(spec: &mut ModelSpec, [embedding, residual, attention, logits_scaling]: [f64; 4]) {
    spec.embed_scale = embedding as f32;
    spec.logit_scale = (1.0 / logits_scaling) as f32;
    for l in &mut spec.layers {
        l.residual_scale = residual as f32;
        l.attn.scale = attention as f32;
        l.attn.sliding_window = None;
    }
}

pub fn spec(cfg: &Value) -> Result<ModelSpec> {
    let c: Config = parse(cfg)?;
    let glu = c.base.glu("silu")?;
    let mut spec = c.base.llama_spec("granite", glu, false, false, c.base.attention_bias)?;
    let m = [c.embedding_multiplier, c.residual_multiplier, c.attention_multiplier, c.logits_scaling];
    multipliers(&mut spec, m);
    Ok(spec)
}
