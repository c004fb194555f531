"""Nemotron: LayerNorm1P (LayerNorm with bias computing `(1 + w)`, stored weights initialised to 1),
ReLU² ungated MLP, partial rotary 0.5, q/k/v/o biases, GQA (2 KV heads)."""

from make_fixtures import COMMON

SPECS = {
    "nemotron": (
        "nemotron",
        {
            **{k: v for k, v in COMMON.items() if k != "rms_norm_eps"},
            "num_key_value_heads": 2,
            "norm_eps": 1e-5,
            "hidden_act": "relu2",
            "attention_bias": True,
            "mlp_bias": False,
            "rope_parameters": {"rope_type": "default", "rope_theta": 10000.0, "partial_rotary_factor": 0.5},
        },
    ),
}
