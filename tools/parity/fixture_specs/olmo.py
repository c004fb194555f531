"""OLMo (1): parameter-free LayerNorms (eps 1e-5, no weight or bias anywhere), q/k/v clamped to
[-clip_qkv, clip_qkv] after the projections (0.8 here: with these weights a large share of q, k
and v entries are clipped, so both the clamp and its zero gradient outside show), q/k/v/o biases,
GQA (2 KV heads)."""

from make_fixtures import COMMON

SPECS = {
    "olmo": (
        "olmo",
        {
            **{k: v for k, v in COMMON.items() if k not in ("rms_norm_eps", "head_dim")},
            "num_key_value_heads": 2,
            "attention_bias": True,
            "clip_qkv": 0.8,
        },
    ),
}
