//! `phimoe` (Phi-3.5-MoE): Mixtral-shaped layers with LayerNorm (weight and bias, eps
//! `rms_norm_eps`) for every norm, q/k/v/o biases by `attention_bias`, an lm_head bias by
//! `lm_head_bias`, an optional sliding window, and the sparsemixer router (eval mode, eps
//! `router_jitter_noise`; `Router::SparseMixer`). Experts stored as Mixtral's
//! `block_sparse_moe.experts.{e}.w1/w3/w2`, the router as `block_sparse_moe.gate`.
//! Phi-3.5's long-context RoPE (explicit short/long mscale) is not supported yet.

use serde::Deserialize;
use serde_json::Value;

use super::common::parse;
use super::ln_common::set_norms;
use super::moe_common::{expert_names, LlamaMoeConfig};
use crate::error::{ModelError, Result};
use crate::moe::Router;
use crate::spec::{ModelSpec, Norm};

#[derive(Deserialize)]
struct Config {
    #[serde(flatten)]
    lm: LlamaMoeConfig,
    #[serde(default)]
    lm_head_bias: bool,
    #[serde(default)]
    input_jitter_noise: f64,
}

pub fn spec(cfg: &Value) -> Result<ModelSpec> {
    let Config { lm: LlamaMoeConfig { base, mut moe }, lm_head_bias, input_jitter_noise } = parse(cfg)?;
    let rope_type = base.rope_params()?.rope_type;
    if rope_type != "default" {
        return Err(ModelError::Unsupported(format!("phimoe rope_type `{rope_type}` (its own long-context mscale)")));
    }
    if input_jitter_noise != 0.0 {
        // transformers multiplies the router input by uniform noise in training mode only.
        return Err(ModelError::Unsupported(format!("phimoe input_jitter_noise {input_jitter_noise}")));
    }
    // The router's jitter is its eval-mode threshold here, not noise: taken out of the config
    // MoeConfig::block refuses noise in.
    let eps = std::mem::take(&mut moe.router_jitter_noise);
    let glu = base.glu("silu")?;
    let mut spec = base.llama_spec("phimoe", glu, false, false, base.attention_bias)?;
    set_norms(&mut spec, &Norm::Layer { eps: base.rms_norm_eps as f32, bias: true });
    spec.head_bias = lm_head_bias;
    let names = expert_names("block_sparse_moe", ("w1", "w3", "w2"));
    let mut block = moe.block(base.intermediate_size, glu, false, names, None, 0.001)?;
    block.router = Router::SparseMixer { eps: eps as f32 };
    block.check()?;
    moe.apply(&mut spec, block)?;
    Ok(spec)
}
