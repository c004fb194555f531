//! `granitemoe`: Granite's multipliers (embedding, residual, attention scale, logits) with a
//! routed MoE in every layer whose router takes the top-k logits and then a softmax over those k
//! (`Router::TopKSoftmax`). The checkpoint stores the experts packed: `block_sparse_moe.
//! input_linear [E, 2I, H]` (gate rows first), `output_linear [E, H, I]`, and the router as
//! `router.layer`. `granitemoeshared` adds an ungated shared MLP with one fused
//! `shared_mlp.input_linear [2S, H]`.

use serde::Deserialize;
use serde_json::Value;

use super::common::parse;
use super::moe_common::LlamaMoeConfig;
use crate::error::Result;
use crate::moe::{MoeNames, Router, SharedExpert};
use crate::spec::ModelSpec;

#[derive(Deserialize)]
struct Config {
    #[serde(flatten)]
    lm: LlamaMoeConfig,
    #[serde(default = "one")]
    embedding_multiplier: f64,
    #[serde(default = "one")]
    residual_multiplier: f64,
    #[serde(default = "one")]
    attention_multiplier: f64,
    #[serde(default = "one")]
    logits_scaling: f64,
    #[serde(default)]
    shared_intermediate_size: usize,
}

fn one() -> f64 {
    1.0
}

const P: &str = "model.layers.{i}.block_sparse_moe";

/// The packed experts of GraniteMoE (`block_sparse_moe`) and JetMoE (`mlp`) under `prefix`
/// (a layer template in `{i}`): a router `router.layer [E, H]`, every expert's gate and up
/// stacked in `input_linear [E, 2·I, H]`, their down projections in `output_linear [E, H, I]`.
pub(super) fn names(prefix: &str) -> MoeNames {
    let packed = |t: &str| format!("{prefix}.{t}.weight");
    MoeNames::packed(packed("router.layer"), packed("input_linear"), None, packed("output_linear"))
}

fn build(cfg: &Value, model_type: &str, shared: bool) -> Result<ModelSpec> {
    let c: Config = parse(cfg)?;
    let (base, moe) = (&c.lm.base, &c.lm.moe);
    let glu = base.glu("silu")?;
    let mut spec = base.llama_spec(model_type, glu, false, false, base.attention_bias)?;
    let m = [c.embedding_multiplier, c.residual_multiplier, c.attention_multiplier, c.logits_scaling];
    super::granite::multipliers(&mut spec, m);
    let shared = (shared && c.shared_intermediate_size > 0).then(|| SharedExpert {
        intermediate: c.shared_intermediate_size,
        gate_proj: "model.layers.{i}.shared_mlp.input_linear".into(),
        up_proj: None,
        down_proj: "model.layers.{i}.shared_mlp.output_linear".into(),
        gate: None,
    });
    let mut block = moe.block(base.intermediate_size, glu, false, names(P), shared, 0.001)?;
    block.router = Router::TopKSoftmax;
    block.packed = true;
    moe.apply(&mut spec, block)?;
    Ok(spec)
}

pub fn granitemoe(cfg: &Value) -> Result<ModelSpec> {
    build(cfg, "granitemoe", false)
}

pub fn granitemoeshared(cfg: &Value) -> Result<ModelSpec> {
    build(cfg, "granitemoeshared", true)
}
