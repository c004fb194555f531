//! `apertus`: Qwen 3's attention (RMSNorm over each head's q and k before RoPE, GQA) with a
//! plain `down(xielu(up(x)))` MLP whose activation has learned scalars (`MlpSpec::Xielu`), and
//! its own norm names (`attention_layernorm`, `feedforward_layernorm`). `hidden_act` must be
//! `xielu` (the only activation ApertusMLP is built with in practice).

use serde_json::Value;
use vkformers_kernels::glu::Glu;

use super::common::{parse, BaseConfig};
use crate::error::{ModelError, Result};
use crate::spec::{padding_idx_or, MlpSpec, ModelSpec};

pub fn spec(cfg: &Value) -> Result<ModelSpec> {
    let mut cfg = cfg.clone();
    let no_rope =
        ["rope_parameters", "rope_scaling", "rope_theta"].iter().all(|k| cfg.get(k).is_none_or(Value::is_null));
    if no_rope {
        // ApertusConfig's default: Llama 3 scaling of theta 12e6.
        cfg["rope_parameters"] = serde_json::json!({
            "rope_type": "llama3", "rope_theta": 12_000_000.0, "factor": 8.0,
            "original_max_position_embeddings": 8192, "low_freq_factor": 1.0, "high_freq_factor": 4.0
        });
    }
    let cfg = &cfg;
    let c: BaseConfig = parse(cfg)?;
    match c.hidden_act.as_deref().unwrap_or("xielu") {
        "xielu" => {}
        other => return Err(ModelError::Unsupported(format!("apertus with hidden_act `{other}` (only xielu)"))),
    }
    // The gated MLP llama_spec builds is replaced below; SwiGLU is only a placeholder.
    let mut spec = c.llama_spec("apertus", Glu::SwiGlu, false, true, c.attention_bias)?;
    spec.padding_idx = padding_idx_or(cfg, 3, spec.vocab);
    for l in &mut spec.layers {
        l.attn.sliding_window = None;
        l.mlp = MlpSpec::Xielu {
            intermediate: c.intermediate_size,
            bias: false,
            act: "model.layers.{i}.mlp.act_fn".into(),
        };
    }
    let n = &mut spec.layer_names;
    (n.attn_norm, n.mlp_norm) =
        ("model.layers.{i}.attention_layernorm".into(), "model.layers.{i}.feedforward_layernorm".into());
    Ok(spec)
}
