"""GPT-NeoX Japanese: bias-free fused per-head query_key_value, `dense_bias` on the last layer only,
sequential residual, bias-free GELU MLP of hidden x intermediate_multiple_size (2 here), partial
rotary 0.5 with base `rotary_emb_base`, head `embed_out` tied to `embed_in`."""

from make_fixtures import INIT_STD, SPECIAL_IDS

SPECS = {
    "gpt_neox_japanese": (
        "gpt_neox_japanese",
        dict(
            vocab_size=128,
            hidden_size=32,
            num_hidden_layers=2,
            num_attention_heads=4,
            intermediate_multiple_size=2,
            hidden_act="gelu",
            rotary_pct=0.5,
            rotary_emb_base=5000,
            max_position_embeddings=64,
            initializer_range=INIT_STD,
            layer_norm_eps=1e-5,
            attention_dropout=0.0,
            hidden_dropout=0.0,
            **SPECIAL_IDS,
            tie_word_embeddings=True,
        ),
    ),
}
