//! `persimmon` (Adept Persimmon-8B): LayerNorm with bias, one fused `query_key_value` laid out
//! per head as `[heads, 3, head_dim]` (with bias), optional `qk_layernorm` (one LayerNorm with
//! bias over head_dim shared by all heads of q, and of k), partial rotary (default 0.5), a plain
//! ReLU² MLP with biases (`dense_h_to_4h`, `dense_4h_to_h`), sequential residual, untied head.

use serde::Deserialize;
use serde_json::Value;
use vkformers_kernels::glu::Glu;

use super::common::parse;
use super::ln_common::{prepare, set_norms, whole_heads, LnConfig};
use crate::error::Result;
use crate::spec::{MapEntry, MlpSpec, ModelSpec};

#[derive(Deserialize)]
struct Config {
    #[serde(flatten)]
    ln: LnConfig,
    #[serde(default = "yes")]
    qk_layernorm: bool,
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
    let b = &mut c.ln.base;
    prepare(b, cfg, "relu2", 0.5);
    whole_heads(b, false);
    let act = match b.hidden_act.as_deref().unwrap_or_default() {
        "relu2" => vkformers_kernels::activation::Activation::Relu2,
        other => super::ln_common::plain_act(other)?,
    };
    let mut spec = b.llama_spec("persimmon", Glu::SwiGlu, false, c.qk_layernorm, true)?;
    set_norms(&mut spec, &c.ln.norm(true));
    let b = &c.ln.base;
    for l in &mut spec.layers {
        l.attn.out_bias = true;
        l.mlp = MlpSpec::Plain { intermediate: b.intermediate_size, act, bias: true };
    }
    spec.final_norm_name = "model.final_layernorm".into();
    super::phi::dense_and_qk_layernorm_names(&mut spec);
    spec.layer_names.up = "model.layers.{i}.mlp.dense_h_to_4h".into();
    spec.layer_names.down = "model.layers.{i}.mlp.dense_4h_to_h".into();
    spec.weight_map = weight_map(b.num_hidden_layers, b.hidden_size, b.num_attention_heads);
    Ok(spec)
}
