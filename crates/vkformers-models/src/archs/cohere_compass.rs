//! `cohere_compass_text` (the text model of Cohere's North / Compass image-text models, with its
//! own causal-LM class): Cohere 2's parallel block on one bias-free LayerNorm, sliding and full
//! layers by `layer_types` (default: all full), tied head and `logit_scale` (default 1, not
//! Cohere's 0.0625), head_dim hidden / heads, no QK-norm; but RoPE in the half-split layout with
//! its own parameters per layer type (`rope_parameters` keyed by `sliding_attention` /
//! `full_attention`; a null entry makes that type NoPE). Its M-RoPE gives every axis the text
//! position for text-only input, so the rotation is plain RoPE.

use serde_json::{json, Value};
use vkformers_kernels::rope::RopeLayout;

use super::common::{parse, BaseConfig};
use super::layer_types::{apply, sliding, window};
use crate::error::{ModelError, Result};
use crate::spec::ModelSpec;

/// The RoPE dict of a layer type: `rope_parameters[type]` when keyed by layer type (null: none),
/// else the one flat dict for every type.
fn rope_dict(ropes: &Value, layer_type: &str) -> Result<Option<Value>> {
    let keyed = ropes.get("sliding_attention").is_some() || ropes.get("full_attention").is_some();
    let d = if keyed { ropes.get(layer_type).cloned().unwrap_or(Value::Null) } else { ropes.clone() };
    match d {
        Value::Null => Ok(None),
        Value::Object(_) => Ok(Some(d)),
        other => Err(ModelError::Config(format!("rope_parameters.{layer_type} is {other}: give an object or null"))),
    }
}

pub fn text(cfg: &Value) -> Result<ModelSpec> {
    let ropes = cfg.get("rope_parameters").cloned().filter(Value::is_object).unwrap_or(json!({}));
    let mut base = cfg.clone();
    if let Some(map) = base.as_object_mut() {
        map.remove("use_qk_norm");
        map.remove("rope_parameters");
        let (hidden, heads) = (map.get("hidden_size"), map.get("num_attention_heads"));
        if let (Some(h), Some(n)) = (hidden.and_then(Value::as_u64), heads.and_then(Value::as_u64)) {
            map.insert("head_dim".into(), Value::from(h / n.max(1)));
        }
        if map.get("logit_scale").is_none_or(Value::is_null) {
            map.insert("logit_scale".into(), Value::from(1.0));
        }
    }
    let mut spec = super::cohere::spec(&base)?;
    spec.model_type = "cohere_compass_text".into();
    let mut c: BaseConfig = parse(&base)?;
    c.rope_scaling = None;
    let slide = sliding(cfg, spec.layers.len(), |_| false)?;
    for (l, &s) in spec.layers.iter_mut().zip(&slide) {
        l.attn.rope = match rope_dict(&ropes, if s { "sliding_attention" } else { "full_attention" })? {
            None => None,
            Some(mut d) => {
                if d.get("rope_theta").is_none() {
                    d["rope_theta"] = json!(10_000.0);
                }
                c.rope_parameters = Some(d);
                Some(c.rope(RopeLayout::HalfSplit)?)
            }
        };
    }
    apply(&mut spec, &slide, window(cfg, Some(4096)))?;
    Ok(spec)
}
