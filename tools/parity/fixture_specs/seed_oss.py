"""Seed-OSS: Llama with q/k/v biases and a separate output bias (`attention_out_bias`)."""

from make_fixtures import COMMON

SPECS = {
    "seed_oss": (
        "seed_oss",
        {
            **COMMON,
            "num_key_value_heads": 2,
            "attention_bias": True,
            "attention_out_bias": True,
            "residual_dropout": 0.0,
        },
    ),
}
