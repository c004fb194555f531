"""GPT-J and CodeGen: parallel attention + MLP on ln_1, interleaved RoPE over the first 4 of 8 head
dims, no position table, lm_head with bias; CodeGen's qkv_proj in 4 blocks of (q, v, k)."""

from make_fixtures import GPT2_COMMON

GPTJ = {
    **GPT2_COMMON,
    "rotary_dim": 4,
    "n_inner": None,
    "activation_function": "gelu_new",
    "tie_word_embeddings": False,
}

SPECS = {
    "gptj": ("gptj", GPTJ),
    "codegen": ("codegen", {**GPTJ, "n_ctx": 64}),
}
