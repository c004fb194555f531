"""GLM and GLM-4: q/k/v biases, interleaved RoPE over half of head_dim, fused gate_up_proj; GLM-4
adds post-sublayer RMSNorms (sandwich)."""

from make_fixtures import COMMON

ROPE = {"rope_type": "default", "rope_theta": 10000.0, "partial_rotary_factor": 0.5}
GLM = {**COMMON, "num_key_value_heads": 2, "attention_bias": True, "rope_parameters": ROPE}

SPECS = {
    "glm": ("glm", GLM),
    "glm4": ("glm4", {**GLM, "tie_word_embeddings": True}),
}
