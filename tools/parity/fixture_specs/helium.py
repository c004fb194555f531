"""Helium: Llama with interleaved RoPE, q/k/v biases (`attention_bias`) and no output bias."""

from make_fixtures import COMMON

SPECS = {"helium": ("helium", {**COMMON, "num_key_value_heads": 2, "attention_bias": True})}
