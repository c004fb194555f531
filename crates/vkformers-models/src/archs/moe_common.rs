//! Config fields of the routed-MoE families (Mixtral, Qwen2/3-MoE, OLMoE, ...) and the MoE spec
//! they give, with the layer pattern of `decoder_sparse_step` / `mlp_only_layers`; the expert
//! names and the layer placement every MoE family shares.

use serde::Deserialize;
use vkformers_kernels::glu::Glu;

use super::common::BaseConfig;
use crate::error::{ModelError, Result};
use crate::moe::{MoeNames, MoeSpec, Router, SharedExpert};
use crate::spec::{MlpSpec, ModelSpec};

/// MoE fields of a `config.json` (both spellings of the expert count).
#[derive(Debug, Deserialize)]
pub struct MoeConfig {
    pub num_experts: Option<usize>,
    pub num_local_experts: Option<usize>,
    pub num_experts_per_tok: usize,
    pub moe_intermediate_size: Option<usize>,
    #[serde(default)]
    pub norm_topk_prob: bool,
    #[serde(default)]
    pub output_router_logits: bool,
    pub router_aux_loss_coef: Option<f64>,
    #[serde(default)]
    pub router_jitter_noise: f64,
    pub decoder_sparse_step: Option<usize>,
    #[serde(default)]
    pub mlp_only_layers: Vec<usize>,
    pub shared_expert_intermediate_size: Option<usize>,
}

/// A Llama-like config with the routed-MoE fields: what Mixtral, Qwen-MoE, OLMoE, Mellum,
/// PhiMoE, GraniteMoE and gpt-oss read (each flattens it beside its own fields).
#[derive(Debug, Deserialize)]
pub struct LlamaMoeConfig {
    #[serde(flatten)]
    pub base: BaseConfig,
    #[serde(flatten)]
    pub moe: MoeConfig,
}

/// The per-expert names of the families that store experts as Llama MLPs under `mlp`
/// (`mlp.experts.{e}.gate_proj/up_proj/down_proj`, router `mlp.gate`).
pub fn mlp_expert_names() -> MoeNames {
    expert_names("mlp", ("gate_proj", "up_proj", "down_proj"))
}

/// The MoE `block` in the layers `sparse` marks (true: MoE), and the joins.
pub fn apply_where(spec: &mut ModelSpec, sparse: &[bool], block: MoeSpec) -> Result<()> {
    for (l, _) in spec.layers.iter_mut().zip(sparse).filter(|(_, s)| **s) {
        l.mlp = MlpSpec::Moe(Box::new(block.clone()));
    }
    crate::moe::add_joins(spec)
}

/// Per-expert stored names under `{prefix}.experts.{e}.`: `(gate, up, down)`.
pub fn expert_names(prefix: &str, (gate, up, down): (&str, &str, &str)) -> MoeNames {
    let p = format!("model.layers.{{i}}.{prefix}");
    MoeNames {
        router: format!("{p}.gate.weight"),
        gate_up: "model.layers.{i}.mlp.experts.gate_up_proj".into(),
        up: None,
        down: "model.layers.{i}.mlp.experts.down_proj".into(),
        expert_gate: format!("{p}.experts.{{e}}.{gate}.weight"),
        expert_up: format!("{p}.experts.{{e}}.{up}.weight"),
        expert_down: format!("{p}.experts.{{e}}.{down}.weight"),
    }
}

impl MoeConfig {
    pub fn experts(&self) -> Result<usize> {
        self.num_experts
            .or(self.num_local_experts)
            .ok_or_else(|| ModelError::Config("an MoE config without num_experts / num_local_experts".into()))
    }

    /// The MoE block: `intermediate` per expert, softmax top-k (`renormalize`: divide the k
    /// probabilities by their sum), the load-balancing coefficient defaulting to `aux_default`.
    pub fn block(
        &self,
        intermediate: usize,
        glu: Glu,
        renormalize: bool,
        names: MoeNames,
        shared: Option<SharedExpert>,
        aux_default: f64,
    ) -> Result<MoeSpec> {
        if self.router_jitter_noise != 0.0 {
            // transformers multiplies the inputs by uniform noise in training mode only.
            return Err(ModelError::Unsupported(format!("router_jitter_noise {}", self.router_jitter_noise)));
        }
        let coef = self.router_aux_loss_coef.unwrap_or(aux_default) as f32;
        let router = Router::SoftmaxTopK { renormalize };
        let m = MoeSpec {
            shared,
            aux_loss_coef: self.output_router_logits.then_some(coef),
            ..MoeSpec::plain(self.experts()?, self.num_experts_per_tok, intermediate, glu, router, names)
        };
        m.check()?;
        Ok(m)
    }

    /// Layer `i` is sparse as transformers decides it (Qwen2-MoE's `Qwen2MoeDecoderLayer`):
    /// not in `mlp_only_layers` and `(i + 1) % decoder_sparse_step == 0`.
    pub fn sparse(&self, i: usize) -> bool {
        let step = self.decoder_sparse_step.unwrap_or(1).max(1);
        !self.mlp_only_layers.contains(&i) && (i + 1).is_multiple_of(step)
    }

    /// Replaces the MLP of the sparse layers of `spec` with `block` and adds the joins.
    pub fn apply(&self, spec: &mut ModelSpec, block: MoeSpec) -> Result<()> {
        let sparse: Vec<bool> = (0..spec.layers.len()).map(|i| self.sparse(i)).collect();
        apply_where(spec, &sparse, block)
    }

    /// The experts' intermediate size: `moe_intermediate_size`, else `base`'s
    /// `intermediate_size` (Qwen-MoE, Mellum).
    pub fn expert_intermediate(&self, base: &BaseConfig) -> usize {
        self.moe_intermediate_size.unwrap_or(base.intermediate_size)
    }
}
