//! Routed mixtures of experts as spec data: the router, the experts (packed per layer), an
//! optional shared expert, and the load-balancing loss: the spec types in `spec.rs`, the graph
//! in `block.rs` (routing in `route.rs`), the auxiliary loss in `aux_loss.rs`.
//!
//! Experts are held as transformers 5 holds them in memory: one `gate_up [E·2I, H]` (expert e's
//! rows `e·2I..e·2I+I` are its gate projection, the next I its up projection) and one
//! `down [E·H, I]` per layer. Checkpoints (Hub and what transformers 5 saves) store them per
//! expert (`experts.{e}.w1` / `gate_proj`, ...): the spec's joins stack them on load and split
//! them again on save.

mod aux_loss;
mod block;
pub mod lora;
mod plain;
mod route;
mod spec;
#[cfg(test)]
mod tests;

pub(crate) use aux_loss::{aux_loss, RouterOut};
pub(crate) use block::block;
pub(crate) use route::topk_softmax;
pub use spec::{BiasedExperts, MoaSpec, MoeNames, MoeSpec, Router, SharedExpert};

use crate::error::{ModelError, Result};
use crate::spec::{layer_name, MlpSpec, ModelSpec};

/// Most expert MLPs of one model (experts × MoE layers): each is three stored tensors named in
/// the joins, so a config may not size that list beyond any real model (DeepSeek-V3: 58 × 256;
/// Qwen3-Next: 48 × 512).
const MAX_EXPERT_MLPS: usize = 1 << 18;

/// Adds the joins of every MoE layer of `spec` (after the arch set its layers).
pub fn add_joins(spec: &mut ModelSpec) -> Result<()> {
    let total: usize = spec
        .layers
        .iter()
        .map(|l| if let MlpSpec::Moe(m) = &l.mlp { m.experts } else { 0 })
        .fold(0usize, usize::saturating_add);
    if total > MAX_EXPERT_MLPS {
        return Err(ModelError::Config(format!(
            "{total} expert MLPs (experts × MoE layers) above the {MAX_EXPERT_MLPS} this loader takes: \
             check num_experts and num_hidden_layers"
        )));
    }
    let mut joins = Vec::new();
    for (i, l) in spec.layers.iter().enumerate() {
        if let MlpSpec::Moe(m) = &l.mlp {
            m.check()?;
            // A packed checkpoint stores the parameters themselves: nothing to stack.
            if !m.packed {
                joins.extend(m.joins(i));
            }
        }
    }
    spec.joins.extend(joins);
    Ok(())
}

/// transformers 5's in-memory names of a layer's router and packed experts.
const PACKED_ROUTER: &str = "model.layers.{i}.mlp.gate.weight";
const PACKED_GATE_UP: &str = "model.layers.{i}.mlp.experts.gate_up_proj";

/// Switches the MoE layers of `spec` to the packed layout where the checkpoint's tensor names
/// (`stored`) hold it (a `state_dict` written as it is), so both layouts load; a per-expert
/// checkpoint (the Hub's, and what `save_pretrained` writes) keeps the joins.
pub fn match_layout<'a>(spec: &mut ModelSpec, stored: impl Iterator<Item = &'a str>) {
    let stored: std::collections::HashSet<&str> = stored.collect();
    pack_layers(spec, |i| stored.contains(layer_name(PACKED_GATE_UP, i).as_str()));
}

/// Every MoE layer in the packed layout: for families whose transformers class saves its
/// experts packed (Mistral 4's `experts.gate_up_proj [E, 2I, H]`), so a model made from a config
/// saves what transformers writes.
pub fn packed_layout(spec: &mut ModelSpec) {
    pack_layers(spec, |_| true);
}

/// Switches MoE layer `i` to the packed names where `wanted(i)`, dropping its joins.
fn pack_layers(spec: &mut ModelSpec, wanted: impl Fn(usize) -> bool) {
    let mut drop = Vec::new();
    for (i, l) in spec.layers.iter_mut().enumerate() {
        let MlpSpec::Moe(m) = &mut l.mlp else { continue };
        // A spec already packed (gpt-oss's own names: `mlp.router`) keeps its names.
        if m.packed || !wanted(i) || m.names.gate_up != PACKED_GATE_UP {
            continue;
        }
        m.packed = true;
        m.names.router = PACKED_ROUTER.into();
        drop.extend([layer_name(&m.names.gate_up, i), layer_name(&m.names.down, i)]);
    }
    spec.joins.retain(|j| !drop.contains(&j.internal));
}

/// Internal names of the tensors the MoE layers read but never train (DeepSeek-V3's
/// `e_score_correction_bias`, a buffer in transformers): loaded and saved, no parameters.
pub fn buffers(spec: &ModelSpec) -> Vec<String> {
    let mut out = Vec::new();
    for (i, l) in spec.layers.iter().enumerate() {
        if let Some(b) = matches_moe(&l.mlp).and_then(|m| m.router.buffer()) {
            out.push(layer_name(b, i));
        }
    }
    // LongCat-Flash's shortcut MoE: one a pair of sublayers, named by the transformers layer.
    if let Some(sc) = &spec.shortcut_moe {
        out.extend((0..spec.layers.len() / 2).map(|i| layer_name(&sc.bias, i)));
    }
    out
}

fn matches_moe(m: &MlpSpec) -> Option<&MoeSpec> {
    match m {
        MlpSpec::Moe(m) => Some(m),
        _ => None,
    }
}

/// The load-balancing coefficient of a spec whose config asks for it (the first MoE layer's).
pub fn aux_loss_coef(spec: &ModelSpec) -> Option<f32> {
    spec.layers.iter().find_map(|l| match &l.mlp {
        MlpSpec::Moe(m) => m.aux_loss_coef,
        _ => None,
    })
}
