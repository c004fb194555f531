//! `t5gemma`: an encoder-decoder of two Gemma 2 stacks (`encoder` and `decoder` sub-configs):
//! RMSNorm with (1 + w), sandwich norms around self-attention, cross-attention and the GeGLU-tanh
//! feed-forward, RoPE and grouped key heads in self-attention (none in cross-attention), scores
//! scaled by `query_pre_attn_scalar^-0.5` and soft-capped, sliding-window layers (the encoder's
//! window bidirectional), embeddings scaled by sqrt(hidden), each stack its own token table, the
//! head tied to the decoder's and soft-capped. Decoder inputs start from the decoder's
//! `bos_token_id`.

use serde_json::Value;

use super::common::parse;
use super::gemma2::GemmaConfig;
use crate::encoder::NormPlacement;
use crate::error::{ModelError, Result};
use crate::seq2seq::{CrossNames, Seq2SeqSpec, Shift, StackEnds};
use crate::spec::{LayerNames, ModelSpec};

/// One stack's Gemma 2 spec from its sub-config, with transformers' defaults for absent keys.
fn stack_spec(cfg: &Value, which: &str) -> Result<ModelSpec> {
    let sub = cfg.get(which).filter(|v| v.is_object()).ok_or_else(|| {
        ModelError::Config(format!("t5gemma: config.json has no `{which}` object (the stack's config)"))
    })?;
    // The registry checks the top level; each stack's sizes are checked here the same way.
    super::check::config_fields(sub)?;
    let mut c: GemmaConfig = parse(sub)?;
    let or = |key: &str, default: f64| match sub.get(key) {
        None => Some(default),
        Some(v) => v.as_f64(),
    };
    c.attn_logit_softcapping = or("attn_logit_softcapping", 50.0);
    c.final_logit_softcapping = or("final_logit_softcapping", 30.0);
    if sub.get("sliding_window").is_none() {
        c.base.sliding_window = Some(4096);
    }
    c.gemma2_spec("t5gemma", 2, false)
}

/// The names of one stack's layers (`model.{stack}.layers.{i}`).
fn names(stack: &str) -> LayerNames {
    let p = format!("model.{stack}.layers.{{i}}");
    let (a, m) = (format!("{p}.self_attn"), format!("{p}.mlp"));
    LayerNames {
        attn_norm: format!("{p}.pre_self_attn_layernorm"),
        q: format!("{a}.q_proj"),
        k: format!("{a}.k_proj"),
        v: format!("{a}.v_proj"),
        o: format!("{a}.o_proj"),
        q_norm: String::new(),
        k_norm: String::new(),
        mlp_norm: format!("{p}.pre_feedforward_layernorm"),
        post_attn_norm: format!("{p}.post_self_attn_layernorm"),
        post_mlp_norm: format!("{p}.post_feedforward_layernorm"),
        gate: format!("{m}.gate_proj"),
        up: format!("{m}.up_proj"),
        down: format!("{m}.down_proj"),
    }
}

pub fn t5gemma(cfg: &Value) -> Result<ModelSpec> {
    let enc = stack_spec(cfg, "encoder")?;
    let mut spec = stack_spec(cfg, "decoder")?;
    if enc.hidden != spec.hidden || enc.vocab != spec.vocab {
        return Err(ModelError::Unsupported(format!(
            "t5gemma with an encoder of hidden size {} / vocabulary {} and a decoder of {} / {}",
            enc.hidden, enc.vocab, spec.hidden, spec.vocab
        )));
    }
    if cfg.get("tie_word_embeddings").and_then(Value::as_bool) == Some(false) {
        return Err(ModelError::Unsupported("t5gemma with an untied lm_head".into()));
    }
    let dec_cfg = &cfg["decoder"];
    let id = |k: &str, default: i64| dec_cfg.get(k).and_then(Value::as_i64).unwrap_or(default) as i32;
    let pad = id("pad_token_id", 0);
    let ends = |stack: &str, embed: Option<String>| StackEnds {
        embed,
        positions: None,
        embed_norm: None,
        final_norm: Some((enc.final_norm.clone(), format!("model.{stack}.norm"))),
        relative_bias: None,
        norm_before_positions: false,
    };
    let x = "model.decoder.layers.{i}";
    let s2s = Seq2SeqSpec {
        encoder_layers: enc.layers.clone(),
        encoder_names: names("encoder"),
        encoder: ends("encoder", Some("model.encoder.embed_tokens".into())),
        decoder: ends("decoder", None),
        cross: CrossNames {
            norm: format!("{x}.pre_cross_attn_layernorm"),
            q: format!("{x}.cross_attn.q_proj"),
            k: format!("{x}.cross_attn.k_proj"),
            v: format!("{x}.cross_attn.v_proj"),
            o: format!("{x}.cross_attn.o_proj"),
            post_norm: format!("{x}.post_cross_attn_layernorm"),
        },
        placement: NormPlacement::Pre,
        relative_bias: None,
        position_offset: 0,
        head_scale: 1.0,
        final_logits_bias: None,
        stored_tables: Vec::new(),
        tied_aliases: vec!["lm_head.out_proj.weight".into()],
        switch: None,
        shift: Shift::Start,
        decoder_start_token_id: id("bos_token_id", 2),
        pad_token_id: pad,
        pad_keys_in_training: true,
    };
    spec.model_type = "t5gemma".into();
    spec.layer_names = names("decoder");
    spec.embed_name = "model.decoder.embed_tokens".into();
    spec.tied_head = true;
    spec.head_name = "lm_head.out_proj".into();
    spec.final_norm_name = "model.decoder.norm".into();
    spec.padding_idx = crate::spec::padding_idx_or(dec_cfg, 0, spec.vocab);
    spec.seq2seq = Some(Box::new(s2s));
    Ok(spec)
}
