"""Fixtures for phi3 and opt (see tools/parity/README.md)."""

from make_fixtures import COMMON

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
