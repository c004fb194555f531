//! `electra` (`ElectraForMaskedLM`, the generator): BERT's layers under `electra.`, embeddings
//! `embedding_size` wide and projected to `hidden_size` by `electra.embeddings_project` when
//! the two differ; the head maps back to `embedding_size` (`generator_predictions`, exact GELU)
//! before the tied `generator_lm_head`.

use serde::Deserialize;
use serde_json::Value;
use vkformers_kernels::activation::Activation;

use super::bert::names;
use super::bert_defaults;
use super::common::parse;
use super::encoder_common::{activation, bert_tables, head, layer, EncoderParts};
use crate::encoder::{EncoderSpec, MlmHead, NormPlacement, PoolAct, Positions};
use crate::error::{ModelError, Result};
use crate::spec::{padding_idx_or, ModelSpec, Norm};

/// `ElectraConfig`, with its defaults (they differ from BERT's).
#[derive(Deserialize)]
struct Config {
    #[serde(default = "bert_defaults::vocab_size")]
    vocab_size: usize,
    #[serde(default = "d_embedding")]
    embedding_size: usize,
    #[serde(default = "d_hidden")]
    hidden_size: usize,
    #[serde(default = "d_layers")]
    num_hidden_layers: usize,
    #[serde(default = "d_heads")]
    num_attention_heads: usize,
    #[serde(default = "d_intermediate")]
    intermediate_size: usize,
    #[serde(default = "bert_defaults::hidden_act")]
    hidden_act: String,
    #[serde(default = "bert_defaults::max_position_embeddings")]
    max_position_embeddings: usize,
    #[serde(default = "bert_defaults::type_vocab_size")]
    type_vocab_size: usize,
    #[serde(default = "bert_defaults::layer_norm_eps")]
    layer_norm_eps: f64,
    #[serde(default = "bert_defaults::yes")]
    tie_word_embeddings: bool,
    #[serde(default)]
    is_decoder: bool,
    #[serde(default)]
    add_cross_attention: bool,
    position_embedding_type: Option<String>,
}

fn d_embedding() -> usize {
    128
}
fn d_hidden() -> usize {
    256
}
fn d_layers() -> usize {
    12
}
fn d_heads() -> usize {
    4
}
fn d_intermediate() -> usize {
    1024
}

pub fn spec(cfg: &Value) -> Result<ModelSpec> {
    let c: Config = parse(cfg)?;
    if c.is_decoder || c.add_cross_attention {
        return Err(ModelError::Unsupported("electra as a decoder (is_decoder / add_cross_attention)".into()));
    }
    if let Some(p) = c.position_embedding_type.as_deref().filter(|p| *p != "absolute") {
        return Err(ModelError::Unsupported(format!("electra position_embedding_type `{p}`")));
    }
    let norm = Norm::Layer { eps: c.layer_norm_eps as f32, bias: true };
    let layer = layer(c.hidden_size, c.num_attention_heads, c.intermediate_size, activation(&c.hidden_act)?, &norm)?;
    let e = "electra.embeddings";
    let (word, pos_table) = bert_tables(e);
    Ok(EncoderParts {
        model_type: "electra",
        vocab: c.vocab_size,
        hidden: c.hidden_size,
        layers: vec![layer; c.num_hidden_layers],
        names: names("electra"),
        word,
        positions: pos_table,
        embed_norm: Some((norm.clone(), format!("{e}.LayerNorm"))),
        decoder: "generator_lm_head".into(),
        tied: c.tie_word_embeddings,
        padding_idx: padding_idx_or(cfg, 0, c.vocab_size),
        encoder: EncoderSpec {
            token_types: Some((format!("{e}.token_type_embeddings"), c.type_vocab_size)),
            embed_project: (c.embedding_size != c.hidden_size).then(|| "electra.embeddings_project".into()),
            ignored: vec!["generator_lm_head.decoder.bias".into()],
            ..EncoderSpec::new(
                c.embedding_size,
                c.max_position_embeddings,
                Positions::Arange,
                NormPlacement::Post,
                head(
                    cfg,
                    MlmHead::transform(
                        "generator_predictions.dense",
                        Activation::Gelu,
                        &norm,
                        "generator_predictions.LayerNorm",
                        "generator_lm_head.bias",
                    ),
                    ("classifier.dense", PoolAct::Act(Activation::Gelu), "classifier.out_proj"),
                    None,
                )?,
            )
        },
    }
    .build())
}
