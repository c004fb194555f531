"""OLMo 3: OLMo 2 with a sliding layer (window 4) and a global one, each with its own RoPE theta."""

from make_fixtures import COMMON

SPECS = {
    "olmo3": (
        "olmo3",
        {
            **COMMON,
            "num_key_value_heads": 2,
            "sliding_window": 4,
            "layer_types": ["sliding_attention", "full_attention"],
            "rope_parameters": {
                "sliding_attention": {"rope_type": "default", "rope_theta": 10000.0},
                "full_attention": {"rope_type": "default", "rope_theta": 500.0},
            },
        },
    ),
}
