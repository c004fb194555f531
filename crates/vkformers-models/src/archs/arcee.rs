//! `arcee` (AFM): Llama whose MLP is ungated: `down(act(up(x)))` with ReLU² by default
//! (`hidden_act` `relu2`), optional `mlp_bias`.

use serde::Deserialize;
use serde_json::Value;
use vkformers_kernels::activation::Activation;
use vkformers_kernels::glu::Glu;

use super::common::{parse, BaseConfig};
use super::ln_common::plain_act;
use crate::error::Result;
use crate::spec::{MlpSpec, ModelSpec};

#[derive(Deserialize)]
struct Config {
    #[serde(flatten)]
    base: BaseConfig,
}

pub fn spec(cfg: &Value) -> Result<ModelSpec> {
    let c: Config = parse(cfg)?;
    let act = match c.base.hidden_act.as_deref().unwrap_or("relu2") {
        "relu2" => Activation::Relu2,
        other => plain_act(other)?,
    };
    let mut spec = c.base.llama_spec("arcee", Glu::SwiGlu, false, false, c.base.attention_bias)?;
    for l in &mut spec.layers {
        l.mlp = MlpSpec::Plain { intermediate: c.base.intermediate_size, act, bias: c.base.mlp_bias };
        l.attn.sliding_window = None;
    }
    Ok(spec)
}
