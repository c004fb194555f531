//! `modernbert`: pre-LN layers under `model.layers.{i}` (no `attn_norm` on layer 0), LayerNorms
//! without bias unless `norm_bias`, fused `attn.Wqkv` (q, k, v by rows) and a gated MLP whose
//! `mlp.Wi` stacks the activated half over the multiplied half (`Wo(act(a) · b)`); rotary
//! attention with a global `rope_theta` (160000) on every `global_attn_every_n_layers`-th layer
//! and a local one (10000) with a bidirectional window `|q − k| ≤ local_attention / 2` on the
//! rest; a final `model.final_norm`. Masked-LM head: `head.dense` (+ bias with
//! `classifier_bias`), `classifier_activation`, `head.norm`, tied `decoder` + its bias; the
//! classifiers run the same transform on the first token (`cls`), the mean (`mean`) or, for
//! tokens, every token.

use serde_json::Value;

use super::bert_layout::under;
use super::common::parse;
use super::encoder_common::{activation, head, is_bare, EncoderParts};
use super::modernbert_config::{get, glu, local_layers, rope};
use crate::encoder::{
    ClsPooling, EncoderHead, EncoderSpec, MlmHead, NormPlacement, PoolAct, Positions, TokenTransform,
};
use crate::error::{ModelError, Result};
use crate::spec::{padding_idx_or, AttnSpec, LayerNames, LayerSpec, MapEntry, MlpSpec, ModelSpec, Norm, Residual};

/// The `ModernBertConfig` fields read here (its defaults in `get`).
#[derive(serde::Deserialize)]
struct Config {
    vocab_size: usize,
    hidden_size: usize,
    intermediate_size: usize,
    num_hidden_layers: usize,
    num_attention_heads: usize,
}

pub fn spec(cfg: &Value) -> Result<ModelSpec> {
    let c: Config = parse(cfg)?;
    // `ModernBertModel` stores its tensors without the `model.` prefix.
    let p = if is_bare(cfg) { "" } else { "model" };
    let (h, heads) = (c.hidden_size, c.num_attention_heads);
    if heads == 0 || !h.is_multiple_of(heads) {
        return Err(ModelError::Config(format!("hidden size {h} over {heads} heads")));
    }
    let hd = h / heads;
    let norm = Norm::Layer { eps: get(cfg, "norm_eps", 1e-5) as f32, bias: get(cfg, "norm_bias", false) };
    let (qkv_bias, mlp_bias) = (get(cfg, "attention_bias", false), get(cfg, "mlp_bias", false));
    let glu = glu(cfg)?;
    let window = (get(cfg, "local_attention", 128usize) / 2) as u32;
    let local = local_layers(cfg, c.num_hidden_layers)?;
    let (global_rope, local_rope) = (
        rope(cfg, "full_attention", "global_rope_theta", 160_000.0, hd)?,
        rope(cfg, "sliding_attention", "local_rope_theta", 10_000.0, hd)?,
    );
    let layers = local.iter().enumerate().map(|(i, &is_local)| LayerSpec {
        attn_norm: (i > 0).then(|| norm.clone()),
        attn: AttnSpec {
            qkv_bias,
            out_bias: qkv_bias,
            rope: Some(if is_local { local_rope.clone() } else { global_rope.clone() }),
            sliding_window: is_local.then_some(window),
            ..AttnSpec::new(heads, heads, hd)
        },
        post_attn_norm: None,
        mlp_norm: Some(norm.clone()),
        mlp: MlpSpec::Gated { intermediate: c.intermediate_size, glu, bias: mlp_bias },
        post_mlp_norm: None,
        residual: Residual::Sequential,
        residual_scale: 1.0,
    });
    let act = activation(&get(cfg, "classifier_activation", "gelu".to_string()))?;
    let mlm = MlmHead {
        dense: "head.dense".into(),
        dense_bias: get(cfg, "classifier_bias", false),
        act,
        norm: norm.clone(),
        norm_name: "head.norm".into(),
        bias: if get(cfg, "decoder_bias", true) { "decoder.bias".into() } else { String::new() },
    };
    let mut head = match is_bare(cfg) {
        true => EncoderHead::Bare { pooler: None },
        false => head(cfg, mlm, ("head.dense", PoolAct::Act(act), "classifier"), None)?,
    };
    match &mut head {
        EncoderHead::SequenceClassification(h) => {
            h.dense_bias = get(cfg, "classifier_bias", false);
            h.norm = Some((norm.clone(), "head.norm".into()));
            h.pooling = match get(cfg, "classifier_pooling", "cls".to_string()).as_str() {
                "cls" => ClsPooling::First,
                "mean" => ClsPooling::Mean,
                other => return Err(ModelError::Config(format!("modernbert classifier_pooling `{other}`"))),
            };
        }
        // Its token classifier runs the head's transform on every token first.
        EncoderHead::TokenClassification { transform, .. } => {
            let dense_bias = get(cfg, "classifier_bias", false);
            let norm = (norm.clone(), "head.norm".into());
            *transform = Some(TokenTransform { dense: "head.dense".into(), dense_bias, act, norm });
        }
        _ => {}
    }
    let l = &under(p, "layers.{i}");
    let names =
        LayerNames::plain(l, ["attn_norm", "attn.q", "attn.k", "attn.v", "attn.Wo", "mlp_norm", "mlp.up", "mlp.Wo"]);
    let mut spec = EncoderParts {
        model_type: "modernbert",
        vocab: c.vocab_size,
        hidden: h,
        layers: layers.collect(),
        names: LayerNames { gate: format!("{l}.mlp.gate"), ..names },
        word: under(p, "embeddings.tok_embeddings"),
        positions: String::new(),
        embed_norm: Some((norm.clone(), under(p, "embeddings.norm"))),
        decoder: "decoder".into(),
        tied: true,
        padding_idx: padding_idx_or(cfg, 50283, c.vocab_size),
        encoder: EncoderSpec {
            final_norm: Some((norm, under(p, "final_norm"))),
            sparse_prediction: get(cfg, "sparse_prediction", false)
                .then(|| get(cfg, "sparse_pred_ignore_index", -100i64) as i32),
            ..EncoderSpec::new(
                h,
                get(cfg, "max_position_embeddings", 8192),
                Positions::Arange,
                NormPlacement::Pre,
                head,
            )
        },
    }
    .build();
    spec.position_embedding = None;
    let suffixes: &[&str] = if qkv_bias { &["weight", "bias"] } else { &["weight"] };
    let qkv = [("q", h), ("k", h), ("v", h)];
    spec.weight_map.extend(MapEntry::fused_qkv(c.num_hidden_layers, &format!("{l}.attn"), "Wqkv", qkv, 1, suffixes));
    let i_rows = c.intermediate_size;
    for i in 0..c.num_hidden_layers {
        for s in if mlp_bias { &["weight", "bias"][..] } else { &["weight"][..] } {
            let m = crate::spec::layer_name(&format!("{l}.mlp"), i);
            let parts = vec![(format!("{m}.gate.{s}"), i_rows), (format!("{m}.up.{s}"), i_rows)];
            spec.weight_map.push(MapEntry { hf: format!("{m}.Wi.{s}"), transpose: false, parts, groups: 1 });
        }
    }
    Ok(spec)
}
