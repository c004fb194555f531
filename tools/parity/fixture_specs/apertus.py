"""Apertus: QK-norm (per head, before RoPE), GQA, Llama-3 RoPE scaling, and the plain MLP with
xIELU, whose learned scalars alpha_p / alpha_n get the 1-D noise (so both branches' gradients
are checked) and whose constants beta / eps are stored 0-d buffers."""

from make_fixtures import COMMON, LLAMA3_ROPE

SPECS = {
    "apertus": (
        "apertus",
        {
            **COMMON,
            "num_key_value_heads": 2,
            "hidden_act": "xielu",
            "rope_parameters": LLAMA3_ROPE,
        },
    ),
}
