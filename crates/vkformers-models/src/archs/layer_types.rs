//! Per-layer attention kinds from a config's `layer_types` (`sliding_attention` /
//! `full_attention`), shared by the wave-2 families that mix sliding-window and global layers.

use serde_json::Value;

use crate::error::{ModelError, Result};
use crate::spec::{ModelSpec, RopeSpec};

/// Whether each of `n` layers is a sliding-window layer: the config's `layer_types`, or else
/// `default(i)` (each family's config class fills the list this way when it is absent).
pub fn sliding(cfg: &Value, n: usize, default: impl Fn(usize) -> bool) -> Result<Vec<bool>> {
    let Some(types) = cfg.get("layer_types").filter(|v| !v.is_null()) else {
        return Ok((0..n).map(default).collect());
    };
    let types = types.as_array().ok_or_else(|| ModelError::Config("`layer_types` is not a list".into()))?;
    if types.len() != n {
        return Err(ModelError::Config(format!("layer_types has {} entries for {n} layers", types.len())));
    }
    types
        .iter()
        .map(|t| match t.as_str() {
            Some("sliding_attention") => Ok(true),
            Some("full_attention") => Ok(false),
            _ => Err(ModelError::Unsupported(format!("layer type {t}"))),
        })
        .collect()
}

/// Sets each layer's window: `window` on sliding layers, none on global ones. A sliding layer
/// without a window is an error (transformers would build no sliding mask for it).
pub fn apply(spec: &mut ModelSpec, sliding: &[bool], window: Option<u32>) -> Result<()> {
    for (l, &s) in spec.layers.iter_mut().zip(sliding) {
        if s && window.is_none() {
            return Err(ModelError::Config("a sliding_attention layer without `sliding_window`".into()));
        }
        l.attn.sliding_window = if s { window } else { None };
    }
    Ok(())
}

/// Each layer's RoPE by its type: `local` on sliding layers, `global` on the others.
pub fn set_ropes(spec: &mut ModelSpec, sliding: &[bool], local: &RopeSpec, global: &RopeSpec) {
    for (l, &s) in spec.layers.iter_mut().zip(sliding) {
        l.attn.rope = Some(if s { local } else { global }.clone());
    }
}

/// `sliding_window` with the config class's default where the key is absent (an explicit null
/// stays none).
pub fn window(cfg: &Value, default: Option<u32>) -> Option<u32> {
    match cfg.get("sliding_window") {
        None => default,
        Some(v) => v.as_u64().map(|w| w as u32),
    }
}
