"""GPT-Neo: a global layer then a local one (window 4, which masks keys at T = 8), unscaled
attention scores, learned positions, tied head."""

from make_fixtures import INIT_STD, SPECIAL_IDS

SPECS = {
    "gpt_neo": (
        "gpt_neo",
        dict(
            vocab_size=128,
            hidden_size=32,
            num_layers=2,
            num_heads=4,
            attention_types=[[["global", "local"], 1]],
            window_size=4,
            intermediate_size=None,
            max_position_embeddings=64,
            activation_function="gelu_new",
            resid_dropout=0.0,
            embed_dropout=0.0,
            attention_dropout=0.0,
            layer_norm_epsilon=1e-5,
            initializer_range=INIT_STD,
            **SPECIAL_IDS,
            tie_word_embeddings=True,
        ),
    ),
}
