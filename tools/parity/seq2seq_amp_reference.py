#!/usr/bin/env python3
"""bf16 mixed-precision training references of encoder-decoders for `vkformers train --bf16`
(`cargo test -p vkformers-cli --test amp_parity seq2seq`).

Offline, with the pinned versions of requirements.txt. The real `Seq2SeqTrainer` with `bf16=True`
(accelerate's CPU autocast: float32 master weights, gradients and AdamW moments; matmul-like ops
in bfloat16) for two steps on the tokenized text pairs of tests/fixtures_train/seq2seq/ (written
by seq2seq_train_reference.py), with the settings of encoder_train_reference.trainer_steps (batch
2, sequential, constant lr 1e-3, AdamW eps 1e-6, no decay, no clipping), and the same without
mixed precision (the f32 losses, for the check that a run really computed in 16 bits). Writes
tests/fixtures_amp/<name>_bf16/: update.safetensors (the parameters after minus before, under the
fixture's stored names) and meta.json in amp_reference.py's layout (the fields amp_parity.rs
reads: losses, f32_losses, initial_weights, update, vkformers_args, and ill_conditioned: the
elements the update cosines leave out, below 1e-6 or below torch's own bf16 rounding noise, see
`below_bf16_noise`).
"""

from __future__ import annotations

import json
import tempfile

import make_fixtures as mf  # sets the offline environment before transformers is imported
from encoder_train_reference import SEED
from seq2seq_train_reference import load

OUT = mf.REPO / "tests" / "fixtures_amp"
FIXTURES = mf.REPO / "tests" / "fixtures"
DATA = "tests/fixtures_train/seq2seq/{name}_tokenized.jsonl"


def run(name: str, bf16: bool):
    import torch
    from safetensors import safe_open
    from transformers import (DataCollatorForSeq2Seq, PreTrainedTokenizerFast, Seq2SeqTrainer, Seq2SeqTrainingArguments,
                              TrainerCallback)

    rows = [json.loads(l) for l in (mf.REPO / DATA.format(name=name)).read_text().splitlines() if l.strip()]
    tok = PreTrainedTokenizerFast.from_pretrained(mf.REPO / "tests" / "fixtures_train" / "seq2seq" / f"{name}_tokenizer")
    torch.manual_seed(SEED)
    model = load(FIXTURES / name)
    params = {n for n, p in model.named_parameters() if p.requires_grad}
    with safe_open(FIXTURES / name / "model.safetensors", "pt") as f:
        stored = [k for k in f.keys() if k in params]
    before = {k: v.detach().clone() for k, v in model.state_dict().items() if k in stored}
    collate = DataCollatorForSeq2Seq(tok, model=model, label_pad_token_id=-100, return_tensors="pt")
    with tempfile.TemporaryDirectory() as tmp:
        args = Seq2SeqTrainingArguments(
            output_dir=tmp, per_device_train_batch_size=2, max_steps=2, learning_rate=1e-3,
            lr_scheduler_type="constant", warmup_steps=0, optim="adamw_torch", adam_beta1=0.9,
            adam_beta2=0.999, adam_epsilon=1e-6, weight_decay=0.0, max_grad_norm=0.0,
            train_sampling_strategy="sequential", use_cpu=True, report_to=[], save_strategy="no",
            logging_steps=1, seed=SEED, dataloader_num_workers=0, bf16=bf16,
        )
        grads: list[dict] = []

        class Grads(TrainerCallback):
            def on_pre_optimizer_step(self, args, state, control, **kwargs):
                p = dict(model.named_parameters())
                grads.append({k: p[k].grad.detach().clone() for k in stored})

        trainer = Seq2SeqTrainer(model=model, args=args, train_dataset=rows, data_collator=collate,
                                 callbacks=[Grads()])
        trainer.train()
    losses = [h["loss"] for h in trainer.state.log_history if "loss" in h]
    after = model.state_dict()
    return losses, {k: (after[k] - before[k]).float().contiguous() for k in stored}, grads


def ill_conditioned(grads: list[dict]) -> dict:
    """amp_reference.ill_conditioned's rule on the f32 run's gradients: per tensor, the elements
    below 1e-6 at every step without being zero at every step (Marian's key biases, zero in exact
    arithmetic, are rounding noise AdamW scales up to ~lr per step)."""
    import torch

    out = {}
    for k in grads[0]:
        g = torch.stack([s[k].flatten() for s in grads])
        bad = (g.abs().amax(0) < 1e-6) & (g != 0).any(0)
        if bool(bad.any()):
            out[k] = bad.nonzero().flatten().tolist()
    return out


def below_bf16_noise(f32_grads: list[dict], bf16_grads: list[dict]) -> dict:
    """Per tensor, the elements whose f32 gradient is, at some step, smaller in magnitude than
    bf16's rounding noise on that tensor at that step: the RMS over the tensor of torch's own
    bf16 gradient minus its f32 one. Their sign is decided by rounding, not by the model (torch's
    bf16 run flips some of them against its f32 run), and AdamW's first steps move an element by
    about ±lr whatever its gradient's size, so on a 16-element norm vector one flip alone takes
    the tensor's update cosine to ~0.95. Any bf16 implementation rounding in other places (or in
    another order) flips other ones."""
    import torch

    out = {}
    for k in f32_grads[0]:
        bad = torch.zeros(f32_grads[0][k].numel(), dtype=torch.bool)
        for f32, bf16 in zip(f32_grads, bf16_grads):
            g, noisy = f32[k].flatten().double(), bf16[k].flatten().double()
            bad |= g.abs() < (noisy - g).pow(2).mean().sqrt()
        if bool(bad.any()):
            out[k] = bad.nonzero().flatten().tolist()
    return out


def merged(*rules: dict) -> dict:
    """The union of the rules' flat indices, per tensor, sorted."""
    out: dict = {}
    for rule in rules:
        for k, idx in rule.items():
            out[k] = sorted(set(out.get(k, [])) | set(idx))
    return out


def main() -> None:
    mf.check_versions()
    torch = mf.setup_torch()
    from safetensors.torch import save_file
    from transformers.utils import logging as hf_logging

    hf_logging.set_verbosity_error()
    for name in ("t5", "marian"):
        f32_losses, f32_update, f32_grads = run(name, bf16=False)
        assert len(f32_grads) == 2, "one gradient snapshot per step"
        losses, update, bf16_grads = run(name, bf16=True)
        case = f"{name}_bf16"
        d = OUT / case
        d.mkdir(parents=True, exist_ok=True)
        save_file(update, str(d / "update.safetensors"), metadata={"format": "pt"})
        dot = sum(float((update[k].double() * f32_update[k].double()).sum()) for k in update)
        na = sum(float(update[k].double().pow(2).sum()) for k in update) ** 0.5
        nb = sum(float(f32_update[k].double().pow(2).sum()) for k in update) ** 0.5
        data = DATA.format(name=name)
        noisy = below_bf16_noise(f32_grads, bf16_grads)
        meta = {
            "case": case, "model": name, "precision": "bf16",
            "initial_weights": f"tests/fixtures/{name}/model.safetensors", "data": data,
            "update": f"tests/fixtures_amp/{case}/update.safetensors",
            "trainer": "transformers.Seq2SeqTrainer(bf16=True, use_cpu=True), DataCollatorForSeq2Seq, 2 steps",
            "losses": losses, "f32_losses": f32_losses, "f32_update_cosine": dot / (na * nb),
            "vkformers_args": ["train", "--model", f"tests/fixtures/{name}", "--data", data, "--out", "OUT",
                               "--max-steps", "2", "--batch-size", "2", "--no-shuffle", "--schedule", "constant",
                               "--lr", "1e-3", "--eps", "1e-6", "--weight-decay", "0", "--max-grad-norm", "0",
                               "--bf16"],
            "versions": mf.check_versions(),
            "ill_conditioned": {
                "rule": "elements whose gradient in the f32 run is below 1e-6 in magnitude at every step and not "
                        "exactly zero at every step: rounding noise AdamW scales up to ~lr per step (key biases, zero "
                        "in exact arithmetic); and elements whose f32 gradient is, at some step, smaller in magnitude "
                        "than the RMS over their tensor of torch's bf16 gradient minus its f32 gradient at that step "
                        "(bf16's rounding noise decides their sign, and AdamW steps them ~lr whatever their size); "
                        "amp_parity.rs leaves both out of the cosines",
                "flat_indices": merged(ill_conditioned(f32_grads), noisy),
                "below_bf16_noise": sum(len(v) for v in noisy.values()),
                "elements": sum(v.numel() for v in update.values()),
            },
        }
        (d / "meta.json").write_text(json.dumps(meta, indent=2) + "\n")
        print(f"{case}: losses {losses} (f32 {f32_losses}), bf16 vs f32 update cosine {dot / (na * nb):.5f}")


if __name__ == "__main__":
    main()
