//! `nomic_bert` (nomic-embed-text): BERT's embeddings without a position table (word + token
//! type, LayerNorm), post-LN layers of bias-free rotary attention (Llama's `rotate_half` pairs,
//! `rope_theta` 1000 unless the config says otherwise) and a bias-free gated MLP
//! (`down(act(gate(x)) · up(x))`, SiLU by default), stored under nomic-embed's own names; BERT's
//! masked-LM head (`cls.predictions`, its norm called `layer_norm`) and pooler classifier.

use serde_json::Value;
use vkformers_kernels::rope::RopeLayout;

use super::bert_defaults;
use super::common::{parse, BaseConfig};
use super::encoder_common::{activation, head, EncoderParts};
use crate::encoder::{EncoderSpec, MlmHead, NormPlacement, PoolAct, Positions};
use crate::error::{ModelError, Result};
use crate::spec::{padding_idx_or, AttnSpec, LayerNames, LayerSpec, MapEntry, MlpSpec, ModelSpec, Norm, Residual};

/// The fields BERT's config adds to the Llama-shaped ones `BaseConfig` reads.
#[derive(serde::Deserialize)]
struct Extra {
    #[serde(default = "bert_defaults::type_vocab_size")]
    type_vocab_size: usize,
    #[serde(default = "bert_defaults::layer_norm_eps")]
    layer_norm_eps: f64,
    #[serde(default = "bert_defaults::yes")]
    tie_word_embeddings: bool,
}

/// The names nomic-embed's checkpoints store (transformers renames them on load and back on
/// save): `attn.Wqkv` holds q, k, v stacked by rows (split here into internal `attn.{q,k,v}`),
/// `fc11` is the up projection and `fc12` the gate.
const L: &str = "nomic_bert.encoder.layers.{i}";

fn names() -> LayerNames {
    let parts = ["norm1", "attn.q", "attn.k", "attn.v", "attn.out_proj", "norm2", "mlp.fc11", "mlp.fc2"];
    LayerNames { gate: format!("{L}.mlp.fc12"), ..LayerNames::plain(L, parts) }
}

pub fn spec(cfg: &Value) -> Result<ModelSpec> {
    // `NomicBertConfig.default_theta`: 1000 where neither spelling of rope_theta is given.
    let mut cfg_theta = cfg.clone();
    let has_theta = cfg.get("rope_theta").is_some() || cfg.pointer("/rope_parameters/rope_theta").is_some();
    if let (false, Some(map)) = (has_theta, cfg_theta.as_object_mut()) {
        map.insert("rope_theta".into(), 1000.0.into());
    }
    let c: BaseConfig = parse(&cfg_theta)?;
    let x: Extra = parse(cfg)?;
    if !x.tie_word_embeddings {
        return Err(ModelError::Unsupported("nomic_bert with tie_word_embeddings false".into()));
    }
    let act_name = c.hidden_act.as_deref().unwrap_or("silu");
    let norm = Norm::Layer { eps: x.layer_norm_eps as f32, bias: true };
    let attn = AttnSpec {
        rope: Some(c.rope(RopeLayout::HalfSplit)?),
        ..AttnSpec::new(c.num_attention_heads, c.num_attention_heads, c.head_dim())
    };
    let layer = LayerSpec {
        attn_norm: Some(norm.clone()),
        attn,
        post_attn_norm: None,
        mlp_norm: Some(norm.clone()),
        mlp: MlpSpec::Gated { intermediate: c.intermediate_size, glu: c.glu("silu")?, bias: false },
        post_mlp_norm: None,
        residual: Residual::Sequential,
        residual_scale: 1.0,
    };
    let e = "nomic_bert.embeddings";
    let act = activation(act_name)?;
    let head = head(
        cfg,
        MlmHead::bert(act, &norm, "layer_norm"),
        ("nomic_bert.pooler.dense", PoolAct::Tanh, "classifier"),
        None,
    )?;
    let mut spec = EncoderParts {
        model_type: "nomic_bert",
        vocab: c.vocab_size,
        hidden: c.hidden_size,
        layers: vec![layer; c.num_hidden_layers],
        names: names(),
        word: format!("{e}.word_embeddings"),
        positions: String::new(),
        embed_norm: Some((norm, "nomic_bert.emb_ln".into())),
        decoder: "cls.predictions.decoder".into(),
        tied: true,
        padding_idx: padding_idx_or(cfg, 0, c.vocab_size),
        encoder: EncoderSpec {
            token_types: Some((format!("{e}.token_type_embeddings"), x.type_vocab_size)),
            ignored: vec!["cls.predictions.decoder.bias".into()],
            ..EncoderSpec::new(c.hidden_size, c.max_position_embeddings, Positions::Arange, NormPlacement::Post, head)
        },
    }
    .build();
    // No learned position table: the rotary layers carry the positions.
    spec.position_embedding = None;
    let q_rows = c.num_attention_heads * c.head_dim();
    let qkv = [("q", q_rows), ("k", q_rows), ("v", q_rows)];
    let attn = format!("{L}.attn");
    spec.weight_map.extend(MapEntry::fused_qkv(c.num_hidden_layers, &attn, "Wqkv", qkv, 1, &["weight"]));
    Ok(spec)
}
