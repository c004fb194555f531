#!/usr/bin/env python3
"""Encoder-decoder `generate` references for `vkformers generate` beyond plain greedy
(`cargo test -p vkformers-cli --test generate_seq2seq`): a PEFT LoRA adapter, and the repetition
penalty.

Offline, with the pinned versions of requirements.txt. For the `t5` and `bart` adapters of
tests/fixtures_lora/ (peft_reference.py) on their base fixtures: `PeftModel.from_pretrained(base,
adapter).generate(input_ids, attention_mask, max_new_tokens=8)` (greedy, cached, unmerged) on each
source of the base fixture's greedy_seq2seq.json, and the base model's own sequences for the same
sources (the adapter must change them for the test to mean anything). Writes
tests/fixtures_lora/<name>/greedy_seq2seq.json. And `generate(..., repetition_penalty=p)`
(greedy, 12 new tokens) of the `t5` and `bart` fixtures for p in 1.5 and 0.7 on those sources,
with the unpenalised sequences beside them: tests/fixtures_train/seq2seq/repetition.json.
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


def repetition() -> None:
    import json

    import torch
    from transformers import AutoModelForSeq2SeqLM

    runs = []
    for name in ("t5", "bart"):
        sources = [r["input_ids"] for r in json.loads((BASE / name / "greedy_seq2seq.json").read_text())["rows"]]
        model = AutoModelForSeq2SeqLM.from_pretrained(BASE / name).eval()
        for penalty in (1.5, 0.7):
            rows = []
            for ids in sources:
                x = torch.tensor([ids])
                kw = {"attention_mask": torch.ones_like(x), "max_new_tokens": 12, "do_sample": False, "num_beams": 1}
                with torch.no_grad():
                    plain = model.generate(x, **kw)[0].tolist()
                    seq = model.generate(x, repetition_penalty=penalty, **kw)[0].tolist()
                rows.append({"input_ids": ids, "sequences": seq, "plain_sequences": plain})
            runs.append({"fixture": name, "repetition_penalty": penalty, "max_new_tokens": 12, "rows": rows})
    write_json(mf.REPO / "tests" / "fixtures_train" / "seq2seq" / "repetition.json", {"runs": runs})
    changed = sum(r["sequences"] != r["plain_sequences"] for run in runs for r in run["rows"])
    print(f"repetition penalty: {changed} of {sum(len(run['rows']) for run in runs)} sequences changed")


def main() -> None:
    mf.check_versions()
    mf.quiet_torch()
    for name in ("t5", "bart"):
        run(name)
    repetition()


if __name__ == "__main__":
    main()
