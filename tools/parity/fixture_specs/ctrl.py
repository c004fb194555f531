"""CTRL: sinusoidal positions in CTRL's [sin | cos] layout, embedding scaled by sqrt(n_embd), pre-LN
layers (eps 1e-6) with biased Wq/Wk/Wv/dense, ReLU MLP, final layernorm, tied head with a bias."""

from make_fixtures import BOS_ID, EOS_ID, INIT_STD, PAD_ID

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
            pad_token_id=PAD_ID,
            bos_token_id=BOS_ID,
            eos_token_id=EOS_ID,
            tie_word_embeddings=True,
        ),
    ),
}
