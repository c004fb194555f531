//! `hunyuan_v1_moe` (Tencent Hunyuan-A13B): `hunyuan_v1_dense`'s layers (per-head QK-norm after
//! RoPE, NTK-alpha RoPE) with a routed MoE in every layer: softmax over `num_experts`, top
//! `moe_topk`, renormalised (the router `mlp.gate.wg` in f32), plus an ungated shared SwiGLU
//! (`mlp.shared_mlp`) added to it; experts and shared MLP both `intermediate_size` wide. No
//! load-balancing loss (transformers adds none). Per-layer lists of experts or top-k are refused.

use serde::Deserialize;
use serde_json::Value;

use super::common::{parse, BaseConfig};
use super::moe_common::expert_names;
use crate::error::{ModelError, Result};
use crate::moe::{MoeSpec, Router, SharedExpert};
use crate::spec::{MlpSpec, ModelSpec};

#[derive(Deserialize)]
struct Config {
    #[serde(flatten)]
    base: BaseConfig,
    #[serde(default = "one")]
    num_experts: Value,
    #[serde(default = "one")]
    moe_topk: Value,
}

fn one() -> Value {
    Value::from(1)
}

/// An int field (the per-layer list form is not supported).
fn count(v: &Value, field: &str) -> Result<usize> {
    v.as_u64()
        .map(|n| n as usize)
        .ok_or_else(|| ModelError::Unsupported(format!("hunyuan_v1_moe {field} {v} (one int for every layer)")))
}

pub fn spec(cfg: &Value) -> Result<ModelSpec> {
    let c: Config = parse(cfg)?;
    let mut spec = super::nanochat::hunyuan_v1_dense(cfg)?;
    spec.model_type = "hunyuan_v1_moe".into();
    let inter = c.base.intermediate_size;
    let mut names = expert_names("mlp", ("gate_proj", "up_proj", "down_proj"));
    names.router = "model.layers.{i}.mlp.gate.wg.weight".into();
    let p = "model.layers.{i}.mlp.shared_mlp";
    let block = MoeSpec {
        experts: count(&c.num_experts, "num_experts")?,
        top_k: count(&c.moe_topk, "moe_topk")?,
        intermediate: inter,
        glu: c.base.glu("silu")?,
        router: Router::SoftmaxTopK { renormalize: true },
        shared: Some(SharedExpert {
            intermediate: inter,
            gate_proj: format!("{p}.gate_proj"),
            up_proj: Some(format!("{p}.up_proj")),
            down_proj: format!("{p}.down_proj"),
            gate: None,
        }),
        routed_scale: 1.0,
        aux_loss_coef: None,
        names,
        packed: false,
        out_bias: None,
        in_out: false,
        down_transposed: false,
        biased: None,
    };
    block.check()?;
    for l in &mut spec.layers {
        l.mlp = MlpSpec::Moe(Box::new(block.clone()));
    }
    crate::moe::add_joins(&mut spec)?;
    Ok(spec)
}
