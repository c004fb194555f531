//! `ministral` and `cwm`: Llama (no biases) whose layers are sliding-window or global by
//! `layer_types`. Ministral's default is every layer sliding when `sliding_window` is set
//! (Mistral's class default 4096); CWM's is every 4th layer (from 0) global, window 8192, and
//! llama3-scaled RoPE (theta 1e6, factor 16, original context 8192) when no RoPE keys are given.

use serde::Deserialize;
use serde_json::{json, Value};

use super::common::{parse, BaseConfig};
use super::layer_types::{apply, sliding, window};
use crate::error::Result;
use crate::spec::ModelSpec;

#[derive(Deserialize)]
struct Config {
    #[serde(flatten)]
    base: BaseConfig,
}

pub fn ministral(cfg: &Value) -> Result<ModelSpec> {
    let c: Config = parse(cfg)?;
    let w = window(cfg, Some(4096));
    let slide = sliding(cfg, c.base.num_hidden_layers, |_| w.is_some())?;
    let mut spec = c.base.llama_spec("ministral", c.base.glu("silu")?, false, false, false)?;
    for l in &mut spec.layers {
        l.attn.out_bias = false;
    }
    apply(&mut spec, &slide, w)?;
    Ok(spec)
}

pub fn cwm(cfg: &Value) -> Result<ModelSpec> {
    let mut c: Config = parse(cfg)?;
    if ["rope_parameters", "rope_scaling", "rope_theta"].iter().all(|k| cfg.get(k).is_none_or(Value::is_null)) {
        c.base.rope_parameters = Some(json!({
            "rope_type": "llama3", "rope_theta": 1_000_000.0, "factor": 16.0, "high_freq_factor": 4.0,
            "low_freq_factor": 1.0, "original_max_position_embeddings": 8192
        }));
    }
    if cfg.get("max_position_embeddings").is_none() {
        c.base.max_position_embeddings = 131_072;
    }
    let w = window(cfg, Some(8192)).filter(|&w| w > 0);
    let slide = sliding(cfg, c.base.num_hidden_layers, |i| i % 4 != 0)?;
    let mut spec = c.base.llama_spec("cwm", c.base.glu("silu")?, false, false, false)?;
    for l in &mut spec.layers {
        l.attn.out_bias = false;
    }
    apply(&mut spec, &slide, w)?;
    Ok(spec)
}
