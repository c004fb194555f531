//! `granite_swa`: Granite (its four multipliers) with sliding-window and global layers by
//! `layer_types` (default: every fourth layer, `i % 4 == 0`, global; window 128), a RoPE base per
//! layer (`layer_rope_theta`, 0 = NoPE; default: the global `rope_theta` on every layer), and a
//! learned attention sink per head (`self_attn.sinks [heads]`) in every layer.

use serde_json::{json, Value};
use vkformers_kernels::rope::RopeLayout;

use super::common::{parse, BaseConfig};
use super::layer_types::{apply, sliding, window};
use crate::error::{ModelError, Result};
use crate::spec::{ModelSpec, RopeSpec};

#[derive(serde::Deserialize)]
struct Config {
    #[serde(flatten)]
    base: BaseConfig,
    layer_rope_theta: Option<Vec<f64>>,
}

/// The rotary spec of base `theta` (the config's RoPE parameters otherwise), or none for 0.
fn rope_of(cfg: &Value, theta: f64) -> Result<Option<RopeSpec>> {
    if theta == 0.0 {
        return Ok(None);
    }
    let mut b: BaseConfig = parse(cfg)?;
    let mut params = b.rope_params()?.scaling;
    if !params.is_object() {
        params = json!({ "rope_type": "default" });
    }
    params["rope_theta"] = json!(theta);
    (b.rope_parameters, b.rope_scaling) = (Some(params), None);
    Ok(Some(b.rope(RopeLayout::HalfSplit)?))
}

pub fn spec(cfg: &Value) -> Result<ModelSpec> {
    let c: Config = parse(cfg)?;
    let mut spec = super::granite::spec(cfg)?;
    spec.model_type = "granite_swa".into();
    let n = spec.layers.len();
    let thetas = match c.layer_rope_theta {
        Some(t) if t.len() != n => {
            return Err(ModelError::Config(format!("layer_rope_theta has {} entries for {n} layers", t.len())))
        }
        Some(t) => t,
        None => vec![c.base.rope_params()?.theta; n],
    };
    for (l, &theta) in spec.layers.iter_mut().zip(&thetas) {
        l.attn.rope = rope_of(cfg, theta)?;
        l.attn.sinks = Some("model.layers.{i}.self_attn.sinks".into());
    }
    let slide = sliding(cfg, n, |i| i % 4 != 0)?;
    apply(&mut spec, &slide, window(cfg, Some(128)))?;
    Ok(spec)
}
