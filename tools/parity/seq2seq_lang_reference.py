#!/usr/bin/env python3
"""Language tokens of multilingual encoder-decoder tokenizers, for vkformers
(`cargo test -p vkformers-data --test seq2seq_lang`, `cargo test -p vkformers-cli --test
generate_seq2seq`).

Offline, with the pinned versions of requirements.txt. Writes tests/fixtures_train/seq2seq/lang/:

- `<name>_tokenizer/`: a tiny tokenizer of transformers' own class, saved by `save_pretrained`
  with `src_lang`/`tgt_lang` defaults that the cases below override: `mbart` (MBartTokenizer:
  `X </s> lang`), `mbart50` (MBart50Tokenizer: `lang X </s>`), `nllb` (NllbTokenizer:
  `lang X </s>`) and `nllb_legacy` (`legacy_behaviour=True`: `X </s> lang`). The mbart and nllb
  ids fit the `mbart` and `m2m_100` fixtures' vocabularies of 64 (NLLB with three language
  codes only);
- `cases.json`: per tokenizer, what `tokenizer(source, text_target=target, max_length=...,
  truncation=True)` gives with `src_lang`/`tgt_lang` set as run_translation.py sets them (or the
  saved defaults), with and without truncation, and the target language's id (the
  `forced_bos_token_id` of the translation pipeline);
- `generate.json`: `model.generate(**tokenizer(source), forced_bos_token_id=...)` greedy
  sequences of the `mbart` fixture with the mbart tokenizer and of the `m2m_100` fixture with
  the nllb one.
"""

from __future__ import annotations

from pathlib import Path

import make_fixtures as mf  # sets the offline environment before transformers is imported
from encoder_train_reference import write_json

OUT = mf.REPO / "tests" / "fixtures_train" / "seq2seq" / "lang"
FIXTURES = mf.REPO / "tests" / "fixtures"

WORDS = ["the", "cat", "sat", "on", "mat", "die", "katze", "sitzt", "auf", "der"]
LETTERS = "etasrk"
SOURCES = ["the cat sat on the mat", "the cat", "a rat sat on the mat the cat sat"]
TARGETS = ["die katze sitzt auf der matte", "die katze", "der kater"]
NLLB_LANGS = ["eng_Latn", "deu_Latn", "fra_Latn"]


def unigram_vocab(specials: list[str]) -> list[tuple[str, float]]:
    """Specials first (ids in order), then whole words (preferred), `▁` and single letters."""
    vocab = [(t, 0.0) for t in specials] + [("▁", -8.0)]
    vocab += [("▁" + w, -1.0 - 0.01 * i) for i, w in enumerate(WORDS)]
    return vocab + [(c, -6.0 - 0.01 * i) for i, c in enumerate(LETTERS)]


def bpe_vocab() -> tuple[dict[str, int], list[tuple[str, str]]]:
    """NLLB's BPE: specials, letters, then each word merged left to right from `▁`."""
    vocab = {"<s>": 0, "<pad>": 1, "</s>": 2, "<unk>": 3}
    merges: list[tuple[str, str]] = []
    for c in ["▁", *sorted(set("".join(WORDS) + LETTERS))]:
        vocab.setdefault(c, len(vocab))
    for w in WORDS[:6]:
        piece = "▁"
        for c in w:
            if piece + c not in vocab:
                merges.append((piece, c))
                vocab[piece + c] = len(vocab)
            piece += c
    return vocab, merges


def make(name: str):
    from transformers import AutoTokenizer, MBart50Tokenizer, MBartTokenizer, NllbTokenizer
    from transformers.models.mbart.tokenization_mbart import FAIRSEQ_LANGUAGE_CODES as MBART
    from transformers.models.mbart50.tokenization_mbart50 import FAIRSEQ_LANGUAGE_CODES as MBART50

    base = ["<s>", "<pad>", "</s>", "<unk>"]
    if name == "mbart":
        tok = MBartTokenizer(vocab=unigram_vocab(base + MBART + ["<mask>"]), src_lang="de_DE", tgt_lang="en_XX")
    elif name == "mbart50":
        tok = MBart50Tokenizer(vocab=unigram_vocab(base + MBART50 + ["<mask>"]), src_lang="de_DE", tgt_lang="fr_XX")
    else:
        vocab, merges = bpe_vocab()
        for lang in NLLB_LANGS + ["<mask>"]:
            vocab[lang] = len(vocab)
        tok = NllbTokenizer(vocab=vocab, merges=merges, additional_special_tokens=NLLB_LANGS, src_lang="deu_Latn",
                            tgt_lang="fra_Latn", legacy_behaviour=name == "nllb_legacy")
    d = OUT / f"{name}_tokenizer"
    tok.save_pretrained(d)
    return AutoTokenizer.from_pretrained(d)


def cases(name: str) -> list[dict]:
    """Each source/target pair with the flags' languages, the saved defaults, and truncated."""
    langs = {"mbart": ("en_XX", "ro_RO"), "mbart50": ("en_XX", "de_DE"), "nllb": ("eng_Latn", "deu_Latn"),
             "nllb_legacy": ("eng_Latn", "fra_Latn")}[name]
    out = []
    for src_lang, tgt_lang, max_src, max_tgt in [(*langs, None, None), (None, None, None, None), (*langs, 5, 4)]:
        tok = make(name)  # fresh: setting src_lang/tgt_lang sticks to the object
        if src_lang is not None:
            tok.src_lang, tok.tgt_lang = src_lang, tgt_lang
        trunc = {"max_length": max_src, "truncation": True} if max_src else {}
        for source, target in zip(SOURCES, TARGETS):
            e = tok(source, **trunc)
            t = tok(text_target=target, **({"max_length": max_tgt, "truncation": True} if max_tgt else {}))
            out.append({"source": source, "target": target, "source_lang": src_lang, "target_lang": tgt_lang,
                        "max_source_len": max_src, "max_target_len": max_tgt, "input_ids": e["input_ids"],
                        "labels": t["input_ids"],
                        "forced_bos_token_id": tok.convert_tokens_to_ids(tok.tgt_lang)})
    return out


def generate(name: str, fixture: str, src_lang: str, tgt_lang: str) -> dict:
    import torch
    from transformers import AutoModelForSeq2SeqLM

    tok = make(name)
    tok.src_lang = src_lang
    model = AutoModelForSeq2SeqLM.from_pretrained(FIXTURES / fixture).eval()
    forced = tok.convert_tokens_to_ids(tgt_lang)
    rows = []
    for source in SOURCES:
        enc = tok(source, return_tensors="pt")
        assert int(enc["input_ids"].max()) < model.config.vocab_size
        with torch.no_grad():
            seq = model.generate(**enc, forced_bos_token_id=forced, max_new_tokens=8, do_sample=False, num_beams=1)
        rows.append({"source": source, "input_ids": enc["input_ids"][0].tolist(), "sequences": seq[0].tolist()})
    return {"tokenizer": name, "fixture": fixture, "source_lang": src_lang, "target_lang": tgt_lang,
            "forced_bos_token_id": forced, "max_new_tokens": 8, "rows": rows}


def main() -> None:
    mf.check_versions()
    mf.quiet_torch()
    OUT.mkdir(parents=True, exist_ok=True)
    names = ["mbart", "mbart50", "nllb", "nllb_legacy"]
    write_json(OUT / "cases.json", {n: cases(n) for n in names})
    runs = [generate("mbart", "mbart", "en_XX", "ro_RO"), generate("nllb", "m2m_100", "eng_Latn", "deu_Latn")]
    write_json(OUT / "generate.json", {"runs": runs})
    print(f"{len(names)} tokenizers, {len(runs)} generate runs in {OUT}")


if __name__ == "__main__":
    main()
