//! `arcee` (AFM): Llama whose MLP is ungated: `down(act(up(x)))` with ReLU² by default
//! (`hidden_act` `relu2`), optional `mlp_bias`. `jais2`: the same with LayerNorms (with bias,
//! `layer_norm_eps`) instead of RMSNorms, and q/k/v/o and MLP biases on by default.
//! `nemotron`: the same with Nemotron's `LayerNorm1P` (bias, weight stored as `w` for `1 + w`,
//! `norm_eps`), `attention_bias` on q/k/v/o, and partial rotary (default 0.5).

use serde::Deserialize;
use serde_json::Value;
use vkformers_kernels::activation::Activation;
use vkformers_kernels::glu::Glu;

use super::common::{parse, BaseConfig};
use super::ln_common::{plain_act, set_norms, LnConfig};
use crate::error::Result;
use crate::spec::{MlpSpec, ModelSpec, Norm};

#[derive(Deserialize)]
struct Jais2Config {
    #[serde(flatten)]
    ln: LnConfig,
    #[serde(default = "yes")]
    attention_bias: bool,
    #[serde(default = "yes")]
    mlp_bias: bool,
}

fn yes() -> bool {
    true
}

pub fn spec(cfg: &Value) -> Result<ModelSpec> {
    let c: BaseConfig = parse(cfg)?;
    relu2_spec("arcee", c)
}

pub fn jais2(cfg: &Value) -> Result<ModelSpec> {
    let Jais2Config { ln, attention_bias, mlp_bias } = parse(cfg)?;
    let norm = ln.norm(true);
    let mut base = ln.base;
    (base.attention_bias, base.mlp_bias) = (attention_bias, mlp_bias);
    let mut spec = relu2_spec("jais2", base)?;
    set_norms(&mut spec, &norm);
    Ok(spec)
}

pub fn nemotron(cfg: &Value) -> Result<ModelSpec> {
    let mut c: BaseConfig = parse(cfg)?;
    super::ln_common::prepare(&mut c, cfg, "relu2", 0.5);
    let eps = cfg.get("norm_eps").and_then(Value::as_f64).unwrap_or(1e-5);
    let mut spec = relu2_spec("nemotron", c)?;
    set_norms(&mut spec, &Norm::LayerUnitOffset { eps: eps as f32 });
    Ok(spec)
}

/// Llama with the ungated MLP.
fn relu2_spec(model_type: &str, base: BaseConfig) -> Result<ModelSpec> {
    let act = match base.hidden_act.as_deref().unwrap_or("relu2") {
        "relu2" => Activation::Relu2,
        other => plain_act(other)?,
    };
    let mut spec = base.llama_spec(model_type, Glu::SwiGlu, false, false, base.attention_bias)?;
    for l in &mut spec.layers {
        l.mlp = MlpSpec::Plain { intermediate: base.intermediate_size, act, bias: base.mlp_bias };
        l.attn.sliding_window = None;
    }
    Ok(spec)
}
