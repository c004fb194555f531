//! Config values checked before and after a family's parser runs, so a bad `config.json` is an
//! error naming the field instead of a division by zero, a huge allocation or a graph that runs
//! on something we do not implement (a quantized checkpoint).

use serde_json::Value;

use crate::error::{ModelError, Result};
use crate::spec::{MlpSpec, ModelSpec};

/// Sizes under the names the families use, each a positive integer up to its bound where
/// present. The bounds sit far above any real model (Llama 3.1 405B: 126 layers, 128 heads of
/// 128, hidden 16384) and keep a hostile config from sizing a host allocation (the RoPE
/// frequencies of a 2^40-wide head, a spec of 2^31 layers) before any tensor is read.
const SIZE_FIELDS: &[(&str, u64)] = &[
    ("vocab_size", 1 << 31),
    ("hidden_size", 1 << 20),
    ("n_embd", 1 << 20),
    ("num_hidden_layers", 1 << 12),
    ("n_layer", 1 << 12),
    ("num_attention_heads", 1 << 14),
    ("n_head", 1 << 14),
    ("num_key_value_heads", 1 << 14),
    ("num_kv_heads", 1 << 14),
    ("n_head_kv", 1 << 14),
    ("rotary_dim", 1 << 14),
    ("n_ctx", 1 << 31),
    ("no_rope_layer_interval", 1 << 12),
    ("max_window_layers", 1 << 12),
    ("num_ln_in_parallel_attn", 2),
    ("head_dim", 1 << 14),
    ("intermediate_size", 1 << 22),
    ("n_inner", 1 << 22),
    ("ffn_dim", 1 << 22),
    ("max_position_embeddings", 1 << 31),
    ("n_positions", 1 << 31),
    ("word_embed_proj_dim", 1 << 20),
    // Encoders (DistilBERT's names, ALBERT/ELECTRA's factorised embedding, token types).
    ("dim", 1 << 20),
    ("hidden_dim", 1 << 22),
    ("n_layers", 1 << 12),
    ("n_heads", 1 << 14),
    ("embedding_size", 1 << 20),
    ("type_vocab_size", 1 << 20),
    // Mixtures of experts (the largest real ones have a few hundred experts).
    ("num_experts", 1 << 12),
    ("num_local_experts", 1 << 12),
    ("num_experts_per_tok", 1 << 12),
    ("moe_intermediate_size", 1 << 22),
    ("shared_expert_intermediate_size", 1 << 22),
    ("decoder_sparse_step", 1 << 12),
    // Encoder-decoders (T5's and BART's names).
    ("d_model", 1 << 20),
    ("d_kv", 1 << 14),
    ("d_ff", 1 << 22),
    ("num_layers", 1 << 12),
    ("num_decoder_layers", 1 << 12),
    ("num_heads", 1 << 14),
    ("relative_attention_num_buckets", 1 << 16),
    ("relative_attention_max_distance", 1 << 31),
    ("encoder_layers", 1 << 12),
    ("decoder_layers", 1 << 12),
    ("encoder_attention_heads", 1 << 14),
    ("decoder_attention_heads", 1 << 14),
    ("encoder_ffn_dim", 1 << 22),
    ("decoder_ffn_dim", 1 << 22),
    // Multi-head latent attention and DeepSeek routing (q_lora_rank is checked by its parser;
    // qk_nope_head_dim may be 0).
    ("kv_lora_rank", 1 << 20),
    ("qk_rope_head_dim", 1 << 14),
    ("v_head_dim", 1 << 14),
    ("n_routed_experts", 1 << 12),
    ("n_shared_experts", 1 << 12),
    ("n_group", 1 << 12),
    ("topk_group", 1 << 12),
    // ERNIE 4.5 MoE's names.
    ("moe_num_experts", 1 << 12),
    ("moe_k", 1 << 12),
    ("moe_num_shared_experts", 1 << 12),
];

/// Sizes that may be 0 (DeBERTa-v2/v3 configs: `type_vocab_size` 0, no token-type table; MoE
/// configs without shared experts).
const ZERO_OK: &[&str] = &["type_vocab_size", "moe_num_shared_experts"];

/// Fractions of the head rotated; each in (0, 1] where present.
const FRACTION_FIELDS: &[&str] = &["partial_rotary_factor", "rotary_pct"];

/// Epsilons of the norms; each must be a finite number ≥ 0 where present.
const EPS_FIELDS: &[&str] = &["rms_norm_eps", "layer_norm_eps", "layer_norm_epsilon", "norm_eps"];

/// The raw fields, before any parser divides by them or sizes a tensor from them.
pub fn config_fields(cfg: &Value) -> Result<()> {
    if let Some(q) = cfg.get("quantization_config").filter(|q| !q.is_null()) {
        let method = q.get("quant_method").and_then(Value::as_str).unwrap_or("unknown");
        return Err(ModelError::Unsupported(format!(
            "a quantized checkpoint (quantization_config.quant_method `{method}`); use an unquantized \
             f32/f16/bf16 folder of the model"
        )));
    }
    for (key, max) in SIZE_FIELDS {
        let Some(v) = cfg.get(*key).filter(|v| !v.is_null()) else { continue };
        match v.as_u64() {
            Some(n) if (n > 0 || ZERO_OK.contains(key)) && n <= *max => {}
            _ => return Err(ModelError::Config(format!("`{key}` is {v}; it must be a positive integer up to {max}"))),
        }
    }
    // The fraction may also sit in the RoPE parameters (transformers 5) or scaling block.
    let blocks = [cfg, &cfg["rope_parameters"], &cfg["rope_scaling"]];
    for (block, key) in blocks.iter().flat_map(|b| FRACTION_FIELDS.iter().map(move |k| (b, k))) {
        let Some(v) = block.get(*key).filter(|v| !v.is_null()) else { continue };
        if !v.as_f64().is_some_and(|f| f > 0.0 && f <= 1.0) {
            return Err(ModelError::Config(format!("`{key}` is {v}; it must be a number in (0, 1]")));
        }
    }
    for key in EPS_FIELDS {
        let Some(v) = cfg.get(*key).filter(|v| !v.is_null()) else { continue };
        if !v.as_f64().is_some_and(|e| e.is_finite() && e >= 0.0) {
            return Err(ModelError::Config(format!("`{key}` is {v}; it must be a finite number ≥ 0")));
        }
    }
    Ok(())
}

/// The task heads `transformers` puts on decoders and encoder-decoders that their graphs do not
/// build: only the LM head runs there, so such a folder is refused by its head's name rather
/// than by the weight check's `unexpected tensor score.weight` (which reads as a config error).
const UNBUILT_HEADS: [&str; 3] = ["ForSequenceClassification", "ForTokenClassification", "ForQuestionAnswering"];

/// A decoder's or encoder-decoder's `architectures` asks for a head we do not build.
pub fn head(cfg: &Value, spec: &ModelSpec) -> Result<()> {
    let first = super::encoder_heads::first_architecture(cfg);
    match UNBUILT_HEADS.iter().find(|h| first.ends_with(*h)) {
        Some(_) if spec.encoder.is_none() => Err(ModelError::Unsupported(format!(
            "the `{first}` head on the `{}` model (decoders and encoder-decoders run with their LM \
             head only; sequence and token classification: an encoder, e.g. BERT or ModernBERT)",
            spec.model_type
        ))),
        _ => Ok(()),
    }
}

/// The spec a parser made: what the graph divides by or groups on.
pub fn spec(spec: &ModelSpec) -> Result<()> {
    let bad = |m: String| Err(ModelError::Config(m));
    if spec.layers.is_empty() {
        return bad("`num_hidden_layers` is 0; a decoder needs at least one layer".into());
    }
    for l in &spec.layers {
        let a = &l.attn;
        if a.heads == 0 || a.kv_heads == 0 || a.head_dim == 0 {
            return bad(format!(
                "attention with {} heads, {} key/value heads of size {}: check num_attention_heads, \
                 num_key_value_heads and head_dim",
                a.heads, a.kv_heads, a.head_dim
            ));
        }
        if a.heads % a.kv_heads != 0 {
            return bad(format!(
                "num_attention_heads ({}) is not a multiple of num_key_value_heads ({})",
                a.heads, a.kv_heads
            ));
        }
        if let Some(r) = a.rope.as_ref().filter(|r| r.rotary_dim > a.head_dim) {
            return bad(format!("the rotary dimension {} exceeds head_dim {}", r.rotary_dim, a.head_dim));
        }
        let (MlpSpec::Gated { intermediate, .. }
        | MlpSpec::Plain { intermediate, .. }
        | MlpSpec::GatedAct { intermediate, .. }) = &l.mlp
        else {
            continue; // checked by `moe::check` when the arch builds it
        };
        if *intermediate == 0 {
            return bad("`intermediate_size` is 0".into());
        }
    }
    Ok(())
}
