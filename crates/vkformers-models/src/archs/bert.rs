//! The BERT family of post-LN encoders with a masked-LM head: `bert`, `roberta` and the models
//! that reuse their modules under another prefix. Learned absolute positions (RoBERTa: counted
//! from `padding_idx + 1` over non-pad ids), token types, LayerNorm after each residual add.

use serde::Deserialize;
use serde_json::Value;

use super::bert_defaults;
use super::bert_heads::{ignored, task_head, Head};
pub(super) use super::bert_layout::names;
use super::bert_layout::{under, Layout};
use super::common::parse;
use super::encoder_common::{activation, bert_tables, is_bare, layer, EncoderParts};
use crate::encoder::{EncoderSpec, NormPlacement, Positions};
use crate::error::{ModelError, Result};
use crate::spec::{padding_idx_or, ModelSpec, Norm};

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
    /// ERNIE 3.0's task-type embeddings.
    #[serde(default)]
    use_task_id: bool,
    /// Configs older than transformers 5 may name relative position schemes here.
    position_embedding_type: Option<String>,
}

/// The spec of a BERT-shaped masked-LM model stored under `prefix` (`bert`, `roberta`, ...);
/// `from_ids`: RoBERTa's position ids; `pad_default`: the config class's `pad_token_id`.
pub(super) fn spec(
    model_type: &str,
    prefix: &str,
    head: Head,
    from_ids: bool,
    pad_default: i64,
    layout: Layout,
    cfg: &Value,
) -> Result<ModelSpec> {
    let c: Config = parse(cfg)?;
    // A bare model (`BertModel`) stores its tensors without the `bert.` prefix.
    let prefix = if is_bare(cfg) { "" } else { prefix };
    if c.is_decoder || c.add_cross_attention {
        return Err(ModelError::Unsupported(format!("{model_type} as a decoder (is_decoder / add_cross_attention)")));
    }
    if let Some(p) = c.position_embedding_type.as_deref().filter(|p| *p != "absolute") {
        return Err(ModelError::Unsupported(format!("{model_type} position_embedding_type `{p}`")));
    }
    if c.use_task_id {
        return Err(ModelError::Unsupported(format!("{model_type} use_task_id (task-type embeddings)")));
    }
    if !c.tie_word_embeddings {
        // Untied, transformers' decoder keeps its own bias and `{head}.bias` becomes a dead
        // parameter (no gradient, no AdamW update): not modelled yet.
        return Err(ModelError::Unsupported(format!("{model_type} with tie_word_embeddings false")));
    }
    let act = activation(&c.hidden_act)?;
    let norm = Norm::Layer { eps: c.layer_norm_eps as f32, bias: true };
    let layer = layer(c.hidden_size, c.num_attention_heads, c.intermediate_size, act, &norm)?;
    let padding_idx = padding_idx_or(cfg, pad_default, c.vocab_size);
    let positions = match (from_ids, padding_idx) {
        (false, _) => Positions::Arange,
        (true, Some(padding_idx)) => Positions::FromIds { padding_idx },
        (true, None) => {
            return Err(ModelError::Config(format!("{model_type} needs a pad_token_id for its position ids")))
        }
    };
    let (head_prefix, head) = task_head(cfg, head, prefix, act, &norm)?;
    let ignored = ignored(prefix, head_prefix, &head);
    let e = under(prefix, "embeddings");
    let (word, pos_table) = bert_tables(&e);
    let spec = EncoderParts {
        model_type,
        vocab: c.vocab_size,
        hidden: c.hidden_size,
        layers: vec![layer; c.num_hidden_layers],
        names: layout.names(prefix),
        word,
        positions: pos_table,
        embed_norm: layout.embedding_norm().then(|| (norm.clone(), format!("{e}.LayerNorm"))),
        decoder: format!("{head_prefix}.decoder"),
        tied: true,
        padding_idx,
        encoder: EncoderSpec {
            token_types: Some((format!("{e}.token_type_embeddings"), c.type_vocab_size)),
            final_norm: layout.final_norm(prefix).map(|name| (norm.clone(), name)),
            ignored,
            ..EncoderSpec::new(
                c.hidden_size,
                c.max_position_embeddings,
                positions,
                if layout == Layout::Post { NormPlacement::Post } else { NormPlacement::Pre },
                head,
            )
        },
    }
    .build();
    check_positions(spec, c.max_position_embeddings)
}

/// RoBERTa's ids start at `padding_idx + 1`, so its table must hold more than that.
fn check_positions(s: ModelSpec, max: usize) -> Result<ModelSpec> {
    if let Some(Positions::FromIds { padding_idx }) = s.encoder.as_ref().map(|e| e.positions) {
        if max <= padding_idx + 1 {
            return Err(ModelError::Config(format!(
                "max_position_embeddings {max} leaves no position after padding_idx {padding_idx}"
            )));
        }
    }
    Ok(s)
}
