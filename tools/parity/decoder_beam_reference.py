#!/usr/bin/env python3
"""Beam-search references for decoder-only models: transformers' `generate` with beams on the two
greedy prompts of a few parity fixtures (each prompt alone, no EOS so every beam runs to
max_new_tokens unless an EOS id is given), for the settings of make_seq2seq_fixtures.BEAM_RUNS.
Writes tests/fixtures_generate/beam/<name>.json: per setting, per prompt, the sequences and
`sequences_scores`.

Run with the pinned venv (tools/parity/requirements.txt); reads only the committed fixture folders.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import make_fixtures as mf  # sets the offline environment before transformers is imported
from make_seq2seq_fixtures import BEAM_RUNS

FIXTURES = mf.REPO / "tests" / "fixtures"
OUT = mf.REPO / "tests" / "fixtures_generate" / "beam"
NAMES = ["llama", "gpt2", "qwen2"]
NEW_TOKENS = 10
EOS_ID = 5  # an id the tiny models do emit, so beams finish at different lengths


def one(d: Path) -> dict:
    import torch
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(str(d), local_files_only=True, attn_implementation="eager",
                                                 dtype=torch.float32)
    model.eval()
    prompts = json.loads((d / "greedy.json").read_text())["prompts"]
    runs = []
    for kw in BEAM_RUNS:
        rows = []
        for p in prompts:
            ids = torch.tensor([p])
            with torch.no_grad():
                out = model.generate(ids, attention_mask=torch.ones_like(ids), do_sample=False,
                                     max_new_tokens=NEW_TOKENS, eos_token_id=EOS_ID, pad_token_id=0,
                                     use_cache=True, output_scores=True, return_dict_in_generate=True, **kw)
            rows.append({"input_ids": p, "sequences": out.sequences.tolist(),
                         "sequences_scores": [float(s) for s in out.sequences_scores]})
        runs.append({"options": kw, "rows": rows})
    return {"max_new_tokens": NEW_TOKENS, "eos_token_id": EOS_ID, "pad_token_id": 0, "runs": runs}


def main() -> None:
    mf.check_versions()
    mf.quiet_torch()
    OUT.mkdir(parents=True, exist_ok=True)
    for name in sys.argv[1:] or NAMES:
        mf.write_json(OUT / f"{name}.json", one(FIXTURES / name))
        print(name)


if __name__ == "__main__":
    main()
