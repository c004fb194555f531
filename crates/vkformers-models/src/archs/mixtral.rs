//! `mixtral`: Mistral attention (optional sliding window) with a routed MoE in every layer:
//! softmax over `num_local_experts`, top-`num_experts_per_tok`, renormalised; SwiGLU experts
//! stored per expert as `block_sparse_moe.experts.{e}.w1/w3/w2` (gate/up/down).

use serde_json::Value;

use super::common::parse;
use super::moe_common::{expert_names, LlamaMoeConfig};
use crate::error::Result;
use crate::spec::ModelSpec;

pub fn spec(cfg: &Value) -> Result<ModelSpec> {
    let c: LlamaMoeConfig = parse(cfg)?;
    let glu = c.base.glu("silu")?;
    let mut spec = c.base.llama_spec("mixtral", glu, false, false, false)?;
    let names = expert_names("block_sparse_moe", ("w1", "w3", "w2"));
    let block = c.moe.block(c.base.intermediate_size, glu, true, names, None, 0.001)?;
    c.moe.apply(&mut spec, block)?;
    Ok(spec)
}
