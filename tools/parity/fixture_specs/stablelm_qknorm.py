"""StableLM with `qk_layernorm`: a LayerNorm (no bias) per head on q and k, each with its own
weight stored as `q_layernorm.norms.{h}.weight`."""

from make_fixtures import COMMON

LN = {k: v for k, v in COMMON.items() if k != "rms_norm_eps"}

SPECS = {
    "stablelm_qknorm": (
        "stablelm",
        {
            **LN,
            "num_key_value_heads": 2,
            "rope_parameters": {"rope_type": "default", "rope_theta": 10000.0, "partial_rotary_factor": 0.75},
            "layer_norm_eps": 1e-5,
            "use_qkv_bias": False,
            "qk_layernorm": True,
            "use_parallel_residual": False,
            "hidden_dropout": 0.0,
        },
    ),
}

# Cohere with `use_qk_norm`: a bias-free LayerNorm over head_dim with one [heads, head_dim] weight.
SPECS["cohere_qknorm"] = (
    "cohere",
    {**LN, "num_key_value_heads": 2, "layer_norm_eps": 1e-5, "logit_scale": 0.5, "use_qk_norm": True, "tie_word_embeddings": True},
)
