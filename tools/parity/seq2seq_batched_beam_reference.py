#!/usr/bin/env python3
"""Batched encoder-decoder beam search references (`cargo test -p vkformers-generate --test
seq2seq_beam`): transformers' `generate` on several sources at once, each with its own beams.

Offline, with the pinned versions of requirements.txt. For every encoder-decoder fixture (those
with a beam_seq2seq.json): three sources of different lengths (the fixture's greedy_seq2seq.json
sources, and the first 3 tokens of the first one), right-padded with pad_token_id (mask 0 on the
padding) into one batch, through `generate` with each of make_seq2seq_fixtures.py's BEAM_RUNS
settings (cached, max_new_tokens 8, output_scores). Writes <fixture>/beam_batched_seq2seq.json:
the sources, and per run the `num_return_sequences` sequences of each source (source-major, as
generate returns them: every row as long as the batch's longest) and their sequences_scores.
"""

from __future__ import annotations

import json

import make_fixtures as mf  # sets the offline environment before transformers is imported
from encoder_train_reference import write_json
from make_seq2seq_fixtures import BEAM_RUNS, NEW_TOKENS

BASE = mf.REPO / "tests" / "fixtures"


def run(d) -> None:
    import torch
    from transformers import AutoModelForSeq2SeqLM

    rows = json.loads((d / "greedy_seq2seq.json").read_text())["rows"]
    sources = [r["input_ids"] for r in rows] + [rows[0]["input_ids"][:3]]
    model = AutoModelForSeq2SeqLM.from_pretrained(d).eval()
    pad = model.generation_config.pad_token_id
    pad = model.config.pad_token_id if pad is None else pad
    width = max(map(len, sources))
    ids = torch.tensor([s + [pad] * (width - len(s)) for s in sources])
    mask = torch.tensor([[1] * len(s) + [0] * (width - len(s)) for s in sources])
    runs = []
    for kw in BEAM_RUNS:
        with torch.no_grad():
            out = model.generate(ids, attention_mask=mask, do_sample=False, max_new_tokens=NEW_TOKENS,
                                 use_cache=True, output_scores=True, return_dict_in_generate=True, **kw)
        runs.append({"options": kw, "sequences": out.sequences.tolist(),
                     "sequences_scores": [float(s) for s in out.sequences_scores]})
    write_json(d / "beam_batched_seq2seq.json", {"max_new_tokens": NEW_TOKENS, "sources": sources, "runs": runs})
    print(f"{d.name}: {len(sources)} sources, {len(runs)} runs")


def main() -> None:
    mf.check_versions()
    mf.quiet_torch()
    for d in sorted(BASE.iterdir()):
        if (d / "beam_seq2seq.json").exists():
            run(d)


if __name__ == "__main__":
    main()
