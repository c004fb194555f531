#!/usr/bin/env python3
"""Generation side by side: `vkformers generate` and transformers on the same GPU, same run.

The random-init 1.1B Llama (TinyLlama's shape, bf16 folder built offline by common.py, no EOS id
so every row runs to --max-new-tokens) with random prompt ids, greedy, 128 new tokens, for the
cases: prefill at 512 and 2048 prompt tokens (batch 1), decode at batch 1, 8 and 64 (512-token
prompts); batch 1 x 512 is one run serving both.

  vkformers       `vkformers generate --model DIR <prompts> --max-new-tokens N --greedy --json`,
                  its `timings` read back: prefill tokens/s (prompt tokens / time to the first
                  new tokens on the host) and decode tokens/s (the tokens after each row's first
                  / the time of the decode steps); peak memory from `device_memory_peak_bytes`
                  (top level or in `timings`) when vkformers writes it, n/a otherwise. One
                  process runs --warmup + --repeats generations (`generate --repeat`; the
                  median of the last --repeats, warm as torch's side is); --cold-processes
                  (or a build without --repeat) runs a process per run instead; the JSON keeps
                  the first run's prefill rate either way. Prompts: batch 1 through --prompt-ids; a batch through
                  --prompt-ids-file (JSONL, {"input_ids": [...]} per line) when `generate --help`
                  lists it, else --prompt-file on a copy of the folder with a WordLevel
                  tokenizer.json whose token `t<i>` is id i (the prompt ids the JSON echoes
                  back are checked against the ones sent).
  torch eager     model.generate, bf16 weights, SDPA, greedy, dynamic cache. The same two
                  numbers on the same definitions: time to first token = generate with
                  max_new_tokens=1, decode = B*(N-1) / (time of generate(N) - that).
                  "fwd prefill" is one plain forward of the prompt (use_cache=True).
  torch compile   cache_implementation="static": transformers compiles the decode step
                  (torch.compile, mode reduce-overhead) itself; failures are caught and shown.
Peak memory on the torch side is torch.cuda.max_memory_allocated (weights included), reset per
case. Each row also checks that all N tokens came out, and the JSON records how many rows'
first new token agree with torch eager (a random model's logits are close to ties, so bf16
rounding can change them: information, not a test).

Usage:
  python3 tools/bench/generate.py [--vkformers PATH] [--prefill-lens 512 2048] [--batches 1 8 64]
      [--max-new-tokens 128] [--repeats 3] [--skip-compile] [--skip-vkformers] [--extra-args ".."]
      [--workdir DIR] [--json FILE]
  python3 tools/bench/generate.py --dry-run   # tiny model, CPU torch, no compile; vkformers
                                              # too if target/debug/vkformers exists
  python3 tools/bench/generate.py --report a.json b.json   # one table from runs split up
      (e.g. --skip-compile, then --skip-vkformers --skip-eager)
The model is built once under --workdir (default target/bench-work) and reused.
Needs torch (CUDA), transformers, safetensors and numpy; nothing from the network.
"""
from __future__ import annotations

import argparse
import json
import shlex
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
import common as C  # noqa: E402

SEED = 0


def cases(args) -> list[tuple[int, int]]:
    """(batch, prompt tokens) of every run, in order, without repeats."""
    out = [(1, p) for p in args.prefill_lens] + [(b, args.decode_prompt_len) for b in args.batches]
    return list(dict.fromkeys(out))


def case_name(b: int, p: int) -> str:
    return f"b{b} p{p}"


def make_prompts(batch: int, plen: int, vocab: int) -> list[list[int]]:
    rng = np.random.default_rng([SEED, batch, plen])
    return rng.integers(0, vocab, size=(batch, plen), dtype=np.int64).tolist()


# ---------------------------------------------------------------- vkformers


def prompt_mode(binary: Path, forced: str) -> str:
    if forced != "auto":
        return forced
    try:
        help = subprocess.run([str(binary), "generate", "--help"], capture_output=True, text=True, timeout=60).stdout
    except (OSError, subprocess.SubprocessError):
        help = ""
    return "ids-file" if "--prompt-ids-file" in help else "tokenizer"


def has_repeat(binary: Path) -> bool:
    """Whether this build's `generate` runs a generation several times in one process."""
    try:
        help = subprocess.run([str(binary), "generate", "--help"], capture_output=True, text=True, timeout=60).stdout
    except (OSError, subprocess.SubprocessError):
        return False
    return "--repeat" in help


def tokenizer_copy(workdir: Path, model_dir: Path, vocab: int) -> Path:
    """A sibling folder that links the model's files and adds the WordLevel tokenizer."""
    out = workdir / (model_dir.name + "-wordlevel")
    out.mkdir(parents=True, exist_ok=True)
    for f in model_dir.iterdir():
        if f.name in ("tokenizer.json", "tokenizer_config.json") or f.is_dir():
            continue
        link = out / f.name
        if link.is_symlink() or link.exists():
            link.unlink()
        link.symlink_to(f.resolve())
    if not (out / "tokenizer.json").is_file():
        C.write_wordlevel_tokenizer(out, vocab)
    return out


def parse_vk_json(stdout: str) -> dict:
    i = stdout.find("{")
    if i < 0:
        raise ValueError("no JSON on stdout")
    return json.loads(stdout[i:])


def vk_generate(binary: Path | None, args, model_dir: Path, prompts: list[list[int]], vocab: int) -> dict:
    b, p = len(prompts), len(prompts[0])
    res = {"system": "vkformers"}
    if binary is None:
        res["error"] = C.NO_BINARY
        return res
    name = case_name(b, p).replace(" ", "-")
    if b == 1:
        mode, folder, inp = "ids", model_dir, ["--prompt-ids", ",".join(map(str, prompts[0]))]
    else:
        mode = args.vk_mode
        if mode == "ids-file":
            f = args.workdir / f"prompts-{name}.jsonl"
            f.write_text("".join(json.dumps({"input_ids": r}) + "\n" for r in prompts))
            folder, inp = model_dir, ["--prompt-ids-file", str(f)]
        else:
            f = args.workdir / f"prompts-{name}.txt"
            f.write_text("".join(C.ids_as_text(r) + "\n" for r in prompts))
            folder, inp = tokenizer_copy(args.workdir, model_dir, vocab), ["--prompt-file", str(f)]
    cmd = [str(binary)] + (["--device", args.vk_device] if args.vk_device else []) + [
        "generate", "--model", str(folder)] + inp + [
        "--max-new-tokens", str(args.max_new_tokens), "--greedy", "--json"] + shlex.split(args.extra_args)
    shown = [c if len(c) < 200 else c[:60] + f"...({len(c)} chars)" for c in cmd]
    print(f"  $ {shlex.join(shown)}", flush=True)
    res.update(prompt_input=mode, cmd=shown)
    log = args.workdir / f"vk-generate-{name}.log"
    # In one process (`--repeat`): the warm-up runs build the pipelines and wake the GPU as
    # torch's warm-up does on its side; --cold-processes runs one process per run instead.
    warm = args.vk_repeat and not args.cold_processes
    procs = 1 if warm else args.warmup + args.repeats
    if warm:
        cmd = cmd + ["--repeat", str(args.warmup + args.repeats)]
    runs = []
    for i in range(procs):
        code, out, wall = C.run_logged(cmd, log, timeout=args.timeout)
        if code != 0:
            res["error"] = f"exit {code}: {C.tail(log)} (log: {log})"
            return res
        try:
            j = parse_vk_json(out)
        except ValueError as e:
            res["error"] = f"unreadable --json output ({e}): {out[:200]!r}"
            return res
        t = j.get("timings", {})
        peak = j.get("device_memory_peak_bytes", t.get("device_memory_peak_bytes"))
        rows = j.get("rows", [])
        problems = []
        if len(rows) != b:
            problems.append(f"{len(rows)} rows for {b} prompts")
        if any(r.get("prompt_ids") != q for r, q in zip(rows, prompts)):
            problems.append("prompt ids read back differ from those sent")
        lens = sorted({len(r.get("token_ids", [])) for r in rows})
        if lens != [args.max_new_tokens]:
            problems.append(f"new tokens per row {lens}, not {args.max_new_tokens}")
        first = [(r.get("token_ids") or [None])[0] for r in rows]
        # With --repeat, every run's timings (the rows are the last run's).
        for rt in (j.get("runs") or [t]) if warm else [t]:
            runs.append(dict(wall_s=wall, prefill=rt.get("prefill_tokens_per_second"),
                             decode=rt.get("decode_tokens_per_second"), peak=peak, timings=rt, problems=problems,
                             first=first))
    if warm and len(runs) != args.warmup + args.repeats:
        res["error"] = f"{len(runs)} runs reported for --repeat {args.warmup + args.repeats} (log: {log})"
        return res
    res["in_process_runs"] = bool(warm)
    # The first run of a process: what a one-off `vkformers generate` gets (pipelines built,
    # GPU woken from idle after the model load).
    res["first_run_prefill_tokens_per_s"] = runs[0]["prefill"]
    timed = runs[args.warmup:]
    peaks = [r["peak"] for r in runs if r["peak"] is not None]
    res.update(
        prefill_tokens_per_s=C.median([r["prefill"] for r in timed]),
        decode_tokens_per_s=C.median([r["decode"] for r in timed]),
        peak_bytes=max(peaks) if peaks else None,
        runs=[{k: v for k, v in r.items() if k != "first"} for r in runs],
        first_tokens=timed[-1]["first"],
        log=str(log),
    )
    problems = sorted({m for r in timed for m in r["problems"]})
    if problems:
        res["warning"] = "; ".join(problems)
    return res


# ---------------------------------------------------------------- transformers


def timed(fn, dev: str, n: int) -> tuple[list[float], object]:
    out, ts = None, []
    for _ in range(n):
        C.sync(dev)
        t0 = time.perf_counter()
        out = fn()
        C.sync(dev)
        ts.append(time.perf_counter() - t0)
    return ts, out


def torch_generate(model, prompts: list[list[int]], args, dev: str, static: bool) -> dict:
    system = "torch compile" if static else "torch eager"
    return C.torch_run(system, dev, lambda: _torch_generate(model, prompts, args, dev, static))


def _torch_generate(model, prompts: list[list[int]], args, dev: str, static: bool) -> dict:
    b, p, n = len(prompts), len(prompts[0]), args.max_new_tokens
    ids = torch.tensor(prompts, dtype=torch.long, device=dev)
    mask = torch.ones_like(ids)
    kw = dict(attention_mask=mask, do_sample=False, pad_token_id=0, eos_token_id=None)
    if static:
        kw["cache_implementation"] = "static"
    gen = lambda k: model.generate(ids, max_new_tokens=k, **kw)  # noqa: E731
    res = {}
    C.reset_peak(dev)
    with torch.inference_mode():
        # Warm-up: the static path compiles (and records CUDA graphs) during its first runs.
        for _ in range(max(args.warmup, 1) + (1 if static else 0)):
            gen(n)
        gen(1)
        if not static:
            model(input_ids=ids, attention_mask=mask, use_cache=True)
            fwd, _ = timed(lambda: model(input_ids=ids, attention_mask=mask, use_cache=True), dev, args.repeats)
            res["fwd_prefill_tokens_per_s"] = b * p / C.median(fwd)
        first, _ = timed(lambda: gen(1), dev, args.repeats)
        full, out = timed(lambda: gen(n), dev, args.repeats)
    ttft, total = C.median(first), C.median(full)
    res.update(
        prefill_tokens_per_s=b * p / ttft,
        decode_tokens_per_s=b * (n - 1) / (total - ttft) if total > ttft else None,
        ttft_s=ttft,
        generate_s=total,
        peak_bytes=C.peak_bytes(dev),
        first_tokens=out[:, p].tolist(),
    )
    if out.shape[1] != p + n:
        res["warning"] = f"{out.shape[1] - p} new tokens, not {n}"
    if static:
        res["decode_compiled"] = hasattr(model, "_compiled_call")
        if not res["decode_compiled"]:
            res["warning"] = "transformers did not compile the decode step (static cache, uncompiled)"
    return res


# ---------------------------------------------------------------- main


def print_report(results: list[dict]) -> None:
    # First-token agreement with torch eager, per case.
    for r in results:
        ref = next((e for e in results if e["system"] == "torch eager" and e["case"] == r["case"]), None)
        if r is not ref and ref and r.get("first_tokens") and ref.get("first_tokens"):
            a = sum(x == y for x, y in zip(r["first_tokens"], ref["first_tokens"]))
            r["first_token_agree"] = f"{a}/{len(ref['first_tokens'])}"
    headers = ["case", "system", "prefill tok/s", "decode tok/s", "peak GiB", "prefill x eager", "decode x eager",
               "prefill x compile", "decode x compile", "fwd prefill tok/s"]
    table = []
    for case in dict.fromkeys(r["case"] for r in results):
        rs = [r for r in results if r["case"] == case]
        base = {r["system"]: r for r in rs}
        eager, comp = base.get("torch eager", {}), base.get("torch compile", {})
        for r in rs:
            pf, dc = r.get("prefill_tokens_per_s"), r.get("decode_tokens_per_s")
            failed = "error" in r and pf is None
            table.append([
                case, r["system"] + (" (failed)" if failed else ""), C.fmt_num(pf), C.fmt_num(dc),
                C.fmt_gib(r.get("peak_bytes")),
                C.ratio(pf, eager.get("prefill_tokens_per_s")), C.ratio(dc, eager.get("decode_tokens_per_s")),
                C.ratio(pf, comp.get("prefill_tokens_per_s")), C.ratio(dc, comp.get("decode_tokens_per_s")),
                C.fmt_num(r.get("fwd_prefill_tokens_per_s")) if "fwd_prefill_tokens_per_s" in r else "-",
            ])
    C.print_table(headers, table)
    for r in results:
        for k in ("error", "warning"):
            if k in r:
                print(f"{r['case']} {r['system']}: {k}: {r[k]}")
    agree = [f"{r['case']} {r['system']} {r['first_token_agree']}" for r in results if "first_token_agree" in r]
    if agree:
        print("first new token equal to torch eager's: " + ", ".join(agree))


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--shape", default="1.1b", choices=sorted(C.SHAPES))
    p.add_argument("--prefill-lens", type=int, nargs="+", default=[512, 2048], help="prompt tokens at batch 1")
    p.add_argument("--batches", type=int, nargs="+", default=[1, 8, 64], help="decode batches")
    p.add_argument("--decode-prompt-len", type=int, default=512, help="prompt tokens of the decode cases")
    p.add_argument("--max-new-tokens", type=int, default=128)
    p.add_argument("--warmup", type=int, default=1, help="untimed runs first (each side, each case)")
    p.add_argument("--repeats", type=int, default=3, help="timed runs; the median is reported")
    p.add_argument("--prompt-input", dest="vk_mode", default="auto", choices=["auto", "ids-file", "tokenizer"],
                   help="how vkformers gets a batch of prompt ids (auto: --prompt-ids-file if it has it)")
    p.add_argument("--cold-processes", action="store_true",
                   help="vkformers: one process per run (each run pays the model load, the pipelines' "
                        "build on a first run, and an idle GPU's wake-up), as builds without --repeat")
    C.add_run_args(p, "generate", "", "tiny model, short prompts, CPU torch, no compile")
    args = p.parse_args()
    if C.report_only(args, "generate", print_report):
        return 0
    if args.dry_run:
        args.shape, args.prefill_lens, args.batches, args.decode_prompt_len = "tiny", [16, 48], [1, 3], 16
        args.max_new_tokens, args.repeats = min(args.max_new_tokens, 8), 1
        args.skip_compile = not args.compile
    dev, binary = C.prepare_run(args)
    if binary is not None:
        args.vk_mode = prompt_mode(binary, args.vk_mode)
    args.vk_repeat = binary is not None and has_repeat(binary)
    vocab = C.SHAPES[args.shape]["vocab_size"]
    meta = C.run_meta(dev, binary, args, shape=args.shape, params=C.n_params(args.shape),
                      max_new_tokens=args.max_new_tokens, repeats=args.repeats,
                      vk_prompt_input=args.vk_mode if binary else None)
    C.print_meta(meta, binary)
    model_dir = C.build_model_dir(args.workdir, args.shape)
    todo = cases(args)
    prompts = {c: make_prompts(*c, vocab) for c in todo}
    print(f"{args.shape}: {meta['params'] / 1e6:.1f}M parameters, cases {', '.join(case_name(*c) for c in todo)}, "
          f"{args.max_new_tokens} new tokens" + (f", vkformers batches through {args.vk_mode}" if binary else ""),
          flush=True)
    results = []

    def add(r: dict, c: tuple[int, int]) -> None:
        r.update(case=case_name(*c), batch=c[0], prompt_len=c[1])
        if "prefill_tokens_per_s" in r:
            print(f"  prefill {C.fmt_num(r['prefill_tokens_per_s'])} tok/s, decode "
                  f"{C.fmt_num(r.get('decode_tokens_per_s'))} tok/s, peak {C.fmt_gib(r.get('peak_bytes'))} GiB",
                  flush=True)
        for k in ("error", "warning"):
            if k in r:
                print(f"  {k}: {r[k]}", flush=True)
        results.append(r)
        C.write_json(args.json, {"benchmark": "generate", **meta, "results": results}, quiet=True)

    if not args.skip_vkformers:  # first, before torch holds device memory
        for c in todo:
            print(f"vkformers {case_name(*c)}", flush=True)
            add(vk_generate(binary, args, model_dir, prompts[c], vocab), c)
    if args.skip_eager and args.skip_compile:
        args.skip_torch = True
    if not args.skip_torch:
        try:
            model = C.load_hf_model(model_dir, torch.bfloat16, dev).eval()
        except Exception as e:  # noqa: BLE001
            model = None
            print(f"transformers cannot load {model_dir}: {e}")
        for static in ([] if args.skip_eager else [False]) + ([] if args.skip_compile else [True]):
            for c in todo:
                if model is None:
                    break
                print(f"torch {'compile' if static else 'eager'} {case_name(*c)}", flush=True)
                add(torch_generate(model, prompts[c], args, dev, static), c)
        del model
        C.free_torch(dev)
    print()
    print_report(results)
    C.write_json(args.json, {"benchmark": "generate", **meta, "results": results})
    return 0


if __name__ == "__main__":
    sys.exit(main())
