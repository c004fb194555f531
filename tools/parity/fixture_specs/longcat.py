"""LongCat-Flash (issue 18): each layer holds two MLA + dense-MLP sublayers and one shortcut MoE
that reads the first sublayer's MLP input and is added after the second sublayer. The MoE routes
over 4 experts plus 2 zero-computation (identity) experts: softmax scores, the choice by score +
e_score_correction_bias (a buffer, given values by make_fixtures.py), weights not renormalised,
times routed_scaling_factor. MLA as DeepSeek-V3 (interleaved RoPE) with the query scaled by
sqrt(hidden / q_lora_rank) and the latent by sqrt(hidden / kv_lora_rank)."""

from make_fixtures import LLAMA_SETTINGS

SPECS = {
    "longcat_flash": (
        "longcat_flash",
        dict(
            vocab_size=96,
            hidden_size=32,
            num_layers=1,
            num_attention_heads=4,
            num_key_value_heads=4,
            ffn_hidden_size=24,
            q_lora_rank=16,
            kv_lora_rank=12,
            qk_nope_head_dim=6,
            qk_rope_head_dim=4,
            # The rotary embedding is sized by head_dim: the rotary part of q and k.
            head_dim=4,
            v_head_dim=8,
            moe_topk=2,
            n_routed_experts=4,
            zero_expert_num=2,
            expert_ffn_hidden_size=8,
            routed_scaling_factor=1.5,
            **LLAMA_SETTINGS,
        ),
    ),
}
