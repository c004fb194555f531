//! `stablelm` (StableLM 2, StableLM-3B-4E1T): LayerNorm with bias, partial rotary
//! (`partial_rotary_factor`, default 0.25), optional q/k/v biases (`use_qkv_bias`), SwiGLU, and
//! optionally attention and MLP in parallel on the one input LayerNorm (`use_parallel_residual`).

use serde::Deserialize;
use serde_json::Value;

use super::common::{parse, BaseConfig};
use super::ln_common::{prepare, set_norms, tied};
use crate::error::Result;
use crate::spec::{JoinEntry, ModelSpec, Norm, Residual};

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
    prepare(&mut c.base, cfg, "silu", 0.25);
    c.base.tie_word_embeddings = tied(cfg, false);
    // The head size is always hidden / heads.
    c.base.head_dim = None;
    c.base.sliding_window = None;
    let mut spec = c.base.llama_spec("stablelm", c.base.glu("silu")?, false, false, c.use_qkv_bias)?;
    set_norms(&mut spec, &Norm::Layer { eps: c.layer_norm_eps as f32, bias: true });
    let (heads, kv_heads) = (c.base.num_attention_heads, c.base.kv_heads());
    spec.layer_names.q_norm = "model.layers.{i}.self_attn.q_layernorm".into();
    spec.layer_names.k_norm = "model.layers.{i}.self_attn.k_layernorm".into();
    for (i, l) in spec.layers.iter_mut().enumerate() {
        l.attn.out_bias = false;
        if c.qk_layernorm {
            l.attn.qk_norm = Some(Norm::LayerPerHead { eps: c.layer_norm_eps as f32 });
            for (which, n) in [("q", heads), ("k", kv_heads)] {
                let base = format!("model.layers.{i}.self_attn.{which}_layernorm");
                let parts = (0..n).map(|h| format!("{base}.norms.{h}.weight")).collect();
                spec.joins.push(JoinEntry { internal: format!("{base}.weight"), parts });
            }
        }
        if c.use_parallel_residual {
            l.mlp_norm = None;
            l.residual = Residual::Parallel { shared_norm: true };
        }
    }
    Ok(spec)
}
