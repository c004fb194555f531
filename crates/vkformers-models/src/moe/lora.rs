//! Which LoRA targets an MoE model takes. Since transformers 5 packs the experts, PEFT rewrites
//! the names it used for expert projections and routers (`w1`/`w2`/`w3`, `gate_proj`/`up_proj`/
//! `down_proj`, `gate`) into `target_parameters` on the packed tensors, for every module of
//! those names (the shared expert's and a dense layer's MLP too). LoRA on packed parameters is not
//! here yet, so such targets are refused rather than adapted differently; other Linear modules
//! (attention, Hunyuan's router `gate.wg`, Qwen2-MoE's `shared_expert_gate`, ...) are adapted.

use crate::error::{ModelError, Result};
use crate::lora::{LinearModule, Targets};
use crate::spec::{MlpSpec, ModelSpec};

/// The module names PEFT turns into expert or router parameter targets.
const PARAMETER_TARGETS: [&str; 7] = ["w1", "w2", "w3", "gate", "gate_proj", "up_proj", "down_proj"];

/// An error when `spec` has MoE layers and `targets` (or the modules they matched) name a module
/// PEFT would adapt as packed expert or router parameters.
pub fn refuse_parameter_targets(spec: &ModelSpec, targets: &Targets, matched: &[LinearModule]) -> Result<()> {
    if !spec.layers.iter().any(|l| matches!(l.mlp, MlpSpec::Moe(_))) {
        return Ok(());
    }
    let last = |n: &str| n.rsplit('.').next().unwrap_or(n).to_string();
    let listed = match targets {
        Targets::Names(names) => names.iter().map(|n| last(n)).collect(),
        _ => Vec::new(),
    };
    let hit = listed
        .into_iter()
        .chain(matched.iter().map(|m| last(&m.name)))
        .find(|n| PARAMETER_TARGETS.contains(&n.as_str()));
    match hit {
        None => Ok(()),
        Some(n) => Err(ModelError::Unsupported(format!(
            "LoRA target `{n}` on an MoE model: PEFT adapts it as the packed experts' or router's parameters \
             (target_parameters), which is not supported yet; target attention or other modules"
        ))),
    }
}
