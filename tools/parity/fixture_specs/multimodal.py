"""Image-text wrappers run as their text backbone: `gemma3` (Gemma3ForConditionalGeneration
around a gemma3_text model: sliding and full layers, per-type RoPE, tied head) and `mistral3`
(Mistral3ForConditionalGeneration around a mistral model, untied head). Each has a tiny vision
tower and projector that the text-only batch never reaches: they get no gradient, and the folder
must carry them through a save unchanged. The checkpoints store the text weights under
`language_model.model.*` (and `language_model.lm_head`), as transformers 5.24 saves them."""

from make_fixtures import COMMON, INIT_STD, SPECIAL_IDS, gemma3_layers

TEXT = {k: v for k, v in COMMON.items() if k not in ("tie_word_embeddings",)}
SIGLIP = dict(hidden_size=16, intermediate_size=32, num_hidden_layers=1, num_attention_heads=2, image_size=16,
              patch_size=8)
PIXTRAL = dict(hidden_size=16, intermediate_size=32, num_hidden_layers=1, num_attention_heads=2, image_size=16,
               patch_size=8, head_dim=8)

SPECS = {
    "gemma3": (
        "gemma3",
        {
            "text_config": {
                **TEXT,
                "model_type": "gemma3_text",
                "num_key_value_heads": 2,
                "hidden_activation": "gelu_pytorch_tanh",
                **gemma3_layers(),
            },
            "vision_config": SIGLIP,
            "mm_tokens_per_image": 4,
            "tie_word_embeddings": True,
            "initializer_range": INIT_STD,
            **SPECIAL_IDS,
        },
    ),
    "mistral3": (
        "mistral3",
        {
            "text_config": {**TEXT, "model_type": "mistral", "num_key_value_heads": 2, "sliding_window": None},
            "vision_config": PIXTRAL,
            "tie_word_embeddings": False,
            "initializer_range": INIT_STD,
            "image_token_index": 10,
        },
    ),
}
