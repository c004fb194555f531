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
use crate::spec::{AttnSpec, LayerNames, LayerSpec, MlpSpec, ModelSpec, Norm, Residual};

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
    LayerNames {
        attn_norm: format!("{P}.self_attn_layer_norm"),
        q: format!("{P}.self_attn.q_proj"),
        k: format!("{P}.self_attn.k_proj"),
        v: format!("{P}.self_attn.v_proj"),
        o: format!("{P}.self_attn.out_proj"),
        q_norm: String::new(),
        k_norm: String::new(),
        mlp_norm: format!("{P}.final_layer_norm"),
        post_attn_norm: String::new(),
        post_mlp_norm: String::new(),
        gate: String::new(),
        up: format!("{P}.fc1"),
        down: format!("{P}.fc2"),
    }
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
    let layer = LayerSpec {
        attn_norm: Some(norm.clone()),
        attn: AttnSpec {
            heads: c.num_attention_heads,
            kv_heads: c.num_attention_heads,
            head_dim,
            qkv_bias: c.enable_bias,
            out_bias: c.enable_bias,
            qk_norm: None,
            qk_norm_full: false,
            softcap: 0.0,
            alibi: false,
            alibi_scale: 1.0,
            sliding_window: None,
            rope: None,
            scale: 1.0 / (head_dim as f32).sqrt(),
        },
        post_attn_norm: None,
        mlp_norm: Some(norm.clone()),
        mlp: MlpSpec::Plain { intermediate: c.ffn_dim, act, bias: c.enable_bias },
        post_mlp_norm: None,
        residual: Residual::Sequential,
        residual_scale: 1.0,
    };
    let projected = c.word_embed_proj_dim.is_some_and(|d| d != c.hidden_size);
    Ok(ModelSpec {
        model_type: "opt".into(),
        vocab: c.vocab_size,
        hidden: c.hidden_size,
        embed_scale: 1.0,
        embed_norm: None,
        embed_norm_name: String::new(),
        layers: vec![layer; c.num_hidden_layers],
        final_norm: norm,
        tied_head: c.tie_word_embeddings,
        head_bias: false,
        logit_scale: 1.0,
        final_softcap: None,
        embed_name: "model.decoder.embed_tokens".into(),
        final_norm_name: "model.decoder.final_layer_norm".into(),
        head_name: "lm_head".into(),
        layer_names: names(),
        position_embedding: Some("model.decoder.embed_positions".into()),
        positions_from_mask: true,
        position_offset: 2,
        project_in: projected.then(|| "model.decoder.project_in".into()),
        project_out: projected.then(|| "model.decoder.project_out".into()),
        weight_map: Vec::new(),
        joins: Vec::new(),
        // OPTDecoder's nn.Embedding takes padding_idx = pad_token_id (OPTConfig's default 1).
        padding_idx: crate::spec::padding_idx_or(cfg, 1, c.vocab_size),
        encoder: None,
    })
}
