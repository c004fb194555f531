//! `mellum` (JetBrains Mellum 2): Qwen3-MoE layers (per-head QK-norm, softmax top-k routed
//! experts renormalised with `norm_topk_prob`, no shared expert) where `layer_types` makes a
//! layer sliding-window (`sliding_window`, default 1024) or full, each type with its own RoPE
//! (`rope_parameters` keyed by layer type; defaults θ 10⁴ sliding, 5·10⁵ full), and
//! `mlp_layer_types` makes a layer dense (an `intermediate_size` SwiGLU MLP) or sparse. The
//! multi-token-prediction layers (`mtp.*`) are not part of the causal LM and not loaded.

use serde::Deserialize;
use serde_json::{json, Value};
use vkformers_kernels::rope::RopeLayout;

use super::common::parse;
use super::layer_types::{apply, set_ropes, sliding, window};
use super::moe_common::{apply_where, mlp_expert_names, LlamaMoeConfig};
use crate::error::{ModelError, Result};
use crate::spec::ModelSpec;

#[derive(Deserialize)]
struct Config {
    #[serde(flatten)]
    lm: LlamaMoeConfig,
    mlp_layer_types: Option<Vec<String>>,
}

/// The RoPE dict of one layer type, with the config class's default θ.
fn rope_dict(cfg: &Value, layer_type: &str, theta: f64) -> Result<Value> {
    let d = match cfg.get("rope_parameters").filter(|v| !v.is_null()) {
        None => json!({"rope_type": "default", "rope_theta": theta}),
        Some(p) => p.get(layer_type).cloned().filter(Value::is_object).ok_or_else(|| {
            ModelError::Config(format!("mellum rope_parameters needs a `{layer_type}` object, got {p}"))
        })?,
    };
    // transformers sizes the frequencies by it but rotates the whole head: it cannot run.
    if d.get("partial_rotary_factor").and_then(Value::as_f64).is_some_and(|f| f != 1.0) {
        return Err(ModelError::Unsupported(format!("mellum partial_rotary_factor in {d}")));
    }
    Ok(d)
}

pub fn spec(cfg: &Value) -> Result<ModelSpec> {
    let Config { lm: LlamaMoeConfig { mut base, moe }, mlp_layer_types } = parse(cfg)?;
    let layers = base.num_hidden_layers;
    let full_rope = base.rope_of(rope_dict(cfg, "full_attention", 500_000.0)?, RopeLayout::HalfSplit)?;
    let sliding_rope = base.rope_of(rope_dict(cfg, "sliding_attention", 10_000.0)?, RopeLayout::HalfSplit)?;
    let glu = base.glu("silu")?;
    let mut spec = base.llama_spec("mellum", glu, false, true, base.attention_bias)?;
    let slide = sliding(cfg, layers, |_| false)?;
    set_ropes(&mut spec, &slide, &sliding_rope, &full_rope);
    apply(&mut spec, &slide, window(cfg, Some(1024)))?;
    let sparse = match &mlp_layer_types {
        None => vec![true; layers],
        Some(t) if t.len() == layers && t.iter().all(|t| t == "sparse" || t == "dense") => {
            t.iter().map(|t| t == "sparse").collect()
        }
        Some(t) => {
            return Err(ModelError::Config(format!(
                "mlp_layer_types {t:?}: one \"sparse\" or \"dense\" per layer ({layers} layers)"
            )))
        }
    };
    let inter = moe.expert_intermediate(&base);
    let block = moe.block(inter, glu, moe.norm_topk_prob, mlp_expert_names(), None, 0.001)?;
    apply_where(&mut spec, &sparse, block)?;
    Ok(spec)
}
