//! `mobilebert` under `mobilebert.`: bottlenecks, stacked FFNs, `NoNorm`, trigram embeddings
//! (`encoder::MobileSpec`); BERT's heads (the decoder's extra rows `cls.predictions.dense`).

use serde::Deserialize;
use serde_json::Value;

use super::bert::names;
use super::bert_heads::{ignored, task_head, Head};
use super::bert_layout::under;
use super::common::parse;
use super::encoder_common::{activation, bert_tables, is_bare, layer, EncoderParts};
use crate::encoder::{EncoderSpec, MobileSpec, NormPlacement, Positions};
use crate::error::{ModelError, Result};
use crate::spec::{padding_idx_or, ModelSpec, Norm};

/// `MobileBertConfig` (its defaults where a config may leave a field out).
#[derive(Deserialize)]
#[serde(default)]
struct Config {
    vocab_size: usize,
    hidden_size: usize,
    num_hidden_layers: usize,
    num_attention_heads: usize,
    intermediate_size: usize,
    hidden_act: String,
    max_position_embeddings: usize,
    type_vocab_size: usize,
    layer_norm_eps: f64,
    embedding_size: usize,
    trigram_input: bool,
    use_bottleneck: bool,
    intra_bottleneck_size: usize,
    use_bottleneck_attention: bool,
    key_query_shared_bottleneck: bool,
    num_feedforward_networks: usize,
    normalization_type: String,
    classifier_activation: bool,
    tie_word_embeddings: bool,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            vocab_size: 30522,
            hidden_size: 512,
            num_hidden_layers: 24,
            num_attention_heads: 4,
            intermediate_size: 512,
            hidden_act: "relu".into(),
            max_position_embeddings: 512,
            type_vocab_size: 2,
            layer_norm_eps: 1e-12,
            embedding_size: 128,
            trigram_input: true,
            use_bottleneck: true,
            intra_bottleneck_size: 128,
            use_bottleneck_attention: false,
            key_query_shared_bottleneck: true,
            num_feedforward_networks: 4,
            normalization_type: "no_norm".into(),
            classifier_activation: true,
            tie_word_embeddings: true,
        }
    }
}

fn mobile(c: &Config, p: &str) -> Result<MobileSpec> {
    let unsupported = |what: &str| Err(ModelError::Unsupported(format!("mobilebert with {what}")));
    if !c.tie_word_embeddings || !c.classifier_activation {
        return unsupported("tie_word_embeddings or classifier_activation false");
    }
    if c.use_bottleneck && c.use_bottleneck_attention && c.key_query_shared_bottleneck {
        return unsupported("use_bottleneck_attention and key_query_shared_bottleneck (an unread bottleneck)");
    }
    if c.embedding_size >= c.hidden_size || c.num_feedforward_networks == 0 {
        return unsupported("embedding_size >= hidden_size or no feed-forward network");
    }
    let inner = if c.use_bottleneck { c.intra_bottleneck_size } else { c.hidden_size };
    // Without a q/k bottleneck the queries read the hidden state, so T' must equal H.
    let qk_width = c.use_bottleneck && !c.use_bottleneck_attention && !c.key_query_shared_bottleneck;
    if (qk_width && inner != c.hidden_size) || inner == 0 || !inner.is_multiple_of(c.num_attention_heads.max(1)) {
        let heads = c.num_attention_heads;
        return Err(ModelError::Config(format!("mobilebert's true hidden size {inner} with {heads} heads")));
    }
    let layer_norm_eps = match c.normalization_type.as_str() {
        "no_norm" => None,
        "layer_norm" => Some(c.layer_norm_eps as f32),
        other => return Err(ModelError::Config(format!("normalization_type `{other}`"))),
    };
    Ok(MobileSpec {
        layer: under(p, "encoder.layer.{i}"),
        embeddings: under(p, "embeddings"),
        hidden: c.hidden_size,
        inner,
        intermediate: c.intermediate_size,
        heads: c.num_attention_heads,
        act: activation(&c.hidden_act)?,
        trigram: c.trigram_input,
        bottleneck: c.use_bottleneck,
        bottleneck_attention: c.use_bottleneck_attention,
        shared_qk: c.key_query_shared_bottleneck,
        ffns: c.num_feedforward_networks,
        layer_norm_eps,
    })
}

pub fn spec(cfg: &Value) -> Result<ModelSpec> {
    let c: Config = parse(cfg)?;
    let p = if is_bare(cfg) { "" } else { "mobilebert" };
    let m = mobile(&c, p)?;
    let act = m.act;
    let norm = Norm::Layer { eps: c.layer_norm_eps as f32, bias: true };
    // The generic layer's shape (the graph runs `MobileSpec`'s layers instead).
    let layer = layer(m.inner, c.num_attention_heads, c.intermediate_size, act, &norm)?;
    let (head_prefix, head) = task_head(cfg, Head::Bert, p, act, &norm)?;
    let e = under(p, "embeddings");
    let (word, pos_table) = bert_tables(&e);
    Ok(EncoderParts {
        model_type: "mobilebert",
        vocab: c.vocab_size,
        hidden: c.hidden_size,
        layers: vec![layer; c.num_hidden_layers],
        names: names(p),
        word,
        positions: pos_table,
        embed_norm: None,
        decoder: format!("{head_prefix}.decoder"),
        tied: true,
        padding_idx: padding_idx_or(cfg, 0, c.vocab_size),
        encoder: EncoderSpec {
            token_types: Some((format!("{e}.token_type_embeddings"), c.type_vocab_size)),
            ignored: ignored(p, head_prefix, &head),
            mobile: Some(m),
            ..EncoderSpec::new(
                c.embedding_size,
                c.max_position_embeddings,
                Positions::Arange,
                NormPlacement::Post,
                head,
            )
        },
    }
    .build())
}
