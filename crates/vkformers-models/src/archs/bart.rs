//! BART and the families built on its modules (`bart`; mBART, PLBART, Marian, Pegasus, M2M-100,
//! Blenderbot through `Family`): biased multi-head attention scaled by `head_dim^-0.5`, plain
//! MLPs `fc1`/`fc2`, LayerNorms after (post-LN) or before (pre-LN) each sublayer, learned
//! positions offset by 2, an optional `layernorm_embedding`, and `final_logits_bias`.

use serde::Deserialize;
use serde_json::Value;

use super::bart_layers::{layer, names};
use super::common::parse;
use crate::encoder::NormPlacement;
use crate::error::Result;
use crate::seq2seq::{CrossNames, Seq2SeqSpec, Shift, StackEnds, StackPositions};
use crate::spec::{padding_idx, ModelSpec, Norm};

#[derive(Debug, Deserialize)]
struct Config {
    vocab_size: usize,
    d_model: usize,
    encoder_layers: usize,
    decoder_layers: usize,
    encoder_attention_heads: usize,
    decoder_attention_heads: usize,
    encoder_ffn_dim: usize,
    decoder_ffn_dim: usize,
    max_position_embeddings: usize,
    #[serde(default = "default_act")]
    activation_function: String,
    #[serde(default)]
    scale_embedding: bool,
    pad_token_id: Option<i64>,
    decoder_start_token_id: Option<i64>,
    tie_word_embeddings: Option<bool>,
}

fn default_act() -> String {
    "gelu".into()
}

/// What the BART-derived families change.
pub(super) struct Family {
    pub(super) model_type: &'static str,
    pub(super) placement: NormPlacement,
    /// `layernorm_embedding` on each stack.
    pub(super) embed_norm: bool,
    /// `layer_norm` after each stack's last layer.
    pub(super) final_norm: bool,
    pub(super) shift: Shift,
    /// Added to the position ids (BART's learned table: 2; Blenderbot's: 0).
    pub(super) position_offset: usize,
    /// BlenderbotSmall's decoder normalises the token embeddings before adding positions.
    pub(super) decoder_norm_before_positions: bool,
    /// Fixed positions instead of the learned `embed_positions` tables.
    pub(super) positions: Option<StackPositions>,
    /// `final_logits_bias` (all but M2M-100).
    pub(super) logits_bias: bool,
    /// Pegasus stores its fixed tables (kept as buffers and saved back; the graph computes them).
    pub(super) stored_positions: bool,
}

impl Family {
    pub(super) const BART: Family = Family {
        model_type: "bart",
        placement: NormPlacement::Post,
        embed_norm: true,
        final_norm: false,
        shift: Shift::Start,
        position_offset: 2,
        decoder_norm_before_positions: false,
        positions: None,
        logits_bias: true,
        stored_positions: false,
    };
}

pub(super) fn build(f: &Family, cfg: &Value) -> Result<ModelSpec> {
    let c: Config = parse(cfg)?;
    let norm = Norm::Layer { eps: 1e-5, bias: true };
    let enc = layer(c.encoder_attention_heads, c.d_model, c.encoder_ffn_dim, &c.activation_function)?;
    let dec = layer(c.decoder_attention_heads, c.d_model, c.decoder_ffn_dim, &c.activation_function)?;
    let ends = |stack: &str| StackEnds {
        embed: None,
        positions: Some(
            f.positions.clone().unwrap_or_else(|| StackPositions::Learned(format!("model.{stack}.embed_positions"))),
        ),
        embed_norm: f.embed_norm.then(|| (norm.clone(), format!("model.{stack}.layernorm_embedding"))),
        final_norm: f.final_norm.then(|| (norm.clone(), format!("model.{stack}.layer_norm"))),
        relative_bias: None,
        norm_before_positions: false,
    };
    let x = "model.decoder.layers.{i}.encoder_attn";
    let pad = c.pad_token_id.unwrap_or(1) as i32;
    let tied = c.tie_word_embeddings != Some(false);
    let mut aliases = vec!["model.encoder.embed_tokens.weight".to_string(), "model.decoder.embed_tokens.weight".into()];
    if tied {
        aliases.push("lm_head.weight".into());
    }

    let s2s = Seq2SeqSpec {
        encoder_layers: vec![enc; c.encoder_layers],
        encoder_names: names("encoder"),
        encoder: ends("encoder"),
        decoder: StackEnds { norm_before_positions: f.decoder_norm_before_positions, ..ends("decoder") },
        cross: CrossNames {
            norm: "model.decoder.layers.{i}.encoder_attn_layer_norm".into(),
            q: format!("{x}.q_proj"),
            k: format!("{x}.k_proj"),
            v: format!("{x}.v_proj"),
            o: format!("{x}.out_proj"),
            post_norm: String::new(),
        },
        placement: f.placement,
        relative_bias: None,
        position_offset: f.position_offset,
        head_scale: 1.0,
        final_logits_bias: f.logits_bias.then(|| "final_logits_bias".into()),
        stored_tables: if f.stored_positions {
            ["encoder", "decoder"].map(|s| (format!("model.{s}.embed_positions"), c.max_position_embeddings)).to_vec()
        } else {
            Vec::new()
        },
        tied_aliases: aliases,
        switch: None,
        shift: f.shift,
        decoder_start_token_id: c.decoder_start_token_id.unwrap_or(2) as i32,
        pad_token_id: pad,
        pad_keys_in_training: false,
    };
    let mut spec =
        ModelSpec::new(f.model_type, (c.vocab_size, c.d_model), dec, c.decoder_layers, norm, names("decoder"));
    spec.embed_name = "model.shared".into();
    spec.embed_scale = if c.scale_embedding { (c.d_model as f32).sqrt() } else { 1.0 };
    spec.padding_idx = padding_idx(c.pad_token_id, c.vocab_size);
    spec.tied_head = tied;
    spec.head_name = "lm_head".into();
    spec.seq2seq = Some(Box::new(s2s));
    Ok(spec)
}

pub fn bart(cfg: &Value) -> Result<ModelSpec> {
    build(&Family::BART, cfg)
}
