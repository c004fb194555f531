//! `bloom`: ALiBi instead of positions, a LayerNorm right after the embedding
//! (`word_embeddings_layernorm`), one fused `query_key_value` laid out per head as
//! `[heads, 3, head_dim]` (split into q, k, v on load), pre-LayerNorm blocks with bias, a plain
//! GELU-tanh MLP (4 x hidden) with biases, a final `ln_f`, and a head tied to the embedding.

use serde::Deserialize;
use serde_json::Value;
use vkformers_kernels::activation::Activation;

use super::common::parse;
use crate::error::{ModelError, Result};
use crate::spec::{AttnSpec, LayerNames, LayerSpec, MapEntry, MlpSpec, ModelSpec, Norm, Residual};

#[derive(Deserialize)]
struct Config {
    vocab_size: usize,
    #[serde(alias = "n_embed")]
    hidden_size: usize,
    #[serde(alias = "num_hidden_layers")]
    n_layer: usize,
    #[serde(alias = "num_attention_heads")]
    n_head: usize,
    #[serde(default = "default_eps")]
    layer_norm_epsilon: f64,
    #[serde(default)]
    apply_residual_connection_post_layernorm: bool,
    #[serde(default = "one")]
    pretraining_tp: usize,
    #[serde(default)]
    slow_but_exact: bool,
    #[serde(default = "yes")]
    tie_word_embeddings: bool,
}

fn default_eps() -> f64 {
    1e-5
}

fn one() -> usize {
    1
}

fn yes() -> bool {
    true
}

const P: &str = "transformer.h.{i}";

fn names() -> LayerNames {
    LayerNames {
        attn_norm: format!("{P}.input_layernorm"),
        q: format!("{P}.self_attention.q"),
        k: format!("{P}.self_attention.k"),
        v: format!("{P}.self_attention.v"),
        o: format!("{P}.self_attention.dense"),
        q_norm: String::new(),
        k_norm: String::new(),
        mlp_norm: format!("{P}.post_attention_layernorm"),
        post_attn_norm: String::new(),
        post_mlp_norm: String::new(),
        gate: String::new(),
        up: format!("{P}.mlp.dense_h_to_4h"),
        down: format!("{P}.mlp.dense_4h_to_h"),
    }
}

/// `query_key_value` (weight and bias): per head, head_dim rows each of q, k and v.
fn weight_map(layers: usize, hidden: usize, heads: usize) -> Vec<MapEntry> {
    let mut map = Vec::new();
    for i in 0..layers {
        let p = format!("transformer.h.{i}.self_attention");
        for suffix in ["weight", "bias"] {
            let parts = ["q", "k", "v"].iter().map(|x| (format!("{p}.{x}.{suffix}"), hidden)).collect();
            map.push(MapEntry { hf: format!("{p}.query_key_value.{suffix}"), transpose: false, parts, groups: heads });
        }
    }
    map
}

pub fn spec(cfg: &Value) -> Result<ModelSpec> {
    let c: Config = parse(cfg)?;
    if c.apply_residual_connection_post_layernorm {
        return Err(ModelError::Unsupported("bloom apply_residual_connection_post_layernorm".into()));
    }
    // `slow_but_exact` with tensor-parallel ranks only changes the summation order of `dense`
    // and `dense_4h_to_h`; the same function in exact arithmetic.
    let _ = (c.pretraining_tp, c.slow_but_exact);
    let head_dim = c.hidden_size / c.n_head;
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
            alibi: true,
            alibi_scale: 1.0,
            sliding_window: None,
            rope: None,
            scale: 1.0 / (head_dim as f32).sqrt(),
        },
        post_attn_norm: None,
        mlp_norm: Some(norm.clone()),
        mlp: MlpSpec::Plain { intermediate: 4 * c.hidden_size, act: Activation::GeluTanh, bias: true },
        post_mlp_norm: None,
        residual: Residual::Sequential,
        residual_scale: 1.0,
    };
    Ok(ModelSpec {
        model_type: "bloom".into(),
        vocab: c.vocab_size,
        hidden: c.hidden_size,
        embed_scale: 1.0,
        embed_norm: Some(norm.clone()),
        embed_norm_name: "transformer.word_embeddings_layernorm".into(),
        layers: vec![layer; c.n_layer],
        final_norm: norm,
        tied_head: c.tie_word_embeddings,
        head_bias: false,
        logit_scale: 1.0,
        final_softcap: None,
        embed_name: "transformer.word_embeddings".into(),
        final_norm_name: "transformer.ln_f".into(),
        head_name: "lm_head".into(),
        layer_names: names(),
        position_embedding: None,
        positions_from_mask: false,
        position_offset: 0,
        project_in: None,
        project_out: None,
        weight_map: weight_map(c.n_layer, c.hidden_size, c.n_head),
        joins: Vec::new(),
        padding_idx: None,
        encoder: None,
    })
}
