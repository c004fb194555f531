"""GPT-J and CodeGen: parallel attention + MLP on ln_1, interleaved RoPE over the first 4 of 8 head
dims, no position table, lm_head with bias; CodeGen's qkv_proj in 4 blocks of (q, v, k)."""

from make_fixtures import BOS_ID, EOS_ID, INIT_STD, PAD_ID

GPTJ = dict(
    vocab_size=128,
    n_embd=32,
    n_layer=2,
    n_head=4,
    n_positions=64,
    rotary_dim=4,
    n_inner=None,
    activation_function="gelu_new",
    resid_pdrop=0.0,
    embd_pdrop=0.0,
    attn_pdrop=0.0,
    layer_norm_epsilon=1e-5,
    initializer_range=INIT_STD,
    pad_token_id=PAD_ID,
    bos_token_id=BOS_ID,
    eos_token_id=EOS_ID,
    tie_word_embeddings=False,
)

SPECS = {
    "gptj": ("gptj", GPTJ),
    "codegen": ("codegen", {**GPTJ, "n_ctx": 64}),
}
