//! What `modernbert` reads of its config beyond the plain sizes: fields with class defaults,
//! each layer type's rotary parameters, and which layers are local (windowed).

use serde_json::Value;
use vkformers_kernels::glu::Glu;
use vkformers_kernels::rope::RopeLayout;

use crate::error::{ModelError, Result};
use crate::rope::{inv_freq, RopeParams};
use crate::spec::RopeSpec;

/// `cfg[key]`, or `default` (`ModernBertConfig`'s) where the config leaves it out.
pub(super) fn get<T: serde::de::DeserializeOwned>(cfg: &Value, key: &str, default: T) -> T {
    cfg.get(key).and_then(|v| serde_json::from_value(v.clone()).ok()).unwrap_or(default)
}

/// `rope_parameters[kind].rope_theta`, else the legacy `{global,local}_rope_theta`, else the
/// class defaults; only the default rotary type.
pub(super) fn rope(cfg: &Value, kind: &str, legacy: &str, default: f64, head_dim: usize) -> Result<RopeSpec> {
    let p = cfg.pointer(&format!("/rope_parameters/{kind}"));
    if let Some(t) = p.and_then(|p| p.get("rope_type")).and_then(Value::as_str).filter(|t| *t != "default") {
        return Err(ModelError::Unsupported(format!("modernbert rope_type `{t}`")));
    }
    let theta = p.and_then(|p| p.get("rope_theta")).and_then(Value::as_f64).unwrap_or(get(cfg, legacy, default));
    let params = RopeParams { rope_type: "default".into(), theta, ..Default::default() };
    let (inv_freq, _) = inv_freq(&params, head_dim, get(cfg, "max_position_embeddings", 8192))?;
    Ok(RopeSpec { inv_freq, mscale: 1.0, rotary_dim: head_dim, layout: RopeLayout::HalfSplit, long: None })
}

/// `layer_types`, else every `global_attn_every_n_layers`-th layer global: whether each is local.
pub(super) fn local_layers(cfg: &Value, layers: usize) -> Result<Vec<bool>> {
    if let Some(types) = cfg.get("layer_types").and_then(Value::as_array) {
        if types.len() != layers {
            return Err(ModelError::Config(format!("modernbert layer_types lists {} of {layers} layers", types.len())));
        }
        return types
            .iter()
            .map(|t| match t.as_str() {
                Some("sliding_attention") => Ok(true),
                Some("full_attention") => Ok(false),
                other => Err(ModelError::Config(format!("modernbert layer type {other:?}"))),
            })
            .collect();
    }
    let every: usize = get(cfg, "global_attn_every_n_layers", 3).max(1);
    Ok((0..layers).map(|i| i % every != 0).collect())
}

/// The gated MLP's activation (`hidden_activation` on the first half of `Wi`).
pub(super) fn glu(cfg: &Value) -> Result<Glu> {
    match get(cfg, "hidden_activation", "gelu".to_string()).as_str() {
        "gelu" => Ok(Glu::GeGlu),
        "gelu_new" | "gelu_pytorch_tanh" => Ok(Glu::GeGluTanh),
        "silu" | "swish" => Ok(Glu::SwiGlu),
        other => Err(ModelError::Unsupported(format!("modernbert hidden_activation `{other}`"))),
    }
}
