"""EXAONE 4.0: post-sublayer RMSNorms, per-head QK-norm; with `sliding_window_pattern` 2, layer 0 is
sliding (window 4) with RoPE and layer 1 global without RoPE (NoPE)."""

from make_fixtures import COMMON

SPECS = {
    "exaone4": (
        "exaone4",
        {**COMMON, "num_key_value_heads": 2, "sliding_window": 4, "sliding_window_pattern": 2},
    ),
}
