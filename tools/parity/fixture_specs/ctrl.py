"""CTRL: sinusoidal positions in CTRL's [sin | cos] layout, embedding scaled by sqrt(n_embd), pre-LN
layers (eps 1e-6) with biased Wq/Wk/Wv/dense, ReLU MLP, final layernorm, tied head with a bias."""

from make_fixtures import INIT_STD, SPECIAL_IDS

SPECS = {
    "ctrl": (
        "ctrl",
        dict(
            vocab_size=128,
            n_positions=64,
            n_embd=32,
            dff=64,
            n_layer=2,
            n_head=4,
            resid_pdrop=0.0,
            embd_pdrop=0.0,
            layer_norm_epsilon=1e-6,
            initializer_range=INIT_STD,
            **SPECIAL_IDS,
            tie_word_embeddings=True,
        ),
    ),
}
