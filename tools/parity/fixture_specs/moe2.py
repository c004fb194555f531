"""Routed MoE types, wave 2 (issue 17): routers, shared experts and layer patterns beyond
moe.py's, on COMMON's tiny decoder with four experts, top-2. `*_aux` set `output_router_logits`
(a large `router_aux_loss_coef`, so a wrong auxiliary gradient shows)."""

from make_fixtures import COMMON

MOE = {**COMMON, "num_key_value_heads": 2, "num_experts_per_tok": 2}
GRANITE = {
    "embedding_multiplier": 1.5,
    "residual_multiplier": 0.7,
    "attention_multiplier": 0.3,
    "logits_scaling": 2.0,
}

SPECS = {
    # Top-2 of the logits, then a softmax over those two; experts stored packed as
    # block_sparse_moe.input_linear [E, 2I, H] / output_linear [E, H, I]; Granite's multipliers.
    "granitemoe": (
        "granitemoe",
        {**MOE, **GRANITE, "num_local_experts": 4, "intermediate_size": 24,
         "output_router_logits": True, "router_aux_loss_coef": 0.5},
    ),
    # The same plus an ungated shared MLP with one fused input_linear [2S, H] (gate rows first).
    "granitemoeshared": (
        "granitemoeshared",
        {**MOE, **GRANITE, "num_local_experts": 4, "intermediate_size": 24, "shared_intermediate_size": 48},
    ),
    # Qwen3-MoE with a dense first layer (mlp_layer_types), a sliding and a full layer with their
    # own RoPE, loss with the load-balancing term.
    "mellum": (
        "mellum",
        {**MOE, "num_experts": 4, "moe_intermediate_size": 20, "intermediate_size": 48,
         "layer_types": ["sliding_attention", "full_attention"], "sliding_window": 4,
         "mlp_layer_types": ["dense", "sparse"],
         "rope_parameters": {
             "sliding_attention": {"rope_type": "default", "rope_theta": 10000.0},
             "full_attention": {"rope_type": "default", "rope_theta": 500000.0},
         },
         "output_router_logits": True, "router_aux_loss_coef": 0.5},
    ),
}

# DeepSeek-V3's router: 8 experts in 4 groups, the best 2 groups, top-2 (renormalised for GLM,
# not for dots1), routed_scaling_factor, one shared expert; the correction bias is a buffer that
# make_fixtures.py fills with noise.
V3_MOE = {
    **MOE, "n_routed_experts": 8, "moe_intermediate_size": 20, "n_shared_experts": 1,
    "n_group": 4, "topk_group": 2, "routed_scaling_factor": 2.5,
}
SPECS.update({
    # Layer 0 dense (first_k_dense_replace 1); partial rotary 0.75 (not the class default 0.5;
    # saved inside rope_parameters), q/k/v biases, QK-norm. The
    # config class moves partial_rotary_factor into rope_parameters in place: its own dict, so
    # COMMON's stays as it is for the fixtures made after this one.
    "glm4_moe": (
        "glm4_moe",
        {**V3_MOE, "first_k_dense_replace": 1, "norm_topk_prob": True, "partial_rotary_factor": 0.75,
         "rope_parameters": dict(COMMON["rope_parameters"]), "attention_bias": True, "use_qk_norm": True},
    ),
    # Both layers sparse; layer 1 sliding (max_window_layers 1, window 4); no renormalisation.
    "dots1": (
        "dots1",
        {**V3_MOE, "first_k_dense_replace": 0, "norm_topk_prob": False, "sliding_window": 4,
         "max_window_layers": 1},
    ),
})

SPECS.update({
    # hunyuan_v1_dense's layers (QK-norm after RoPE, NTK-alpha RoPE) with softmax top-2
    # renormalised over 4 experts plus an ungated shared MLP, every layer; no auxiliary loss.
    "hunyuan_v1_moe": (
        "hunyuan_v1_moe",
        {**MOE, "intermediate_size": 24, "num_experts": 4, "moe_topk": 2, "attention_bias": True,
         "rope_parameters": {"rope_type": "dynamic", "rope_theta": 10000.0, "alpha": 1000.0, "factor": 1.0}},
    ),
})

SPECS.update({
    # ERNIE 4.5 layers (interleaved RoPE) with a dense layer 0 (moe_layer_start_index 1); experts
    # chosen by softmax + the frozen moe_statics correction bias, weighted by the softmax alone,
    # renormalised; one shared expert; the load-balancing loss (its top-k without the bias).
    "ernie4_5_moe": (
        "ernie4_5_moe",
        {**MOE, "moe_num_experts": 4, "moe_k": 2, "moe_intermediate_size": 20, "intermediate_size": 48,
         "moe_num_shared_experts": 1, "moe_layer_start_index": 1, "use_bias": False,
         "tie_word_embeddings": False, "output_router_logits": True, "router_aux_loss_coef": 0.5},
    ),
})

SPECS.update({
    # The sparsemixer router in eval mode with a wide threshold (2·0.3: the masked softmaxes keep
    # several experts), LayerNorm everywhere, attention and lm_head biases, sliding window 4, the
    # load-balancing loss. The harness margin includes each mask's distance to its threshold.
    "phimoe": (
        "phimoe",
        {**MOE, "num_local_experts": 4, "intermediate_size": 24, "router_jitter_noise": 0.3,
         "attention_bias": True, "lm_head_bias": True, "sliding_window": 4,
         "output_router_logits": True, "router_aux_loss_coef": 0.5},
    ),
})

SPECS.update({
    # DBRX: nested attn/ffn configs, fused Wqkv clamped to ±clip_qkv, bias-free LayerNorms, experts
    # stored as w1 (gate) / v1 (up) [E·F, H] and w2 [E·F, H] (each expert's down projection
    # transposed), softmax top-2 divided by the L1 norm, the load-balancing loss (moe_loss_weight).
    "dbrx": (
        "dbrx",
        {
            "vocab_size": 128, "d_model": 32, "n_heads": 4, "n_layers": 2, "max_seq_len": 64,
            "initializer_range": COMMON["initializer_range"], "pad_token_id": COMMON["pad_token_id"],
            "bos_token_id": COMMON["bos_token_id"], "eos_token_id": COMMON["eos_token_id"],
            "tie_word_embeddings": False, "output_router_logits": True,
            "rope_parameters": {"rope_type": "default", "rope_theta": 10000.0},
            "attn_config": {"kv_n_heads": 2, "clip_qkv": 0.6, "rope_theta": 10000.0},
            "ffn_config": {"ffn_hidden_size": 24, "moe_num_experts": 4, "moe_top_k": 2,
                           "moe_loss_weight": 0.5, "moe_normalize_expert_weights": 1.0},
        },
    ),
})
