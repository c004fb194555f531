//! `gpt2`: learned absolute positions, LayerNorm with bias, a plain GELU-tanh MLP with biases,
//! Conv1D weights stored `[in, out]`, and one fused `c_attn` for q, k and v (split on load,
//! joined on save). The head is tied to `wte`.

use serde::Deserialize;
use serde_json::Value;
use vkformers_kernels::activation::Activation;

use super::common::parse;
use crate::error::{ModelError, Result};
use crate::spec::{AttnSpec, LayerNames, LayerSpec, MapEntry, MlpSpec, ModelSpec, Norm, Residual};

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
    let p = "transformer.h.{i}";
    LayerNames {
        attn_norm: format!("{p}.ln_1"),
        q: format!("{p}.attn.q"),
        k: format!("{p}.attn.k"),
        v: format!("{p}.attn.v"),
        o: format!("{p}.attn.c_proj"),
        q_norm: String::new(),
        k_norm: String::new(),
        mlp_norm: format!("{p}.ln_2"),
        post_attn_norm: String::new(),
        post_mlp_norm: String::new(),
        gate: String::new(),
        up: format!("{p}.mlp.c_fc"),
        down: format!("{p}.mlp.c_proj"),
    }
}

/// Conv1D weights are transposed; `c_attn` (weight and bias) is split into q, k, v.
fn weight_map(layers: usize, hidden: usize) -> Vec<MapEntry> {
    let mut map = Vec::new();
    for i in 0..layers {
        let p = format!("transformer.h.{i}");
        for suffix in ["weight", "bias"] {
            let parts = ["q", "k", "v"].iter().map(|x| (format!("{p}.attn.{x}.{suffix}"), hidden)).collect();
            map.push(MapEntry {
                hf: format!("{p}.attn.c_attn.{suffix}"),
                transpose: suffix == "weight",
                parts,
                groups: 1,
            });
        }
        for conv in ["attn.c_proj", "mlp.c_fc", "mlp.c_proj"] {
            let name = format!("{p}.{conv}.weight");
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
    let layer = LayerSpec {
        attn_norm: Some(norm.clone()),
        attn: AttnSpec {
            heads: c.n_head,
            kv_heads: c.n_head,
            head_dim,
            qkv_bias: true,
            out_bias: true,
            qk_norm: None,
            qk_norm_full: false,
            softcap: 0.0,
            alibi: false,
            alibi_scale: 1.0,
            sliding_window: None,
            rope: None,
            scale: if c.scale_attn_weights { 1.0 / (head_dim as f32).sqrt() } else { 1.0 },
        },
        post_attn_norm: None,
        mlp_norm: Some(norm.clone()),
        mlp: MlpSpec::Plain { intermediate: c.n_inner.unwrap_or(4 * c.n_embd), act, bias: true },
        post_mlp_norm: None,
        residual: Residual::Sequential,
        residual_scale: 1.0,
    };
    Ok(ModelSpec {
        model_type: "gpt2".into(),
        vocab: c.vocab_size,
        hidden: c.n_embd,
        embed_scale: 1.0,
        embed_norm: None,
        embed_norm_name: String::new(),
        layers: vec![layer; c.n_layer],
        final_norm: norm,
        tied_head: c.tie_word_embeddings,
        head_bias: false,
        logit_scale: 1.0,
        final_softcap: None,
        embed_name: "transformer.wte".into(),
        final_norm_name: "transformer.ln_f".into(),
        head_name: "lm_head".into(),
        layer_names: names(),
        position_embedding: Some("transformer.wpe".into()),
        positions_from_mask: false,
        position_offset: 0,
        project_in: None,
        project_out: None,
        weight_map: weight_map(c.n_layer, c.n_embd),
        joins: Vec::new(),
        padding_idx: None,
        encoder: None,
    })
}
