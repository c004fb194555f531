//! The configs of `deberta` and `deberta-v2` (`DebertaConfig` is a subset of
//! `DebertaV2Config`: v1 reads no buckets, table norm or shared keys), the options we refuse,
//! and the relative table they describe.

use serde::Deserialize;
use serde_json::Value;

use super::bert_defaults;
use super::bert_layout::under;
use crate::encoder::RelativeTable;
use crate::error::{ModelError, Result};
use crate::spec::Norm;

/// `DebertaV2Config` (its defaults where a config may leave a field out).
#[derive(Deserialize)]
pub(super) struct Config {
    pub vocab_size: usize,
    pub hidden_size: usize,
    pub num_hidden_layers: usize,
    pub num_attention_heads: usize,
    pub intermediate_size: usize,
    #[serde(default = "bert_defaults::hidden_act")]
    pub hidden_act: String,
    #[serde(default = "bert_defaults::max_position_embeddings")]
    pub max_position_embeddings: usize,
    #[serde(default)]
    pub type_vocab_size: usize,
    #[serde(default = "d_eps")]
    pub layer_norm_eps: f64,
    #[serde(default)]
    pub relative_attention: bool,
    pub max_relative_positions: Option<i64>,
    pub position_buckets: Option<i64>,
    #[serde(default = "bert_defaults::yes")]
    pub position_biased_input: bool,
    #[serde(default)]
    pub pos_att_type: Option<Value>,
    #[serde(default = "bert_defaults::hidden_act")]
    pub pooler_hidden_act: String,
    #[serde(default = "bert_defaults::yes")]
    pub legacy: bool,
    #[serde(default = "bert_defaults::yes")]
    pub tie_word_embeddings: bool,
    #[serde(default)]
    pub share_att_key: bool,
    /// DeBERTa v1's head-mixing projections (not supported).
    #[serde(default)]
    pub talking_head: bool,
    pub norm_rel_ebd: Option<String>,
    pub conv_kernel_size: Option<usize>,
    pub embedding_size: Option<usize>,
    pub attention_head_size: Option<usize>,
    pub pooler_hidden_size: Option<usize>,
}

fn d_eps() -> f64 {
    1e-7
}

/// `pos_att_type` as a list or a `|`-joined string (older configs), lower-cased.
pub(super) fn att_types(v: &Option<Value>) -> Vec<String> {
    match v {
        Some(Value::String(s)) => s.to_lowercase().split('|').map(|x| x.trim().to_string()).collect(),
        Some(Value::Array(a)) => a.iter().filter_map(Value::as_str).map(str::to_string).collect(),
        _ => Vec::new(),
    }
}

pub(super) fn check(c: &Config) -> Result<()> {
    let unsupported = |what: &str| Err(ModelError::Unsupported(format!("deberta with {what}")));
    if c.talking_head {
        return unsupported("talking_head");
    }
    if c.conv_kernel_size.unwrap_or(0) > 0 {
        return unsupported("conv_kernel_size (the first layer's convolution)");
    }
    if c.embedding_size.is_some_and(|e| e != c.hidden_size) {
        return unsupported("embedding_size != hidden_size (embed_proj)");
    }
    let head_dim = c.hidden_size / c.num_attention_heads.max(1);
    if c.attention_head_size.is_some_and(|d| d != head_dim) || c.pooler_hidden_size.is_some_and(|p| p != c.hidden_size)
    {
        return unsupported("attention_head_size or pooler_hidden_size other than the hidden size's");
    }
    if c.position_buckets.is_some_and(|b| b == 1) {
        // Half of one bucket is 0: transformers' log buckets divide by it.
        return unsupported("position_buckets 1");
    }
    if !c.tie_word_embeddings {
        return unsupported("tie_word_embeddings false");
    }
    Ok(())
}

pub(super) fn relative(c: &Config, types: &[String], p: &str, v1: bool) -> Option<RelativeTable> {
    if !c.relative_attention {
        return None;
    }
    let max_rel = c.max_relative_positions.filter(|&m| m >= 1).unwrap_or(c.max_position_embeddings as i64) as usize;
    // v1 reads none of v2's bucket, table-norm and shared-key options.
    let buckets = c.position_buckets.filter(|&b| b > 0 && !v1).map(|b| b as usize);
    let norms = if v1 { String::new() } else { c.norm_rel_ebd.as_deref().unwrap_or("none").to_lowercase() };
    let l = under(p, "encoder.layer.{i}.attention.self");
    Some(RelativeTable {
        table: under(p, "encoder.rel_embeddings"),
        span: buckets.unwrap_or(max_rel),
        log_buckets: buckets.map(|b| (b, max_rel)),
        norm: norms
            .split('|')
            .any(|n| n.trim() == "layer_norm")
            .then(|| (Norm::Layer { eps: c.layer_norm_eps as f32, bias: true }, under(p, "encoder.LayerNorm"))),
        c2p: types.iter().any(|t| t == "c2p"),
        p2c: types.iter().any(|t| t == "p2c"),
        share_att_key: c.share_att_key && !v1,
        // v1: `pos_proj` (no bias) and `pos_q_proj`.
        pos_key: format!("{l}.{}", if v1 { "pos_proj" } else { "pos_key_proj" }),
        pos_query: format!("{l}.{}", if v1 { "pos_q_proj" } else { "pos_query_proj" }),
        pos_key_bias: !v1,
    })
}
