//! `qwen2_moe`: Qwen2 attention (q/k/v biases, `qkv_bias`) with a routed MoE (softmax top-k,
//! renormalised with `norm_topk_prob`) plus a shared expert scaled by
//! `sigmoid(shared_expert_gate(x))`; dense layers by `decoder_sparse_step` / `mlp_only_layers`.
//! `qwen3_moe`: Qwen3 attention (per-head QK-norm) with the routed MoE and no shared expert.

use serde::Deserialize;
use serde_json::Value;

use super::common::{parse, BaseConfig};
use super::moe_common::{expert_names, MoeConfig};
use crate::error::{ModelError, Result};
use crate::moe::SharedExpert;
use crate::spec::ModelSpec;

#[derive(Deserialize)]
struct Config {
    #[serde(flatten)]
    base: BaseConfig,
    #[serde(flatten)]
    moe: MoeConfig,
    qkv_bias: Option<bool>,
    #[serde(default)]
    use_sliding_window: bool,
}

fn parse_moe(cfg: &Value) -> Result<(Config, usize)> {
    let c: Config = parse(cfg)?;
    if c.use_sliding_window {
        return Err(ModelError::Unsupported("use_sliding_window in an MoE Qwen config".into()));
    }
    let inter = c.moe.moe_intermediate_size.unwrap_or(c.base.intermediate_size);
    Ok((c, inter))
}

pub fn qwen2_moe(cfg: &Value) -> Result<ModelSpec> {
    let (c, inter) = parse_moe(cfg)?;
    let glu = c.base.glu("silu")?;
    let mut spec = c.base.llama_spec("qwen2_moe", glu, false, false, c.qkv_bias.unwrap_or(true))?;
    for l in &mut spec.layers {
        l.attn.out_bias = false;
        l.attn.sliding_window = None;
    }
    let shared = match c.moe.shared_expert_intermediate_size {
        Some(n) if n > 0 => Some(SharedExpert {
            intermediate: n,
            gate_proj: "model.layers.{i}.mlp.shared_expert.gate_proj".into(),
            up_proj: Some("model.layers.{i}.mlp.shared_expert.up_proj".into()),
            down_proj: "model.layers.{i}.mlp.shared_expert.down_proj".into(),
            gate: Some("model.layers.{i}.mlp.shared_expert_gate".into()),
        }),
        _ => None,
    };
    let names = expert_names("mlp", ("gate_proj", "up_proj", "down_proj"));
    let block = c.moe.block(inter, glu, c.moe.norm_topk_prob, names, shared, 0.001)?;
    c.moe.apply(&mut spec, block)?;
    Ok(spec)
}

pub fn qwen3_moe(cfg: &Value) -> Result<ModelSpec> {
    let (c, inter) = parse_moe(cfg)?;
    let glu = c.base.glu("silu")?;
    let mut spec = c.base.llama_spec("qwen3_moe", glu, false, true, c.base.attention_bias)?;
    for l in &mut spec.layers {
        l.attn.sliding_window = None;
    }
    let names = expert_names("mlp", ("gate_proj", "up_proj", "down_proj"));
    let block = c.moe.block(inter, glu, c.moe.norm_topk_prob, names, None, 0.001)?;
    c.moe.apply(&mut spec, block)?;
    Ok(spec)
}
