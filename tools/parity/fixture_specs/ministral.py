"""Ministral: Llama with per-layer `layer_types` (layer 0 sliding with window 4, which masks keys at
T = 8; layer 1 global). CWM: the same with its default pattern (every 4th layer from 0 global) and
llama3-scaled RoPE."""

from make_fixtures import COMMON, LLAMA3_ROPE

SPECS = {
    "ministral": (
        "ministral",
        {**COMMON, "num_key_value_heads": 2, "sliding_window": 4, "layer_types": ["sliding_attention", "full_attention"]},
    ),
    "cwm": ("cwm", {**COMMON, "num_key_value_heads": 2, "sliding_window": 4, "rope_parameters": LLAMA3_ROPE}),
}
