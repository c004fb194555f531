#!/usr/bin/env python3
"""transformers' token-classification pipeline (no aggregation, its default `ignore_labels=["O"]`)
on the `distilbert_tokcls` fixture with the WordPiece tokenizer of tests/fixtures_data/wordpiece
and labels O, B-PER, I-PER, B-LOC, I-LOC, for `vkformers classify` on token classifiers
(crates/vkformers-cli/tests/encoder_train.rs). Writes tests/fixtures_train/encoder/classify_tokens.json
with the id2label it used. Same venv, offline, a few seconds."""

from __future__ import annotations

import json
import shutil
import tempfile
from pathlib import Path

import encoder_train_reference as etr
import make_fixtures as mf

LABELS = ["O", "B-PER", "I-PER", "B-LOC", "I-LOC"]
TEXTS = ["the cat sat on the mat.", "a very good movie about a bad film"]


def main() -> None:
    mf.setup_torch()
    from transformers import AutoTokenizer, pipeline

    id2label = {i: l for i, l in enumerate(LABELS)}
    with tempfile.TemporaryDirectory() as tmp:
        d = Path(tmp)
        for f in ("config.json", "model.safetensors"):
            shutil.copy(etr.FIXTURES / "distilbert_tokcls" / f, d / f)
        for f in ("tokenizer.json", "tokenizer_config.json"):
            shutil.copy(mf.REPO / "tests" / "fixtures_data" / "wordpiece" / f, d / f)
        model = etr.load(d, id2label=id2label, label2id={l: i for i, l in enumerate(LABELS)})
        pipe = pipeline("token-classification", model=model, tokenizer=AutoTokenizer.from_pretrained(d))
        out = [[{k: (float(v) if k == "score" else v) for k, v in e.items()} for e in pipe(t)] for t in TEXTS]
    etr.write_json(etr.OUT / "classify_tokens.json", {"texts": TEXTS, "id2label": id2label, "entities": out})
    print(f"classify_tokens: {[len(o) for o in out]} entities")


if __name__ == "__main__":
    main()
