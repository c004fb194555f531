"""Routed mixtures of experts (issue 17): four experts, top-2, on COMMON's tiny decoder.

`*_aux` fixtures set `output_router_logits`, so the reference loss (and every gradient) includes
`router_aux_loss_coef` times the load-balancing loss, as transformers adds it; the coefficient is
large so that a wrong auxiliary gradient shows. The harness prints and meta.json records the
smallest gap between the k-th and (k+1)-th router probability (see RouterMargins)."""

from make_fixtures import COMMON

MOE = {**COMMON, "num_key_value_heads": 2, "num_experts_per_tok": 2}

SPECS = {
    # softmax -> top-2 -> renormalised; experts stored as block_sparse_moe.experts.{e}.w1/w3/w2.
    "mixtral": ("mixtral", {**MOE, "num_local_experts": 4}),
    "mixtral_aux": (
        "mixtral",
        {**MOE, "num_local_experts": 4, "output_router_logits": True, "router_aux_loss_coef": 0.5},
    ),
    # Shared expert with a sigmoid gate; top-2 without renormalisation; layer 1 dense
    # (mlp_only_layers), so the auxiliary loss averages over one MoE layer.
    "qwen2_moe": (
        "qwen2_moe",
        {
            **MOE,
            "num_experts": 4,
            "moe_intermediate_size": 24,
            "shared_expert_intermediate_size": 40,
            "norm_topk_prob": False,
            "mlp_only_layers": [1],
            "output_router_logits": True,
            "router_aux_loss_coef": 0.5,
        },
    ),
    # OLMo-2-style QK-norm over the whole projections; top-2 without renormalisation.
    "olmoe": ("olmoe", {**MOE, "num_experts": 4, "norm_topk_prob": False}),
    # Qwen3 per-head QK-norm; top-2 renormalised (norm_topk_prob).
    "qwen3_moe": (
        "qwen3_moe",
        {**MOE, "num_experts": 4, "moe_intermediate_size": 20, "norm_topk_prob": True, "attention_bias": False},
    ),
}
