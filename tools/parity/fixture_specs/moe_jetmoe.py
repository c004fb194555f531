"""JetMoE (issue 17): a mixture of attention heads (MoA: four query/output projection experts,
top-2, each giving num_key_value_heads heads that share one K/V projection) and a routed MoE MLP
(top-2 logits then a softmax, packed experts, an output bias) in every layer. `jetmoe_aux` sets
`output_router_logits`, so the loss has the load-balancing term over both routers of every layer."""

from make_fixtures import BOS_ID, EOS_ID, INIT_STD

JETMOE = dict(
    vocab_size=128,
    hidden_size=32,
    num_hidden_layers=2,
    num_key_value_heads=2,
    kv_channels=8,
    intermediate_size=32,
    num_local_experts=4,
    num_experts_per_tok=2,
    max_position_embeddings=64,
    initializer_range=INIT_STD,
    rms_norm_eps=1e-5,
    # No padding_idx: a zero embedding row would give the first router all-equal logits on padding.
    pad_token_id=None,
    bos_token_id=BOS_ID,
    eos_token_id=EOS_ID,
    tie_word_embeddings=False,
    rope_parameters={"rope_type": "default", "rope_theta": 10000.0},
)

SPECS = {
    "jetmoe": ("jetmoe", {**JETMOE}),
    # Tied head (the class default) and the load-balancing loss with a large coefficient.
    "jetmoe_aux": (
        "jetmoe",
        {**JETMOE, "tie_word_embeddings": True, "output_router_logits": True, "aux_loss_coef": 0.5},
    ),
}
