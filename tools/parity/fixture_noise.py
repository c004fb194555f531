"""How far PyTorch itself lands from a decoder fixture: its own f32 run (1 and N threads) and an
f64 run of the same forward / backward / two AdamW steps, measured as the parity test measures
vkformers (gradients: relative L2 per tensor; parameters after two steps: worst |Δ| over elements
whose fixture gradient is at least AdamW's eps). When a parity margin is thin on some device,
this tells the fixture's own f32 noise from an error of ours.

    /tmp/parity-venv/bin/python tools/parity/fixture_noise.py cwm [--threads 4]

Reads `tests/fixtures/<name>/` only; writes nothing.
"""

import argparse
from pathlib import Path

import torch
from safetensors.torch import load_file
from transformers import AutoModelForCausalLM

ROOT = Path(__file__).resolve().parents[2] / "tests" / "fixtures"
ADAMW = dict(lr=1e-3, betas=(0.9, 0.999), eps=1e-6, weight_decay=0.01)  # make_fixtures.ADAMW


def run(folder: Path, ref: dict, dtype: torch.dtype, threads: int):
    """(first-step gradients, parameters after two AdamW steps) by name, as float64."""
    torch.set_num_threads(threads)
    model = AutoModelForCausalLM.from_pretrained(folder, dtype=dtype, attn_implementation="eager")
    model.eval()  # as the fixtures: eval mode, gradients still taken
    batch = {k: ref[k].long() for k in ("input_ids", "attention_mask", "labels")}
    opt = torch.optim.AdamW(model.parameters(), **ADAMW)
    grads = {}
    for step in range(2):
        opt.zero_grad()
        model(**batch).loss.backward()
        if step == 0:
            grads = {n: p.grad.flatten().double().clone() for n, p in model.named_parameters()}
        opt.step()
    return grads, {n: p.detach().flatten().double() for n, p in model.named_parameters()}


def step2_worst(ref: dict, params: dict) -> tuple[float, str]:
    """Worst |Δ| to the fixture's `step2.*` over elements with |grad| >= eps, and where."""
    worst = (0.0, "")
    for n, p in params.items():
        want, g = ref[f"step2.{n}"].flatten().double(), ref[f"grad.{n}"].flatten()
        kept = torch.nonzero(g.abs() >= ADAMW["eps"]).flatten()
        if kept.numel() == 0:
            continue
        d = (p[kept] - want[kept]).abs()
        if d.max().item() > worst[0]:
            i = int(kept[d.argmax()])
            worst = (d.max().item(), f"{n}[{i}] (fixture gradient {g[i].item():.4e})")
    return worst


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("fixture")
    ap.add_argument("--threads", type=int, default=4)
    a = ap.parse_args()
    folder = ROOT / a.fixture
    ref = load_file(folder / "reference.safetensors")
    runs = {
        "f32, 1 thread": run(folder, ref, torch.float32, 1),
        f"f32, {a.threads} threads": run(folder, ref, torch.float32, a.threads),
        "f64": run(folder, ref, torch.float64, 1),
    }
    truth = runs["f64"][0]
    for label, (grads, params) in runs.items():
        rel = max((grads[n] - t).norm().item() / max(t.norm().item(), 1e-300) for n, t in truth.items())
        fixture = max(
            (ref[f"grad.{n}"].flatten().double() - t).norm().item() / max(t.norm().item(), 1e-300)
            for n, t in truth.items()
        )
        d, where = step2_worst(ref, params)
        print(f"torch {label}: gradients vs f64 worst rel L2 {rel:.2e} (the fixture's: {fixture:.2e}); "
              f"after two steps vs the fixture {d:.2e} at {where}")


if __name__ == "__main__":
    main()
