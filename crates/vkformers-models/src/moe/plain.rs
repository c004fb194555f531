//! The plain pieces most families' MoE blocks start from: a block with every option off, the
//! names of packed experts, and a shared expert stored as a Llama MLP.

use vkformers_kernels::glu::Glu;

use vkformers_kernels::moe::clamped_swiglu::ClampedSwiGlu;

use super::spec::{BiasedExperts, MoeNames, MoeSpec, Router, SharedExpert};

impl MoeSpec {
    /// A block of `experts` experts of `intermediate` each, `top_k` chosen by `router`, stored
    /// under `names` per expert, in the usual orientation (`down [E·H, I]`), with every option
    /// off: no shared expert, routed scale 1, no load-balancing loss, no biases.
    pub fn plain(experts: usize, top_k: usize, intermediate: usize, glu: Glu, router: Router, names: MoeNames) -> Self {
        MoeSpec {
            experts,
            top_k,
            intermediate,
            glu,
            router,
            shared: None,
            routed_scale: 1.0,
            aux_loss_coef: None,
            names,
            down_transposed: false,
            biased: None,
            packed: false,
            out_bias: None,
            in_out: false,
        }
    }
}

impl MoeNames {
    /// Experts stored packed (`router`, `gate_up`, optional separate `up`, `down`: full names
    /// with `{i}`), not per expert: the packed tensors are the parameters.
    pub fn packed(router: String, gate_up: String, up: Option<String>, down: String) -> Self {
        MoeNames {
            router,
            gate_up,
            up,
            down,
            expert_gate: String::new(),
            expert_up: String::new(),
            expert_down: String::new(),
        }
    }
}

impl BiasedExperts {
    /// gpt-oss's experts under `prefix` (with `{i}`), with their names: the router
    /// `router.weight` and `router.bias`, `experts.gate_up_proj` / `down_proj` and their `_bias`.
    pub fn gpt_oss(prefix: &str, act: ClampedSwiGlu) -> (MoeNames, Self) {
        let p = prefix;
        let names = MoeNames::packed(
            format!("{p}.router.weight"),
            format!("{p}.experts.gate_up_proj"),
            None,
            format!("{p}.experts.down_proj"),
        );
        let biased = BiasedExperts {
            router_bias: format!("{p}.router.bias"),
            gate_up_bias: format!("{p}.experts.gate_up_proj_bias"),
            down_bias: format!("{p}.experts.down_proj_bias"),
            act,
        };
        (names, biased)
    }
}

impl SharedExpert {
    /// An ungated shared expert of `intermediate` stored as a Llama MLP under `prefix` (with
    /// `{i}`): `{prefix}.gate_proj`, `.up_proj`, `.down_proj`.
    pub fn mlp(prefix: &str, intermediate: usize) -> Self {
        SharedExpert {
            intermediate,
            gate_proj: format!("{prefix}.gate_proj"),
            up_proj: Some(format!("{prefix}.up_proj")),
            down_proj: format!("{prefix}.down_proj"),
            gate: None,
        }
    }
}
