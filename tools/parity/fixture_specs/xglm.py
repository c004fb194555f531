"""XGLM: fairseq sinusoidal positions at position + 2 (pad row zeroed), embedding scaled by
sqrt(d_model), pre-LN OPT-style layers with biases, GELU MLP, final layer_norm, tied head."""

from make_fixtures import INIT_STD, SPECIAL_IDS

SPECS = {
    "xglm": (
        "xglm",
        dict(
            vocab_size=128,
            max_position_embeddings=64,
            d_model=32,
            ffn_dim=64,
            num_layers=2,
            attention_heads=4,
            activation_function="gelu",
            dropout=0.0,
            attention_dropout=0.0,
            activation_dropout=0.0,
            init_std=INIT_STD,
            scale_embedding=True,
            **SPECIAL_IDS,
            tie_word_embeddings=True,
        ),
    ),
}
