#!/usr/bin/env python3
"""Greedy `generate` of encoder-decoders with a PEFT LoRA adapter, for `vkformers generate
--adapter` (`cargo test -p vkformers-cli --test generate_seq2seq`).

Offline, with the pinned versions of requirements.txt. For the `t5` and `bart` adapters of
tests/fixtures_lora/ (peft_reference.py) on their base fixtures: `PeftModel.from_pretrained(base,
adapter).generate(input_ids, attention_mask, max_new_tokens=8)` (greedy, cached, unmerged) on each
source of the base fixture's greedy_seq2seq.json, and the base model's own sequences for the same
sources (the adapter must change them for the test to mean anything). Writes
tests/fixtures_lora/<name>/greedy_seq2seq.json.
"""

from __future__ import annotations

import make_fixtures as mf  # sets the offline environment before transformers is imported
from encoder_train_reference import write_json

LORA = mf.REPO / "tests" / "fixtures_lora"
BASE = mf.REPO / "tests" / "fixtures"


def run(name: str) -> None:
    import json

    import torch
    from peft import PeftModel
    from transformers import AutoModelForSeq2SeqLM

    sources = [r["input_ids"] for r in json.loads((BASE / name / "greedy_seq2seq.json").read_text())["rows"]]
    base = AutoModelForSeq2SeqLM.from_pretrained(BASE / name).eval()
    rows = []
    for ids in sources:
        x = torch.tensor([ids])
        kw = {"attention_mask": torch.ones_like(x), "max_new_tokens": 8, "do_sample": False, "num_beams": 1}
        with torch.no_grad():
            plain = base.generate(x, **kw)[0].tolist()
        rows.append({"input_ids": ids, "base_sequences": plain})
    model = PeftModel.from_pretrained(AutoModelForSeq2SeqLM.from_pretrained(BASE / name), str(LORA / name)).eval()
    for r in rows:
        x = torch.tensor([r["input_ids"]])
        with torch.no_grad():
            r["sequences"] = model.generate(input_ids=x, attention_mask=torch.ones_like(x), max_new_tokens=8,
                                            do_sample=False, num_beams=1)[0].tolist()
    changed = sum(r["sequences"] != r["base_sequences"] for r in rows)
    write_json(LORA / name / "greedy_seq2seq.json", {"max_new_tokens": 8, "rows": rows})
    print(f"{name}: {changed} of {len(rows)} sequences changed by the adapter")


def main() -> None:
    mf.check_versions()
    torch = mf.setup_torch()
    from transformers.utils import logging as hf_logging

    hf_logging.set_verbosity_error()
    torch.use_deterministic_algorithms(True)
    for name in ("t5", "bart"):
        run(name)


if __name__ == "__main__":
    main()
