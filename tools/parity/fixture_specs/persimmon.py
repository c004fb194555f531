"""Persimmon: fused per-head query_key_value with bias, shared LayerNorm QK-norm with bias, partial
rotary 0.5, ReLU² MLP with biases, LayerNorms with bias."""

from make_fixtures import COMMON

LN = {k: v for k, v in COMMON.items() if k not in ("rms_norm_eps", "head_dim", "num_key_value_heads")}

SPECS = {
    "persimmon": (
        "persimmon",
        {
            **LN,
            "rope_parameters": {"rope_type": "default", "rope_theta": 10000.0, "partial_rotary_factor": 0.5},
            "layer_norm_eps": 1e-5,
            "hidden_act": "relu2",
            "qk_layernorm": True,
            "hidden_dropout": 0.0,
        },
    ),
}
