"""VaultGemma: Gemma 2 without post-sublayer norms; softcaps, sliding (window 4) and global layers,
query_pre_attn_scalar, tied head."""

from make_fixtures import COMMON

SPECS = {
    "vaultgemma": (
        "vaultgemma",
        {
            **COMMON,
            "num_key_value_heads": 2,
            "hidden_activation": "gelu_pytorch_tanh",
            "tie_word_embeddings": True,
            "attn_logit_softcapping": 5.0,
            "final_logit_softcapping": 3.0,
            "sliding_window": 4,
            "query_pre_attn_scalar": 12,
        },
    ),
}
