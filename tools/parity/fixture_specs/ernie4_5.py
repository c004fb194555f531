"""ERNIE 4.5 (dense): interleaved RoPE, `use_bias` on every projection and the MLP, tied head."""

from make_fixtures import COMMON

SPECS = {
    "ernie4_5": ("ernie4_5", {**COMMON, "num_key_value_heads": 2, "use_bias": True, "tie_word_embeddings": True}),
}
