//! T5 (`t5`, and `mt5` / `umt5` with their own names): pre-RMSNorm stacks without biases or
//! score scaling, a bucketed relative position bias (layer 0's, shared; UMT5: every layer's),
//! a ReLU or gated-GELU feed-forward, and the tied head read at `d_model^-0.5`.

use serde::Deserialize;
use serde_json::Value;

use super::common::parse;
use super::t5_layers::{mlp, names};
use crate::encoder::NormPlacement;
use crate::error::Result;
use crate::seq2seq::{CrossNames, RelativeBias, Seq2SeqSpec, Shift, StackEnds};
use crate::spec::{AttnSpec, LayerNames, LayerSpec, MlpSpec, ModelSpec, Norm, Residual};

#[derive(Debug, Deserialize)]
struct Config {
    vocab_size: usize,
    d_model: usize,
    d_kv: usize,
    d_ff: usize,
    num_layers: usize,
    num_decoder_layers: Option<usize>,
    num_heads: usize,
    #[serde(default = "default_buckets")]
    relative_attention_num_buckets: usize,
    #[serde(default = "default_distance")]
    relative_attention_max_distance: usize,
    #[serde(default = "default_eps")]
    layer_norm_epsilon: f64,
    #[serde(default = "default_ff")]
    feed_forward_proj: String,
    /// transformers 5 writes this; older configs say `tie_word_embeddings: false` for T5 v1.1,
    /// whose head is read unscaled.
    scale_decoder_outputs: Option<bool>,
    tie_word_embeddings: Option<bool>,
    #[serde(default)]
    pad_token_id: Option<i64>,
    decoder_start_token_id: Option<i64>,
}

fn default_buckets() -> usize {
    32
}
fn default_distance() -> usize {
    128
}
fn default_eps() -> f64 {
    1e-6
}
fn default_ff() -> String {
    "relu".into()
}

pub fn t5(cfg: &Value) -> Result<ModelSpec> {
    build("t5", cfg, false, true)
}

/// mT5 never rescales its head.
pub fn mt5(cfg: &Value) -> Result<ModelSpec> {
    build("mt5", cfg, false, false)
}

/// UMT5: a relative bias table in every layer.
pub fn umt5(cfg: &Value) -> Result<ModelSpec> {
    build("umt5", cfg, true, true)
}

/// `may_scale`: the family reads its head at `d_model^-0.5` when the config says so
/// (`scale_decoder_outputs`, or in older configs a head not untied).
fn build(model_type: &str, cfg: &Value, per_layer_bias: bool, may_scale: bool) -> Result<ModelSpec> {
    let c: Config = parse(cfg)?;
    let norm = Norm::Rms { eps: c.layer_norm_epsilon as f32, unit_offset: false };
    let mut attn = AttnSpec::new(c.num_heads, c.num_heads, c.d_kv);
    attn.scale = 1.0;
    let layer = LayerSpec {
        attn_norm: Some(norm.clone()),
        attn,
        post_attn_norm: None,
        mlp_norm: Some(norm.clone()),
        mlp: mlp(&c.feed_forward_proj, c.d_ff)?,
        post_mlp_norm: None,
        residual: Residual::Sequential,
        residual_scale: 1.0,
    };
    let gated = matches!(layer.mlp, MlpSpec::Gated { .. });
    let fix_up = |n: LayerNames| if gated { LayerNames { up: n.up.replace(".wi", ".wi_1"), ..n } } else { n };
    let enc_names = fix_up(names("encoder", 1));
    let dec_names = fix_up(names("decoder", 2));
    let ends = |stack: &str| StackEnds {
        embed: None,
        positions: None,
        embed_norm: None,
        final_norm: Some((norm.clone(), format!("{stack}.final_layer_norm"))),
        relative_bias: Some(format!("{stack}.block.{{i}}.layer.0.SelfAttention.relative_attention_bias")),
        norm_before_positions: false,
    };
    let scale_head = may_scale && c.scale_decoder_outputs.unwrap_or(c.tie_word_embeddings != Some(false));
    let x = "decoder.block.{i}.layer.1";
    let pad = c.pad_token_id.unwrap_or(0) as i32;
    let s2s = Seq2SeqSpec {
        encoder_layers: vec![layer.clone(); c.num_layers],
        encoder_names: enc_names,
        encoder: ends("encoder"),
        decoder: ends("decoder"),
        cross: CrossNames {
            norm: format!("{x}.layer_norm"),
            q: format!("{x}.EncDecAttention.q"),
            k: format!("{x}.EncDecAttention.k"),
            v: format!("{x}.EncDecAttention.v"),
            o: format!("{x}.EncDecAttention.o"),
            post_norm: String::new(),
        },
        placement: NormPlacement::Pre,
        relative_bias: Some(RelativeBias {
            num_buckets: c.relative_attention_num_buckets,
            max_distance: c.relative_attention_max_distance,
            per_layer: per_layer_bias,
        }),
        position_offset: 0,
        head_scale: if scale_head { (c.d_model as f32).powf(-0.5) } else { 1.0 },
        final_logits_bias: None,
        stored_tables: Vec::new(),
        tied_aliases: ["encoder.embed_tokens.weight", "decoder.embed_tokens.weight", "lm_head.weight"]
            .map(String::from)
            .to_vec(),
        switch: None,
        shift: Shift::Start,
        decoder_start_token_id: c.decoder_start_token_id.unwrap_or(i64::from(pad)) as i32,
        pad_token_id: pad,
        pad_keys_in_training: false,
    };
    let decoder_layers = c.num_decoder_layers.unwrap_or(c.num_layers);
    let mut spec = ModelSpec::new(model_type, (c.vocab_size, c.d_model), layer, decoder_layers, norm, dec_names);
    spec.embed_name = "shared".into();
    spec.tied_head = true;
    spec.head_name = "lm_head".into();
    spec.final_norm_name = "decoder.final_layer_norm".into();
    spec.seq2seq = Some(Box::new(s2s));
    Ok(spec)
}
