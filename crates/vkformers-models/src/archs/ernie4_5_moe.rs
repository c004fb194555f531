//! `ernie4_5_moe` (ERNIE 4.5 MoE): `ernie4_5`'s layers (interleaved RoPE, `use_bias`, tied head
//! by default) where layer i is sparse when `(i + 1) % moe_layer_interval == 0` and
//! `moe_layer_start_index ≤ i ≤ moe_layer_end_index` (−1: the last layer). The router chooses by
//! softmax plus the frozen `moe_statics.e_score_correction_bias [1, E]` and weights by the
//! softmax, renormalised (`Router::SoftmaxBiasedTopK`); `moe_num_shared_experts` ungated shared
//! experts of `moe_intermediate_size` each form one shared MLP.

use serde::Deserialize;
use serde_json::Value;

use super::moe_common::{apply_where, mlp_expert_names};
use crate::error::{ModelError, Result};
use crate::moe::{MoeSpec, Router, SharedExpert};
use crate::spec::ModelSpec;

#[derive(Deserialize)]
struct Config {
    num_hidden_layers: usize,
    moe_num_experts: usize,
    moe_k: usize,
    moe_intermediate_size: usize,
    #[serde(default)]
    moe_num_shared_experts: usize,
    #[serde(default = "one")]
    moe_layer_start_index: i64,
    #[serde(default = "minus_one")]
    moe_layer_end_index: i64,
    #[serde(default = "one")]
    moe_layer_interval: i64,
    #[serde(default)]
    use_bias: bool,
    #[serde(default)]
    output_router_logits: bool,
    router_aux_loss_coef: Option<f64>,
}

fn one() -> i64 {
    1
}

fn minus_one() -> i64 {
    -1
}

impl Config {
    fn sparse(&self, i: usize) -> bool {
        let end =
            if self.moe_layer_end_index == -1 { self.num_hidden_layers as i64 - 1 } else { self.moe_layer_end_index };
        let (i, step) = (i as i64, self.moe_layer_interval.max(1));
        (i + 1) % step == 0 && i >= self.moe_layer_start_index && i <= end
    }
}

pub fn spec(cfg: &Value) -> Result<ModelSpec> {
    let c: Config = super::common::parse(cfg)?;
    let mut spec = super::ernie4_5::spec(cfg)?;
    spec.model_type = "ernie4_5_moe".into();
    let glu = vkformers_kernels::glu::Glu::SwiGlu;
    if !matches!(cfg.get("hidden_act").and_then(Value::as_str), None | Some("silu")) {
        return Err(ModelError::Unsupported(format!("ernie4_5_moe hidden_act {}", cfg["hidden_act"])));
    }
    if c.use_bias && c.moe_num_shared_experts > 0 {
        return Err(ModelError::Unsupported("ernie4_5_moe shared experts with use_bias".into()));
    }
    let shared = (c.moe_num_shared_experts > 0).then(|| {
        SharedExpert::mlp("model.layers.{i}.mlp.shared_experts", c.moe_intermediate_size * c.moe_num_shared_experts)
    });
    let router = Router::SoftmaxBiasedTopK { bias: "model.layers.{i}.mlp.moe_statics.e_score_correction_bias".into() };
    let block = MoeSpec {
        shared,
        aux_loss_coef: c.output_router_logits.then_some(c.router_aux_loss_coef.unwrap_or(0.001) as f32),
        ..MoeSpec::plain(c.moe_num_experts, c.moe_k, c.moe_intermediate_size, glu, router, mlp_expert_names())
    };
    block.check()?;
    let sparse: Vec<bool> = (0..spec.layers.len()).map(|i| c.sparse(i)).collect();
    apply_where(&mut spec, &sparse, block)?;
    Ok(spec)
}
