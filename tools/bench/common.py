"""Shared pieces of the side-by-side benchmarks (train.py, generate.py).

Random-init Llama folders built offline from a shape table (config.json + one bf16
model.safetensors), the statistics and table printing, the vkformers binary lookup, the command
line and run set-up both share, and the PyTorch helpers (model loading, freeing, peak memory). Needs torch, safetensors and numpy;
transformers only where a model is loaded.
"""
from __future__ import annotations

import argparse
import gc
import json
import os
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import torch

REPO = Path(__file__).resolve().parents[2]
DEFAULT_WORKDIR = REPO / "target" / "bench-work"
GIB = 1024**3
# A vkformers row's error when no binary was found.
NO_BINARY = "no vkformers binary (build it: cargo build --release -p vkformers-cli)"

# Llama shapes. `batch`/`seq` are the training shape of train.py. max_position_embeddings is
# large enough for generate.py's 2048-token prompt plus its new tokens (RoPE has no parameters,
# so it does not change the model's size).
SHAPES = {
    "134m": dict(hidden_size=768, num_hidden_layers=12, num_attention_heads=12, num_key_value_heads=12,
                 intermediate_size=2048, vocab_size=32000, max_position_embeddings=2048, batch=8, seq=1024),
    # TinyLlama-1.1B's shape.
    "1.1b": dict(hidden_size=2048, num_hidden_layers=22, num_attention_heads=32, num_key_value_heads=4,
                 intermediate_size=5632, vocab_size=32000, max_position_embeddings=4096, batch=4, seq=1024),
    # --dry-run: seconds on a CPU (GQA kept so the same code paths run).
    "tiny": dict(hidden_size=64, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                 intermediate_size=160, vocab_size=512, max_position_embeddings=256, batch=2, seq=32),
    # Mixtral-shaped routed MoE (issue 17): 8 experts, top-2, hidden 1024, 16 layers; each expert's
    # intermediate size 3584 (Mixtral's 14336 scaled with the hidden size, 4096 -> 1024).
    "moe": dict(hidden_size=1024, num_hidden_layers=16, num_attention_heads=16, num_key_value_heads=8,
                intermediate_size=3584, vocab_size=32000, max_position_embeddings=4096, batch=4, seq=1024,
                family="mixtral", num_local_experts=8, num_experts_per_tok=2),
    # --dry-run --shapes tiny-moe: the MoE path in seconds.
    "tiny-moe": dict(hidden_size=64, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                     intermediate_size=96, vocab_size=512, max_position_embeddings=256, batch=2, seq=32,
                     family="mixtral", num_local_experts=4, num_experts_per_tok=2),
}
TINY_SHAPES = ("tiny", "tiny-moe")
MODEL_KEYS = ("hidden_size", "num_hidden_layers", "num_attention_heads", "num_key_value_heads",
              "intermediate_size", "vocab_size", "max_position_embeddings")


def llama_config(shape: str) -> dict:
    """config.json of a Llama of `shape`. No EOS id: a random model must not stop early, so
    every generation runs to max_new_tokens on both sides."""
    s = SHAPES[shape]
    cfg = {
        "architectures": ["LlamaForCausalLM"],
        "model_type": "llama",
        **{k: s[k] for k in MODEL_KEYS},
        "head_dim": s["hidden_size"] // s["num_attention_heads"],
        "hidden_act": "silu",
        "rms_norm_eps": 1e-5,
        "rope_theta": 10000.0,
        "rope_scaling": None,
        "attention_bias": False,
        "attention_dropout": 0.0,
        "mlp_bias": False,
        "initializer_range": 0.02,
        "tie_word_embeddings": False,
        "bos_token_id": 1,
        "eos_token_id": None,
        "pad_token_id": None,
        "use_cache": True,
        "torch_dtype": "bfloat16",
    }
    if s.get("family") == "mixtral":
        # Mixtral's Hub config (per-expert names below); no load-balancing loss, as by default.
        cfg.update(architectures=["MixtralForCausalLM"], model_type="mixtral", rope_theta=1e6,
                   num_local_experts=s["num_local_experts"], num_experts_per_tok=s["num_experts_per_tok"],
                   router_aux_loss_coef=0.02, output_router_logits=False, sliding_window=None)
        for k in ("mlp_bias", "rope_scaling"):
            cfg.pop(k)
    return cfg


def param_shapes(cfg: dict) -> list[tuple[str, tuple[int, ...]]]:
    """Every tensor of LlamaForCausalLM (untied), in the order of its state dict; for a Mixtral
    config, MixtralForCausalLM's as the Hub stores it (per-expert w1/w2/w3)."""
    h, inter, v = cfg["hidden_size"], cfg["intermediate_size"], cfg["vocab_size"]
    hd = cfg["head_dim"]
    q, kv = cfg["num_attention_heads"] * hd, cfg["num_key_value_heads"] * hd
    out = [("model.embed_tokens.weight", (v, h))]
    for i in range(cfg["num_hidden_layers"]):
        p = f"model.layers.{i}."
        out += [
            (p + "self_attn.q_proj.weight", (q, h)),
            (p + "self_attn.k_proj.weight", (kv, h)),
            (p + "self_attn.v_proj.weight", (kv, h)),
            (p + "self_attn.o_proj.weight", (h, q)),
        ]
        if cfg["model_type"] == "mixtral":
            m = p + "block_sparse_moe."
            out.append((m + "gate.weight", (cfg["num_local_experts"], h)))
            for e in range(cfg["num_local_experts"]):
                x = f"{m}experts.{e}."
                out += [(x + "w1.weight", (inter, h)), (x + "w2.weight", (h, inter)), (x + "w3.weight", (inter, h))]
        else:
            out += [
                (p + "mlp.gate_proj.weight", (inter, h)),
                (p + "mlp.up_proj.weight", (inter, h)),
                (p + "mlp.down_proj.weight", (h, inter)),
            ]
        out += [
            (p + "input_layernorm.weight", (h,)),
            (p + "post_attention_layernorm.weight", (h,)),
        ]
    out += [("model.norm.weight", (h,)), ("lm_head.weight", (v, h))]
    return out


def n_params(shape: str) -> int:
    return sum(int(np.prod(s)) for _, s in param_shapes(llama_config(shape)))


def build_model_dir(workdir: Path, shape: str, seed: int = 0) -> Path:
    """WORKDIR/llama-SHAPE: config.json and a bf16 model.safetensors, matrices drawn from
    N(0, 0.02) (seeded, per tensor), norm weights 1. Reused when a previous build had the same
    config and seed."""
    from safetensors.torch import save_file

    cfg = llama_config(shape)
    out = Path(workdir) / f"{cfg['model_type']}-{shape}"
    stamp = {"config": cfg, "seed": seed, "builder": 1}
    stamp_path = out / "bench_build.json"
    if stamp_path.is_file() and (out / "model.safetensors").is_file():
        try:
            if json.loads(stamp_path.read_text()) == stamp:
                return out
        except ValueError:
            pass
    t0 = time.time()
    dev = "cuda" if torch.cuda.is_available() else "cpu"
    tensors = {}
    for i, (name, shp) in enumerate(param_shapes(cfg)):
        if len(shp) == 1:
            tensors[name] = torch.ones(shp, dtype=torch.bfloat16)
            continue
        g = torch.Generator(device=dev).manual_seed(seed * 100003 + i)
        w = torch.randn(shp, generator=g, device=dev, dtype=torch.float32) * cfg["initializer_range"]
        tensors[name] = w.to(torch.bfloat16).cpu()
        del w
    tmp = out.with_name(out.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    save_file(tensors, str(tmp / "model.safetensors"), metadata={"format": "pt"})
    (tmp / "config.json").write_text(json.dumps(cfg, indent=2) + "\n")
    (tmp / "bench_build.json").write_text(json.dumps(stamp, indent=2) + "\n")
    shutil.rmtree(out, ignore_errors=True)
    tmp.rename(out)
    del tensors
    gc.collect()
    print(f"built {out} ({n_params(shape) / 1e6:.1f}M parameters, bf16) in {time.time() - t0:.1f} s", flush=True)
    return out


def write_wordlevel_tokenizer(dir: Path, vocab: int) -> None:
    """A tokenizer.json whose token `t<i>` is id i (WordLevel, split on whitespace, no special
    tokens): the text "t5 t17 t3" encodes to exactly [5, 17, 3]."""
    tok = {
        "version": "1.0",
        "truncation": None,
        "padding": None,
        "added_tokens": [],
        "normalizer": None,
        "pre_tokenizer": {"type": "WhitespaceSplit"},
        "post_processor": None,
        "decoder": None,
        "model": {"type": "WordLevel", "vocab": {f"t{i}": i for i in range(vocab)}, "unk_token": "t0"},
    }
    (Path(dir) / "tokenizer.json").write_text(json.dumps(tok))


def ids_as_text(ids) -> str:
    return " ".join(f"t{int(i)}" for i in ids)


def median(xs):
    xs = [x for x in xs if x is not None]
    return statistics.median(xs) if xs else None


def after_warmup(xs: list, warmup: int) -> list:
    """xs without its first `warmup` entries; keeps at least the last one."""
    if not xs:
        return []
    return xs[min(warmup, len(xs) - 1):]


def fmt_num(x, digits: int = 0) -> str:
    return "n/a" if x is None else f"{x:,.{digits}f}"


def fmt_gib(b) -> str:
    if b is None:
        return "n/a"
    return f"{b / GIB:.2f}" if b >= GIB / 10 else f"{b / GIB:.4f}"


def ratio(a, b) -> str:
    return "-" if a is None or not b else f"{a / b:.2f}"


def print_table(headers: list[str], rows: list[list[str]]) -> None:
    widths = [max(len(h), *(len(r[i]) for r in rows)) if rows else len(h) for i, h in enumerate(headers)]
    line = lambda cells: "  ".join(c.ljust(w) if i < 2 else c.rjust(w) for i, (c, w) in enumerate(zip(cells, widths)))
    print(line(headers))
    print("  ".join("-" * w for w in widths))
    for r in rows:
        print(line(r))


def find_binary(arg: str | None, dry_run: bool) -> Path | None:
    """The vkformers binary: --vkformers as given (relative to the current folder, else the
    repository root); by default target/release/vkformers, or target/debug/vkformers for
    --dry-run. None when it does not exist."""
    cands = [arg] if arg else (["target/debug/vkformers", "target/release/vkformers"] if dry_run
                               else ["target/release/vkformers"])
    for c in cands:
        for p in (Path(c), REPO / c):
            if p.is_file() and os.access(p, os.X_OK):
                return p.resolve()
    return None


def binary_version(binary: Path | None) -> str | None:
    if binary is None:
        return None
    try:
        r = subprocess.run([str(binary), "--version"], capture_output=True, text=True, timeout=60)
        return r.stdout.strip() or None
    except (OSError, subprocess.SubprocessError):
        return None


def run_logged(cmd: list[str], log: Path, timeout: float | None = None) -> tuple[int, str, float]:
    """Runs cmd; stderr goes to `log` (and its stdout is returned). Returns (exit code, stdout,
    seconds)."""
    t0 = time.time()
    with open(log, "w") as err:
        err.write("$ " + " ".join(cmd) + "\n")
        err.flush()
        try:
            r = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=err, text=True, timeout=timeout)
            code, out = r.returncode, r.stdout
        except subprocess.TimeoutExpired as e:
            code, out = 124, (e.stdout or b"").decode() if isinstance(e.stdout, bytes) else (e.stdout or "")
        except OSError as e:
            err.write(f"cannot run: {e}\n")
            code, out = 127, ""
    return code, out, time.time() - t0


def log_line(path: Path, prefix: str) -> str | None:
    """The first line of a log that starts with `prefix`."""
    try:
        return next((l for l in Path(path).read_text(errors="replace").splitlines() if l.startswith(prefix)), None)
    except OSError:
        return None


def tail(path: Path, n: int = 1) -> str:
    try:
        lines = [l for l in Path(path).read_text(errors="replace").splitlines() if l.strip()]
    except OSError:
        return ""
    return " | ".join(lines[-n:])


def device_of(dry_run: bool) -> str:
    if dry_run:
        return "cpu"
    if not torch.cuda.is_available():
        sys.exit("torch sees no CUDA device (use --dry-run for a CPU check)")
    return "cuda"


def device_name(dev: str) -> str:
    return torch.cuda.get_device_name() if dev == "cuda" else "cpu"


def sync(dev: str) -> None:
    if dev == "cuda":
        torch.cuda.synchronize()


def reset_peak(dev: str) -> None:
    if dev == "cuda":
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()


def peak_bytes(dev: str):
    return torch.cuda.max_memory_allocated() if dev == "cuda" else None


def free_torch(dev: str) -> None:
    gc.collect()
    if dev == "cuda":
        torch.cuda.synchronize()
        torch.cuda.empty_cache()
    try:
        torch._dynamo.reset()
    except Exception:  # noqa: BLE001 (no dynamo: nothing to reset)
        pass


def torch_run(system: str, dev: str, run) -> dict:
    """`{"system": system}` with the measures `run()` returns, or the first line of its exception
    as the error (an OOM or compile failure is a result, not a crash); the device's memory is
    freed after either (the model, optimizer and batches a run makes are its locals)."""
    res = {"system": system}
    try:
        res.update(run())
    except Exception as e:  # noqa: BLE001 (see above)
        msg = str(e).strip().splitlines()
        res["error"] = f"{type(e).__name__}: {msg[0] if msg else ''}"
        print(f"  {res['system']} failed: {res['error']}", flush=True)
    free_torch(dev)
    return res


def load_hf_model(model_dir: Path, dtype: torch.dtype, dev: str):
    """The folder through transformers with SDPA attention, every weight checked to be read."""
    import transformers
    from transformers import AutoModelForCausalLM

    transformers.utils.logging.disable_progress_bar()
    kw = dict(attn_implementation="sdpa", output_loading_info=True)
    try:
        model, info = AutoModelForCausalLM.from_pretrained(str(model_dir), dtype=dtype, **kw)
    except TypeError:  # transformers 4 spells it torch_dtype
        model, info = AutoModelForCausalLM.from_pretrained(str(model_dir), torch_dtype=dtype, **kw)
    bad = {k: v for k, v in info.items() if k in ("missing_keys", "unexpected_keys", "mismatched_keys") and v}
    if bad:
        raise RuntimeError(f"{model_dir}: weights do not match {type(model).__name__}: {bad}")
    return model.to(dev)


def versions() -> dict:
    v = {"torch": torch.__version__, "python": sys.version.split()[0]}
    try:
        import transformers

        v["transformers"] = transformers.__version__
    except ImportError:
        pass
    return v


def write_json(path: str | None, payload: dict, quiet: bool = False) -> None:
    """Writes payload to path (atomically: a run cut short leaves the last complete file)."""
    if path:
        tmp = Path(str(path) + ".tmp")
        tmp.write_text(json.dumps(payload, indent=2) + "\n")
        tmp.replace(path)
        if not quiet:
            print(f"wrote {path}")


def read_reports(paths: list[str], benchmark: str) -> tuple[list[dict], list[dict]]:
    """The run descriptions and results of earlier --json files of one benchmark, in order; a
    result of the same shape/case and system in a later file replaces the earlier one."""
    metas, results = [], {}
    for p in paths:
        d = json.loads(Path(p).read_text())
        if d.get("benchmark") != benchmark:
            sys.exit(f"{p}: not a {benchmark} result file")
        metas.append({k: v for k, v in d.items() if k != "results"} | {"file": str(p)})
        for r in d["results"]:
            results[(r.get("shape"), r.get("case"), r["system"])] = dict(r, source=str(p))
    return metas, list(results.values())


def add_run_args(p: argparse.ArgumentParser, command: str, extra_example: str, dry_run_help: str) -> None:
    """The options train.py and generate.py share: which binary and device, which systems run,
    where they work, the JSON results and --report, --dry-run (`command`: the vkformers subcommand
    the benchmark runs; `extra_example`: what --extra-args's help suggests)."""
    p.add_argument("--vkformers", help="vkformers binary (default target/release/vkformers)")
    p.add_argument("--vk-device", help="vkformers --device (index or part of the name; default: its own choice)")
    p.add_argument("--skip-compile", action="store_true")
    p.add_argument("--compile", action="store_true", help="run the torch.compile system even with --dry-run")
    p.add_argument("--skip-eager", action="store_true", help="no torch eager run (e.g. a compile-only run for --report)")
    p.add_argument("--skip-vkformers", action="store_true")
    p.add_argument("--skip-torch", action="store_true")
    p.add_argument("--extra-args", default="", help=f"more `vkformers {command}` flags{extra_example}")
    p.add_argument("--workdir", type=Path, default=DEFAULT_WORKDIR)
    p.add_argument("--timeout", type=float, default=None, help="seconds per vkformers run")
    p.add_argument("--json", help="write the results to this file (rewritten after every run)")
    p.add_argument("--report", nargs="+", metavar="JSON",
                   help="run nothing: print one table from the results of earlier --json files")
    p.add_argument("--dry-run", action="store_true", help=dry_run_help)


def report_only(args, benchmark: str, print_report) -> bool:
    """With --report: prints one table from the earlier results and writes them merged to --json;
    whether it did (then nothing runs)."""
    if not args.report:
        return False
    metas, results = read_reports(args.report, benchmark)
    print_report(results)
    write_json(args.json, {"benchmark": benchmark, "merged_from": metas, "results": results})
    return True


def prepare_run(args) -> tuple[str, Path | None]:
    """The torch device and the vkformers binary of a run (None: skipped or not found, said so);
    makes the work folder absolute and creates it."""
    dev = device_of(args.dry_run or args.skip_torch)
    args.workdir = args.workdir.resolve()
    args.workdir.mkdir(parents=True, exist_ok=True)
    binary = None if args.skip_vkformers else find_binary(args.vkformers, args.dry_run)
    if not args.skip_vkformers and binary is None:
        print(f"no vkformers binary ({args.vkformers or 'target/release/vkformers'}): its rows will say so")
    return dev, binary


def run_meta(dev: str, binary: Path | None, args, **more) -> dict:
    """What every results file records first (device, versions, binary, runs), then `more`."""
    return {"device": device_name(dev), **versions(), "vkformers": str(binary) if binary else None,
            "vkformers_version": binary_version(binary), **more, "warmup": args.warmup,
            "extra_args": args.extra_args, "dry_run": args.dry_run}


def print_meta(meta: dict, binary: Path | None) -> None:
    print(f"device: {meta['device']}  torch {meta['torch']}  transformers {meta.get('transformers')}  "
          f"vkformers: {meta['vkformers_version'] or binary}", flush=True)
