//! BART and the families built on its modules (`bart`; mBART, PLBART, Marian, Pegasus, M2M-100,
//! Blenderbot through `Family`): biased multi-head attention scaled by `head_dim^-0.5`, plain
//! MLPs `fc1`/`fc2`, LayerNorms after (post-LN) or before (pre-LN) each sublayer, learned
//! positions offset by 2, an optional `layernorm_embedding`, and `final_logits_bias`.

use serde::Deserialize;
use serde_json::Value;

use super::common::parse;
use super::encoder_common::activation;
use crate::encoder::NormPlacement;
use crate::error::{ModelError, Result};
use crate::seq2seq::{CrossNames, Seq2SeqSpec, Shift, StackEnds, StackPositions};
use crate::spec::{padding_idx, AttnSpec, LayerNames, LayerSpec, MlpSpec, ModelSpec, Norm, Residual};

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
struct Family {
    model_type: &'static str,
    placement: NormPlacement,
    /// `layernorm_embedding` on each stack.
    embed_norm: bool,
    /// `layer_norm` after each stack's last layer.
    final_norm: bool,
    shift: Shift,
    /// Added to the position ids (BART's learned table: 2; Blenderbot's: 0).
    position_offset: usize,
    /// BlenderbotSmall's decoder normalises the token embeddings before adding positions.
    decoder_norm_before_positions: bool,
    /// Fixed positions instead of the learned `embed_positions` tables.
    positions: Option<StackPositions>,
    /// `final_logits_bias` (all but M2M-100).
    logits_bias: bool,
    /// Pegasus stores its fixed tables (kept as buffers and saved back; the graph computes them).
    stored_positions: bool,
}

impl Family {
    const BART: Family = Family {
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

fn names(stack: &str) -> LayerNames {
    let p = format!("model.{stack}.layers.{{i}}");
    let mut n = LayerNames::plain(
        &p,
        [
            "self_attn_layer_norm",
            "self_attn.q_proj",
            "self_attn.k_proj",
            "self_attn.v_proj",
            "self_attn.out_proj",
            "final_layer_norm",
            "fc1",
            "fc2",
        ],
    );
    n.gate = String::new();
    n
}

fn layer(heads: usize, d_model: usize, ffn: usize, act: &str) -> Result<LayerSpec> {
    if heads == 0 || !d_model.is_multiple_of(heads) {
        return Err(ModelError::Config(format!("d_model {d_model} is not a multiple of {heads} attention heads")));
    }
    let norm = Norm::Layer { eps: 1e-5, bias: true };
    Ok(LayerSpec {
        attn_norm: Some(norm.clone()),
        attn: AttnSpec { qkv_bias: true, out_bias: true, ..AttnSpec::new(heads, heads, d_model / heads) },
        post_attn_norm: None,
        mlp_norm: Some(norm),
        mlp: MlpSpec::Plain { intermediate: ffn, act: activation(act)?, bias: true },
        post_mlp_norm: None,
        residual: Residual::Sequential,
        residual_scale: 1.0,
    })
}

fn build(f: &Family, cfg: &Value) -> Result<ModelSpec> {
    let c: Config = parse(cfg)?;
    let norm = Norm::Layer { eps: 1e-5, bias: true };
    let enc = layer(c.encoder_attention_heads, c.d_model, c.encoder_ffn_dim, &c.activation_function)?;
    let dec = layer(c.decoder_attention_heads, c.d_model, c.decoder_ffn_dim, &c.activation_function)?;
    let ends = |stack: &str| StackEnds {
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
        shift: f.shift,
        decoder_start_token_id: c.decoder_start_token_id.unwrap_or(2) as i32,
        pad_token_id: pad,
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

/// mBART: pre-LN with a final `layer_norm` on each stack; the decoder starts with each row's
/// last token (its language code).
pub fn mbart(cfg: &Value) -> Result<ModelSpec> {
    let f = Family {
        model_type: "mbart",
        placement: NormPlacement::Pre,
        final_norm: true,
        shift: Shift::WrapLastToken,
        ..Family::BART
    };
    build(&f, cfg)
}

/// PLBART: BART's layers with mBART's shift.
pub fn plbart(cfg: &Value) -> Result<ModelSpec> {
    build(&Family { model_type: "plbart", shift: Shift::WrapLastToken, ..Family::BART }, cfg)
}

/// Blenderbot: pre-LN, positions from 0, no embedding norm, a final `layer_norm`.
pub fn blenderbot(cfg: &Value) -> Result<ModelSpec> {
    let f = Family {
        model_type: "blenderbot",
        placement: NormPlacement::Pre,
        embed_norm: false,
        final_norm: true,
        position_offset: 0,
        ..Family::BART
    };
    build(&f, cfg)
}

/// Blenderbot-small: BART's post-LN layers, positions from 0, and a decoder that normalises its
/// token embeddings before adding the positions.
pub fn blenderbot_small(cfg: &Value) -> Result<ModelSpec> {
    let f = Family {
        model_type: "blenderbot-small",
        position_offset: 0,
        decoder_norm_before_positions: true,
        ..Family::BART
    };
    build(&f, cfg)
}

/// Marian: BART's post-LN layers without an embedding norm, fixed sinusoidal positions from 0,
/// one table shared by source and target.
pub fn marian(cfg: &Value) -> Result<ModelSpec> {
    if cfg.get("share_encoder_decoder_embeddings").and_then(Value::as_bool) == Some(false) {
        return Err(ModelError::Unsupported(
            "Marian with separate source and target embeddings (share_encoder_decoder_embeddings: false) is not \
             supported yet"
                .into(),
        ));
    }
    let f = Family {
        model_type: "marian",
        embed_norm: false,
        position_offset: 0,
        positions: Some(StackPositions::Sinusoidal),
        ..Family::BART
    };
    build(&f, cfg)
}

/// Pegasus: pre-LN with final norms, fixed sinusoidal positions from 0 (stored, recomputed).
pub fn pegasus(cfg: &Value) -> Result<ModelSpec> {
    let f = Family {
        model_type: "pegasus",
        placement: NormPlacement::Pre,
        embed_norm: false,
        final_norm: true,
        position_offset: 0,
        positions: Some(StackPositions::Sinusoidal),
        stored_positions: true,
        ..Family::BART
    };
    build(&f, cfg)
}

/// M2M-100 (NLLB's architecture): pre-LN with final norms, fairseq positions counted from the
/// ids past `pad_token_id`, no logits bias.
pub fn m2m_100(cfg: &Value) -> Result<ModelSpec> {
    let pad = cfg.get("pad_token_id").and_then(Value::as_u64).unwrap_or(1) as usize;
    let f = Family {
        model_type: "m2m_100",
        placement: NormPlacement::Pre,
        embed_norm: false,
        final_norm: true,
        positions: Some(StackPositions::FairseqFromIds { padding_idx: pad }),
        logits_bias: false,
        ..Family::BART
    };
    build(&f, cfg)
}
