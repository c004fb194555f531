//! `roformer`: BERT's post-LN layers under `roformer.` with rotary positions instead of a
//! learned table. Each head's pairs `(2i, 2i+1)` of q and k (and v with `rotary_value`) rotate
//! by `pos · 10000^(-2i/head_dim)` (`apply_rotary_position_embeddings`); the sinusoid table
//! `roformer.encoder.embed_positions.weight [max_positions, head_dim]` is stored but fixed, so
//! it is a buffer here. Embeddings are `embedding_size` wide (projected by
//! `roformer.embeddings_project` when that differs from `hidden_size`), like ELECTRA's.

use serde::Deserialize;
use serde_json::Value;
use vkformers_kernels::rope::RopeLayout;

use super::bert::names;
use super::bert_defaults;
use super::common::parse;
use super::encoder_common::{activation, head, layer, EncoderParts};
use crate::encoder::{EncoderSpec, MlmHead, NormPlacement, PoolAct, Positions};
use crate::error::{ModelError, Result};
use crate::spec::{padding_idx_or, ModelSpec, Norm, RopeSpec};

/// `RoFormerConfig` (its defaults where a config may leave a field out).
#[derive(Deserialize)]
struct Config {
    vocab_size: usize,
    /// `None`: `hidden_size` (the config's `__post_init__`).
    embedding_size: Option<usize>,
    hidden_size: usize,
    num_hidden_layers: usize,
    num_attention_heads: usize,
    intermediate_size: usize,
    #[serde(default = "bert_defaults::hidden_act")]
    hidden_act: String,
    #[serde(default = "d_positions")]
    max_position_embeddings: usize,
    #[serde(default = "bert_defaults::type_vocab_size")]
    type_vocab_size: usize,
    #[serde(default = "bert_defaults::layer_norm_eps")]
    layer_norm_eps: f64,
    #[serde(default)]
    rotary_value: bool,
    #[serde(default = "bert_defaults::yes")]
    tie_word_embeddings: bool,
    #[serde(default)]
    is_decoder: bool,
    #[serde(default)]
    add_cross_attention: bool,
}

fn d_positions() -> usize {
    1536
}

/// RoFormer's rotation over the whole head: `inv_freq[i] = 10000^(-2i/d)` (computed in f64 as
/// its numpy table is, then rounded).
fn rope(head_dim: usize) -> RopeSpec {
    let inv_freq = (0..head_dim / 2).map(|i| 10000f64.powf(-((2 * i) as f64) / head_dim as f64) as f32).collect();
    RopeSpec { inv_freq, mscale: 1.0, rotary_dim: head_dim, layout: RopeLayout::Interleaved, long: None }
}

pub fn spec(cfg: &Value) -> Result<ModelSpec> {
    let c: Config = parse(cfg)?;
    if c.is_decoder || c.add_cross_attention {
        return Err(ModelError::Unsupported("roformer as a decoder (is_decoder / add_cross_attention)".into()));
    }
    if !c.tie_word_embeddings {
        // As BERT's: an untied decoder leaves `cls.predictions.bias` a dead parameter.
        return Err(ModelError::Unsupported("roformer with tie_word_embeddings false".into()));
    }
    let e_dim = c.embedding_size.unwrap_or(c.hidden_size);
    let act = activation(&c.hidden_act)?;
    let norm = Norm::Layer { eps: c.layer_norm_eps as f32, bias: true };
    let mut layer = layer(c.hidden_size, c.num_attention_heads, c.intermediate_size, act, &norm)?;
    let head_dim = layer.attn.head_dim;
    if head_dim % 2 == 1 {
        return Err(ModelError::Unsupported(format!("roformer with an odd head size {head_dim}")));
    }
    layer.attn.rope = Some(rope(head_dim));
    let e = "roformer.embeddings";
    let mut spec = EncoderParts {
        model_type: "roformer",
        vocab: c.vocab_size,
        hidden: c.hidden_size,
        layers: vec![layer; c.num_hidden_layers],
        names: names("roformer"),
        word: format!("{e}.word_embeddings"),
        positions: String::new(),
        embed_norm: Some((norm.clone(), format!("{e}.LayerNorm"))),
        decoder: "cls.predictions.decoder".into(),
        tied: true,
        padding_idx: padding_idx_or(cfg, 0, c.vocab_size),
        encoder: EncoderSpec {
            token_types: Some((format!("{e}.token_type_embeddings"), c.type_vocab_size)),
            embed_project: (e_dim != c.hidden_size).then(|| "roformer.embeddings_project".into()),
            ignored: vec!["cls.predictions.decoder.bias".into()],
            stored_tables: vec![("roformer.encoder.embed_positions".into(), c.max_position_embeddings, head_dim)],
            rope_on_values: c.rotary_value,
            ..EncoderSpec::new(
                e_dim,
                c.max_position_embeddings,
                Positions::Arange,
                NormPlacement::Post,
                head(
                    cfg,
                    MlmHead::bert(act, &norm, "LayerNorm"),
                    ("classifier.dense", PoolAct::Act(act), "classifier.out_proj"),
                    None,
                )?,
            )
        },
    }
    .build();
    // No learned position table: the rotary layers carry the positions.
    spec.position_embedding = None;
    Ok(spec)
}
