"""OpenAI GPT (GPT-1): post-LN blocks (ln_1 after the attention add, ln_2 after the MLP add), no
final norm, learned positions, Conv1D weights with fused c_attn, `afn` gelu (the tanh form), tied
head."""

from make_fixtures import INIT_STD

SPECS = {
    "openai-gpt": (
        "openai-gpt",
        dict(
            vocab_size=128,
            n_positions=64,
            n_embd=32,
            n_layer=2,
            n_head=4,
            afn="gelu",
            resid_pdrop=0.0,
            embd_pdrop=0.0,
            attn_pdrop=0.0,
            layer_norm_epsilon=1e-5,
            initializer_range=INIT_STD,
            tie_word_embeddings=True,
        ),
    ),
}
