//! `stablelm` (StableLM 2, StableLM-3B-4E1T): LayerNorm with bias, partial rotary
//! (`partial_rotary_factor`, default 0.25), optional q/k/v biases (`use_qkv_bias`), SwiGLU, and
//! optionally attention and MLP in parallel on the one input LayerNorm (`use_parallel_residual`).

use serde::Deserialize;
use serde_json::Value;

use super::common::parse;
use super::ln_common::{prepare, set_norms, tied, whole_heads, LnConfig};
use crate::error::Result;
use crate::spec::{JoinEntry, ModelSpec, Norm, Residual};

#[derive(Deserialize)]
struct Config {
    #[serde(flatten)]
    ln: LnConfig,
    #[serde(default)]
    use_qkv_bias: bool,
    #[serde(default)]
    qk_layernorm: bool,
    #[serde(default)]
    use_parallel_residual: bool,
}

pub fn spec(cfg: &Value) -> Result<ModelSpec> {
    let mut c: Config = parse(cfg)?;
    let b = &mut c.ln.base;
    prepare(b, cfg, "silu", 0.25);
    b.tie_word_embeddings = tied(cfg, false);
    whole_heads(b, true);
    let mut spec = b.llama_spec("stablelm", b.glu("silu")?, false, false, c.use_qkv_bias)?;
    set_norms(&mut spec, &c.ln.norm(true));
    let (heads, kv_heads) = (c.ln.base.num_attention_heads, c.ln.base.kv_heads());
    spec.layer_names.q_norm = "model.layers.{i}.self_attn.q_layernorm".into();
    spec.layer_names.k_norm = "model.layers.{i}.self_attn.k_layernorm".into();
    for (i, l) in spec.layers.iter_mut().enumerate() {
        l.attn.out_bias = false;
        if c.qk_layernorm {
            l.attn.qk_norm = Some(Norm::LayerPerHead { eps: c.ln.layer_norm_eps as f32 });
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
