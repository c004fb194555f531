//! `exaone4` (EXAONE 4.0): OLMo 2's post-sublayer RMSNorms with per-head q/k RMSNorm (Qwen 3
//! style), no biases, and sliding-window and global layers by `layer_types` (default: every
//! `sliding_window_pattern`-th layer, 4, global). With a sliding window, only sliding layers use
//! RoPE (global layers are NoPE); without one every layer is global and rotary.

use serde_json::Value;

use super::common::{parse, BaseConfig};
use super::layer_types::{apply, sliding, window};
use crate::error::{ModelError, Result};
use crate::spec::ModelSpec;

pub fn spec(cfg: &Value) -> Result<ModelSpec> {
    let mut c: BaseConfig = parse(cfg)?;
    if cfg.get("rms_norm_eps").is_none() {
        c.rms_norm_eps = 1e-5;
    }
    let w = window(cfg, Some(4096));
    let pattern = match cfg.get("sliding_window_pattern") {
        None => 4,
        Some(v) => v.as_u64().unwrap_or(0) as usize,
    };
    if w.is_some() && pattern == 0 && cfg.get("layer_types").is_none_or(Value::is_null) {
        return Err(ModelError::Unsupported(format!(
            "exaone4 sliding_window_pattern {}",
            cfg["sliding_window_pattern"]
        )));
    }
    let slide = sliding(cfg, c.num_hidden_layers, |i| w.is_some() && (i + 1) % pattern.max(1) != 0)?;
    let mut spec = c.llama_spec("exaone4", c.glu("silu")?, false, true, false)?;
    for (l, &s) in spec.layers.iter_mut().zip(&slide) {
        l.post_attn_norm = l.attn_norm.take();
        l.post_mlp_norm = l.mlp_norm.take();
        l.attn.out_bias = false;
        if w.is_some() && !s {
            l.attn.rope = None;
        }
    }
    apply(&mut spec, &slide, w)?;
    Ok(spec)
}
