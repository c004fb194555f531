//! `hyperclovax` (HyperCLOVA X SEED): Granite's multipliers (embedding, residual, attention
//! scores) with logits multiplied (not divided) by `logits_scaling`, and with `use_post_norm`
//! (on by default) RMSNorms `post_norm1` / `post_norm2` on the attention and MLP outputs before
//! the scaled residual add (Peri-LN).

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
    /// head_dim^-0.5 when absent or null.
    attention_multiplier: Option<f64>,
    #[serde(default = "one")]
    logits_scaling: f64,
    #[serde(default = "yes")]
    use_post_norm: bool,
}

fn one() -> f64 {
    1.0
}

fn yes() -> bool {
    true
}

pub fn spec(cfg: &Value) -> Result<ModelSpec> {
    let c: Config = parse(cfg)?;
    let mut spec = c.base.llama_spec("hyperclovax", c.base.glu("silu")?, false, false, c.base.attention_bias)?;
    spec.embed_scale = c.embedding_multiplier as f32;
    spec.logit_scale = c.logits_scaling as f32;
    let scale = c.attention_multiplier.unwrap_or((c.base.head_dim() as f64).powf(-0.5)) as f32;
    for l in &mut spec.layers {
        l.residual_scale = c.residual_multiplier as f32;
        l.attn.scale = scale;
        l.attn.sliding_window = None;
        if c.use_post_norm {
            l.post_attn_norm = l.attn_norm.clone();
            l.post_mlp_norm = l.mlp_norm.clone();
        }
    }
    spec.layer_names.post_attn_norm = "model.layers.{i}.post_norm1".into();
    spec.layer_names.post_mlp_norm = "model.layers.{i}.post_norm2".into();
    Ok(spec)
}
