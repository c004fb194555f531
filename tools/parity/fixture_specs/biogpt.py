"""BioGPT: OPT's layer under `biogpt.`, embedding scaled by sqrt(hidden), learned positions at
position + 2 from `arange(T)` (not from the mask: the padded positions' logits show it), GELU MLP,
tied `output_projection`. `layer_norm_eps` 1e-12 is set to show that transformers ignores it (every
LayerNorm is `nn.LayerNorm(hidden)`, eps 1e-5)."""

from make_fixtures import INIT_STD, SPECIAL_IDS

SPECS = {
    "biogpt": (
        "biogpt",
        dict(
            vocab_size=128,
            hidden_size=32,
            num_hidden_layers=2,
            num_attention_heads=4,
            intermediate_size=64,
            hidden_act="gelu",
            hidden_dropout_prob=0.0,
            attention_probs_dropout_prob=0.0,
            activation_dropout=0.0,
            max_position_embeddings=64,
            initializer_range=INIT_STD,
            layer_norm_eps=1e-12,
            scale_embedding=True,
            **SPECIAL_IDS,
            tie_word_embeddings=True,
        ),
    ),
}
