//! `ministral` and `cwm`: Llama (no biases) whose layers are sliding-window or global by
//! `layer_types`. Ministral's default is every layer sliding when `sliding_window` is set
//! (Mistral's class default 4096); CWM's is every 4th layer (from 0) global, window 8192, and
//! llama3-scaled RoPE (theta 1e6, factor 16, original context 8192) when no RoPE keys are given.
//! `ministral3`: Mistral (bias-free, optional `sliding_window` on every layer, YaRN by default)
//! whose queries are multiplied after RoPE by `1 + β · ln(1 + ⌊pos / original⌋)` with
//! `rope_parameters.llama_4_scaling_beta` and `original_max_position_embeddings`.

use serde_json::{json, Value};

use super::common::{parse, BaseConfig};
use super::layer_types::{apply, sliding, window};
use crate::error::Result;
use crate::spec::ModelSpec;

pub fn ministral(cfg: &Value) -> Result<ModelSpec> {
    let c: BaseConfig = parse(cfg)?;
    let w = window(cfg, Some(4096));
    let slide = sliding(cfg, c.num_hidden_layers, |_| w.is_some())?;
    let mut spec = c.llama_spec("ministral", c.glu("silu")?, false, false, false)?;
    for l in &mut spec.layers {
        l.attn.out_bias = false;
    }
    apply(&mut spec, &slide, w)?;
    Ok(spec)
}

pub fn cwm(cfg: &Value) -> Result<ModelSpec> {
    let mut c: BaseConfig = parse(cfg)?;
    if ["rope_parameters", "rope_scaling", "rope_theta"].iter().all(|k| cfg.get(k).is_none_or(Value::is_null)) {
        c.rope_parameters = Some(json!({
            "rope_type": "llama3", "rope_theta": 1_000_000.0, "factor": 16.0, "high_freq_factor": 4.0,
            "low_freq_factor": 1.0, "original_max_position_embeddings": 8192
        }));
    }
    if cfg.get("max_position_embeddings").is_none() {
        c.max_position_embeddings = 131_072;
    }
    let w = window(cfg, Some(8192)).filter(|&w| w > 0);
    let slide = sliding(cfg, c.num_hidden_layers, |i| i % 4 != 0)?;
    let mut spec = c.llama_spec("cwm", c.glu("silu")?, false, false, false)?;
    for l in &mut spec.layers {
        l.attn.out_bias = false;
    }
    apply(&mut spec, &slide, w)?;
    Ok(spec)
}

pub fn ministral3(cfg: &Value) -> Result<ModelSpec> {
    let mut c: BaseConfig = parse(cfg)?;
    if c.rope_parameters.is_none() && c.rope_scaling.is_none() {
        c.rope_parameters = Some(json!({
            "type": "yarn", "rope_theta": 1_000_000.0, "factor": 16.0, "original_max_position_embeddings": 16384,
            "beta_fast": 32.0, "beta_slow": 1.0, "mscale_all_dim": 1.0, "mscale": 1.0, "llama_4_scaling_beta": 0.1
        }));
    }
    let params = c.rope_params()?;
    let beta = params.scaling.get("llama_4_scaling_beta").and_then(Value::as_f64);
    let original = params.scaling.get("original_max_position_embeddings").and_then(Value::as_u64);
    let q_scale = match (beta, original) {
        (Some(beta), Some(original)) if original > 0 => Some((beta as f32, original as usize)),
        (Some(_), _) => {
            return Err(crate::error::ModelError::Config(
                "ministral3 llama_4_scaling_beta needs a positive rope_parameters.original_max_position_embeddings"
                    .into(),
            ))
        }
        _ => None,
    };
    let mut spec = c.llama_spec("ministral3", c.glu("silu")?, false, false, false)?;
    spec.padding_idx = crate::spec::padding_idx_or(cfg, 11, spec.vocab);
    for l in &mut spec.layers {
        l.attn.out_bias = false;
        l.attn.q_position_scale = q_scale;
    }
    Ok(spec)
}
