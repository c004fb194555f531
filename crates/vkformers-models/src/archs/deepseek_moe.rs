//! DeepSeek's MoE fields and the blocks they make: the router of `topk_method` (V2: softmax
//! scores, greedy or group-limited) or V3's sigmoid router with its correction bias, shared
//! experts, and the MoE block in the layers past `first_k_dense_replace` (or those a list marks).

use serde::Deserialize;
use vkformers_kernels::glu::Glu;

use super::moe_common::{apply_where, mlp_expert_names};
use crate::error::{ModelError, Result};
use crate::moe::{MoeSpec, Router, SharedExpert};
use crate::spec::ModelSpec;

/// DeepSeek's MoE fields.
#[derive(Debug, Deserialize)]
pub(super) struct DeepseekMoe {
    pub(super) n_routed_experts: Option<usize>,
    pub(super) num_experts_per_tok: Option<usize>,
    pub(super) moe_intermediate_size: usize,
    pub(super) n_shared_experts: Option<usize>,
    #[serde(default)]
    pub(super) first_k_dense_replace: usize,
    pub(super) routed_scaling_factor: Option<f64>,
    pub(super) topk_method: Option<String>,
    pub(super) n_group: Option<usize>,
    pub(super) topk_group: Option<usize>,
    pub(super) norm_topk_prob: Option<bool>,
}

impl DeepseekMoe {
    /// The router of `topk_method` (DeepSeek-V2: softmax scores, never renormalised).
    pub(super) fn v2_router(&self) -> Result<Router> {
        match self.topk_method.as_deref().unwrap_or("greedy") {
            "greedy" => Ok(Router::SoftmaxTopK { renormalize: false }),
            "group_limited_greedy" => {
                let (groups, top_groups) = self.groups()?;
                Ok(Router::SoftmaxGroupLimited { groups, top_groups })
            }
            other => Err(ModelError::Unsupported(format!(
                "topk_method `{other}` in a deepseek_v2 config (greedy and group_limited_greedy are supported)"
            ))),
        }
    }

    /// DeepSeek-V3's router (`noaux_tc`).
    pub(super) fn v3_router(&self) -> Result<Router> {
        let (groups, top_groups) = self.groups()?;
        Ok(Router::SigmoidGroupLimited {
            groups,
            top_groups,
            renormalize: self.norm_topk_prob.unwrap_or(true),
            bias: Some("model.layers.{i}.mlp.gate.e_score_correction_bias".into()),
        })
    }

    /// `(n_group, topk_group)`, checked against the expert count.
    pub(super) fn groups(&self) -> Result<(usize, usize)> {
        let experts = self.n_routed_experts.unwrap_or(0);
        match (self.n_group, self.topk_group) {
            (Some(g), Some(k)) if g > 0 && k > 0 && k <= g && experts.is_multiple_of(g) => Ok((g, k)),
            (g, k) => Err(ModelError::Config(format!(
                "group-limited routing with n_group {g:?} and topk_group {k:?} over {experts} experts: \
                 n_group must divide n_routed_experts and topk_group be in 1..=n_group"
            ))),
        }
    }

    /// The MoE block of the sparse layers.
    pub(super) fn block(&self, glu: Glu, router: Router) -> Result<MoeSpec> {
        let (Some(experts), Some(top_k)) = (self.n_routed_experts, self.num_experts_per_tok) else {
            return Err(ModelError::Config(
                "a DeepSeek MoE config needs n_routed_experts and num_experts_per_tok (null for a dense model)".into(),
            ));
        };
        let inter = self.moe_intermediate_size;
        let shared = self.n_shared_experts.filter(|&n| n > 0);
        let m = MoeSpec {
            shared: shared.map(|n| SharedExpert::mlp("model.layers.{i}.mlp.shared_experts", n * inter)),
            routed_scale: self.routed_scaling_factor.unwrap_or(1.0) as f32,
            ..MoeSpec::plain(experts, top_k, inter, glu, router, mlp_expert_names())
        };
        m.check()?;
        Ok(m)
    }

    /// The MoE block in every layer from `first_k_dense_replace` on, and the joins.
    pub(super) fn apply(&self, spec: &mut ModelSpec, block: MoeSpec) -> Result<()> {
        let sparse: Vec<bool> = (0..spec.layers.len()).map(|i| i >= self.first_k_dense_replace).collect();
        apply_where(spec, &sparse, block)
    }
}
