"""Cohere 2: Cohere's parallel block with `sliding_window_pattern` 2 (layer 0 sliding with window 4
and RoPE, layer 1 global without RoPE), logit_scale, tied head."""

from make_fixtures import COMMON

LN = {k: v for k, v in COMMON.items() if k != "rms_norm_eps"}

SPECS = {
    "cohere2": (
        "cohere2",
        {
            **LN,
            "num_key_value_heads": 2,
            "layer_norm_eps": 1e-5,
            "logit_scale": 0.5,
            "sliding_window": 4,
            "sliding_window_pattern": 2,
            "tie_word_embeddings": True,
        },
    ),
}
