//! `albert`: BERT's post-LN layers with factorised embeddings (tables and their LayerNorm
//! `embedding_size` wide, projected by `encoder.embedding_hidden_mapping_in` to `hidden_size`)
//! and shared layers: `num_hidden_groups` groups of `inner_group_num` layers each, stored once
//! as `encoder.albert_layer_groups.{g}.albert_layers.{j}`; layer `l` of `num_hidden_layers`
//! runs group `int(l / (L / G))` (all of its layers in order). The stored layers are internal
//! `encoder.albert_layers.{g·inner + j}`, renamed on load and save; the graph runs them in
//! `layer_order`. Heads: `predictions` (dense to `embedding_size`, `hidden_act`, LayerNorm,
//! tied decoder + bias), the `pooler` (dense + tanh) + `classifier`, or a token `classifier`.

use serde::Deserialize;
use serde_json::Value;

use super::bert_layout::under;
use super::common::parse;
use super::encoder_common::{activation, bert_tables, head, is_bare, layer, EncoderParts};
use crate::encoder::{EncoderHead, EncoderSpec, MlmHead, NormPlacement, PoolAct, Positions};
use crate::error::{ModelError, Result};
use crate::spec::{layer_name, padding_idx_or, LayerNames, MapEntry, ModelSpec, Norm};

/// `AlbertConfig`; its defaults where a config leaves a field out: `embedding_size` 128, one
/// group of one layer, `gelu_new`, 512 positions, 2 token types, eps 1e-12, tied.
#[derive(Deserialize)]
struct Config {
    vocab_size: usize,
    embedding_size: Option<usize>,
    hidden_size: usize,
    num_hidden_layers: usize,
    num_hidden_groups: Option<usize>,
    inner_group_num: Option<usize>,
    num_attention_heads: usize,
    intermediate_size: usize,
    hidden_act: Option<String>,
    max_position_embeddings: Option<usize>,
    type_vocab_size: Option<usize>,
    layer_norm_eps: Option<f64>,
    tie_word_embeddings: Option<bool>,
}

/// One stored layer's modules: attention norm, q, k, v, o, MLP norm, up, down (post-LN: each
/// norm after its residual add).
const MODULES: [&str; 8] = [
    "attention.LayerNorm",
    "attention.query",
    "attention.key",
    "attention.value",
    "attention.dense",
    "full_layer_layer_norm",
    "ffn",
    "ffn_output",
];

/// Stored `albert_layer_groups.{g}.albert_layers.{j}.*` -> internal `albert_layers.{g·inner+j}.*`.
fn renames(p: &str, groups: usize, inner: usize) -> Vec<MapEntry> {
    let mut out = Vec::new();
    for u in 0..groups * inner {
        let stored = under(p, &format!("encoder.albert_layer_groups.{}.albert_layers.{}", u / inner, u % inner));
        let internal = layer_name(&under(p, "encoder.albert_layers.{i}"), u);
        for (m, s) in MODULES.iter().flat_map(|m| [(m, "weight"), (m, "bias")]) {
            let parts = vec![(format!("{internal}.{m}.{s}"), 0)];
            out.push(MapEntry { hf: format!("{stored}.{m}.{s}"), transpose: false, parts, groups: 1 });
        }
    }
    out
}

/// Stored layers in the order they run: group `int(l / (L / G))` for each layer `l`.
fn order(layers: usize, groups: usize, inner: usize) -> Vec<usize> {
    let per_group = layers as f64 / groups as f64;
    (0..layers).flat_map(|l| ((l as f64 / per_group) as usize * inner..).take(inner)).collect()
}

/// Most layer applications a config may ask for (num_hidden_layers × inner_group_num).
const MAX_LAYER_RUNS: usize = 1 << 16;

pub fn spec(cfg: &Value) -> Result<ModelSpec> {
    let c: Config = parse(cfg)?;
    if !c.tie_word_embeddings.unwrap_or(true) {
        return Err(ModelError::Unsupported("albert with tie_word_embeddings false".into()));
    }
    let (groups, inner) = (c.num_hidden_groups.unwrap_or(1), c.inner_group_num.unwrap_or(1));
    // Layers run: num_hidden_layers passes over a group of `inner` layers each; a config whose
    // count does not fit in memory (e.g. inner_group_num 2^64 - 1) is refused, not allocated.
    let runs = c.num_hidden_layers.checked_mul(inner).filter(|&n| n <= MAX_LAYER_RUNS);
    if groups == 0 || inner == 0 || groups > c.num_hidden_layers || runs.is_none() {
        return Err(ModelError::Config(format!(
            "albert with {groups} groups of {inner} for {} layers",
            c.num_hidden_layers
        )));
    }
    // `AlbertModel` stores its tensors without the `albert.` prefix.
    let p = if is_bare(cfg) { "" } else { "albert" };
    let act = activation(c.hidden_act.as_deref().unwrap_or("gelu_new"))?;
    let norm = Norm::Layer { eps: c.layer_norm_eps.unwrap_or(1e-12) as f32, bias: true };
    let layer = layer(c.hidden_size, c.num_attention_heads, c.intermediate_size, act, &norm)?;
    let mlm = MlmHead::transform("predictions.dense", act, &norm, "predictions.LayerNorm", "predictions.bias");
    let pooler = under(p, "pooler");
    let head = head(cfg, mlm, (&pooler, PoolAct::Tanh, "classifier"), Some(&pooler))?;
    // Pre-training heads this model has not (the SOP classifier, the decoder's bias alias), and
    // the pooler where the head does not read it.
    let mut ignored = vec!["predictions.decoder.bias".into(), "sop_classifier.".into()];
    if !matches!(head, EncoderHead::SequenceClassification(_) | EncoderHead::Bare { .. }) {
        ignored.push(format!("{pooler}."));
    }
    if !matches!(head, EncoderHead::MaskedLm(_)) {
        ignored.push("predictions.".into());
    }
    let e = under(p, "embeddings");
    let (word, pos_table) = bert_tables(&e);
    let mut spec = EncoderParts {
        model_type: "albert",
        vocab: c.vocab_size,
        hidden: c.hidden_size,
        layers: vec![layer; groups * inner],
        names: LayerNames::plain(&under(p, "encoder.albert_layers.{i}"), MODULES),
        word,
        positions: pos_table,
        embed_norm: Some((norm, format!("{e}.LayerNorm"))),
        decoder: "predictions.decoder".into(),
        tied: true,
        padding_idx: padding_idx_or(cfg, 0, c.vocab_size),
        encoder: EncoderSpec {
            token_types: Some((format!("{e}.token_type_embeddings"), c.type_vocab_size.unwrap_or(2))),
            embed_project: Some(under(p, "encoder.embedding_hidden_mapping_in")),
            ignored,
            layer_order: order(c.num_hidden_layers, groups, inner),
            ..EncoderSpec::new(
                c.embedding_size.unwrap_or(128),
                c.max_position_embeddings.unwrap_or(512),
                Positions::Arange,
                NormPlacement::Post,
                head,
            )
        },
    }
    .build();
    spec.weight_map.extend(renames(p, groups, inner));
    Ok(spec)
}
