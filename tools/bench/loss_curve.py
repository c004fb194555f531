#!/usr/bin/env python3
"""Mixed precision against f32 over a real training run: pre-trains the same random-init Llama
(the 134M shape of train.py by default) from scratch on the demo corpus (demo/corpus.jsonl, with a
byte-level BPE tokenizer trained on it) twice with `vkformers train`, once `--bf16` and once
`--fp32`, same seed, data order and schedule, and compares the loss curves.

The check of issue 13: the `--bf16` curve ends within 2% of the `--fp32` one. "Ends" is the mean
loss of the last `--tail` steps of each run (one step's loss moves with its batch; both runs see
the same batches, so the tails compare like with like).

  python3 tools/bench/loss_curve.py --vkformers target/release/vkformers [--steps 200] [--json F]
  python3 tools/bench/loss_curve.py --dry-run     # tiny shape, 6 steps: checks the plumbing

Only the Python standard library is needed (no torch).
"""
from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]

# The 134M shape of train.py (common.SHAPES["134m"]) without its vocabulary: the tokenizer trained
# on the corpus sets vocab_size. "tiny" is for --dry-run.
SHAPES = {
    "134m": dict(hidden_size=768, num_hidden_layers=12, num_attention_heads=12, num_key_value_heads=12,
                 intermediate_size=2048, batch=8, seq=1024),
    "tiny": dict(hidden_size=64, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                 intermediate_size=160, batch=2, seq=64),
}


def config(shape: str, vocab: int) -> dict:
    s = SHAPES[shape]
    return {
        "architectures": ["LlamaForCausalLM"],
        "model_type": "llama",
        **{k: s[k] for k in ("hidden_size", "num_hidden_layers", "num_attention_heads",
                             "num_key_value_heads", "intermediate_size")},
        "vocab_size": vocab,
        "max_position_embeddings": max(2048, s["seq"]),
        "hidden_act": "silu",
        "rms_norm_eps": 1e-5,
        "rope_theta": 10000.0,
        "initializer_range": 0.02,
        "tie_word_embeddings": False,
        "torch_dtype": "bfloat16",
    }


def run(binary: str, cfg_path: Path, out: Path, precision: str, a) -> list[float]:
    """Trains one run; returns its loss per step (from OUT/metrics.jsonl)."""
    shutil.rmtree(out, ignore_errors=True)
    s = SHAPES[a.shape]
    cmd = [binary, "train", "--init-from-config", str(cfg_path), "--train-tokenizer", str(a.vocab),
           "--data", str(REPO / "demo" / "corpus.jsonl"), "--out", str(out),
           "--seq-len", str(s["seq"]), "--batch-size", str(s["batch"]), "--max-steps", str(a.steps),
           "--lr", str(a.lr), "--schedule", "cosine", "--warmup-steps", str(max(1, a.steps // 10)),
           "--weight-decay", "0.1", "--seed", "0", f"--{precision}"]
    if a.vk_device:
        cmd += ["--device", a.vk_device]
    print("  $ " + " ".join(cmd), flush=True)
    t0 = time.time()
    done = subprocess.run(cmd, capture_output=True, text=True)
    if done.returncode != 0:
        sys.exit(f"{precision} run failed ({done.returncode}):\n{done.stdout[-2000:]}{done.stderr[-2000:]}")
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines() if line.strip()]
    losses = [r["loss"] for r in sorted(rows, key=lambda r: r["step"]) if "loss" in r and "step" in r]
    print(f"  {precision}: {len(losses)} steps in {time.time() - t0:.1f} s, "
          f"loss {losses[0]:.4f} -> {losses[-1]:.4f}", flush=True)
    return losses


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--vkformers", default=str(REPO / "target" / "release" / "vkformers"))
    p.add_argument("--vk-device", help="vkformers --device (index or part of the name)")
    p.add_argument("--shape", default="134m", choices=sorted(SHAPES))
    p.add_argument("--steps", type=int, default=200)
    p.add_argument("--vocab", type=int, default=8192, help="tokens of the BPE tokenizer trained on the corpus")
    p.add_argument("--lr", type=float, default=6e-4)
    p.add_argument("--tail", type=int, default=20, help="last steps averaged as the end of a curve")
    p.add_argument("--tolerance", type=float, default=0.02, help="largest relative gap of the curves' ends")
    p.add_argument("--workdir", type=Path, default=REPO / "target" / "bench-work" / "loss-curve")
    p.add_argument("--json", help="write both curves and the verdict here")
    p.add_argument("--dry-run", action="store_true", help="tiny shape, 6 steps, 512 tokens")
    a = p.parse_args()
    if a.dry_run:
        a.shape, a.steps, a.vocab, a.tail = "tiny", 6, 512, 3
    a.workdir.mkdir(parents=True, exist_ok=True)
    cfg_path = a.workdir / f"config-{a.shape}.json"
    cfg_path.write_text(json.dumps(config(a.shape, a.vocab), indent=2) + "\n")

    curves = {prec: run(a.vkformers, cfg_path, a.workdir / prec, prec, a) for prec in ("bf16", "fp32")}
    tail = min(a.tail, a.steps)
    ends = {prec: sum(c[-tail:]) / tail for prec, c in curves.items()}
    gap = abs(ends["bf16"] - ends["fp32"]) / ends["fp32"]
    ok = gap <= a.tolerance
    print(f"\n{a.shape}, {a.steps} steps, mean loss of the last {tail}: bf16 {ends['bf16']:.4f}, "
          f"fp32 {ends['fp32']:.4f}, gap {100 * gap:.2f}% ({'within' if ok else 'OUTSIDE'} "
          f"{100 * a.tolerance:.0f}%)")
    for step in sorted({0, a.steps // 4, a.steps // 2, 3 * a.steps // 4, a.steps - 1}):
        print(f"  step {step + 1:4d}: bf16 {curves['bf16'][step]:.4f}  fp32 {curves['fp32'][step]:.4f}")
    if a.json:
        Path(a.json).write_text(json.dumps({"shape": a.shape, "steps": a.steps, "vocab": a.vocab, "tail": tail,
                                            "curves": curves, "ends": ends, "gap": gap, "within": ok}, indent=1))
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
