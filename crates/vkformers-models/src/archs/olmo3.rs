//! `olmo3`: OLMo 2 (post-sublayer RMSNorms, q and k RMSNormed over the whole projection) with
//! sliding-window and global layers by `layer_types` (default: every 4th global, window 4096)
//! and a RoPE per layer type: `rope_parameters` keyed by `sliding_attention` / `full_attention`
//! (theta 5e5 by default), or old `rope_theta` for both and `rope_scaling` for global layers.

use serde_json::{json, Value};
use vkformers_kernels::rope::RopeLayout;

use super::common::{parse, BaseConfig};
use super::layer_types::{apply, set_ropes, sliding, window};
use crate::error::Result;
use crate::spec::ModelSpec;

/// `(sliding, full)` RoPE parameter dicts as `Olmo3Config.convert_rope_params_to_dict` makes them.
fn rope_dicts(cfg: &Value) -> (Value, Value) {
    let theta = cfg.get("rope_theta").and_then(Value::as_f64).unwrap_or(500_000.0);
    let params = cfg.get("rope_parameters").filter(|v| v.is_object());
    let keyed = params.filter(|p| p.get("full_attention").is_some() || p.get("sliding_attention").is_some());
    let get = |d: Option<&Value>| {
        let mut d = d.cloned().filter(Value::is_object).unwrap_or_else(|| json!({"rope_type": "default"}));
        if d.get("rope_theta").is_none() {
            d["rope_theta"] = json!(theta);
        }
        d
    };
    match keyed {
        Some(p) => (get(p.get("sliding_attention")), get(p.get("full_attention"))),
        None => {
            let full = params.or_else(|| cfg.get("rope_scaling")).filter(|v| v.is_object());
            (get(None), get(full))
        }
    }
}

pub fn spec(cfg: &Value) -> Result<ModelSpec> {
    let mut c: BaseConfig = parse(cfg)?;
    let w = window(cfg, Some(4096));
    let slide = sliding(cfg, c.num_hidden_layers, |i| (i + 1) % 4 != 0)?;
    let (local, global) = rope_dicts(cfg);
    let local_rope = c.rope_of(local, RopeLayout::HalfSplit)?;
    let global_rope = c.rope_of(global, RopeLayout::HalfSplit)?;
    let mut spec = c.llama_spec("olmo3", c.glu("silu")?, false, true, c.attention_bias)?;
    // Olmo3Config (as Olmo2Config) defaults pad_token_id to 1.
    spec.padding_idx = crate::spec::padding_idx_or(cfg, 1, spec.vocab);
    for l in &mut spec.layers {
        l.post_attn_norm = l.attn_norm.take();
        l.post_mlp_norm = l.mlp_norm.take();
        l.attn.qk_norm_at = crate::spec::QkNormAt::Projection;
    }
    set_ropes(&mut spec, &slide, &local_rope, &global_rope);
    apply(&mut spec, &slide, w)?;
    Ok(spec)
}
