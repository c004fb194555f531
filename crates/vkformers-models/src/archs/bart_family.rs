//! The BART-derived families (mBART, PLBART, Blenderbot, Blenderbot-small, Marian, Pegasus,
//! M2M-100): each is `bart::Family` with what it changes.

use serde_json::Value;

use super::bart::{build, Family};
use crate::encoder::NormPlacement;
use crate::error::{ModelError, Result};
use crate::seq2seq::{Shift, StackPositions};
use crate::spec::ModelSpec;

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
