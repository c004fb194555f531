#!/usr/bin/env python3
"""Training references for vkformers (`cargo test -p vkformers-cli --test train_parity`).

Offline, with the pinned versions of requirements.txt. For each fixture model named in
MODELS (read from tests/fixtures/<name>/), on the pre-tokenized rows of
tests/fixtures_train/rows.jsonl:

- runs the real `transformers.Trainer` for two optimizer steps: batch 2, sequential order (no
  shuffle), constant lr 1e-3, AdamW (torch) eps 1e-6, betas (0.9, 0.999), no weight decay, no
  clipping, right padding to the longest row with attention mask 0 and labels -100, and writes
  the weights after the two steps (`<name>/step2.safetensors`) and the Trainer's logged losses;
- writes the gradients of the first step (`<name>/grad1.safetensors`);
- computes the evaluation loss of the untrained model on the same rows: per-row mean
  cross-entropy of the shifted labels and the token-weighted mean over all rows
  (`<name>/eval.json`);
- writes `decay_names.json`: `Trainer.get_decay_parameter_names` (`decay`) and every parameter
  name (`all`) of each fixture model.

Mode `--check-export DIR --fixture NAME --ours EVAL_JSON`: loads a folder written by
`vkformers train` with transformers and checks that its per-row losses (from its logits) equal
those `vkformers eval --json` reported for it.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("HF_HUB_DISABLE_TELEMETRY", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

HERE = Path(__file__).resolve().parent
REPO = HERE.parent.parent
FIXTURES = REPO / "tests" / "fixtures"
OUT = REPO / "tests" / "fixtures_train"
MODELS = ["llama", "gpt2"]
SEED = 1234
PAD_ID = 0
# Rows of different lengths (padding in both batches); row 1 masks its first three tokens as a
# prompt would be masked.
ROW_LENS = [7, 5, 8, 6]
MASKED_PREFIX = {1: 3}


def make_rows(vocab: int) -> list[dict]:
    import torch

    g = torch.Generator().manual_seed(SEED)
    rows = []
    for i, n in enumerate(ROW_LENS):
        ids = torch.randint(3, vocab, (n,), generator=g).tolist()
        labels = list(ids)
        for j in range(MASKED_PREFIX.get(i, 0)):
            labels[j] = -100
        rows.append({"input_ids": ids, "labels": labels})
    return rows


def collate(rows: list[dict]) -> dict:
    import torch

    t = max(len(r["input_ids"]) for r in rows)
    ids, mask, labels = [], [], []
    for r in rows:
        pad = t - len(r["input_ids"])
        ids.append(r["input_ids"] + [PAD_ID] * pad)
        mask.append([1] * len(r["input_ids"]) + [0] * pad)
        labels.append(r["labels"] + [-100] * pad)
    return {"input_ids": torch.tensor(ids), "attention_mask": torch.tensor(mask), "labels": torch.tensor(labels)}


def load(path: Path):
    import torch
    from transformers import AutoModelForCausalLM

    return AutoModelForCausalLM.from_pretrained(path, attn_implementation="eager", dtype=torch.float32)


def row_losses(model, rows: list[dict]) -> tuple[list[float], list[int], float]:
    """Per-row mean loss and target count, and the token-weighted mean, in float64 sums."""
    import torch

    batch = collate(rows)
    with torch.no_grad():
        logits = model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"]).logits
    shift_logits, shift_labels = logits[:, :-1].double(), batch["labels"][:, 1:]
    ce = torch.nn.functional.cross_entropy(
        shift_logits.reshape(-1, shift_logits.shape[-1]), shift_labels.reshape(-1), reduction="none"
    ).reshape(shift_labels.shape)
    counted = shift_labels.ne(-100)
    sums, counts = (ce * counted).sum(1), counted.sum(1)
    return (sums / counts).tolist(), counts.tolist(), float(sums.sum() / counts.sum())


def train_two_steps(name: str, rows: list[dict]) -> None:
    import torch
    from safetensors import safe_open
    from safetensors.torch import save_file
    from transformers import Trainer, TrainingArguments

    torch.manual_seed(SEED)
    model = load(FIXTURES / name)
    # GPT2LMHeadModel's class name does not match transformers' loss-type pattern, so its
    # `loss_type` is None: its forward falls back to ForCausalLMLoss anyway, but the Trainer then
    # counts `num_items_in_batch` over unshifted labels (one token per row too many) and scales
    # the loss by the wrong count. Naming the loss it uses makes the Trainer count as it does for
    # every `*ForCausalLM` class.
    model.loss_type = "ForCausalLM"
    with tempfile.TemporaryDirectory() as tmp:
        args = TrainingArguments(
            output_dir=tmp,
            per_device_train_batch_size=2,
            max_steps=2,
            learning_rate=1e-3,
            lr_scheduler_type="constant",
            warmup_steps=0,
            optim="adamw_torch",
            adam_beta1=0.9,
            adam_beta2=0.999,
            adam_epsilon=1e-6,
            weight_decay=0.0,
            max_grad_norm=0.0,
            train_sampling_strategy="sequential",
            use_cpu=True,
            report_to=[],
            save_strategy="no",
            logging_steps=1,
            seed=SEED,
            dataloader_num_workers=0,
        )
        trainer = Trainer(model=model, args=args, train_dataset=rows, data_collator=collate)
        trainer.train()
    with safe_open(FIXTURES / name / "model.safetensors", "pt") as f:
        stored = list(f.keys())
    state = model.state_dict()
    out = OUT / name
    out.mkdir(parents=True, exist_ok=True)
    save_file({k: state[k].detach().clone().contiguous() for k in stored}, out / "step2.safetensors")
    losses = [h["loss"] for h in trainer.state.log_history if "loss" in h]
    # The first step's gradients: an element whose gradient is rounding noise below eps (a key
    # bias's, zero in exact arithmetic) gets an AdamW update of noise/eps, which the test holds
    # only to Adam's step bound, as the parity harness does.
    first = load(FIXTURES / name)
    first.train()
    first(**collate(rows[:2])).loss.backward()
    grads = dict(first.named_parameters())
    save_file({k: grads[k].grad.detach().clone().contiguous() for k in stored}, out / "grad1.safetensors")
    ev_rows, ev_counts, ev = row_losses(load(FIXTURES / name), rows)
    (out / "eval.json").write_text(
        json.dumps(
            {
                "loss": ev,
                "rows": [{"loss": l, "tokens": c} for l, c in zip(ev_rows, ev_counts)],
                "tokens": sum(ev_counts),
                "trainer_step_losses": losses,
                "note": "eval: untrained fixture model; train: transformers.Trainer, 2 steps (see train_reference.py)",
            },
            indent=2,
        )
        + "\n"
    )
    print(f"{name}: step losses {losses}, eval loss {ev:.6f}")


def decay_names() -> None:
    from transformers import Trainer

    names = {}
    for d in sorted(p for p in FIXTURES.iterdir() if (p / "config.json").exists()):
        model = load(d)
        names[d.name] = {
            "decay": sorted(Trainer.get_decay_parameter_names(None, model)),
            "all": sorted(n for n, _ in model.named_parameters()),
        }
    (OUT / "decay_names.json").write_text(json.dumps(names, indent=1, sort_keys=True) + "\n")


def check_export(folder: Path, fixture: str, ours: Path) -> None:
    rows = [json.loads(l) for l in (OUT / "rows.jsonl").read_text().splitlines() if l.strip()]
    got_rows, _, got = row_losses(load(folder), rows)
    mine = json.loads(ours.read_text())
    worst = max(abs(a - b["loss"]) / abs(a) for a, b in zip(got_rows, mine["rows"]))
    print(f"{folder}: transformers loss {got:.7f}, vkformers {mine['loss']:.7f}, worst row rel {worst:.2e}")
    if worst > 1e-5 or abs(got - mine["loss"]) / abs(got) > 1e-5:
        sys.exit("export check FAILED")
    print("export check ok: transformers loads the folder and its logits give our losses")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--check-export", type=Path)
    ap.add_argument("--fixture", default="llama")
    ap.add_argument("--ours", type=Path)
    a = ap.parse_args()
    sys.path.insert(0, str(HERE))
    from make_fixtures import check_versions

    check_versions()
    import torch

    torch.set_num_threads(1)
    torch.use_deterministic_algorithms(True)
    if a.check_export:
        check_export(a.check_export, a.fixture, a.ours)
        return
    OUT.mkdir(parents=True, exist_ok=True)
    rows = make_rows(128)
    (OUT / "rows.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    for name in MODELS:
        train_two_steps(name, rows)
    decay_names()


if __name__ == "__main__":
    main()
