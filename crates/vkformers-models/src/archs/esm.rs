//! `esm` (ESM-1b / ESM-2 protein language models): pre-LN layers (`attention.LayerNorm` before
//! attention, the layer's `LayerNorm` before the GELU MLP) and a final
//! `encoder.emb_layer_norm_after`; rotary q/k (`rotate_half` pairs, `rope_theta`; ESM-2) or a
//! learned table counted from `padding_idx + 1` as RoBERTa's (ESM-1b). Its embeddings: words,
//! `token_dropout` (mask tokens zeroed, rows rescaled), then times the attention mask. Queries
//! are scaled by `head_dim^-0.5` before the rotation, the same product as after it.
//! Heads: `lm_head` (dense, GELU, `layer_norm`, tied decoder + `bias`), `classifier.dense` +
//! tanh + `classifier.out_proj`, or a token `classifier`. `contact_head` is kept, unread.

use serde::Deserialize;
use serde_json::Value;
use vkformers_kernels::activation::Activation;
use vkformers_kernels::rope::RopeLayout;

use super::bert::names;
use super::bert_layout::under;
use super::common::parse;
use super::encoder_common::{bert_tables, head, is_bare, layer, EncoderParts};
use crate::encoder::{EmbedMasking, EncoderSpec, MlmHead, NormPlacement, PoolAct, Positions};
use crate::error::{ModelError, Result};
use crate::rope::{inv_freq, RopeParams};
use crate::spec::{padding_idx_or, LayerNames, ModelSpec, Norm, RopeSpec};

/// `EsmConfig`; its defaults where a config leaves a field out: 1026 positions, `rope_theta`
/// 10000, eps 1e-12, tied, the flags false.
#[derive(Deserialize)]
struct Config {
    vocab_size: usize,
    mask_token_id: Option<i32>,
    hidden_size: usize,
    num_hidden_layers: usize,
    num_attention_heads: usize,
    intermediate_size: usize,
    max_position_embeddings: Option<usize>,
    rope_theta: Option<f64>,
    layer_norm_eps: Option<f64>,
    position_embedding_type: Option<String>,
    emb_layer_norm_before: Option<bool>,
    token_dropout: Option<bool>,
    is_folding_model: Option<bool>,
    is_decoder: Option<bool>,
    add_cross_attention: Option<bool>,
    tie_word_embeddings: Option<bool>,
}

/// BERT's module names under `{p}.encoder.layer.{i}` with ESM's pre-LN norm names.
fn esm_names(p: &str) -> LayerNames {
    let l = under(p, "encoder.layer.{i}");
    LayerNames { attn_norm: format!("{l}.attention.LayerNorm"), mlp_norm: format!("{l}.LayerNorm"), ..names(p) }
}

/// The rotary `inv_freq` buffers checkpoints store: per layer (the hub's ESM-2), once under the
/// model, or under the literal layer `*` (transformers 5 saves its model-level buffer back
/// through the per-layer key pattern). Recomputed from `rope_theta`, so skipped on load.
fn rotary_buffers(p: &str, layers: usize) -> Vec<String> {
    let layer = |i: String| under(p, &format!("encoder.layer.{i}.attention.self.rotary_embeddings."));
    let per_layer = (0..layers).map(|i| layer(i.to_string()));
    per_layer.chain([layer("*".into()), under(p, "rotary_embeddings.")]).collect()
}

pub fn spec(cfg: &Value) -> Result<ModelSpec> {
    let c: Config = parse(cfg)?;
    let max_pos = c.max_position_embeddings.unwrap_or(1026);
    if c.is_decoder.unwrap_or(false) || c.add_cross_attention.unwrap_or(false) || c.is_folding_model.unwrap_or(false) {
        return Err(ModelError::Unsupported("esm as a decoder or ESMFold (is_folding_model)".into()));
    }
    // `EsmModel` stores its tensors without the `esm.` prefix.
    let p = if is_bare(cfg) { "" } else { "esm" };
    let norm = Norm::Layer { eps: c.layer_norm_eps.unwrap_or(1e-12) as f32, bias: true };
    // ESM's MLP and head use the exact (erf) GELU whatever `hidden_act` says.
    let mut layer = layer(c.hidden_size, c.num_attention_heads, c.intermediate_size, Activation::Gelu, &norm)?;
    let padding_idx = padding_idx_or(cfg, -1, c.vocab_size);
    let positions = match (c.position_embedding_type.as_deref().unwrap_or("absolute"), padding_idx) {
        ("rotary", _) => {
            let hd = layer.attn.head_dim;
            let params = RopeParams {
                rope_type: "default".into(),
                theta: c.rope_theta.unwrap_or(10000.0),
                ..Default::default()
            };
            let (inv_freq, _) = inv_freq(&params, hd, max_pos)?;
            let rope = RopeSpec { inv_freq, mscale: 1.0, rotary_dim: hd, layout: RopeLayout::HalfSplit, long: None };
            layer.attn.rope = Some(rope);
            None
        }
        ("absolute", Some(padding_idx)) => Some(Positions::FromIds { padding_idx }),
        ("absolute", None) => {
            return Err(ModelError::Config("esm with absolute positions needs a pad_token_id".into()))
        }
        (other, _) => return Err(ModelError::Unsupported(format!("esm position_embedding_type `{other}`"))),
    };
    let token_dropout = match (c.token_dropout.unwrap_or(false), c.mask_token_id) {
        (false, _) => None,
        (true, Some(id)) => Some(id),
        (true, None) => return Err(ModelError::Config("esm token_dropout needs a mask_token_id".into())),
    };
    let e = under(p, "embeddings");
    let (word, pos_table) = bert_tables(&e);
    let mlm = MlmHead::roberta(&norm);
    let mut spec = EncoderParts {
        model_type: "esm",
        vocab: c.vocab_size,
        hidden: c.hidden_size,
        layers: vec![layer; c.num_hidden_layers],
        names: esm_names(p),
        word,
        positions: pos_table,
        embed_norm: c.emb_layer_norm_before.unwrap_or(false).then(|| (norm.clone(), format!("{e}.layer_norm"))),
        decoder: "lm_head.decoder".into(),
        tied: c.tie_word_embeddings.unwrap_or(true),
        padding_idx,
        encoder: EncoderSpec {
            final_norm: Some((norm, under(p, "encoder.emb_layer_norm_after"))),
            ignored: rotary_buffers(p, c.num_hidden_layers),
            masking: EmbedMasking { token_dropout, zero_padding: true },
            // Logistic regression over every layer's and head's attention map.
            unread_linears: vec![(under(p, "contact_head.regression"), 1, c.num_hidden_layers * c.num_attention_heads)],
            ..EncoderSpec::new(
                c.hidden_size,
                max_pos,
                positions.unwrap_or(Positions::Arange),
                NormPlacement::Pre,
                head(cfg, mlm, ("classifier.dense", PoolAct::Tanh, "classifier.out_proj"), Some("pooler.dense"))?,
            )
        },
    }
    .build();
    if positions.is_none() {
        // Rotary layers carry the positions: no learned table.
        spec.position_embedding = None;
    }
    Ok(spec)
}
