//! `distilbert`: BERT's post-LN layers under other names (`q_lin`, `sa_layer_norm`, `ffn.lin1`,
//! ...), no token types, LayerNorm eps fixed at 1e-12, and the head `vocab_transform` ->
//! `activation` -> `vocab_layer_norm` -> `vocab_projector` (tied, with its own bias).

use serde::Deserialize;
use serde_json::Value;
use vkformers_kernels::activation::Activation;

use super::bert_defaults;
use super::common::parse;
use super::encoder_common::{activation, bert_tables, head, layer, EncoderParts};
use crate::encoder::{EncoderSpec, MlmHead, NormPlacement, PoolAct, Positions};
use crate::error::{ModelError, Result};
use crate::spec::{padding_idx_or, LayerNames, ModelSpec, Norm};

/// `DistilBertConfig` (its own field names; defaults as the class).
#[derive(Deserialize)]
struct Config {
    #[serde(default = "bert_defaults::vocab_size")]
    vocab_size: usize,
    #[serde(default = "d_dim")]
    dim: usize,
    #[serde(default = "d_layers")]
    n_layers: usize,
    #[serde(default = "d_heads")]
    n_heads: usize,
    #[serde(default = "d_hidden_dim")]
    hidden_dim: usize,
    #[serde(default = "bert_defaults::hidden_act")]
    activation: String,
    #[serde(default = "bert_defaults::max_position_embeddings")]
    max_position_embeddings: usize,
    #[serde(default)]
    sinusoidal_pos_embds: bool,
    #[serde(default = "bert_defaults::yes")]
    tie_word_embeddings: bool,
}

fn d_dim() -> usize {
    768
}
fn d_layers() -> usize {
    6
}
fn d_heads() -> usize {
    12
}
fn d_hidden_dim() -> usize {
    3072
}

fn names() -> LayerNames {
    let parts = [
        "sa_layer_norm",
        "attention.q_lin",
        "attention.k_lin",
        "attention.v_lin",
        "attention.out_lin",
        "output_layer_norm",
        "ffn.lin1",
        "ffn.lin2",
    ];
    LayerNames::plain("distilbert.transformer.layer.{i}", parts)
}

pub fn spec(cfg: &Value) -> Result<ModelSpec> {
    let c: Config = parse(cfg)?;
    if c.sinusoidal_pos_embds {
        return Err(ModelError::Unsupported("distilbert sinusoidal_pos_embds".into()));
    }
    let act = activation(&c.activation)?;
    // DistilBERT hard-codes eps 1e-12 in every LayerNorm.
    let norm = Norm::Layer { eps: 1e-12, bias: true };
    let layer = layer(c.dim, c.n_heads, c.hidden_dim, act, &norm)?;
    let e = "distilbert.embeddings";
    let (word, pos_table) = bert_tables(e);
    Ok(EncoderParts {
        model_type: "distilbert",
        vocab: c.vocab_size,
        hidden: c.dim,
        layers: vec![layer; c.n_layers],
        names: names(),
        word,
        positions: pos_table,
        embed_norm: Some((norm.clone(), format!("{e}.LayerNorm"))),
        decoder: "vocab_projector".into(),
        tied: c.tie_word_embeddings,
        padding_idx: padding_idx_or(cfg, 0, c.vocab_size),
        encoder: EncoderSpec::new(
            c.dim,
            c.max_position_embeddings,
            Positions::Arange,
            NormPlacement::Post,
            head(
                cfg,
                MlmHead::transform("vocab_transform", act, &norm, "vocab_layer_norm", "vocab_projector.bias"),
                ("pre_classifier", PoolAct::Act(Activation::Relu), "classifier"),
                None,
            )?,
        ),
    }
    .build())
}
