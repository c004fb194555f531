#!/usr/bin/env python3
"""A DeBERTa-v3-style tokenizer folder that ships only `spm.model` (no tokenizer.json), and what
transformers makes of it (`cargo test -p vkformers-io --test spm_tokenizer`).

Trains a tiny sentencepiece Unigram model (vocabulary 120) as DeBERTa-v3's is laid out: `[PAD]`
0, `[CLS]` 1 (BOS), `[SEP]` 2 (EOS), `[UNK]` 3, `[MASK]` a user-defined piece. Writes
tests/fixtures_data/deberta_v3_spm/ with `spm.model`, `tokenizer_config.json` (DebertaV2Tokenizer,
as microsoft/deberta-v3-* ship it) and `expected.json`: the ids of transformers'
DebertaV2TokenizerFast (AutoTokenizer on the folder) for single texts and pairs with special
tokens, and single texts without: unicode, runs of spaces, tabs and newlines, unknown characters.

Needs `sentencepiece` (PyPI) in the parity venv beside the pinned transformers.
"""

from __future__ import annotations

import io
import json
import tempfile
from pathlib import Path

import make_fixtures as mf  # sets the offline environment before transformers is imported

OUT = mf.REPO / "tests" / "fixtures_data" / "deberta_v3_spm"

CORPUS = [
    "The quick brown fox jumps over the lazy dog.",
    "A tokenizer splits text into pieces; the model reads their ids.",
    "Hello world, hello tokenizer, hello model!",
    "Sentence piece models treat spaces as part of the pieces.",
    "DeBERTa uses disentangled attention with relative positions.",
    "Numbers like 12, 345 and 6789 appear in text too.",
    "Café, naïve and façade carry accents; Straße has a sharp s.",
    "lower case and UPPER CASE words mix in real text.",
]

TEXTS = [
    "Hello world!",
    "The lazy dog jumps over the quick brown fox.",
    "  leading and trailing spaces  ",
    "many     spaces\tand a tab\nand a newline",
    "Café naïve façade Straße",
    "unknown: 漢字 ☃ 🤖 and Ω",
    "[MASK] is a piece; so is [CLS] in the middle [SEP] here",
    "UPPER lower MiXeD 12345",
    "",
]
PAIRS = [("Hello world!", "the model reads ids"), ("Café", "  spaces  ")]


def train(dst: Path) -> None:
    import sentencepiece as spm

    model = io.BytesIO()
    spm.SentencePieceTrainer.train(
        sentence_iterator=iter(CORPUS * 20), model_writer=model, model_type="unigram", vocab_size=120,
        pad_id=0, pad_piece="[PAD]", bos_id=1, bos_piece="[CLS]", eos_id=2, eos_piece="[SEP]",
        unk_id=3, unk_piece="[UNK]", user_defined_symbols=["[MASK]"], character_coverage=1.0,
        split_digits=True, hard_vocab_limit=False, seed_sentencepiece_size=1000, num_threads=1,
    )
    (dst / "spm.model").write_bytes(model.getvalue())


def main() -> None:
    mf.check_versions()
    from transformers import AutoTokenizer

    OUT.mkdir(parents=True, exist_ok=True)
    train(OUT)
    config = {
        "tokenizer_class": "DebertaV2Tokenizer", "do_lower_case": False, "split_by_punct": False,
        "bos_token": "[CLS]", "eos_token": "[SEP]", "unk_token": "[UNK]", "sep_token": "[SEP]",
        "pad_token": "[PAD]", "cls_token": "[CLS]", "mask_token": "[MASK]", "model_max_length": 512,
    }
    (OUT / "tokenizer_config.json").write_text(json.dumps(config, indent=2) + "\n")
    with tempfile.TemporaryDirectory() as tmp:
        # Loaded from a copy so no tokenizer.json lands in the fixture.
        for f in ("spm.model", "tokenizer_config.json"):
            (Path(tmp) / f).write_bytes((OUT / f).read_bytes())
        tok = AutoTokenizer.from_pretrained(tmp)
        assert type(tok).__name__ in ("DebertaV2Tokenizer", "DebertaV2TokenizerFast"), type(tok)
        expected = {
            "tokenizer": type(tok).__name__,
            "single": [{"text": t, "ids": tok(t)["input_ids"]} for t in TEXTS],
            "no_special": [{"text": t, "ids": tok(t, add_special_tokens=False)["input_ids"]} for t in TEXTS],
            "pairs": [{"text": a, "text_pair": b, "ids": tok(a, b)["input_ids"],
                       "token_type_ids": tok(a, b)["token_type_ids"]} for a, b in PAIRS],
        }
    (OUT / "expected.json").write_text(json.dumps(expected, indent=1, ensure_ascii=False) + "\n")
    unk = tok.convert_tokens_to_ids("[UNK]")
    n_unk = sum(i == unk for r in expected["no_special"] for i in r["ids"])
    print(f"{OUT}: vocabulary {tok.vocab_size}, {len(TEXTS)} texts, {n_unk} unknown ids")


if __name__ == "__main__":
    main()
