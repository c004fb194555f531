#!/usr/bin/env python3
"""Load test of `vkformers serve` through the official `openai` client.

N concurrent clients send a fixed number of streamed completions (random token-id prompts of
--prompt-len ± --prompt-spread tokens, greedy unless --temperature; --top-p, --top-k and the
penalties sample on the server's device like any request) and the run reports throughput
(generated tokens/s over the wall time, requests/s), time to first token and latency, p50/p99,
the time to first token of the first wave (the first --clients requests sent: the server's first
work) apart from the rest's, with maxima (the --json file also lists every request's send time
and time to first token in the order sent), the server's warm-up (requests, prefill forwards, ms:
`vkformers serve` warms up before listening unless given --no-warmup), the prefill forwards the
server ran (requests arriving together share them) and the rows it chose on the host (0: every
token chosen on the device). Every request asks for usage, so the
token counts are the server's.

--soak: a random third of the streams are closed mid-way (after a random number of chunks; the
server must free their slots and KV blocks at once). At the end /metrics must show no running
request and zero KV blocks in use, and every finished response must equal the same request run
alone, one at a time (--verify runs those references; sampled runs too: a request's seed is its
prompt's index, so equal requests draw equally).

The issue's H200 target (1.1B bf16, 64 concurrent clients, 256-token completions: at least
10,000 generated tokens/s, p99 time to first token at most 500 ms):
  python3 tools/bench/serve.py --shape 1.1b --vkformers target/release/vkformers \
      --serve-args "--max-batch 64" --clients 64 --requests 512 --max-tokens 256 --procs 8
(--procs spreads the clients over processes: one Python process parses every stream's chunks
under one interpreter lock and caps the run; tools/bench/serve_fake.py measures that ceiling.)
(--shape builds the random-init Llama folder of common.py, no EOS id so every completion runs to
--max-tokens, with a WordLevel tokenizer; needs torch and safetensors for that step only.)

Usage:
  python3 tools/bench/serve.py --model DIR [--vkformers PATH] [--serve-args "--max-batch 64"]
      [--clients 64] [--requests 512] [--prompt-len 128] [--max-tokens 256] [--soak] [--verify]
      [--json FILE]
  python3 tools/bench/serve.py --base-url http://127.0.0.1:8000/v1 --model-name NAME ...
      (a server already running)
Without --base-url the script starts `vkformers serve --port 0` itself (loopback) and stops it
with SIGTERM at the end. Needs only the `openai` package (.ci/install-openai installs it into
/opt/vkformers-openai).
"""
from __future__ import annotations

import argparse
import json
import random
import re
import shlex
import signal
import statistics
import subprocess
import sys
import threading
import time
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def openai_client(base_url: str, api_key: str, timeout: float):
    """The official client (imported here: --help works without the package)."""
    import openai

    return openai.OpenAI(base_url=base_url, api_key=api_key, max_retries=0, timeout=timeout)


def percentile(xs: list[float], p: float) -> float:
    if not xs:
        return float("nan")
    xs = sorted(xs)
    k = min(len(xs) - 1, max(0, round(p / 100 * (len(xs) - 1))))
    return xs[k]


def start_server(args) -> tuple[subprocess.Popen, str, dict]:
    """The server, its base URL, and its warm-up line's numbers (empty when it ran none)."""
    exe = args.vkformers or str(REPO / "target" / "release" / "vkformers")
    if not Path(exe).exists():
        exe = str(REPO / "target" / "debug" / "vkformers")
    cmd = [exe, "serve", "--model", args.model, "--port", "0", *shlex.split(args.serve_args)]
    proc = subprocess.Popen(cmd, stderr=subprocess.PIPE, text=True)
    warmup = {}
    for line in proc.stderr:
        sys.stderr.write(line)
        w = re.search(r"warm-up: (\d+) requests, (\d+) prefill forwards, (\d+) ms", line)
        if w:
            warmup = {"warmup_requests": int(w.group(1)), "warmup_prefill_forwards": int(w.group(2)),
                      "warmup_ms": int(w.group(3))}
        m = re.search(r"listening on (http://\S+)", line)
        if m:
            threading.Thread(target=lambda: [None for _ in proc.stderr], daemon=True).start()
            return proc, m.group(1) + "/v1", warmup
    raise SystemExit(f"vkformers serve exited ({proc.wait()}) before listening")


def metrics(base_url: str) -> dict[str, float]:
    text = urllib.request.urlopen(base_url.removesuffix("/v1") + "/metrics", timeout=30).read().decode()
    out = {}
    for line in text.splitlines():
        if line and not line.startswith("#"):
            name, value = line.rsplit(" ", 1)
            out[name] = float(value)
    return out


def build_shape(shape: str, workdir: str | None) -> Path:
    """common.py's model folder of `shape`, with a WordLevel tokenizer.json (serve needs one)."""
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    import common  # torch and safetensors, only for this

    out = common.build_model_dir(Path(workdir) if workdir else common.DEFAULT_WORKDIR, shape)
    if not (out / "tokenizer.json").is_file():
        common.write_wordlevel_tokenizer(out, common.SHAPES[shape]["vocab_size"])
    return out


def one(client, model, req, cancel_after):
    """Streams one completion; returns its record. `cancel_after`: close after that many chunks.
    `sent`: when it was sent (wall clock, comparable between client processes)."""
    sent = time.time()
    t0 = time.perf_counter()
    ttft, text, tokens, finish, chunks = None, "", 0, None, 0
    stream = client.completions.create(model=model, prompt=req["prompt"], max_tokens=req["max_tokens"],
                                       temperature=req["temperature"], seed=req["seed"], stream=True,
                                       top_p=req["top_p"], presence_penalty=req["presence_penalty"],
                                       frequency_penalty=req["frequency_penalty"], extra_body=req["extra"],
                                       stream_options={"include_usage": True})
    for chunk in stream:
        if chunk.usage is not None:
            tokens = chunk.usage.completion_tokens
        for c in chunk.choices:
            if ttft is None:
                ttft = time.perf_counter() - t0
            text += c.text or ""
            finish = c.finish_reason or finish
        chunks += 1
        if cancel_after is not None and chunks >= cancel_after:
            stream.close()
            return {"cancelled": True, "ttft": ttft, "latency": time.perf_counter() - t0, "tokens": 0, "text": None,
                    "sent": sent}
    return {"cancelled": False, "ttft": ttft, "latency": time.perf_counter() - t0, "tokens": tokens, "text": text,
            "finish": finish, "sent": sent}


def ttft_by_wave(records: list[dict], clients: int) -> dict:
    """Time to first token of the first wave (the first `clients` requests sent: the server's
    first work, which pays whatever a cold server pays) apart from the rest, with the maxima, and
    every request's (seconds after the first was sent, time to first token) in the order sent.
    Cancelled requests count too (they had their first token)."""
    sent = sorted((r for r in records if r["ttft"] is not None), key=lambda r: r["sent"])
    if not sent:
        return {}
    first, rest = [r["ttft"] for r in sent[:clients]], [r["ttft"] for r in sent[clients:]]
    return {
        "ttft_max_s": max(first + rest),
        "ttft_first_wave_p50_s": percentile(first, 50), "ttft_first_wave_p99_s": percentile(first, 99),
        "ttft_first_wave_max_s": max(first),
        "ttft_rest_p50_s": percentile(rest, 50), "ttft_rest_p99_s": percentile(rest, 99),
        "ttft_rest_max_s": max(rest, default=float("nan")),
        "ttft_by_arrival": [[round(r["sent"] - sent[0]["sent"], 4), round(r["ttft"], 4)] for r in sent],
    }


def requests(args, vocab: int) -> list[dict]:
    rng = random.Random(args.seed)
    lens = [max(1, args.prompt_len + rng.randint(-args.prompt_spread, args.prompt_spread)) for _ in range(args.distinct)]
    distinct = [[rng.randrange(3, vocab) for _ in range(n)] for n in lens]
    extra = {"top_k": args.top_k} if args.top_k is not None else {}
    # The seed is the prompt's index: equal requests draw equally (--verify compares them).
    return [{"prompt": distinct[i % args.distinct], "max_tokens": args.max_tokens, "temperature": args.temperature,
             "top_p": args.top_p, "presence_penalty": args.presence_penalty,
             "frequency_penalty": args.frequency_penalty, "extra": extra,
             "seed": args.seed + i % args.distinct, "key": i % args.distinct} for i in range(args.requests)]


def client_slice(job) -> list[dict]:
    """One client process's share: its own `openai` client, `threads` concurrent streams."""
    base_url, api_key, timeout, model, threads, work = job
    client = openai_client(base_url, api_key, timeout)
    with ThreadPoolExecutor(max_workers=threads) as pool:
        return list(pool.map(lambda rc: one(client, model, rc[0], rc[1]), work))


def ready(_) -> None:
    """Nothing: a started client process answers it once it has imported this module."""


def run_clients(args, base_url, model, work, client) -> tuple[list[dict], float]:
    """The records of every (request, cancel) of `work`, in order, and the wall seconds they took
    (client processes started and ready before the clock starts), from `args.clients` concurrent
    streams: threads of this process, or with --procs P threads of P processes (request i goes to
    process i mod P). One Python process caps the client side: every stream's chunks are parsed
    under one interpreter lock (a fake server that answers at once gives about 13,600 tokens/s
    and a time-to-first-token p99 of 0.8 s at 64 clients on a 2-core EPYC host), so a fast
    server needs several."""
    if args.procs <= 1:
        t0 = time.perf_counter()
        with ThreadPoolExecutor(max_workers=args.clients) as pool:
            return list(pool.map(lambda rc: one(client, model, rc[0], rc[1]), work)), time.perf_counter() - t0
    import multiprocessing
    procs = min(args.procs, args.clients)
    jobs = [(base_url, args.api_key, args.timeout, model, len(range(p, args.clients, procs)), work[p::procs])
            for p in range(procs)]
    with multiprocessing.get_context("spawn").Pool(procs) as pool:
        pool.map(ready, range(procs), chunksize=1)
        t0 = time.perf_counter()
        parts = pool.map(client_slice, jobs, chunksize=1)
        wall = time.perf_counter() - t0
    records = [None] * len(work)
    for p, part in enumerate(parts):
        records[p::procs] = part
    return records, wall


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", help="model folder to serve (or the name when --base-url is given)")
    ap.add_argument("--shape", help="serve common.py's random-init Llama of this shape (1.1b, 134m, tiny)")
    ap.add_argument("--workdir", help="where --shape builds its folder (default target/bench-work)")
    ap.add_argument("--model-name", help="model name of a running server (default: --model)")
    ap.add_argument("--base-url")
    ap.add_argument("--vkformers")
    ap.add_argument("--serve-args", default="")
    ap.add_argument("--api-key", default="none")
    ap.add_argument("--clients", type=int, default=64)
    ap.add_argument("--procs", type=int, default=1,
                    help="client processes the clients are spread over (1: threads of this one; the "
                         "interpreter lock caps one process near 13,600 streamed tokens/s)")
    ap.add_argument("--requests", type=int, default=512)
    ap.add_argument("--distinct", type=int, default=32, help="distinct prompts the requests cycle through")
    ap.add_argument("--prompt-len", type=int, default=128)
    ap.add_argument("--max-tokens", type=int, default=256)
    ap.add_argument("--prompt-spread", type=int, default=0, help="prompt lengths vary by up to this much")
    ap.add_argument("--temperature", type=float, default=0.0)
    ap.add_argument("--top-p", type=float, default=1.0)
    ap.add_argument("--top-k", type=int, default=None)
    ap.add_argument("--presence-penalty", type=float, default=0.0)
    ap.add_argument("--frequency-penalty", type=float, default=0.0)
    ap.add_argument("--vocab", type=int, default=None, help="prompt ids below this (default: config.json's)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--soak", action="store_true")
    ap.add_argument("--verify", action="store_true")
    ap.add_argument("--timeout", type=float, default=1800, help="seconds for the whole run at most")
    ap.add_argument("--json")
    args = ap.parse_args()
    if args.shape:
        args.model = str(build_shape(args.shape, args.workdir))
    if not args.model and not args.model_name:
        ap.error("give --model (and --base-url for a running server)")
    proc = None
    base_url = args.base_url
    warmup = {}
    if base_url is None:
        proc, base_url, warmup = start_server(args)
    model = args.model_name or args.model
    vocab = args.vocab
    if vocab is None:
        vocab = json.loads((Path(args.model) / "config.json").read_text())["vocab_size"] if args.model else 256
    client = openai_client(base_url, args.api_key, args.timeout)
    try:
        reqs = requests(args, vocab)
        rng = random.Random(args.seed + 1)
        cancel = [rng.randrange(1, max(2, args.max_tokens // 2)) if args.soak and rng.random() < 1 / 3 else None
                  for _ in reqs]
        before = metrics(base_url)
        records, wall = run_clients(args, base_url, model, list(zip(reqs, cancel)), client)
        done = [r for r in records if not r["cancelled"]]
        tokens = sum(r["tokens"] for r in done)
        report = {
            "clients": args.clients, "requests": len(reqs), "cancelled": len(records) - len(done),
            "prompt_len": args.prompt_len, "max_tokens": args.max_tokens, "wall_s": wall,
            "generated_tokens": tokens, "tokens_per_s": tokens / wall, "requests_per_s": len(done) / wall,
            "ttft_p50_s": percentile([r["ttft"] for r in done if r["ttft"] is not None], 50),
            "ttft_p99_s": percentile([r["ttft"] for r in done if r["ttft"] is not None], 99),
            "latency_p50_s": percentile([r["latency"] for r in done], 50),
            "latency_p99_s": percentile([r["latency"] for r in done], 99),
        }
        report.update(warmup)
        if "vkformers_warmup_seconds" in before:  # also known for a server started elsewhere
            report["warmup_s"] = before["vkformers_warmup_seconds"]
        report.update(ttft_by_wave(records, args.clients))
        after = metrics(base_url)
        for key, name in [("prefill_forwards", "vkformers_prefill_forwards_total"),
                          ("host_sampled_rows", "vkformers_host_sampled_rows_total")]:
            report[key] = after.get(name, 0) - before.get(name, 0)
        # The engine thread's ms per step: recording the forwards (host), the driver's submission,
        # waiting for the device (near 0: the host is the bottleneck), and the sink (host:
        # detokenizing, stop strings, sending tokens).
        parts = ["steps", "step_seconds", "record_seconds", "submit_seconds", "device_wait_seconds", "sink_seconds"]
        delta = {k: after.get(f"vkformers_engine_{k}_total", 0) - before.get(f"vkformers_engine_{k}_total", 0)
                 for k in parts}
        if delta["steps"]:
            report["engine_steps"] = delta["steps"]
            # Rows a step decoded on average (64 when --clients 64 keep every slot busy).
            report["engine_tokens_per_step"] = tokens / delta["steps"]
            for k in parts[1:]:
                report[f"engine_{k.removesuffix('_seconds')}_ms_per_step"] = 1e3 * delta[k] / delta["steps"]
        ok = True
        if args.soak:
            deadline = time.time() + 30
            m = metrics(base_url)
            while (m.get("vkformers_kv_blocks_in_use", 1) or m.get("vkformers_running_requests", 1)) and time.time() < deadline:
                time.sleep(0.05)
                m = metrics(base_url)
            report["kv_blocks_in_use_after"] = m.get("vkformers_kv_blocks_in_use")
            report["running_after"] = m.get("vkformers_running_requests")
            ok &= report["kv_blocks_in_use_after"] == 0 and report["running_after"] == 0
        if args.verify:
            alone = {}
            for r in reqs:
                if r["key"] not in alone:
                    alone[r["key"]] = one(client, model, r, None)["text"]
            mismatched = [i for i, (r, rec) in enumerate(zip(reqs, records))
                          if not rec["cancelled"] and rec["text"] != alone[r["key"]]]
            report["mismatched_vs_alone"] = len(mismatched)
            ok &= not mismatched
        report["ok"] = ok
        # Every request's time to first token goes to the JSON file only.
        print(json.dumps({k: v for k, v in report.items() if k != "ttft_by_arrival"}, indent=2))
        if args.json:
            Path(args.json).write_text(json.dumps(report, indent=2))
        if not ok:
            sys.exit(1)
    finally:
        if proc is not None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                proc.kill()


if __name__ == "__main__":
    main()
