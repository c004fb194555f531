//! `stablelm` (StableLM 2, StableLM-3B-4E1T): LayerNorm with bias, partial rotary
//! (`partial_rotary_factor`, default 0.25), optional q/k/v biases (`use_qkv_bias`), SwiGLU, and
//! optionally attention and MLP in parallel on the one input LayerNorm (`use_parallel_residual`).

use serde::Deserialize;
use serde_json::Value;

use super::common::{parse, BaseConfig};
use super::ln_common::{prepare, set_norms, tied};
use crate::error::{ModelError, Result};
use crate::spec::{ModelSpec, Norm, Residual};

#[derive(Deserialize)]
struct Config {
    #[serde(flatten)]
    base: BaseConfig,
    #[serde(default = "default_eps")]
    layer_norm_eps: f64,
    #[serde(default)]
    use_qkv_bias: bool,
    #[serde(default)]
    qk_layernorm: bool,
    #[serde(default)]
    use_parallel_residual: bool,
}

fn default_eps() -> f64 {
    1e-5
}

pub fn spec(cfg: &Value) -> Result<ModelSpec> {
    let mut c: Config = parse(cfg)?;
    if c.qk_layernorm {
        return Err(ModelError::Unsupported("stablelm qk_layernorm (a LayerNorm per head)".into()));
    }
    prepare(&mut c.base, cfg, "silu", 0.25);
    c.base.tie_word_embeddings = tied(cfg, false);
    // The head size is always hidden / heads.
    c.base.head_dim = None;
    c.base.sliding_window = None;
    let mut spec = c.base.llama_spec("stablelm", c.base.glu("silu")?, false, false, c.use_qkv_bias)?;
    set_norms(&mut spec, &Norm::Layer { eps: c.layer_norm_eps as f32, bias: true });
    for l in &mut spec.layers {
        l.attn.out_bias = false;
        if c.use_parallel_residual {
            l.mlp_norm = None;
            l.residual = Residual::Parallel { shared_norm: true };
        }
    }
    Ok(spec)
}
