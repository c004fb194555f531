//! `phi` (Phi-1, Phi-1.5, Phi-2): one LayerNorm feeds attention and MLP in parallel, partial
//! rotary (`partial_rotary_factor`, default 0.5), biases on q/k/v and the `dense` output, a plain
//! GELU-tanh MLP (`fc1`, `fc2`) with biases, a final LayerNorm and an LM head with a bias.
//! Optional `qk_layernorm`: one LayerNorm of head_dim shared by all heads of q (and of k).

use serde::Deserialize;
use serde_json::Value;
use vkformers_kernels::glu::Glu;

use super::common::parse;
use super::ln_common::{plain_act, prepare, set_norms, LnConfig};
use crate::error::Result;
use crate::spec::{MlpSpec, ModelSpec, Residual};

#[derive(Deserialize)]
struct Config {
    #[serde(flatten)]
    ln: LnConfig,
    #[serde(default)]
    qk_layernorm: bool,
}

pub fn spec(cfg: &Value) -> Result<ModelSpec> {
    let mut c: Config = parse(cfg)?;
    let b = &mut c.ln.base;
    prepare(b, cfg, "gelu_new", 0.5);
    let act = plain_act(b.hidden_act.as_deref().unwrap_or_default())?;
    let mut spec = b.llama_spec("phi", Glu::SwiGlu, false, c.qk_layernorm, true)?;
    set_norms(&mut spec, &c.ln.norm(true));
    for l in &mut spec.layers {
        l.attn.out_bias = true;
        l.attn.sliding_window = None;
        l.mlp_norm = None;
        l.mlp = MlpSpec::Plain { intermediate: c.ln.base.intermediate_size, act, bias: true };
        l.residual = Residual::Parallel { shared_norm: true };
    }
    spec.final_norm_name = "model.final_layernorm".into();
    spec.head_bias = true;
    dense_and_qk_layernorm_names(&mut spec);
    let n = &mut spec.layer_names;
    n.up = "model.layers.{i}.mlp.fc1".into();
    n.down = "model.layers.{i}.mlp.fc2".into();
    Ok(spec)
}

/// Phi's and Persimmon's attention names: the output `self_attn.dense`, the QK-norms
/// `self_attn.q_layernorm` / `k_layernorm`.
pub(super) fn dense_and_qk_layernorm_names(spec: &mut ModelSpec) {
    let (n, p) = (&mut spec.layer_names, "model.layers.{i}.self_attn");
    n.o = format!("{p}.dense");
    n.q_norm = format!("{p}.q_layernorm");
    n.k_norm = format!("{p}.k_layernorm");
}
