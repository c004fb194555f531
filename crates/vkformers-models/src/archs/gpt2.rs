//! `gpt2`: learned absolute positions, LayerNorm with bias, a plain GELU-tanh MLP with biases,
//! Conv1D weights stored `[in, out]`, and one fused `c_attn` for q, k and v (split on load,
//! joined on save). The head is tied to `wte`.

use serde::Deserialize;
use serde_json::Value;
use vkformers_kernels::activation::Activation;

use super::common::parse;
use crate::error::{ModelError, Result};
use crate::spec::{AttnSpec, LayerNames, LayerSpec, MapEntry, MlpSpec, ModelSpec, Norm, ResidualInit};

#[derive(Deserialize)]
struct Config {
    vocab_size: usize,
    n_embd: usize,
    n_layer: usize,
    n_head: usize,
    n_inner: Option<usize>,
    #[serde(default = "default_eps")]
    layer_norm_epsilon: f64,
    activation_function: Option<String>,
    #[serde(default = "yes")]
    scale_attn_weights: bool,
    #[serde(default)]
    scale_attn_by_inverse_layer_idx: bool,
    #[serde(default)]
    reorder_and_upcast_attn: bool,
    #[serde(default = "yes")]
    tie_word_embeddings: bool,
}

fn default_eps() -> f64 {
    1e-5
}

fn yes() -> bool {
    true
}

fn names() -> LayerNames {
    let parts = ["ln_1", "attn.q", "attn.k", "attn.v", "attn.c_proj", "ln_2", "mlp.c_fc", "mlp.c_proj"];
    LayerNames::plain("transformer.h.{i}", parts)
}

/// Conv1D weights are transposed; `c_attn` (weight and bias) is split into q, k, v.
fn weight_map(layers: usize, hidden: usize) -> Vec<MapEntry> {
    let parts = [("q", hidden), ("k", hidden), ("v", hidden)];
    let mut map = MapEntry::fused_qkv(layers, "transformer.h.{i}.attn", "c_attn", parts, 1, &["weight", "bias"]);
    for e in &mut map {
        e.transpose = e.hf.ends_with(".weight");
    }
    for i in 0..layers {
        for conv in ["attn.c_proj", "mlp.c_fc", "mlp.c_proj"] {
            let name = format!("transformer.h.{i}.{conv}.weight");
            map.push(MapEntry { hf: name.clone(), transpose: true, parts: vec![(name, 0)], groups: 1 });
        }
    }
    map
}

pub fn spec(cfg: &Value) -> Result<ModelSpec> {
    let c: Config = parse(cfg)?;
    if c.scale_attn_by_inverse_layer_idx || c.reorder_and_upcast_attn {
        return Err(ModelError::Unsupported("gpt2 scale_attn_by_inverse_layer_idx / reorder_and_upcast_attn".into()));
    }
    let act = match c.activation_function.as_deref().unwrap_or("gelu_new") {
        "gelu_new" | "gelu_pytorch_tanh" | "gelu_fast" => Activation::GeluTanh,
        "gelu" => Activation::Gelu,
        "relu" => Activation::Relu,
        "silu" | "swish" => Activation::Silu,
        other => return Err(ModelError::Unsupported(format!("gpt2 activation_function `{other}`"))),
    };
    let head_dim = c.n_embd / c.n_head;
    let norm = Norm::Layer { eps: c.layer_norm_epsilon as f32, bias: true };
    let attn = AttnSpec {
        qkv_bias: true,
        out_bias: true,
        scale: if c.scale_attn_weights { 1.0 / (head_dim as f32).sqrt() } else { 1.0 },
        ..AttnSpec::new(c.n_head, c.n_head, head_dim)
    };
    let mlp = MlpSpec::Plain { intermediate: c.n_inner.unwrap_or(4 * c.n_embd), act, bias: true };
    let layer = LayerSpec::pre_norm(norm.clone(), attn, mlp);
    let mut spec = ModelSpec::new("gpt2", (c.vocab_size, c.n_embd), layer, c.n_layer, norm, names());
    spec.tied_head = c.tie_word_embeddings;
    spec.embed_name = "transformer.wte".into();
    spec.final_norm_name = "transformer.ln_f".into();
    spec.position_embedding = Some("transformer.wpe".into());
    spec.weight_map = weight_map(c.n_layer, c.n_embd);
    spec.residual_init = ResidualInit::AttnOutAndMlpDown;
    Ok(spec)
}
