"""Fixtures for phi3 and opt (see tools/parity/README.md)."""

from make_fixtures import COMMON, INIT_STD, SPECIAL_IDS

SPECS = {
    # Fused qkv_proj (GQA: 32 q rows, 16 k, 16 v) and gate_up_proj, RMSNorm, SwiGLU, untied head.
    # LongRoPE: original context 32 of 64 (factor 2, attention factor sqrt(1 + ln 2 / ln 32)); at
    # T = 8 transformers uses the short factors. The top-level original_max_position_embeddings
    # wins over the one in rope_parameters in Phi3Config, so both are set.
    "phi3": (
        "phi3",
        {
            **COMMON,
            "num_key_value_heads": 2,
            "original_max_position_embeddings": 32,
            "rope_parameters": {
                "rope_type": "longrope",
                "rope_theta": 10000.0,
                "short_factor": [1.0, 1.3, 2.1, 3.7],
                "long_factor": [1.5, 4.0, 9.0, 20.0],
                "original_max_position_embeddings": 32,
            },
            "hidden_act": "silu",
            "resid_pdrop": 0.0,
            "embd_pdrop": 0.0,
            "sliding_window": None,
        },
    ),
}

# OPT-125m-like pre-LayerNorm blocks with a narrower embedding: word_embed_proj_dim 16 adds the
# bias-free project_in / project_out around the 32-wide decoder; tied head; ReLU fc1/fc2 with
# biases; learned positions at cumsum(mask)·mask − 1 + 2 (right padding reads row 1).
SPECS["opt"] = (
    "opt",
    dict(
        vocab_size=128,
        hidden_size=32,
        num_hidden_layers=2,
        ffn_dim=64,
        num_attention_heads=4,
        max_position_embeddings=64,
        word_embed_proj_dim=16,
        do_layer_norm_before=True,
        activation_function="relu",
        enable_bias=True,
        dropout=0.0,
        attention_dropout=0.0,
        layerdrop=0.0,
        init_std=INIT_STD,
        **SPECIAL_IDS,
        tie_word_embeddings=True,
    ),
)
