//! `mpnet`: RoBERTa's post-LN layers and heads under `mpnet.` (attention projections
//! `attention.attn.{q,k,v,o}`, its norm `attention.LayerNorm`), no token types, position ids
//! counted from `padding_idx + 1` with `padding_idx` fixed at 1 (MPNet's embeddings ignore
//! `pad_token_id`), and a relative position bias `encoder.relative_attention_bias
//! [relative_attention_num_buckets, heads]` shared by every layer, bucketed as T5's
//! bidirectional buckets with 32 buckets and max distance 128.

use serde::Deserialize;
use serde_json::Value;

use super::bert::names;
use super::bert_defaults;
use super::bert_heads::{ignored, task_head, Head};
use super::bert_layout::under;
use super::common::parse;
use super::encoder_common::{activation, bert_tables, is_bare, layer, EncoderParts};
use crate::encoder::{EncoderSpec, NormPlacement, Positions, RelativeBias};
use crate::error::{ModelError, Result};
use crate::spec::{LayerNames, ModelSpec, Norm};

/// `MPNetConfig` (its defaults where a config may leave a field out).
#[derive(Deserialize)]
struct Config {
    vocab_size: usize,
    hidden_size: usize,
    num_hidden_layers: usize,
    num_attention_heads: usize,
    intermediate_size: usize,
    #[serde(default = "bert_defaults::hidden_act")]
    hidden_act: String,
    #[serde(default = "bert_defaults::max_position_embeddings")]
    max_position_embeddings: usize,
    #[serde(default = "bert_defaults::layer_norm_eps")]
    layer_norm_eps: f64,
    #[serde(default = "d_buckets")]
    relative_attention_num_buckets: usize,
    #[serde(default = "bert_defaults::yes")]
    tie_word_embeddings: bool,
}

fn d_buckets() -> usize {
    32
}

/// `MPNetEmbeddings.padding_idx` (a constant, not the config's pad id).
const PADDING_IDX: usize = 1;

fn mpnet_names(p: &str) -> LayerNames {
    let a = under(p, "encoder.layer.{i}.attention");
    LayerNames {
        attn_norm: format!("{a}.LayerNorm"),
        q: format!("{a}.attn.q"),
        k: format!("{a}.attn.k"),
        v: format!("{a}.attn.v"),
        o: format!("{a}.attn.o"),
        ..names(p)
    }
}

pub fn spec(cfg: &Value) -> Result<ModelSpec> {
    let c: Config = parse(cfg)?;
    if !c.tie_word_embeddings {
        // As RoBERTa's: untied, `lm_head.bias` would be a dead parameter.
        return Err(ModelError::Unsupported("mpnet with tie_word_embeddings false".into()));
    }
    if c.vocab_size <= PADDING_IDX || c.max_position_embeddings <= PADDING_IDX + 1 {
        return Err(ModelError::Config("mpnet needs room for padding_idx 1 in its word and position tables".into()));
    }
    // `MPNetModel` stores its tensors without the `mpnet.` prefix.
    let p = if is_bare(cfg) { "" } else { "mpnet" };
    let act = activation(&c.hidden_act)?;
    let norm = Norm::Layer { eps: c.layer_norm_eps as f32, bias: true };
    let layer = layer(c.hidden_size, c.num_attention_heads, c.intermediate_size, act, &norm)?;
    let (head_prefix, head) = task_head(cfg, Head::Roberta, p, act, &norm)?;
    let e = under(p, "embeddings");
    let (word, pos_table) = bert_tables(&e);
    Ok(EncoderParts {
        model_type: "mpnet",
        vocab: c.vocab_size,
        hidden: c.hidden_size,
        layers: vec![layer; c.num_hidden_layers],
        names: mpnet_names(p),
        word,
        positions: pos_table,
        embed_norm: Some((norm, format!("{e}.LayerNorm"))),
        decoder: format!("{head_prefix}.decoder"),
        tied: true,
        padding_idx: Some(PADDING_IDX),
        encoder: EncoderSpec {
            ignored: ignored(p, head_prefix, &head),
            relative_bias: Some(RelativeBias {
                table: under(p, "encoder.relative_attention_bias"),
                rows: c.relative_attention_num_buckets,
                num_buckets: 32,
                max_distance: 128,
            }),
            ..EncoderSpec::new(
                c.hidden_size,
                c.max_position_embeddings,
                Positions::FromIds { padding_idx: PADDING_IDX },
                NormPlacement::Post,
                head,
            )
        },
    }
    .build())
}
