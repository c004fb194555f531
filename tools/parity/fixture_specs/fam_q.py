"""Fixtures of the OLMo 2, Granite, SmolLM3, Gemma 2 and Gemma 3 (text) families."""

from make_fixtures import COMMON, gemma3_layers

GEMMA = {**COMMON, "num_key_value_heads": 2, "hidden_activation": "gelu_pytorch_tanh", "tie_word_embeddings": True}

SPECS = {
    # Norms after each sublayer (no pre-norms) and RMSNorm over the whole q and k projections.
    "olmo2": ("olmo2", {**COMMON, "num_key_value_heads": 2}),
    # Embedding, residual, attention-score and logit multipliers.
    "granite": (
        "granite",
        {
            **COMMON,
            "num_key_value_heads": 2,
            "embedding_multiplier": 3.0,
            "residual_multiplier": 0.37,
            "attention_multiplier": 0.2,
            "logits_scaling": 2.5,
        },
    ),
    # Every second layer is NoPE (no_rope_layers [1, 0]) and has a window of 4.
    "smollm3": (
        "smollm3",
        {
            **COMMON,
            "num_key_value_heads": 2,
            "no_rope_layer_interval": 2,
            "use_sliding_window": True,
            "sliding_window": 4,
        },
    ),
    # Sandwich norms, attention and final logit softcaps, a sliding layer then a global one,
    # query_pre_attn_scalar 12 (not head_dim).
    "gemma2": (
        "gemma2",
        {
            **GEMMA,
            "attn_logit_softcapping": 5.0,
            "final_logit_softcapping": 3.0,
            "sliding_window": 4,
            "layer_types": ["sliding_attention", "full_attention"],
            "query_pre_attn_scalar": 12,
        },
    ),
    # Gemma 2's layout with per-head QK-norm and a RoPE theta per layer type.
    "gemma3_text": (
        "gemma3_text",
        {**GEMMA, **gemma3_layers()},
    ),
}
