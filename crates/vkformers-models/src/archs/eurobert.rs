//! `eurobert`: a Llama-shaped bidirectional encoder under `model.`: word embeddings only (no
//! position table, no norm), pre-norm layers of RMSNorm, rotary (`rotate_half`) attention with
//! grouped keys and a gated MLP (`down(act(gate(x)) · up(x))`, SiLU by default), a final
//! `model.norm`. Heads: `lm_head` straight on the hidden state (untied by default, its bias
//! when `mlp_bias`), or `dense` + GELU + `classifier` on the first token (`bos`), the mean over
//! real tokens (`mean`) or per token and then averaged (`late`, the default), or a token
//! `classifier`; the bare `EuroBertModel` (tensors without `model.`) for embeddings.

use serde_json::Value;
use vkformers_kernels::activation::Activation;
use vkformers_kernels::rope::RopeLayout;

use super::bert_layout::under;
use super::common::{parse, BaseConfig};
use super::encoder_common::{head, is_bare, EncoderParts};
use crate::encoder::{ClsPooling, EncoderHead, EncoderSpec, MlmHead, NormPlacement, PoolAct, Positions};
use crate::error::{ModelError, Result};
use crate::spec::{padding_idx_or, AttnSpec, LayerNames, LayerSpec, MlpSpec, ModelSpec, Norm, Residual};

/// `EuroBertConfig.classifier_pooling`.
fn pooling(cfg: &Value) -> Result<ClsPooling> {
    match cfg.get("classifier_pooling").and_then(Value::as_str).unwrap_or("late") {
        "bos" => Ok(ClsPooling::First),
        "mean" => Ok(ClsPooling::Mean),
        "late" => Ok(ClsPooling::Late),
        other => Err(ModelError::Config(format!("eurobert classifier_pooling `{other}`"))),
    }
}

pub fn spec(cfg: &Value) -> Result<ModelSpec> {
    // `EuroBertModel` stores its tensors without the `model.` prefix.
    let p = if is_bare(cfg) { "" } else { "model" };
    let c: BaseConfig = parse(cfg)?;
    let norm = Norm::Rms { eps: c.rms_norm_eps as f32, unit_offset: false };
    let kv_heads = c.num_key_value_heads.unwrap_or(c.num_attention_heads);
    if kv_heads == 0 || !c.num_attention_heads.is_multiple_of(kv_heads) {
        return Err(ModelError::Config(format!("{} heads over {kv_heads} key/value heads", c.num_attention_heads)));
    }
    let attn = AttnSpec {
        qkv_bias: c.attention_bias,
        out_bias: c.attention_bias,
        rope: Some(c.rope(RopeLayout::HalfSplit)?),
        ..AttnSpec::new(c.num_attention_heads, kv_heads, c.head_dim())
    };
    let layer = LayerSpec {
        attn_norm: Some(norm.clone()),
        attn,
        post_attn_norm: None,
        mlp_norm: Some(norm.clone()),
        mlp: MlpSpec::Gated { intermediate: c.intermediate_size, glu: c.glu("silu")?, bias: c.mlp_bias },
        post_mlp_norm: None,
        residual: Residual::Sequential,
        residual_scale: 1.0,
    };
    // No transform: `lm_head` reads the final norm's output.
    let mlm = MlmHead {
        dense: String::new(),
        dense_bias: false,
        act: Activation::Gelu,
        norm: norm.clone(),
        norm_name: String::new(),
        bias: if c.mlp_bias { "lm_head.bias".into() } else { String::new() },
    };
    let mut head = match is_bare(cfg) {
        true => EncoderHead::Bare { pooler: None },
        false => head(cfg, mlm, ("dense", PoolAct::Act(Activation::Gelu), "classifier"), None)?,
    };
    if let EncoderHead::SequenceClassification(h) = &mut head {
        h.pooling = pooling(cfg)?;
    }
    let l = &under(p, "layers.{i}");
    let names = LayerNames::plain(
        l,
        [
            "input_layernorm",
            "self_attn.q_proj",
            "self_attn.k_proj",
            "self_attn.v_proj",
            "self_attn.o_proj",
            "post_attention_layernorm",
            "mlp.up_proj",
            "mlp.down_proj",
        ],
    );
    let mut spec = EncoderParts {
        model_type: "eurobert",
        vocab: c.vocab_size,
        hidden: c.hidden_size,
        layers: vec![layer; c.num_hidden_layers],
        names: LayerNames { gate: format!("{l}.mlp.gate_proj"), ..names },
        word: under(p, "embed_tokens"),
        positions: String::new(),
        embed_norm: None,
        decoder: "lm_head".into(),
        tied: c.tie_word_embeddings,
        padding_idx: padding_idx_or(cfg, 128001, c.vocab_size),
        encoder: EncoderSpec {
            final_norm: Some((norm, under(p, "norm"))),
            ..EncoderSpec::new(c.hidden_size, c.max_position_embeddings, Positions::Arange, NormPlacement::Pre, head)
        },
    }
    .build();
    // Rotary layers carry the positions: no learned table.
    spec.position_embedding = None;
    Ok(spec)
}
