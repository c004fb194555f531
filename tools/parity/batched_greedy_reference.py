#!/usr/bin/env python3
"""Batched greedy references: transformers' `generate` on the two greedy prompts of every parity
fixture at once, left-padded with an attention mask (as a user batches prompts of different
lengths), 32 new tokens with the KV cache. Writes tests/fixtures_generate/batched/<name>.json with
the prompts, the padded batch, the new tokens per row and the smallest top-1/top-2 logit gap per row
(a tiny gap would make the comparison fragile).

`--left-padded NAME ...` writes instead tests/fixtures_generate/left_padded/<name>.json and
<name>.safetensors: three prompts of lengths 2, 5 and 11 (seeded), left-padded to 11 (9, 6 and 0
pad columns: not multiples of Llama 4's chunk of 4), the new tokens, and logits to compare closely:
`forward` [B, T, V], one uncached forward of the padded batch with generate's position ids
(`cumsum(mask) - 1`), and `steps` [N, B, V], generate's logits at each new token.

Run with the pinned venv (tools/parity/requirements.txt); reads only the committed fixture folders.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
# Also sets the offline environment before transformers is imported.
from make_fixtures import PAD_ID, cached_greedy, lm_class  # noqa: E402

REPO = Path(__file__).resolve().parent.parent.parent
FIXTURES = REPO / "tests" / "fixtures"
OUT = REPO / "tests" / "fixtures_generate" / "batched"


def left_pad(prompts: list[list[int]]):
    import torch

    width = max(len(p) for p in prompts)
    ids = [[PAD_ID] * (width - len(p)) + p for p in prompts]
    mask = [[0] * (width - len(p)) + [1] * len(p) for p in prompts]
    return torch.tensor(ids), torch.tensor(mask)


def load(d: Path):
    import torch
    from transformers import AutoConfig

    cls = lm_class(AutoConfig.from_pretrained(d))
    return cls.from_pretrained(d, attn_implementation="eager", dtype=torch.float32).eval()


def one(d: Path) -> dict:
    import torch

    model = load(d)
    # MoE fixtures with `output_router_logits` (for the auxiliary loss): transformers 5.24's
    # load-balancing loss fails in batched cached decoding (it weights one new column's router
    # logits with the whole mask), and the loss never changes the tokens; generate without it.
    if getattr(model.config, "output_router_logits", False):
        model.config.output_router_logits = False
    prompts = json.loads((d / "greedy.json").read_text())["prompts"]
    ids, mask = left_pad(prompts)
    with torch.no_grad():
        out = cached_greedy(model, ids, mask)
    new = out.sequences[:, ids.shape[1] :].tolist()
    gaps = [min(float(torch.topk(s[r], 2).values.diff().abs()) for s in out.logits) for r in range(len(prompts))]
    return {
        "prompts": prompts,
        "input_ids": ids.tolist(),
        "attention_mask": mask.tolist(),
        "new_tokens": new,
        "min_logit_gap": gaps,
    }


LEFT_PADDED_OUT = REPO / "tests" / "fixtures_generate" / "left_padded"
LEFT_PADDED_LENGTHS = (2, 5, 11)


def left_padded(name: str) -> None:
    """Prompts whose left padding (9, 6, 0 columns) and lengths cross chunk boundaries."""
    import torch
    from safetensors.torch import save_file

    d = FIXTURES / name
    model = load(d)
    vocab = model.config.vocab_size
    g = torch.Generator().manual_seed(2026)
    prompts = [torch.randint(3, vocab, (n,), generator=g).tolist() for n in LEFT_PADDED_LENGTHS]
    ids, mask = left_pad(prompts)
    pos = (mask.cumsum(-1) - 1).masked_fill(mask == 0, 1)
    with torch.no_grad():
        forward = model(input_ids=ids, attention_mask=mask, position_ids=pos, use_cache=False).logits
        out = cached_greedy(model, ids, mask)
    steps = torch.stack(list(out.logits))
    gaps = [float(torch.topk(steps[:, r], 2).values.diff().abs().min()) for r in range(len(prompts))]
    LEFT_PADDED_OUT.mkdir(parents=True, exist_ok=True)
    ref = {
        "prompts": prompts,
        "input_ids": ids.tolist(),
        "attention_mask": mask.tolist(),
        "new_tokens": out.sequences[:, ids.shape[1] :].tolist(),
        "min_logit_gap": gaps,
    }
    (LEFT_PADDED_OUT / f"{name}.json").write_text(json.dumps(ref) + "\n")
    tensors = {"forward": forward.float().contiguous(), "steps": steps.float().contiguous()}
    save_file(tensors, str(LEFT_PADDED_OUT / f"{name}.safetensors"), metadata={"format": "pt"})
    print(name, "left-padded", [len(p) for p in prompts], "gaps", ["%.2e" % x for x in gaps])


def main() -> None:
    if sys.argv[1:2] == ["--left-padded"]:
        for name in sys.argv[2:]:
            left_padded(name)
        return
    OUT.mkdir(parents=True, exist_ok=True)
    only = set(sys.argv[1:])
    for d in sorted(p for p in FIXTURES.iterdir() if (p / "greedy.json").exists()):
        if only and d.name not in only:
            continue
        ref = one(d)
        (OUT / f"{d.name}.json").write_text(json.dumps(ref) + "\n")
        print(d.name, "gaps", ["%.2e" % g for g in ref["min_logit_gap"]])


if __name__ == "__main__":
    main()
