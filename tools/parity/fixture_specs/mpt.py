"""MPT: ALiBi with MPT's slopes on 6 heads (not a power of two, so the odd-then-even slope order
matters), fused bias-free Wqkv clamped by `clip_qkv` 1.0, an explicit `softmax_scale`, weight-only
LayerNorms, exact-GELU MLP of 4 x d_model, tied head."""

from make_fixtures import INIT_STD, SPECIAL_IDS

SPECS = {
    "mpt": (
        "mpt",
        dict(
            vocab_size=128,
            d_model=48,
            n_heads=6,
            n_layers=2,
            max_seq_len=64,
            layer_norm_epsilon=1e-5,
            resid_pdrop=0.0,
            emb_pdrop=0.0,
            attn_config={"attn_pdrop": 0, "clip_qkv": 1.0, "softmax_scale": 0.3, "alibi": True},
            initializer_range=INIT_STD,
            **SPECIAL_IDS,
            tie_word_embeddings=True,
        ),
    ),
}
