//! `hunyuan_v1_moe` (Tencent Hunyuan-A13B): `hunyuan_v1_dense`'s layers (per-head QK-norm after
//! RoPE, NTK-alpha RoPE) with a routed MoE in every layer: softmax over `num_experts`, top
//! `moe_topk`, renormalised (the router `mlp.gate.wg` in f32), plus an ungated shared SwiGLU
//! (`mlp.shared_mlp`) added to it; experts and shared MLP both `intermediate_size` wide. No
//! load-balancing loss (transformers adds none). Per-layer lists of experts or top-k are refused.

use serde::Deserialize;
use serde_json::Value;

use super::common::{parse, BaseConfig};
use super::moe_common::{apply_where, mlp_expert_names};
use crate::error::{ModelError, Result};
use crate::moe::{MoeSpec, Router, SharedExpert};
use crate::spec::ModelSpec;

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
    let mut names = mlp_expert_names();
    names.router = "model.layers.{i}.mlp.gate.wg.weight".into();
    let (experts, top_k) = (count(&c.num_experts, "num_experts")?, count(&c.moe_topk, "moe_topk")?);
    let router = Router::SoftmaxTopK { renormalize: true };
    let block = MoeSpec {
        shared: Some(SharedExpert::mlp("model.layers.{i}.mlp.shared_mlp", inter)),
        ..MoeSpec::plain(experts, top_k, inter, c.base.glu("silu")?, router, names)
    };
    block.check()?;
    let every = vec![true; spec.layers.len()];
    apply_where(&mut spec, &every, block)?;
    Ok(spec)
}
