"""gpt-oss (issue 17): four experts, top-2 of the router logits (weight + bias) then a softmax over
those two; experts stored in-out with per-expert biases (perturbed by make_fixtures.py like the 1-D
parameters) and the clamped SwiGLU, its limit (1.0) low enough that both clamps act on INIT_STD's
activations; q/k/v/o biases, a learned sink per head, layer 0 sliding (window 4) and layer 1 full
(the config's default alternation), YaRN RoPE untruncated (factor 4 over 16 positions).
`gpt_oss_aux` adds the load-balancing loss with a large coefficient so that its gradient shows."""

from make_fixtures import COMMON

GPT_OSS = {
    **COMMON,
    "num_key_value_heads": 2,
    "num_local_experts": 4,
    "num_experts_per_tok": 2,
    "intermediate_size": 24,
    "swiglu_limit": 1.0,
    "sliding_window": 4,
    "rope_parameters": {
        "rope_type": "yarn", "rope_theta": 10000.0, "factor": 4.0, "beta_fast": 32.0, "beta_slow": 1.0,
        "truncate": False, "original_max_position_embeddings": 16,
    },
}

SPECS = {
    "gpt_oss": ("gpt_oss", GPT_OSS),
    "gpt_oss_aux": ("gpt_oss", {**GPT_OSS, "output_router_logits": True, "router_aux_loss_coef": 0.5}),
}
