"""Multi-head latent attention (issue 18) on COMMON's tiny decoder: 4 heads, a latent of rank 12,
per-head q/k of nope + rope values and value heads of a different size (v < qk and v > qk), so the
zero-padding of the shorter side shows if it leaks.

`deepseek_v2` exercises the full-rank query, YaRN with `mscale` != `mscale_all_dim` (cos/sin and
the softmax scale both scaled), one dense layer before the MoE one (`first_k_dense_replace`),
greedy top-2 of softmax scores times `routed_scaling_factor` and a shared expert;
`deepseek_v2_qlora` the low-rank query with its norm, `attention_bias` (q_a, kv_a and o biases)
and group-limited routing (2 groups of 2 experts, the best group only).

`deepseek_v3` exercises its router: sigmoid scores, the choice by score + e_score_correction_bias
(a buffer, given values by make_fixtures.py) within the 2 best of 4 groups of 2 experts, a group
ranked by its top-2 sum; weights renormalised (norm_topk_prob) times 2.5; rope_interleave."""

from make_fixtures import COMMON

MLA = {**COMMON, "kv_lora_rank": 12, "qk_nope_head_dim": 6, "qk_rope_head_dim": 4}
DEEPSEEK = {
    **MLA,
    "n_routed_experts": 4,
    "num_experts_per_tok": 2,
    "moe_intermediate_size": 16,
    "n_shared_experts": 1,
    "routed_scaling_factor": 1.5,
}
YARN = {
    "rope_type": "yarn",
    "rope_theta": 10000.0,
    "factor": 4.0,
    "original_max_position_embeddings": 16,
    "mscale": 1.0,
    "mscale_all_dim": 0.8,
}

SPECS = {
    # Dense MLA, low-rank query, v_head_dim 8 < qk 10; scaled embedding, residuals and logits; tied head.
    "minicpm3": (
        "minicpm3",
        {
            **MLA,
            "q_lora_rank": 16,
            "v_head_dim": 8,
            "scale_emb": 3.0,
            "scale_depth": 1.4,
            "dim_model_base": 16,
            "tie_word_embeddings": True,
        },
    ),
    "deepseek_v2": (
        "deepseek_v2",
        {
            **DEEPSEEK,
            "q_lora_rank": None,
            "v_head_dim": 14,
            "first_k_dense_replace": 1,
            "topk_method": "greedy",
            "rope_parameters": YARN,
        },
    ),
    "deepseek_v2_qlora": (
        "deepseek_v2",
        {
            **DEEPSEEK,
            # Rank 14, not 16: with 16 one o_proj gradient came out at 1.2x AdamW's eps, so its
            # second step was rounding noise scaled by 1/eps (1.1e-5 apart on the H200).
            "q_lora_rank": 14,
            "v_head_dim": 8,
            "attention_bias": True,
            "first_k_dense_replace": 0,
            "topk_method": "group_limited_greedy",
            "n_group": 2,
            "topk_group": 1,
        },
    ),
    # DeepseekV3Config has no head_dim field: a head_dim kwarg would override qk_rope_head_dim as
    # the rotary width (COMMON's 8), so it is left out, as DeepSeek-V3's config.json does.
    "deepseek_v3": (
        "deepseek_v3",
        {
            **{k: v for k, v in DEEPSEEK.items() if k != "head_dim"},
            "n_routed_experts": 8,
            "q_lora_rank": 16,
            "v_head_dim": 8,
            "first_k_dense_replace": 1,
            "n_group": 4,
            "topk_group": 2,
            "norm_topk_prob": True,
            "routed_scaling_factor": 2.5,
            "rope_interleave": True,
        },
    ),
    # Dense MLA with DeepSeek-V3's attention on Llama layers; rope_interleave off (half-split pairs);
    # YoutuConfig (a DeepseekV3Config) has no head_dim field either. Tied head (its default).
    "youtu": (
        "youtu",
        {
            **{k: v for k, v in MLA.items() if k != "head_dim"},
            "q_lora_rank": 16,
            "v_head_dim": 8,
            "rope_interleave": False,
            "tie_word_embeddings": True,
        },
    ),
    # DeepSeek-V3 with an RMSNorm on the MoE output (stored as the layer's post_mlp_layernorm);
    # layer 0 dense, layer 1 sparse by mlp_layer_types; AXK1Config has no head_dim field either.
    "axk1": (
        "axk1",
        {
            **{k: v for k, v in DEEPSEEK.items() if k != "head_dim"},
            "n_routed_experts": 8,
            "q_lora_rank": 16,
            "v_head_dim": 8,
            "mlp_layer_types": ["dense", "sparse"],
            "n_group": 4,
            "topk_group": 2,
            "norm_topk_prob": True,
            "routed_scaling_factor": 2.5,
        },
    ),
    # DeepSeek-V3 under another name (transformers builds DeepseekV3ForCausalLM): full-rank query,
    # one expert group (its default), one dense layer.
    "sarvam_mla": (
        "sarvam_mla",
        {
            **{k: v for k, v in DEEPSEEK.items() if k != "head_dim"},
            "n_routed_experts": 8,
            "q_lora_rank": None,
            "v_head_dim": 14,
            "first_k_dense_replace": 1,
            "n_group": 1,
            "topk_group": 1,
            "norm_topk_prob": True,
            "routed_scaling_factor": 2.5,
        },
    ),
    # DeepSeek-V3 attention and router with GLM's layer list (default: layer 0 dense, the rest sparse);
    # its config maps head_dim onto qk_rope_head_dim, so COMMON's head_dim is left out.
    "glm4_moe_lite": (
        "glm4_moe_lite",
        {
            **{k: v for k, v in DEEPSEEK.items() if k != "head_dim"},
            "n_routed_experts": 8,
            "q_lora_rank": 16,
            "v_head_dim": 8,
            "n_group": 2,
            "topk_group": 1,
            "norm_topk_prob": True,
            "routed_scaling_factor": 1.8,
        },
    ),
    # Mistral 4: DeepSeek-V3's MLA and MoE with a softmax router (one group: its default) and
    # Llama 4's query scale 1 + beta * ln(1 + floor(pos / 4)), so the fixture's positions 4+ are
    # scaled; YaRN over original 4 positions; layer 0 dense. Mistral4Config sets head_dim = nope +
    # rope and a partial_rotary_factor of rope / head_dim itself, so COMMON's head_dim is left out.
    "mistral4": (
        "mistral4",
        {
            **{k: v for k, v in DEEPSEEK.items() if k != "head_dim"},
            "q_lora_rank": 16,
            "v_head_dim": 8,
            "first_k_dense_replace": 1,
            "n_group": 1,
            "topk_group": 1,
            "norm_topk_prob": True,
            "rope_interleave": True,
            "rope_parameters": {
                **YARN,
                "original_max_position_embeddings": 4,
                "llama_4_scaling_beta": 0.5,
            },
        },
    ),
}

# A.X-K2: DeepSeek-V3.2's MLA without q_b_proj: `q_gate_proj` reads [norm(q_a) | q_a] and writes
# each head's query and a sigmoid gate on its attention output; gated RMSNorms (norm, then
# `y * sigmoid(fc2(silu(fc1(y))))`) on every input norm and on the sparse layers' post-attention
# norm; the sigmoid + correction-bias router without groups (its default). The DSA indexer selects
# every key below index_topk (64 >= every fixture sequence), so attention is dense; its weights get
# no gradient (transformers runs it under no_grad). AXK2Config sets head_dim itself.
SPECS["axk2"] = (
    "axk2",
    {
        **{k: v for k, v in DEEPSEEK.items() if k != "head_dim"},
        "v_head_dim": 8,
        "mlp_layer_types": ["dense", "sparse"],
        "norm_topk_prob": True,
        "routed_scaling_factor": 2.5,
        "index_topk": 64,
        "index_head_dim": 8,
        "index_n_heads": 2,
        "gated_norm_rank": 4,
        # A smaller vocabulary, query rank and MLPs than the others, to keep the fixture small.
        "vocab_size": 96,
        "q_lora_rank": 8,
        "intermediate_size": 32,
        "moe_intermediate_size": 8,
    },
)

# DeepSeek-V3 with a latent row wider than the paged decode kernel's 256 values: kv_lora_rank 272
# + qk_rope_head_dim 16 = 288 (MiniCPM3's real width; DeepSeek-V3's is 512 + 64), so generation
# caches the latent through the wide latent kernel (decode) and the expanded form (prefill and
# chunks). Two heads on a hidden size of 16 and small MLPs keep the fixture small.
SPECS["deepseek_v3_wide"] = (
    "deepseek_v3",
    {
        **{k: v for k, v in DEEPSEEK.items() if k != "head_dim"},
        "hidden_size": 16,
        "intermediate_size": 32,
        "num_attention_heads": 2,
        "num_key_value_heads": 2,
        "kv_lora_rank": 272,
        "qk_rope_head_dim": 16,
        "q_lora_rank": 8,
        "v_head_dim": 8,
        "n_routed_experts": 4,
        "moe_intermediate_size": 8,
        "first_k_dense_replace": 1,
        "n_group": 2,
        "topk_group": 1,
        "norm_topk_prob": True,
        "routed_scaling_factor": 2.5,
        "rope_interleave": True,
    },
)
