//! `minicpm3`: dense multi-head latent attention (`mla_common`) with half-split RoPE, a gated
//! MLP, the embedding scaled by `scale_emb`, each sublayer output by
//! `scale_depth / sqrt(num_hidden_layers)` and the final hidden state divided by
//! `hidden_size / dim_model_base` before the (tied) head.

use serde::Deserialize;
use serde_json::Value;
use vkformers_kernels::rope::RopeLayout;

use super::common::{parse, tied_by_default};
use super::mla_common::{q_lora_rank, LlamaMlaConfig};
use crate::error::Result;
use crate::spec::ModelSpec;

#[derive(Deserialize)]
struct Config {
    #[serde(flatten)]
    lm: LlamaMlaConfig,
    #[serde(default = "scale_emb")]
    scale_emb: f64,
    scale_depth: Option<f64>,
    dim_model_base: Option<f64>,
}

fn scale_emb() -> f64 {
    12.0
}

pub fn spec(cfg: &Value) -> Result<ModelSpec> {
    let c: Config = parse(cfg)?;
    let b = &c.lm.base;
    let (mut spec, _) = c.lm.llama_spec("minicpm3")?;
    // MiniCPM3Config ties the head by default.
    spec.tied_head = tied_by_default(cfg);
    let attn =
        c.lm.mla.attn(b, RopeLayout::HalfSplit, b.hidden_size / b.num_attention_heads, q_lora_rank(cfg, Some(768))?)?;
    let layers = b.num_hidden_layers as f64;
    let residual = c.scale_depth.unwrap_or(layers.sqrt()) / layers.sqrt();
    for l in &mut spec.layers {
        l.attn = attn.clone();
        l.residual_scale = residual as f32;
    }
    spec.embed_scale = c.scale_emb as f32;
    spec.logit_scale = (c.dim_model_base.unwrap_or(b.hidden_size as f64) / b.hidden_size as f64) as f32;
    Ok(spec)
}
