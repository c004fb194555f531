"""Jais 2: Llama with LayerNorms (with bias), q/k/v/o biases and an ungated ReLU² MLP with biases."""

from make_fixtures import COMMON

LN = {k: v for k, v in COMMON.items() if k != "rms_norm_eps"}

SPECS = {
    "jais2": (
        "jais2",
        {
            **LN,
            "num_key_value_heads": 2,
            "layer_norm_eps": 1e-5,
            "hidden_act": "relu2",
            "attention_bias": True,
            "mlp_bias": True,
        },
    ),
}
