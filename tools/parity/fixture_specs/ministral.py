"""Ministral: Llama with per-layer `layer_types` (layer 0 sliding with window 4, which masks keys at
T = 8; layer 1 global). CWM: the same with its default pattern (every 4th layer from 0 global) and
llama3-scaled RoPE."""

from make_fixtures import COMMON

LLAMA3 = {
    "rope_type": "llama3",
    "rope_theta": 10000.0,
    "factor": 8.0,
    "low_freq_factor": 1.0,
    "high_freq_factor": 4.0,
    "original_max_position_embeddings": 16,
}

SPECS = {
    "ministral": (
        "ministral",
        {**COMMON, "num_key_value_heads": 2, "sliding_window": 4, "layer_types": ["sliding_attention", "full_attention"]},
    ),
    "cwm": ("cwm", {**COMMON, "num_key_value_heads": 2, "sliding_window": 4, "rope_parameters": LLAMA3}),
}
