#!/usr/bin/env python3
"""A Qwen3-Embedding-shaped sentence-transformers folder, random-initialised and tiny, and
sentence-transformers' own embeddings of it, for `cargo test -p vkformers-cli --test embed`.

Writes tests/fixtures_embed/qwen3_embedding/: a bare `Qwen3Model` (tensors without the `model.`
prefix, no LM head: as Qwen3-Embedding stores them) of 2 layers, hidden 32, GQA 4/2, QK-norm;
a word-level tokenizer whose post-processor appends `<|endoftext|>` (Qwen3-Embedding's
tokenizer appends its EOS so that the last token pools the text) with left padding; modules.json
Transformer -> Pooling (`pooling_mode_lasttoken`) -> Normalize. Then
`SentenceTransformer(DIR, device="cpu").encode(SENTENCES, batch_size=3)` (rows of different
lengths, left-padded in each batch) goes to reference.json (7 significant digits).

sentence-transformers is not in requirements.txt; install it beside the pinned environment as
st_reference.py says, then
  PYTHONPATH=/tmp/st-extra /tmp/parity-venv/bin/python tools/parity/make_decoder_embed_fixture.py
"""

from __future__ import annotations

import json

import make_fixtures as mf  # sets the offline environment before transformers is imported

OUT = mf.REPO / "tests" / "fixtures_embed" / "qwen3_embedding"
SPECIAL = ["<|endoftext|>", "<unk>"]  # ids 0 (pad and eos, as Qwen's), 1
WORDS = ("the a quick brown fox jumps over lazy dog vulkan runs compute shaders on every gpu sentence "
         "embeddings map text to vectors similar meanings land close together hello world").split()
SENTENCES = [
    "hello world",
    "the quick brown fox jumps over the lazy dog",
    "vulkan runs compute shaders on every gpu",
    "a",
    "sentence embeddings map text to vectors similar meanings land close together",
    "zyxq the dog",
]


def write_json(path, obj) -> None:
    path.write_text(json.dumps(obj, indent=2) + "\n")


def tokenizer() -> None:
    from tokenizers import Tokenizer, models, pre_tokenizers, processors

    vocab = {t: i for i, t in enumerate(SPECIAL + WORDS)}
    tok = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    tok.post_processor = processors.TemplateProcessing(single="$A <|endoftext|>", special_tokens=[("<|endoftext|>", 0)])
    tok.add_special_tokens(SPECIAL)
    tok.save(str(OUT / "tokenizer.json"))
    write_json(OUT / "tokenizer_config.json", {
        "tokenizer_class": "PreTrainedTokenizerFast", "pad_token": "<|endoftext|>", "eos_token": "<|endoftext|>",
        "unk_token": "<unk>", "padding_side": "left", "model_max_length": 64})


def st_modules() -> None:
    write_json(OUT / "modules.json", [
        {"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"},
        {"idx": 1, "name": "1", "path": "1_Pooling", "type": "sentence_transformers.models.Pooling"},
        {"idx": 2, "name": "2", "path": "2_Normalize", "type": "sentence_transformers.models.Normalize"},
    ])
    write_json(OUT / "sentence_bert_config.json", {"max_seq_length": 64, "do_lower_case": False})
    (OUT / "1_Pooling").mkdir(exist_ok=True)
    write_json(OUT / "1_Pooling" / "config.json", {
        "word_embedding_dimension": 32, "pooling_mode_cls_token": False, "pooling_mode_mean_tokens": False,
        "pooling_mode_max_tokens": False, "pooling_mode_mean_sqrt_len_tokens": False,
        "pooling_mode_weightedmean_tokens": False, "pooling_mode_lasttoken": True, "include_prompt": True})
    (OUT / "2_Normalize").mkdir(exist_ok=True)


def model() -> None:
    import torch
    from transformers import Qwen3Config, Qwen3Model

    import fixture_common as fc

    cfg = Qwen3Config(vocab_size=len(SPECIAL) + len(WORDS), hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=2, head_dim=8, max_position_embeddings=64,
                      initializer_range=mf.INIT_STD, pad_token_id=0, eos_token_id=0, bos_token_id=0,
                      tie_word_embeddings=True)
    torch.manual_seed(mf.SEED)
    m = Qwen3Model(cfg)
    fc.perturb_1d(m)
    m.save_pretrained(OUT, safe_serialization=True)


def main() -> None:
    OUT.mkdir(parents=True, exist_ok=True)
    tokenizer()
    st_modules()
    model()
    from sentence_transformers import SentenceTransformer

    st = SentenceTransformer(str(OUT), device="cpu")
    emb = st.encode(SENTENCES, batch_size=3, convert_to_numpy=True)
    write_json(OUT / "reference.json", {
        "sentences": SENTENCES, "batch_size": 3,
        "embeddings": [[float(f"{x:.7g}") for x in row] for row in emb.tolist()]})
    print(f"qwen3_embedding: {emb.shape} embeddings, tokens of row 1: {st.tokenize([SENTENCES[1]])['input_ids']}")


if __name__ == "__main__":
    main()
