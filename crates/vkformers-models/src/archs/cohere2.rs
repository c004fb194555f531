//! `cohere2` (Command R7B, Command A): Cohere (parallel attention and MLP on one bias-free
//! LayerNorm, interleaved RoPE, `logit_scale`, tied head) with sliding-window and global layers by
//! `layer_types` (default: every `sliding_window_pattern`-th, 4, global; window 4096). Only
//! sliding layers use RoPE; global layers are NoPE. No QK-norm; head_dim is hidden / heads.

use serde_json::Value;

use super::layer_types::{apply, sliding, window};
use crate::error::{ModelError, Result};
use crate::spec::ModelSpec;

pub fn spec(cfg: &Value) -> Result<ModelSpec> {
    let mut cfg = cfg.clone();
    if let Some(map) = cfg.as_object_mut() {
        // Cohere2Config has no QK-norm and always derives head_dim.
        map.remove("use_qk_norm");
        let (hidden, heads) = (map.get("hidden_size"), map.get("num_attention_heads"));
        if let (Some(h), Some(n)) = (hidden.and_then(Value::as_u64), heads.and_then(Value::as_u64)) {
            map.insert("head_dim".into(), Value::from(h / n.max(1)));
        }
    }
    let mut spec = super::cohere::spec(&cfg)?;
    spec.model_type = "cohere2".into();
    let pattern = cfg.get("sliding_window_pattern").and_then(Value::as_u64).unwrap_or(4) as usize;
    if pattern == 0 {
        return Err(ModelError::Config("cohere2 sliding_window_pattern 0".into()));
    }
    let slide = sliding(&cfg, spec.layers.len(), |i| (i + 1) % pattern != 0)?;
    for (l, &s) in spec.layers.iter_mut().zip(&slide) {
        if !s {
            l.attn.rope = None;
        }
    }
    apply(&mut spec, &slide, window(&cfg, Some(4096)))?;
    Ok(spec)
}
