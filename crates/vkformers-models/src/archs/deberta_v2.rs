//! `deberta-v2` (DeBERTa-v2 / v3): BERT's post-LN layers under `deberta.` with
//! `attention.self.{query,key,value}_proj` and disentangled attention (`encoder::Disentangled`):
//! one relative table `encoder.rel_embeddings [2·span, hidden]` (optionally `encoder.LayerNorm`ed),
//! c2p / p2c terms through `pos_key_proj` / `pos_query_proj` or the shared key / query
//! projections, log buckets. Embeddings: word (+ learned positions with `position_biased_input`)
//! (+ token types when `type_vocab_size > 0`), LayerNorm, times the attention mask. Heads: the
//! legacy `cls.predictions.*` MLM head (or `lm_predictions.lm_head.*`), `pooler.dense` +
//! `pooler_hidden_act` + `classifier`, a token `classifier`, the bare `DebertaV2Model`.

use serde_json::Value;

use super::bert::names;
use super::bert_heads::{task_head, Head};
use super::bert_layout::under;
use super::common::parse;
use super::deberta_config::{att_types, check, relative, Config};
use super::encoder_common::{activation, bert_tables, is_bare, layer, EncoderParts};
use crate::encoder::Positions;
use crate::encoder::{Disentangled, EmbedMasking, EncoderHead, EncoderSpec, MlmHead, NormPlacement, PoolAct};
use crate::error::Result;
use crate::spec::{padding_idx_or, LayerNames, ModelSpec, Norm};

pub fn spec(cfg: &Value) -> Result<ModelSpec> {
    build(cfg, false)
}

/// The head's names (legacy `cls.predictions`, or `lm_predictions.lm_head`; the context pooler)
/// and the stored tensors of the heads this model has not.
fn adapt_head(head: &mut EncoderHead, c: &Config) -> Result<Vec<String>> {
    let mut ignored = vec!["mask_predictions.".to_string(), "cls.predictions.decoder.bias".into()];
    match head {
        EncoderHead::MaskedLm(m) if !c.legacy => {
            let lm = "lm_predictions.lm_head";
            *m = MlmHead {
                dense: format!("{lm}.dense"),
                norm_name: format!("{lm}.LayerNorm"),
                bias: format!("{lm}.bias"),
                ..m.clone()
            };
            ignored.extend(["cls.".into(), "pooler.".into()]);
        }
        EncoderHead::MaskedLm(_) => ignored.extend(["lm_predictions.".into(), "pooler.".into()]),
        EncoderHead::SequenceClassification(s) => {
            let act = match c.pooler_hidden_act.as_str() {
                "tanh" => PoolAct::Tanh,
                other => PoolAct::Act(activation(other)?),
            };
            (s.dense, s.act) = ("pooler.dense".into(), act);
            ignored.extend(["cls.".into(), "lm_predictions.".into()]);
        }
        EncoderHead::TokenClassification { .. } => {
            ignored.extend(["cls.".into(), "lm_predictions.".into(), "pooler.".into()])
        }
        // `DebertaV2Model` / `DebertaModel` have no pooler.
        EncoderHead::Bare { pooler } => *pooler = None,
    }
    Ok(ignored)
}

/// DeBERTa v2 (`v1` false) or v1: v1 projects q, k, v through one `in_proj` (see `deberta`),
/// has no key bias, and counts every `pos_att_type` entry in the score's scale.
pub(super) fn build(cfg: &Value, v1: bool) -> Result<ModelSpec> {
    let c: Config = parse(cfg)?;
    check(&c)?;
    let p = if is_bare(cfg) { "" } else { "deberta" };
    let act = activation(&c.hidden_act)?;
    let norm = Norm::Layer { eps: c.layer_norm_eps as f32, bias: true };
    let mut layer = layer(c.hidden_size, c.num_attention_heads, c.intermediate_size, act, &norm)?;
    let types = att_types(&c.pos_att_type);
    // Every score divides by sqrt(D · scale_factor), whether or not the relative terms run.
    let counted = if v1 { types.len() } else { types.iter().filter(|t| *t == "c2p" || *t == "p2c").count() };
    layer.attn.scale = 1.0 / (layer.attn.head_dim as f32 * (1 + counted) as f32).sqrt();
    let (_, mut head) = task_head(cfg, Head::Bert, p, act, &norm)?;
    let mut ignored = adapt_head(&mut head, &c)?;
    let e = under(p, "embeddings");
    let (word, pos_table) = bert_tables(&e);
    if !c.position_biased_input {
        ignored.push(format!("{e}.position_embeddings"));
    }
    let l = under(p, "encoder.layer.{i}.attention.self");
    let qkv = if v1 { ["q", "k", "v"] } else { ["query_proj", "key_proj", "value_proj"] };
    let [q, k, v] = qkv.map(|x| format!("{l}.{x}"));
    let layer_names = LayerNames { q, k, v, ..names(p) };
    let mut spec = EncoderParts {
        model_type: if v1 { "deberta" } else { "deberta-v2" },
        vocab: c.vocab_size,
        hidden: c.hidden_size,
        layers: vec![layer; c.num_hidden_layers],
        names: layer_names,
        word,
        positions: pos_table,
        embed_norm: Some((norm, format!("{e}.LayerNorm"))),
        decoder: "cls.predictions.decoder".into(),
        tied: true,
        padding_idx: padding_idx_or(cfg, 0, c.vocab_size),
        encoder: EncoderSpec {
            token_types: (c.type_vocab_size > 0).then(|| (format!("{e}.token_type_embeddings"), c.type_vocab_size)),
            ignored,
            // The embeddings times the attention mask.
            masking: EmbedMasking { token_dropout: None, zero_padding: true },
            disentangled: Some(Disentangled { relative: relative(&c, &types, p, v1), key_bias: !v1 }),
            ..EncoderSpec::new(c.hidden_size, c.max_position_embeddings, Positions::Arange, NormPlacement::Post, head)
        },
    }
    .build();
    if !c.position_biased_input {
        spec.position_embedding = None;
    }
    Ok(spec)
}
