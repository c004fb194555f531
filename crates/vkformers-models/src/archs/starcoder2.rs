//! `starcoder2`: LayerNorm with bias, RoPE, GQA, a plain GELU-tanh MLP (`c_fc`, `c_proj`),
//! biases on every projection (`use_bias`), and a sliding window on every layer.

use serde::Deserialize;
use serde_json::Value;
use vkformers_kernels::glu::Glu;

use super::common::{parse, BaseConfig};
use super::ln_common::{plain_act, prepare, set_norms, tied};
use crate::error::Result;
use crate::spec::{MlpSpec, ModelSpec, Norm};

#[derive(Deserialize)]
struct Config {
    #[serde(flatten)]
    base: BaseConfig,
    #[serde(default = "default_eps")]
    norm_epsilon: f64,
    #[serde(default = "yes")]
    use_bias: bool,
}

fn default_eps() -> f64 {
    1e-5
}

fn yes() -> bool {
    true
}

pub fn spec(cfg: &Value) -> Result<ModelSpec> {
    let mut c: Config = parse(cfg)?;
    prepare(&mut c.base, cfg, "gelu_pytorch_tanh", 1.0);
    c.base.tie_word_embeddings = tied(cfg, true);
    let act = plain_act(c.base.hidden_act.as_deref().unwrap_or_default())?;
    let mut spec = c.base.llama_spec("starcoder2", Glu::SwiGlu, false, false, c.use_bias)?;
    set_norms(&mut spec, &Norm::Layer { eps: c.norm_epsilon as f32, bias: true });
    for l in &mut spec.layers {
        l.attn.out_bias = c.use_bias;
        l.mlp = MlpSpec::Plain { intermediate: c.base.intermediate_size, act, bias: c.use_bias };
    }
    let n = &mut spec.layer_names;
    n.up = "model.layers.{i}.mlp.c_fc".into();
    n.down = "model.layers.{i}.mlp.c_proj".into();
    Ok(spec)
}
