"""nanochat: weightless RMSNorms (also one on the embeddings), weightless QK RMSNorm after RoPE,
nanochat's rotate_half ([x2, -x1]), bias-free ReLU² fc1/fc2 MLP, q/k/v/o biases, final logit softcap
(3.0 here, so it bends the logits), GQA (2 KV heads)."""

from make_fixtures import COMMON

SPECS = {
    "nanochat": (
        "nanochat",
        {
            **COMMON,
            "num_key_value_heads": 2,
            "hidden_act": "relu2",
            "attention_bias": True,
            "final_logit_softcapping": 3.0,
        },
    ),
}
