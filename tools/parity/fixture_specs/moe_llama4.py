"""Llama 4's text model (issue 17): layer 0 a RoPE layer (interleaved pairs, L2 QK-norm, chunked
local attention of 3 positions) with a dense MLP; layer 1 a NoPE layer (full attention, the query
scaled by the attention temperature `1 + attn_scale·log1p(floor((pos + 1) / floor_scale))`) with
the MoE: top-2 of four experts by logit, sigmoid of the chosen logits scaling each expert's
*input*, packed in-out experts (`gate_up_proj [E, H, 2I]`, `down_proj [E, I, H]`) and a shared
expert. Small chunk and floor_scale so both act inside the 8-token batch and the greedy prompts; the chunk
(4) keeps a real token in every chunk of the right-padded row (a chunk of padding alone leaves its
queries no key: transformers' eager attention then spreads them uniformly over every key).
transformers never adds a load-balancing loss for this class, so there is no `_aux` variant."""

from make_fixtures import INIT_STD, SPECIAL_IDS

LLAMA4 = dict(
    vocab_size=128,
    hidden_size=32,
    intermediate_size=24,
    intermediate_size_mlp=48,
    num_hidden_layers=2,
    num_attention_heads=4,
    num_key_value_heads=2,
    head_dim=8,
    num_local_experts=4,
    num_experts_per_tok=2,
    interleave_moe_layer_step=2,
    no_rope_layer_interval=2,
    attention_chunk_size=4,
    attn_temperature_tuning=True,
    floor_scale=2,
    attn_scale=0.5,
    use_qk_norm=True,
    max_position_embeddings=64,
    initializer_range=INIT_STD,
    rms_norm_eps=1e-5,
    **SPECIAL_IDS,
    tie_word_embeddings=False,
    rope_parameters={"rope_type": "default", "rope_theta": 10000.0},
)

SPECS = {"llama4_text": ("llama4_text", LLAMA4)}
