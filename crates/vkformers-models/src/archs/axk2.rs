//! `axk2` (A.X-K2): DeepSeek-V3.2's layers with three changes (transformers 5.24's modeling_axk2):
//! - the query has no `q_b_proj` of its own: `q_gate_proj` (stored as `q_b_proj`) reads
//!   `[norm(q_a(x)) | q_a(x)]` and writes per head the query and a sigmoid gate on the attention
//!   output (`MlaSpec::gated_query`);
//! - gated RMSNorms (`Norm::RmsGated`, rank `gated_norm_rank`) as every `input_layernorm` and as the
//!   sparse layers' `post_attention_layernorm`;
//! - the sigmoid + correction-bias router without groups (`n_group` null, A.X-K2-Light), or
//!   DeepSeek-V3's grouped one.
//!
//! The DSA indexer (`self_attn.indexer.*`) scores keys to keep `index_topk` of them a query; over at
//! most `index_topk` keys it keeps every one, so attention is dense there and the indexer changes
//! nothing (transformers runs it without gradient). Its weights are carried (loaded, saved, drawn
//! for a new model by `wrapper_init`), and longer sequences are refused (`MlaSpec::index_topk`).

use serde::Deserialize;
use serde_json::Value;
use vkformers_kernels::rope::RopeLayout;

use super::common::parse;
use super::deepseek::layer_types;
use super::deepseek_moe::DeepseekMoe;
use super::mla_common::{q_lora_rank, LlamaMlaConfig};
use super::moe_common::apply_where;
use crate::error::{ModelError, Result};
use crate::moe::Router;
use crate::spec::{ModelSpec, Norm, VisionTower};

#[derive(Deserialize)]
struct Config {
    #[serde(flatten)]
    lm: LlamaMlaConfig,
    #[serde(flatten)]
    moe: DeepseekMoe,
    #[serde(default = "index_topk")]
    index_topk: usize,
    #[serde(default = "gated_norm_rank")]
    gated_norm_rank: usize,
}

/// AXK2Config's defaults.
fn index_topk() -> usize {
    2048
}

fn gated_norm_rank() -> usize {
    16
}

/// The router: without `n_group`, one group (the group step chooses nothing).
fn router(moe: &DeepseekMoe) -> Result<Router> {
    match (moe.n_group, moe.topk_group) {
        (None, None) => Ok(Router::SigmoidGroupLimited {
            groups: 1,
            top_groups: 1,
            renormalize: moe.norm_topk_prob.unwrap_or(true),
            bias: Some("model.layers.{i}.mlp.gate.e_score_correction_bias".into()),
        }),
        (Some(_), Some(_)) => moe.v3_router(),
        (g, k) => Err(ModelError::Config(format!(
            "axk2 n_group {g:?} and topk_group {k:?}: set both (grouped routing) or neither"
        ))),
    }
}

pub fn spec(cfg: &Value) -> Result<ModelSpec> {
    let c: Config = parse(cfg)?;
    let b = &c.lm.base;
    let Some(q_rank) = q_lora_rank(cfg, Some(384))? else {
        return Err(ModelError::Config("axk2 needs a q_lora_rank (its query and output gate read it)".into()));
    };
    if c.gated_norm_rank == 0 || c.index_topk == 0 {
        return Err(ModelError::Config(format!(
            "axk2 gated_norm_rank {} and index_topk {}: both must be positive",
            c.gated_norm_rank, c.index_topk
        )));
    }
    let (mut spec, glu) = c.lm.llama_spec("axk2")?;
    let mut attn = c.lm.mla.attn(b, RopeLayout::Interleaved, 64, Some(q_rank))?;
    if let Some(m) = attn.mla.as_mut() {
        m.gated_query = true;
        m.index_topk = Some(c.index_topk);
    }
    let sparse = layer_types(cfg, spec.layers.len())?;
    let gated = Norm::RmsGated { eps: b.rms_norm_eps as f32, rank: c.gated_norm_rank };
    for (l, s) in spec.layers.iter_mut().zip(&sparse) {
        l.attn = attn.clone();
        l.attn_norm = Some(gated.clone());
        if *s {
            l.mlp_norm = Some(gated.clone());
        }
    }
    let block = c.moe.block(glu, router(&c.moe)?)?;
    apply_where(&mut spec, &sparse, block)?;
    spec.carried = (0..spec.layers.len()).map(|i| format!("model.layers.{i}.self_attn.indexer.")).collect();
    spec.vision = Some(VisionTower::DsaIndexer);
    // transformers saves `q_gate_proj` as `q_b_proj` (its conversion mapping); PEFT names the
    // module, so adapters on it are keyed `q_gate_proj` (the trailing dot keeps layer 1 from
    // matching layer 10).
    spec.module_paths = (0..spec.layers.len())
        .map(|i| {
            let p = format!("model.layers.{i}.self_attn.");
            (format!("{p}q_b_proj"), format!("{p}q_gate_proj"))
        })
        .collect();
    Ok(spec)
}
