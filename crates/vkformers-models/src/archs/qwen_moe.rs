//! `qwen2_moe`: Qwen2 attention (q/k/v biases, `qkv_bias`) with a routed MoE (softmax top-k,
//! renormalised with `norm_topk_prob`) plus a shared expert scaled by
//! `sigmoid(shared_expert_gate(x))`; dense layers by `decoder_sparse_step` / `mlp_only_layers`.
//! `qwen3_moe`: Qwen3 attention (per-head QK-norm) with the routed MoE and no shared expert.

use serde::Deserialize;
use serde_json::Value;

use super::common::parse;
use super::moe_common::{mlp_expert_names, LlamaMoeConfig};
use crate::error::{ModelError, Result};
use crate::moe::SharedExpert;
use crate::spec::ModelSpec;

#[derive(Deserialize)]
struct Config {
    #[serde(flatten)]
    lm: LlamaMoeConfig,
    qkv_bias: Option<bool>,
    #[serde(default)]
    use_sliding_window: bool,
}

fn parse_moe(cfg: &Value) -> Result<(Config, usize)> {
    let c: Config = parse(cfg)?;
    if c.use_sliding_window {
        return Err(ModelError::Unsupported("use_sliding_window in an MoE Qwen config".into()));
    }
    let inter = c.lm.moe.expert_intermediate(&c.lm.base);
    Ok((c, inter))
}

pub fn qwen2_moe(cfg: &Value) -> Result<ModelSpec> {
    let (c, inter) = parse_moe(cfg)?;
    let (base, moe) = (&c.lm.base, &c.lm.moe);
    let glu = base.glu("silu")?;
    let mut spec = base.llama_spec("qwen2_moe", glu, false, false, c.qkv_bias.unwrap_or(true))?;
    for l in &mut spec.layers {
        l.attn.out_bias = false;
        l.attn.sliding_window = None;
    }
    let shared = match moe.shared_expert_intermediate_size {
        Some(n) if n > 0 => Some(SharedExpert {
            intermediate: n,
            gate_proj: "model.layers.{i}.mlp.shared_expert.gate_proj".into(),
            up_proj: Some("model.layers.{i}.mlp.shared_expert.up_proj".into()),
            down_proj: "model.layers.{i}.mlp.shared_expert.down_proj".into(),
            gate: Some("model.layers.{i}.mlp.shared_expert_gate".into()),
        }),
        _ => None,
    };
    let block = moe.block(inter, glu, moe.norm_topk_prob, mlp_expert_names(), shared, 0.001)?;
    moe.apply(&mut spec, block)?;
    Ok(spec)
}

pub fn qwen3_moe(cfg: &Value) -> Result<ModelSpec> {
    let (c, inter) = parse_moe(cfg)?;
    let (base, moe) = (&c.lm.base, &c.lm.moe);
    let glu = base.glu("silu")?;
    let mut spec = base.llama_spec("qwen3_moe", glu, false, true, base.attention_bias)?;
    for l in &mut spec.layers {
        l.attn.sliding_window = None;
    }
    let block = moe.block(inter, glu, moe.norm_topk_prob, mlp_expert_names(), None, 0.001)?;
    moe.apply(&mut spec, block)?;
    Ok(spec)
}
