"""cohere_compass_text (CohereCompassForCausalLM): Cohere 2's parallel block on a bias-free
LayerNorm, sliding layer 0 (window 4) with half-split RoPE from its own `rope_parameters` entry,
full layer 1 with a null entry (NoPE), logit_scale left to its default (1), tied head."""

from make_fixtures import COMMON

LN = {k: v for k, v in COMMON.items() if k not in ("rms_norm_eps", "rope_parameters", "head_dim")}

SPECS = {
    "cohere_compass_text": (
        "cohere_compass_text",
        {
            **LN,
            "num_key_value_heads": 2,
            "layer_norm_eps": 1e-5,
            "sliding_window": 4,
            "layer_types": ["sliding_attention", "full_attention"],
            "rope_parameters": {
                "sliding_attention": {"rope_type": "default", "rope_theta": 500.0},
                "full_attention": None,
            },
            "tie_word_embeddings": True,
        },
    ),
}
