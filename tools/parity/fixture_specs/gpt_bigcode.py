"""GPTBigCode: GPT-2's layout with Linear weights and a fused c_attn; multi-query (one key/value
head) in `gpt_bigcode`, per-head fused QKV without it in `gpt_bigcode_mha`. GPT-SW3: GPT-2 under
its own model_type, here with exact GELU, an explicit n_inner and an untied head."""

from make_fixtures import GPT2_COMMON as GPT

SPECS = {
    "gpt_bigcode": ("gpt_bigcode", {**GPT, "multi_query": True, "activation_function": "gelu_pytorch_tanh"}),
    "gpt_bigcode_mha": ("gpt_bigcode", {**GPT, "multi_query": False, "n_inner": 48}),
    "gpt-sw3": ("gpt-sw3", {**GPT, "n_inner": 48, "activation_function": "gelu", "tie_word_embeddings": False}),
}
