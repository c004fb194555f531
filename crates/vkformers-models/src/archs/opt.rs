//! `opt` (OPT-125m ... 66b): learned positions read at `cumsum(mask)·mask − 1 + 2` (the table has
//! two extra rows; padding reads row 1), pre-LayerNorm blocks with bias (`do_layer_norm_before`),
//! biases on q/k/v/out and a plain ReLU MLP (`fc1`, `fc2`) with biases, a final LayerNorm, and a
//! tied head. A `word_embed_proj_dim` below the hidden size adds the bias-free `project_in` after
//! the token embedding and `project_out` before the head. The post-norm variant (OPT-350m,
//! `do_layer_norm_before: false`) is not supported.

use serde::Deserialize;
use serde_json::Value;

use super::common::parse;
use super::ln_common::plain_act;
use crate::error::{ModelError, Result};
use crate::spec::{AttnSpec, LayerNames, LayerSpec, MlpSpec, ModelSpec, Norm, PositionIds};

#[derive(Deserialize)]
struct Config {
    vocab_size: usize,
    hidden_size: usize,
    num_hidden_layers: usize,
    ffn_dim: usize,
    num_attention_heads: usize,
    #[serde(default = "yes")]
    do_layer_norm_before: bool,
    #[serde(default)]
    _remove_final_layer_norm: bool,
    word_embed_proj_dim: Option<usize>,
    #[serde(default = "relu")]
    activation_function: String,
    #[serde(default = "yes")]
    enable_bias: bool,
    #[serde(default = "yes")]
    tie_word_embeddings: bool,
}

fn yes() -> bool {
    true
}

fn relu() -> String {
    "relu".into()
}

const P: &str = "model.decoder.layers.{i}";

fn names() -> LayerNames {
    let parts = ["self_attn_layer_norm", "self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj"];
    let [a, q, k, v] = parts;
    LayerNames::plain(P, [a, q, k, v, "self_attn.out_proj", "final_layer_norm", "fc1", "fc2"])
}

pub fn spec(cfg: &Value) -> Result<ModelSpec> {
    let c: Config = parse(cfg)?;
    if !c.do_layer_norm_before || c._remove_final_layer_norm {
        return Err(ModelError::Unsupported("opt with post-norm layers or no final layer norm".into()));
    }
    let act = plain_act(&c.activation_function)?;
    let head_dim = c.hidden_size / c.num_attention_heads;
    // nn.LayerNorm's default eps; OPT has no config key for it.
    let norm = Norm::Layer { eps: 1e-5, bias: true };
    let attn = AttnSpec {
        qkv_bias: c.enable_bias,
        out_bias: c.enable_bias,
        ..AttnSpec::new(c.num_attention_heads, c.num_attention_heads, head_dim)
    };
    let mlp = MlpSpec::Plain { intermediate: c.ffn_dim, act, bias: c.enable_bias };
    let layer = LayerSpec::pre_norm(norm.clone(), attn, mlp);
    let projected = c.word_embed_proj_dim.is_some_and(|d| d != c.hidden_size);
    let mut spec = ModelSpec::new("opt", (c.vocab_size, c.hidden_size), layer, c.num_hidden_layers, norm, names());
    spec.tied_head = c.tie_word_embeddings;
    spec.embed_name = "model.decoder.embed_tokens".into();
    spec.final_norm_name = "model.decoder.final_layer_norm".into();
    spec.position_embedding = Some("model.decoder.embed_positions".into());
    (spec.position_ids, spec.position_offset) = (PositionIds::FromMask, 2);
    spec.project_in = projected.then(|| "model.decoder.project_in".into());
    spec.project_out = projected.then(|| "model.decoder.project_out".into());
    // OPTDecoder's nn.Embedding takes padding_idx = pad_token_id (OPTConfig's default 1).
    spec.padding_idx = crate::spec::padding_idx_or(cfg, 1, c.vocab_size);
    Ok(spec)
}
