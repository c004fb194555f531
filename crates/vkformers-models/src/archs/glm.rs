//! `glm` (GLM-4-9B) and `glm4` (GLM-4-0414): Llama with q/k/v biases (`attention_bias`, on by
//! default; never an output bias), interleaved partial RoPE (`partial_rotary_factor`, default
//! 0.5) and one fused `gate_up_proj` (gate rows, then up rows). `glm4` adds sandwich norms:
//! `post_self_attn_layernorm` and `post_mlp_layernorm` on the sublayer outputs.

use serde::Deserialize;
use serde_json::Value;
use vkformers_kernels::rope::RopeLayout;

use super::common::{parse, BaseConfig};
use super::ln_common::rotary_factor;
use crate::error::Result;
use crate::spec::{MapEntry, ModelSpec};

#[derive(Deserialize)]
struct Config {
    #[serde(flatten)]
    base: BaseConfig,
    #[serde(default = "yes")]
    attention_bias: bool,
}

fn yes() -> bool {
    true
}

/// `gate_up_proj` into gate and up (row-contiguous).
fn gate_up(layers: usize, inter: usize) -> Vec<MapEntry> {
    (0..layers)
        .map(|i| {
            let p = format!("model.layers.{i}.mlp");
            MapEntry {
                hf: format!("{p}.gate_up_proj.weight"),
                transpose: false,
                parts: vec![(format!("{p}.gate_proj.weight"), inter), (format!("{p}.up_proj.weight"), inter)],
                groups: 1,
            }
        })
        .collect()
}

fn build(model_type: &str, cfg: &Value) -> Result<ModelSpec> {
    let mut c: Config = parse(cfg)?;
    c.base.partial_rotary_factor = Some(rotary_factor(cfg, 0.5));
    let mut spec = c.base.llama_spec(model_type, c.base.glu("silu")?, false, false, c.attention_bias)?;
    // GlmConfig and Glm4Config default pad_token_id to 151329.
    spec.padding_idx = crate::spec::padding_idx_or(cfg, 151329, spec.vocab);
    let rope = c.base.rope(RopeLayout::Interleaved)?;
    for l in &mut spec.layers {
        l.attn.out_bias = false;
        l.attn.sliding_window = None;
        l.attn.rope = Some(rope.clone());
    }
    spec.weight_map = gate_up(c.base.num_hidden_layers, c.base.intermediate_size);
    Ok(spec)
}

pub fn glm(cfg: &Value) -> Result<ModelSpec> {
    build("glm", cfg)
}

pub fn glm4(cfg: &Value) -> Result<ModelSpec> {
    let mut spec = build("glm4", cfg)?;
    for l in &mut spec.layers {
        l.post_attn_norm = l.attn_norm.clone();
        l.post_mlp_norm = l.mlp_norm.clone();
    }
    let n = &mut spec.layer_names;
    n.post_attn_norm = "model.layers.{i}.post_self_attn_layernorm".into();
    n.post_mlp_norm = "model.layers.{i}.post_mlp_layernorm".into();
    Ok(spec)
}
