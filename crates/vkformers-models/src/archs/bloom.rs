//! `bloom`: ALiBi instead of positions, a LayerNorm right after the embedding
//! (`word_embeddings_layernorm`), one fused `query_key_value` laid out per head as
//! `[heads, 3, head_dim]` (split into q, k, v on load), pre-LayerNorm blocks with bias, a plain
//! GELU-tanh MLP (4 x hidden) with biases, a final `ln_f`, and a head tied to the embedding.

use serde::Deserialize;
use serde_json::Value;
use vkformers_kernels::activation::Activation;

use super::common::parse;
use crate::decoder::alibi_slopes;
use crate::error::{ModelError, Result};
use crate::spec::{AttnSpec, LayerNames, LayerSpec, MapEntry, MlpSpec, ModelSpec, Norm};

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
    let (q, k, v) = ("self_attention.q", "self_attention.k", "self_attention.v");
    let mlp = ["mlp.dense_h_to_4h", "mlp.dense_4h_to_h"];
    LayerNames::plain(
        P,
        ["input_layernorm", q, k, v, "self_attention.dense", "post_attention_layernorm", mlp[0], mlp[1]],
    )
}

/// `query_key_value` (weight and bias): per head, head_dim rows each of q, k and v.
fn weight_map(layers: usize, hidden: usize, heads: usize) -> Vec<MapEntry> {
    let parts = [("q", hidden), ("k", hidden), ("v", hidden)];
    MapEntry::fused_qkv(
        layers,
        "transformer.h.{i}.self_attention",
        "query_key_value",
        parts,
        heads,
        &["weight", "bias"],
    )
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
    let attn = AttnSpec {
        qkv_bias: true,
        out_bias: true,
        alibi: Some(alibi_slopes(c.n_head)),
        ..AttnSpec::new(c.n_head, c.n_head, head_dim)
    };
    let mlp = MlpSpec::Plain { intermediate: 4 * c.hidden_size, act: Activation::GeluTanh, bias: true };
    let layer = LayerSpec::pre_norm(norm.clone(), attn, mlp);
    let mut spec = ModelSpec::new("bloom", (c.vocab_size, c.hidden_size), layer, c.n_layer, norm.clone(), names());
    spec.embed_norm = Some(norm);
    spec.embed_norm_name = "transformer.word_embeddings_layernorm".into();
    spec.tied_head = c.tie_word_embeddings;
    spec.embed_name = "transformer.word_embeddings".into();
    spec.final_norm_name = "transformer.ln_f".into();
    spec.weight_map = weight_map(c.n_layer, c.hidden_size, c.n_head);
    Ok(spec)
}
