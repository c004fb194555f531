"""HunYuan dense v1: per-head RMSNorm of q and k after RoPE (query_layernorm, key_layernorm), the
fixed NTK-alpha RoPE (rope_type dynamic with alpha 1000: base theta * alpha^(d/(d-2))), q/k/v/o
biases, bias-free SwiGLU MLP, GQA (2 KV heads)."""

from make_fixtures import COMMON

SPECS = {
    "hunyuan_v1_dense": (
        "hunyuan_v1_dense",
        {
            **COMMON,
            "num_key_value_heads": 2,
            "attention_bias": True,
            "rope_parameters": {"rope_type": "dynamic", "rope_theta": 10000.0, "alpha": 1000.0, "factor": 1.0},
        },
    ),
}
