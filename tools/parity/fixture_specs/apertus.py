"""Apertus: QK-norm (per head, before RoPE), GQA, Llama-3 RoPE scaling, and the plain MLP with
xIELU, whose learned scalars alpha_p / alpha_n get the 1-D noise (so both branches' gradients
are checked) and whose constants beta / eps are stored 0-d buffers."""

from make_fixtures import COMMON

SPECS = {
    "apertus": (
        "apertus",
        {
            **COMMON,
            "num_key_value_heads": 2,
            "hidden_act": "xielu",
            "rope_parameters": {
                "rope_type": "llama3",
                "rope_theta": 10000.0,
                "factor": 8.0,
                "original_max_position_embeddings": 16,
                "low_freq_factor": 1.0,
                "high_freq_factor": 4.0,
            },
        },
    ),
}
