"""BitNet (unpacked weights): attn_sub_norm (RMSNorm of the attention output before o_proj),
ffn_sub_norm (RMSNorm of relu²(gate) · up before down_proj), ReLU²-gated MLP, GQA (2 KV heads),
RoPE base 500000 (BitNet's default, left out of the kwargs)."""

from make_fixtures import COMMON

SPECS = {
    "bitnet": (
        "bitnet",
        {
            **{k: v for k, v in COMMON.items() if k not in ("rope_parameters", "head_dim")},
            "num_key_value_heads": 2,
            "hidden_act": "relu2",
            "rms_norm_eps": 1e-5,
        },
    ),
}
