"""Ministral 3: Mistral with YaRN (factor 4, original context 2) and the Llama-4 query scale
`1 + beta * ln(1 + floor(pos / 2))` (beta 0.5: positions 2..7 of the batch get scales up to 1.69),
sliding window 4, GQA (2 KV heads)."""

from make_fixtures import COMMON

SPECS = {
    "ministral3": (
        "ministral3",
        {
            **COMMON,
            "num_key_value_heads": 2,
            "sliding_window": 4,
            "rope_parameters": {
                "rope_type": "yarn",
                "rope_theta": 10000.0,
                "factor": 4.0,
                "original_max_position_embeddings": 2,
                "beta_fast": 32.0,
                "beta_slow": 1.0,
                "mscale": 1.0,
                "mscale_all_dim": 1.0,
                "llama_4_scaling_beta": 0.5,
            },
        },
    ),
}
