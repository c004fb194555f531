//! `persimmon` (Adept Persimmon-8B): LayerNorm with bias, one fused `query_key_value` laid out
//! per head as `[heads, 3, head_dim]` (with bias), optional `qk_layernorm` (one LayerNorm with
//! bias over head_dim shared by all heads of q, and of k), partial rotary (default 0.5), a plain
//! ReLU² MLP with biases (`dense_h_to_4h`, `dense_4h_to_h`), sequential residual, untied head.

use serde::Deserialize;
use serde_json::Value;
use vkformers_kernels::glu::Glu;

use super::common::{parse, BaseConfig};
use super::ln_common::{prepare, set_norms};
use crate::error::Result;
use crate::spec::{MapEntry, MlpSpec, ModelSpec, Norm};

#[derive(Deserialize)]
struct Config {
    #[serde(flatten)]
    base: BaseConfig,
    #[serde(default = "default_eps")]
    layer_norm_eps: f64,
    #[serde(default = "yes")]
    qk_layernorm: bool,
}

fn default_eps() -> f64 {
    1e-5
}

fn yes() -> bool {
    true
}

/// `query_key_value` (weight and bias): per head, head_dim rows each of q, k and v.
fn weight_map(layers: usize, hidden: usize, heads: usize) -> Vec<MapEntry> {
    let parts = [("q_proj", hidden), ("k_proj", hidden), ("v_proj", hidden)];
    MapEntry::fused_qkv(layers, "model.layers.{i}.self_attn", "query_key_value", parts, heads, &["weight", "bias"])
}

pub fn spec(cfg: &Value) -> Result<ModelSpec> {
    let mut c: Config = parse(cfg)?;
    prepare(&mut c.base, cfg, "relu2", 0.5);
    // The head size is always hidden / heads; no GQA.
    c.base.head_dim = None;
    c.base.num_key_value_heads = None;
    c.base.sliding_window = None;
    let act = match c.base.hidden_act.as_deref().unwrap_or_default() {
        "relu2" => vkformers_kernels::activation::Activation::Relu2,
        other => super::ln_common::plain_act(other)?,
    };
    let mut spec = c.base.llama_spec("persimmon", Glu::SwiGlu, false, c.qk_layernorm, true)?;
    set_norms(&mut spec, &Norm::Layer { eps: c.layer_norm_eps as f32, bias: true });
    for l in &mut spec.layers {
        l.attn.out_bias = true;
        l.mlp = MlpSpec::Plain { intermediate: c.base.intermediate_size, act, bias: true };
    }
    spec.final_norm_name = "model.final_layernorm".into();
    let n = &mut spec.layer_names;
    let p = "model.layers.{i}";
    n.o = format!("{p}.self_attn.dense");
    n.q_norm = format!("{p}.self_attn.q_layernorm");
    n.k_norm = format!("{p}.self_attn.k_layernorm");
    n.up = format!("{p}.mlp.dense_h_to_4h");
    n.down = format!("{p}.mlp.dense_4h_to_h");
    spec.weight_map = weight_map(c.base.num_hidden_layers, c.base.hidden_size, c.base.num_attention_heads);
    Ok(spec)
}
