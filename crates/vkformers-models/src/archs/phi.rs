//! `phi` (Phi-1, Phi-1.5, Phi-2): one LayerNorm feeds attention and MLP in parallel, partial
//! rotary (`partial_rotary_factor`, default 0.5), biases on q/k/v and the `dense` output, a plain
//! GELU-tanh MLP (`fc1`, `fc2`) with biases, a final LayerNorm and an LM head with a bias.
//! Optional `qk_layernorm`: one LayerNorm of head_dim shared by all heads of q (and of k).

use serde::Deserialize;
use serde_json::Value;
use vkformers_kernels::glu::Glu;

use super::common::{parse, BaseConfig};
use super::ln_common::{plain_act, prepare, set_norms};
use crate::error::Result;
use crate::spec::{MlpSpec, ModelSpec, Norm, Residual};

#[derive(Deserialize)]
struct Config {
    #[serde(flatten)]
    base: BaseConfig,
    #[serde(default = "default_eps")]
    layer_norm_eps: f64,
    #[serde(default)]
    qk_layernorm: bool,
}

fn default_eps() -> f64 {
    1e-5
}

pub fn spec(cfg: &Value) -> Result<ModelSpec> {
    let mut c: Config = parse(cfg)?;
    prepare(&mut c.base, cfg, "gelu_new", 0.5);
    let act = plain_act(c.base.hidden_act.as_deref().unwrap_or_default())?;
    let mut spec = c.base.llama_spec("phi", Glu::SwiGlu, false, c.qk_layernorm, true)?;
    set_norms(&mut spec, &Norm::Layer { eps: c.layer_norm_eps as f32, bias: true });
    for l in &mut spec.layers {
        l.attn.out_bias = true;
        l.attn.sliding_window = None;
        l.mlp_norm = None;
        l.mlp = MlpSpec::Plain { intermediate: c.base.intermediate_size, act, bias: true };
        l.residual = Residual::Parallel { shared_norm: true };
    }
    spec.final_norm_name = "model.final_layernorm".into();
    spec.head_bias = true;
    let n = &mut spec.layer_names;
    let p = "model.layers.{i}";
    n.o = format!("{p}.self_attn.dense");
    n.q_norm = format!("{p}.self_attn.q_layernorm");
    n.k_norm = format!("{p}.self_attn.k_layernorm");
    n.up = format!("{p}.mlp.fc1");
    n.down = format!("{p}.mlp.fc2");
    Ok(spec)
}
