#!/usr/bin/env python3
"""Training side by side: `vkformers train` and PyTorch on the same GPU, same run.

For each shape (random-init Llama, bf16 folder built offline; 134m at batch 8 x 1024, 1.1b =
TinyLlama's shape at batch 4 x 1024; `moe`: a Mixtral-shaped routed MoE, 8 experts, top-2, hidden
1024, 16 layers, batch 4 x 1024, transformers with its default experts implementation) and a dataset of random-token rows of exactly seq_len
tokens (pre-tokenized `input_ids` JSONL, no tokenizer needed):

  vkformers      `vkformers train --model DIR --data data.jsonl --out OUT --batch-size B
                 --seq-len S --max-steps N --no-shuffle` + the optimizer flags below +
                 --extra-args; tokens/s is the median of metrics.jsonl's `tokens_per_s` after
                 the warm-up steps, peak memory the largest `device_memory_peak_bytes` there
                 (n/a while vkformers does not write it).
  torch eager    fp32 weights, torch.autocast(bfloat16), SDPA attention, fused AdamW, the same
                 constant lr, betas, eps, no weight decay, gradient clipping at 1.0, the same
                 batches in the same order; tokens/s is the median over steps after the warm-up
                 of B*S / step time (host time around a synchronised step, like vkformers' step);
                 peak memory is torch.cuda.max_memory_allocated (reset per run).
  torch compile  the same with torch.compile(model).

Both sides count every fed token (B*S a step). The first loss of each system is printed as a
check that they train the same model on the same data (~ln(vocab) at random init).

Usage:
  python3 tools/bench/train.py [--vkformers PATH] [--shapes 134m 1.1b] [--steps 20] [--warmup 3]
      [--skip-compile] [--skip-vkformers] [--extra-args "--bf16"] [--workdir DIR] [--json FILE]
  python3 tools/bench/train.py --dry-run     # tiny model, 2 steps, CPU torch, no compile;
                                             # vkformers too if target/debug/vkformers exists
  python3 tools/bench/train.py --report a.json b.json   # one table from runs split up
      (e.g. one shape per run, or --skip-vkformers --skip-eager for a compile-only run)
Models and data are built once under --workdir (default target/bench-work) and reused.
Needs torch (CUDA), transformers, safetensors and numpy; nothing from the network.
"""
from __future__ import annotations

import argparse
import json
import shlex
import shutil
import sys
import time
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
import common as C  # noqa: E402

LR = 3e-4
BETAS = (0.9, 0.999)
EPS = 1e-8
MAX_GRAD_NORM = 1.0
SEED = 0


def write_data(workdir: Path, shape: str, rows: int, seq: int, seed: int = SEED) -> Path:
    """`rows` rows of `seq` random token ids each, `{"input_ids": [...]}` per line."""
    vocab = C.SHAPES[shape]["vocab_size"]
    path = workdir / f"data-{shape}-{rows}x{seq}-s{seed}.jsonl"
    if not path.is_file():
        rng = np.random.default_rng(seed)
        ids = rng.integers(0, vocab, size=(rows, seq), dtype=np.int64)
        tmp = path.with_suffix(".tmp")
        with open(tmp, "w") as f:
            for r in ids:
                f.write(json.dumps({"input_ids": r.tolist()}) + "\n")
        tmp.rename(path)
    return path


def read_data(path: Path) -> list[list[int]]:
    with open(path) as f:
        return [json.loads(l)["input_ids"] for l in f if l.strip()]


def vk_train(binary: Path | None, args, shape: str, model_dir: Path, data: Path, batch: int, seq: int) -> dict:
    res = {"system": "vkformers"}
    if binary is None:
        res["error"] = C.NO_BINARY
        return res
    out = args.workdir / f"vk-train-{shape}"
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir(parents=True)
    cmd = [str(binary)] + (["--device", args.vk_device] if args.vk_device else []) + [
        "train", "--model", str(model_dir), "--data", str(data), "--out", str(out),
        "--batch-size", str(batch), "--seq-len", str(seq), "--max-steps", str(args.steps), "--no-shuffle",
        "--lr", str(LR), "--schedule", "constant", "--warmup-steps", "0", "--weight-decay", "0",
        "--beta1", str(BETAS[0]), "--beta2", str(BETAS[1]), "--eps", str(EPS),
        "--max-grad-norm", str(MAX_GRAD_NORM), "--seed", str(SEED),
    ] + shlex.split(args.extra_args)
    log = args.workdir / f"vk-train-{shape}.log"
    print("  $ " + shlex.join(cmd), flush=True)
    code, _, wall = C.run_logged(cmd, log, timeout=args.timeout)
    # vkformers' own summary: device, sequences, steps and (newer builds) the precision.
    res.update(cmd=cmd, log=str(log), wall_s=wall, vk_summary=C.log_line(log, "training "))
    lines = []
    mpath = out / "metrics.jsonl"
    if mpath.is_file():
        lines = [json.loads(l) for l in mpath.read_text().splitlines() if l.strip()]
    if code != 0:
        res["error"] = f"exit {code}: {C.tail(log)} (log: {log})"
        if not lines:
            return res
    if not lines:
        res["error"] = f"no metrics.jsonl lines (log: {log})"
        return res
    tps = [l.get("tokens_per_s") for l in lines]
    peaks = [l["device_memory_peak_bytes"] for l in lines if l.get("device_memory_peak_bytes") is not None]
    res.update(
        steps=len(lines),
        step_tokens_per_s=tps,
        tokens_per_s=C.median(C.after_warmup(tps, args.warmup)),
        peak_bytes=max(peaks) if peaks else None,
        first_loss=lines[0].get("loss"),
        last_loss=lines[-1].get("loss"),
        tokens_per_step=lines[-1].get("tokens"),
    )
    return res


def torch_train(model_dir: Path, rows: list[list[int]], batch: int, seq: int, args, dev: str, compiled: bool) -> dict:
    system = "torch compile" if compiled else "torch eager"
    return C.torch_run(system, dev, lambda: _torch_train(model_dir, rows, batch, seq, args, dev, compiled))


def _torch_train(model_dir: Path, rows: list[list[int]], batch: int, seq: int, args, dev: str, compiled: bool) -> dict:
    res = {}
    torch.manual_seed(SEED)
    model = C.load_hf_model(model_dir, torch.float32, dev)
    model.train()
    params = [p for p in model.parameters() if p.requires_grad]
    try:
        opt = torch.optim.AdamW(params, lr=LR, betas=BETAS, eps=EPS, weight_decay=0.0, fused=True)
        res["fused_adamw"] = True
    except (RuntimeError, ValueError, TypeError) as e:  # no fused kernel on this device
        if dev == "cuda":
            raise
        opt = torch.optim.AdamW(params, lr=LR, betas=BETAS, eps=EPS, weight_decay=0.0, foreach=True)
        res["fused_adamw"] = f"no ({e})"
    fwd = torch.compile(model) if compiled else model
    batches = [torch.tensor(rows[(i * batch) % len(rows):][:batch], dtype=torch.long, device=dev)
               for i in range(args.steps)]
    C.reset_peak(dev)
    times, losses = [], []
    for x in batches:
        C.sync(dev)
        t0 = time.perf_counter()
        with torch.autocast(device_type=dev, dtype=torch.bfloat16):
            loss = fwd(input_ids=x, labels=x).loss
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, MAX_GRAD_NORM)
        opt.step()
        opt.zero_grad(set_to_none=True)
        C.sync(dev)
        times.append(time.perf_counter() - t0)
        losses.append(loss.item())
    tps = [batch * seq / t for t in times]
    res.update(
        steps=len(times),
        step_tokens_per_s=tps,
        tokens_per_s=C.median(C.after_warmup(tps, args.warmup)),
        peak_bytes=C.peak_bytes(dev),
        first_loss=losses[0],
        last_loss=losses[-1],
        tokens_per_step=batch * seq,
    )
    return res


def print_report(results: list[dict]) -> None:
    headers = ["shape", "system", "tokens/s", "peak GiB", "x eager", "x compile", "loss@1", "loss@N"]
    table = []
    for shape in dict.fromkeys(r["shape"] for r in results):
        rs = [r for r in results if r["shape"] == shape]
        base = {r["system"]: r.get("tokens_per_s") for r in rs}
        for r in rs:
            t = r.get("tokens_per_s")
            table.append([
                shape, r["system"] + (" (failed)" if "error" in r and t is None else ""), C.fmt_num(t),
                C.fmt_gib(r.get("peak_bytes")), C.ratio(t, base.get("torch eager")),
                C.ratio(t, base.get("torch compile")),
                C.fmt_num(r.get("first_loss"), 4), C.fmt_num(r.get("last_loss"), 4),
            ])
    C.print_table(headers, table)
    for r in results:
        if "error" in r:
            print(f"{r['shape']} {r['system']}: {r['error']}")


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--shapes", nargs="+", default=["134m", "1.1b"], choices=sorted(C.SHAPES))
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--warmup", type=int, default=3, help="steps left out of the median")
    p.add_argument("--batch-size", type=int, help="override the shape's batch")
    p.add_argument("--seq-len", type=int, help="override the shape's 1024")
    C.add_run_args(p, "train", ', e.g. "--bf16"', "tiny model, 2 steps, CPU torch, no compile")
    args = p.parse_args()
    if C.report_only(args, "train", print_report):
        return 0
    if args.dry_run:
        shapes = [x for x in args.shapes if x in C.TINY_SHAPES] or ["tiny"]
        args.shapes, args.steps, args.warmup = shapes, 2, 1
        args.skip_compile = not args.compile
    dev, binary = C.prepare_run(args)
    meta = C.run_meta(dev, binary, args, steps=args.steps, lr=LR)
    C.print_meta(meta, binary)
    results = []

    def add(r: dict, shape: str, batch: int, seq: int) -> None:
        r.update(shape=shape, batch=batch, seq=seq, params=C.n_params(shape))
        if "error" in r and r["system"] == "vkformers":
            print(f"  vkformers: {r['error']}", flush=True)
        elif "tokens_per_s" in r:
            print(f"  {r['system']}: {C.fmt_num(r['tokens_per_s'])} tokens/s, peak {C.fmt_gib(r.get('peak_bytes'))} GiB",
                  flush=True)
        results.append(r)
        C.write_json(args.json, {"benchmark": "train", **meta, "results": results}, quiet=True)

    for shape in args.shapes:
        s = C.SHAPES[shape]
        batch, seq = args.batch_size or s["batch"], args.seq_len or s["seq"]
        model_dir = C.build_model_dir(args.workdir, shape)
        data = write_data(args.workdir, shape, batch * args.steps, seq)
        rows = read_data(data)
        print(f"{shape}: {C.n_params(shape) / 1e6:.1f}M parameters, batch {batch} x {seq}, {args.steps} steps",
              flush=True)
        if not args.skip_vkformers:  # first, before torch holds device memory
            add(vk_train(binary, args, shape, model_dir, data, batch, seq), shape, batch, seq)
        if not args.skip_torch:
            if not args.skip_eager:
                add(torch_train(model_dir, rows, batch, seq, args, dev, compiled=False), shape, batch, seq)
            if not args.skip_compile:
                add(torch_train(model_dir, rows, batch, seq, args, dev, compiled=True), shape, batch, seq)
    print()
    print_report(results)
    C.write_json(args.json, {"benchmark": "train", **meta, "results": results})
    return 0


if __name__ == "__main__":
    sys.exit(main())
