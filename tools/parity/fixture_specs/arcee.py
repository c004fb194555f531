"""Arcee: Llama with an ungated ReLU² MLP (up_proj, down_proj) with biases."""

from make_fixtures import COMMON

SPECS = {"arcee": ("arcee", {**COMMON, "num_key_value_heads": 2, "hidden_act": "relu2", "mlp_bias": True})}
