"""Fixtures for starcoder2, phi, gpt_neox, cohere and stablelm (see tools/parity/README.md)."""

from make_fixtures import COMMON

LN = {k: v for k, v in COMMON.items() if k != "rms_norm_eps"}

SPECS = {
    # LayerNorm with bias, plain GELU-tanh MLP (c_fc/c_proj) with biases, q/k/v/o biases, GQA,
    # sliding window 4 (masks keys at T = 8), untied head.
    "starcoder2": (
        "starcoder2",
        {
            **LN,
            "num_key_value_heads": 2,
            "norm_epsilon": 1e-5,
            "use_bias": True,
            "hidden_act": "gelu_pytorch_tanh",
            "sliding_window": 4,
            "tie_word_embeddings": False,
        },
    ),
    # Partial rotary (half of head_dim), parallel attention + MLP on one LayerNorm, fc1/fc2 GELU-tanh
    # MLP with biases, q/k/v/dense biases, final LayerNorm, lm_head with bias.
    "phi": (
        "phi",
        {
            **LN,
            "rope_parameters": {"rope_type": "default", "rope_theta": 10000.0, "partial_rotary_factor": 0.5},
            "layer_norm_eps": 1e-5,
            "hidden_act": "gelu_new",
            "qk_layernorm": False,
            "resid_pdrop": 0.0,
            "embd_pdrop": 0.0,
        },
    ),
    # Partial rotary (rotary_pct 0.5), parallel residual with two LayerNorms, fused per-head QKV,
    # GELU MLP with biases, untied embed_out.
    "gpt_neox": (
        "gpt_neox",
        {
            **{k: v for k, v in LN.items() if k not in ("head_dim", "num_key_value_heads", "rope_parameters")},
            "rope_parameters": {"rope_type": "default", "rope_theta": 10000.0, "partial_rotary_factor": 0.5},
            "layer_norm_eps": 1e-5,
            "hidden_act": "gelu",
            "use_parallel_residual": True,
            "attention_bias": True,
            "hidden_dropout": 0.0,
        },
    ),
    # Parallel block on one bias-free LayerNorm, interleaved RoPE, logit_scale, tied head, SwiGLU.
    "cohere": (
        "cohere",
        {
            **LN,
            "num_key_value_heads": 2,
            "layer_norm_eps": 1e-5,
            "logit_scale": 0.5,
            "use_qk_norm": False,
            "tie_word_embeddings": True,
        },
    ),
    # StableLM 2 1.6B-like: partial rotary, LayerNorm, q/k/v biases, sequential residual, SwiGLU, no
    # QK LayerNorm. Rotary 0.75 rather than the usual 0.25: with a k bias, the non-rotary dims of
    # that bias have a gradient that is zero in theory, and at 0.25 torch's rounding noise there
    # comes out exactly 0.0 for some elements, which the harness then holds to the strict AdamW
    # bound although any rounding noise on our side is amplified by 1/eps.
    "stablelm": (
        "stablelm",
        {
            **LN,
            "num_key_value_heads": 2,
            "rope_parameters": {"rope_type": "default", "rope_theta": 10000.0, "partial_rotary_factor": 0.75},
            "layer_norm_eps": 1e-5,
            "use_qkv_bias": True,
            "qk_layernorm": False,
            "use_parallel_residual": False,
            "hidden_dropout": 0.0,
        },
    ),
    # Attention and MLP in parallel on the one input LayerNorm (no post_attention_layernorm), no
    # q/k/v biases (see above), partial rotary 0.25 (the StableLM default).
    "stablelm_parallel": (
        "stablelm",
        {
            **LN,
            "num_key_value_heads": 2,
            "rope_parameters": {"rope_type": "default", "rope_theta": 10000.0, "partial_rotary_factor": 0.25},
            "layer_norm_eps": 1e-5,
            "use_qkv_bias": False,
            "qk_layernorm": False,
            "use_parallel_residual": True,
            "hidden_dropout": 0.0,
        },
    ),
}
