"""Fixtures for bloom and falcon (see tools/parity/README.md)."""

from make_fixtures import INIT_STD, SPECIAL_IDS

BASE = dict(
    vocab_size=128,
    hidden_size=32,
    num_hidden_layers=2,
    num_attention_heads=4,
    initializer_range=INIT_STD,
    layer_norm_epsilon=1e-5,
    **SPECIAL_IDS,
    attention_dropout=0.0,
    hidden_dropout=0.0,
)

SPECS = {
    # ALiBi (4 heads: slopes 2^-2 .. 2^-8), LayerNorm right after the embedding, per-head fused
    # query_key_value [heads, 3, head_dim], LayerNorm with bias, bloom's GELU-tanh MLP (4 x hidden)
    # with biases, tied head.
    "bloom": (
        "bloom",
        {**BASE, "tie_word_embeddings": True},
    ),
    # Falcon 40B/180B layout: new_decoder_architecture, grouped fused QKV
    # [kv_heads, q_per_kv + 2, head_dim] with 2 KV heads, parallel attention + MLP on two norms
    # (ln_attn, ln_mlp), RoPE, GELU MLP without biases, untied head.
    "falcon": (
        "falcon",
        {
            **BASE,
            "num_kv_heads": 2,
            "new_decoder_architecture": True,
            "num_ln_in_parallel_attn": 2,
            "parallel_attn": True,
            "alibi": False,
            "bias": False,
            "ffn_hidden_size": 64,
            "activation": "gelu",
            "max_position_embeddings": 64,
            "rope_parameters": {"rope_type": "default", "rope_theta": 10000.0},
            "tie_word_embeddings": False,
        },
    ),
    # Falcon 7B's old architecture with ALiBi instead of RoPE: multi-query attention (one KV head,
    # fused [heads + 2, head_dim]), sequential blocks (input_layernorm, post_attention_layernorm),
    # biases on every linear, tied head. transformers adds the ALiBi bias both inside the scaled
    # score and again through the mask, so its slopes act as 2 * slope / sqrt(head_dim).
    "falcon_alibi": (
        "falcon",
        {
            **BASE,
            "new_decoder_architecture": False,
            "multi_query": True,
            "parallel_attn": False,
            "alibi": True,
            "bias": True,
            "ffn_hidden_size": 64,
            "activation": "gelu",
            "max_position_embeddings": 64,
            "tie_word_embeddings": True,
        },
    ),
}
