#!/usr/bin/env python3
"""GEMM side by side: `vkformers bench gemm` and `torch.matmul` on the same GPU, same run.

Usage: python3 tools/bench/gemm.py [--vkformers PATH] [--sizes 4096 8192] [--dtypes f32 f16 bf16]
                                  [--c32] [--trans-b] [--engine E --unroll U --raster R]
Prints a table of TFLOP/s and the ratio vkformers / torch. TF32 is off in torch, so the f32
column compares true f32 products. f16/bf16 products write C in the operand type on both sides,
as `torch.matmul` does (`bench gemm --c16`; `--c32` keeps vkformers' f32 C, f32 accumulation
either way). `--trans-b` times both sides with B stored [n, k] (`torch.matmul(a, b.t())`, the
nn.Linear layout of a forward product) instead of [k, n]. `--engine/--unroll/--raster` pass a cooperative-matrix-2 tile and its knobs through
(defaults: the measured best). Needs torch with CUDA (no other Python package).
"""
import argparse
import json
import subprocess
import sys

import torch


def torch_tflops(n: int, dtype: str, trans_b: bool = False, iters: int = 20) -> float:
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    dt = {"f32": torch.float32, "f16": torch.float16, "bf16": torch.bfloat16}[dtype]
    a = torch.rand(n, n, device="cuda", dtype=dt) * 2 - 1
    b = torch.rand(n, n, device="cuda", dtype=dt) * 2 - 1
    if trans_b:
        b = b.t()  # a [n, k] buffer seen as [k, n]: cuBLAS reads it transposed, no copy
    for _ in range(3):
        torch.matmul(a, b)
    times = []
    for _ in range(iters):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        torch.matmul(a, b)
        end.record()
        torch.cuda.synchronize()
        times.append(start.elapsed_time(end) * 1e-3)
    times.sort()
    return 2 * n**3 / times[len(times) // 2] / 1e12


def vk_tflops(binary: str, n: int, dtype: str, extra: list) -> dict:
    c16 = ["--c16"] if dtype != "f32" and "--c32" not in extra else []
    knobs = [a for a in extra if a != "--c32"]
    out = subprocess.run([binary, "bench", "gemm", "--m", str(n), "--n", str(n), "--k", str(n),
                          "--dtype", dtype, "--json", *c16, *knobs], capture_output=True, text=True)
    if out.returncode != 0:
        return {"error": (out.stderr or out.stdout).strip().splitlines()[-1]}
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--vkformers", default="target/release/vkformers")
    p.add_argument("--sizes", type=int, nargs="+", default=[4096, 8192])
    p.add_argument("--dtypes", nargs="+", default=["f32", "f16", "bf16"])
    p.add_argument("--c32", action="store_true", help="f32 C for f16/bf16 products (torch writes the operand type)")
    p.add_argument("--trans-b", action="store_true", help="B stored [n, k] on both sides")
    p.add_argument("--engine")
    p.add_argument("--unroll")
    p.add_argument("--raster")
    args = p.parse_args()
    extra = (["--c32"] if args.c32 else []) + (["--trans-b"] if args.trans_b else [])
    for flag in ("engine", "unroll", "raster"):
        if getattr(args, flag) is not None:
            extra += [f"--{flag}", getattr(args, flag)]
    layout = "NT (B [n, k])" if args.trans_b else "NN (B [k, n])"
    print(f"device: {torch.cuda.get_device_name()}  torch {torch.__version__}  layout {layout}")
    print(f"{'size':>6} {'dtype':>5} {'vkformers TFLOP/s':>18} {'torch TFLOP/s':>14} {'ratio':>6}")
    for n in args.sizes:
        for dt in args.dtypes:
            vk = vk_tflops(args.vkformers, n, dt, extra)
            th = torch_tflops(n, dt, args.trans_b)
            if "error" in vk:
                print(f"{n:>6} {dt:>5} {'n/a':>18} {th:>14.1f} {'-':>6}   ({vk['error']})")
            else:
                print(f"{n:>6} {dt:>5} {vk['tflops']:>18.1f} {th:>14.1f} {vk['tflops'] / th:>6.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
