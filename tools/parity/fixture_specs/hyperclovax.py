"""HyperCLOVA X: Granite's multipliers with logits multiplied by `logits_scaling`, and post-norms
(`post_norm1`, `post_norm2`) on the sublayer outputs before the scaled residual add."""

from make_fixtures import COMMON

SPECS = {
    "hyperclovax": (
        "hyperclovax",
        {
            **COMMON,
            "num_key_value_heads": 2,
            "embedding_multiplier": 2.0,
            "residual_multiplier": 0.5,
            "attention_multiplier": 0.25,
            "logits_scaling": 0.5,
            "use_post_norm": True,
        },
    ),
}
