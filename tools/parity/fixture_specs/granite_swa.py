"""Granite SWA: Granite's four multipliers; layer 0 global with RoPE base 10000, layer 1 sliding
(window 4) with base 500, layer 2 sliding and NoPE (layer_rope_theta 0); a learned attention sink
per head in every layer (perturbed from zero by the harness's 1-D noise); tied head."""

from make_fixtures import COMMON

SPECS = {
    "granite_swa": (
        "granite_swa",
        {
            **COMMON,
            "num_hidden_layers": 3,
            "num_key_value_heads": 2,
            "embedding_multiplier": 3.0,
            "residual_multiplier": 0.37,
            "attention_multiplier": 0.2,
            "logits_scaling": 2.5,
            "sliding_window": 4,
            "layer_types": ["full_attention", "sliding_attention", "sliding_attention"],
            "layer_rope_theta": [10000.0, 500.0, 0],
            "tie_word_embeddings": True,
        },
    ),
}
