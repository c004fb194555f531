#!/usr/bin/env python3
"""16-bit mixed-precision training references for `vkformers train --bf16` / `--fp16`.

Offline, with the pinned versions of requirements.txt. Same models, rows and optimizer as
train_reference.py (tests/fixtures/<model>/ weights, tests/fixtures_train/rows.jsonl, batch 2 in
file order, constant lr 1e-3, torch AdamW betas (0.9, 0.999) eps 1e-6, no weight decay, no
clipping), but the forward pass and the loss run under `torch.autocast(device_type="cpu",
dtype=...)`: parameters, gradients and AdamW moments stay float32 (master weights) and autocast
casts the operands of matmul-like ops to 16-bit. For float16 a `torch.amp.GradScaler` multiplies
the loss before the backward pass; `scaler.step` unscales the gradients and skips the AdamW step
(its step count included) when any gradient is inf/NaN, and `scaler.update` halves the scale after
a skipped step and doubles it after `growth_interval` finite ones.

The loop is written out here (it is what `transformers.Trainer` + `accelerate` run) and checked
against the real Trainer where the Trainer can do the same on CPU: with no mixed precision and with
`bf16=True` it must give the same weights. It cannot check fp16: accelerate 1.16 creates fp16
autocast and its GradScaler only off the CPU, and with `use_cpu=True, fp16=True` trains in plain
float32; the script checks that too and records it.

Writes tests/fixtures_amp/<case>/meta.json and update.safetensors (parameters after the run minus
before, float32, under the names of tests/fixtures/<model>/model.safetensors), f32_update.safetensors
where no other case holds the f32 run's update, and tests/fixtures_amp/rows_overflow.jsonl. For
context meta.json also holds two variants of each 16-bit run: torch's rounding points with exactly
accumulated GEMMs, and the "operands16" design (no autocast; only the operands of every GEMM rounded
to 16-bit, everything else f32), to show what a correct but different implementation reaches. See
the "16-bit training" section of tools/parity/README.md.

  amp_reference.py                       all cases (~20 s on 2 cores)
  amp_reference.py --only llama_bf16     a subset (the f32 runs are always made, not written)
  amp_reference.py --out DIR             somewhere else
  amp_reference.py --probe               fp16 overflow thresholds of the two batches, printed
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import sys
import tempfile
from pathlib import Path

import offline_env  # noqa: F401  (offline and quiet before transformers is imported)

HERE = Path(__file__).resolve().parent
REPO = HERE.parent.parent
FIXTURES = REPO / "tests" / "fixtures"
TRAIN = REPO / "tests" / "fixtures_train"
DEFAULT_OUT = REPO / "tests" / "fixtures_amp"

SEED = 1234
BATCH = 2
LR = 1e-3
BETAS = (0.9, 0.999)
EPS = 1e-6
WEIGHT_DECAY = 0.0
FP16_MAX = 65504.0
# torch.amp.GradScaler's defaults (init 2**16, growth interval 2000).
SCALER = dict(init_scale=65536.0, growth_factor=2.0, backoff_factor=0.5, growth_interval=2000)
# Overflow cases; `--probe` prints the thresholds they rest on. Under autocast the float16 backward
# of rows.jsonl's two batches, at the initial weights, stays finite up to a loss scale of 2**16 and
# overflows from 2**17 on (rows 0-1 peak at 0.944 per unit of scale, in the attention probabilities'
# gradient; the first inf at 2**17 is o_proj's weight gradient, an fp16 GEMM result).
# - llama_fp16_overflow, init 2**17: step 1 overflows, the scale halves to 2**16, step 2 (rows 2-3,
#   peak at 0.57 of fp16's range) is taken. Only a design that stores GEMM results in float16 as
#   autocast does overflows at 2**17: with f32 GEMM results (the "operands16" design below) the
#   thresholds are 2**18 and neither step would be skipped.
# - llama_fp16_overflow_logits, init 2**20: the loss gradient with respect to the logits (peak
#   0.1248 per unit of scale) is itself inf in float16 in step 1 (2x margin), which any design that
#   feeds it to a 16-bit GEMM sees, and step 2 (2**19) overflows too, in both designs: the weights
#   do not move.
# - llama_fp16_skip_then_take, init 2**18, on rows_overflow.jsonl (written here): rows 0-1 have one
#   target each, so their logits gradient peaks at 0.499 per unit and is inf at 2**18 (2x margin, any
#   design); rows 2-3 are 16 tokens long and stay finite at 2**17 (autocast peak 0.31 per unit, 1.6x
#   margin; the operands16 design is finite up to 2**19). Skip, halve, take, in either design.
OVERFLOW_INIT_SCALE = 2.0**17
LOGITS_OVERFLOW_INIT_SCALE = 2.0**20
SKIP_THEN_TAKE_INIT_SCALE = 2.0**18
OVERFLOW_ROWS_SEED = 1238
OVERFLOW_ROW_LENS = (6, 4, 16, 16)  # rows 0-1: only the last token is a label
# Informational, in meta.json: from these scales, how many steps are skipped before one is taken
# (the weights do not change while steps are skipped, so it counts halvings down to 2**16).
SKIP_COUNT_FROM = (2.0**20, 2.0**40)
# train_parity.rs's threshold for ill-conditioned elements: a gradient below AdamW's eps.
TINY_GRAD = 1e-6

DATA = {"rows": "tests/fixtures_train/rows.jsonl", "rows_overflow": "tests/fixtures_amp/rows_overflow.jsonl"}
CASES = {
    # name: (model, precision, steps, GradScaler init_scale or None, data)
    "llama_f32": ("llama", "f32", 2, None, "rows"),
    "llama_bf16": ("llama", "bf16", 2, None, "rows"),
    "llama_fp16": ("llama", "fp16", 2, SCALER["init_scale"], "rows"),
    "llama_fp16_overflow": ("llama", "fp16", 2, OVERFLOW_INIT_SCALE, "rows"),
    "llama_fp16_overflow_logits": ("llama", "fp16", 2, LOGITS_OVERFLOW_INIT_SCALE, "rows"),
    "llama_fp16_skip_then_take": ("llama", "fp16", 2, SKIP_THEN_TAKE_INIT_SCALE, "rows_overflow"),
    "gpt2_f32": ("gpt2", "f32", 2, None, "rows"),
    "gpt2_bf16": ("gpt2", "bf16", 2, None, "rows"),
    "gpt2_fp16": ("gpt2", "fp16", 2, SCALER["init_scale"], "rows"),
}
# Ops that only view or copy a tensor: in the backward pass they re-expose saved forward values,
# which do not scale with the loss scale, so PeakFp16 ignores them.
VIEW_OPS = {"t", "transpose", "view", "_unsafe_view", "slice", "expand", "detach", "squeeze", "unsqueeze", "clone",
            "alias", "permute", "select", "split", "as_strided", "reshape", "lift_fresh"}


def autocast_dtype(precision: str):
    import torch

    return {"f32": None, "bf16": torch.bfloat16, "fp16": torch.float16}[precision]


def read_rows() -> list[dict]:
    from train_reference import make_rows

    rows = [json.loads(l) for l in (TRAIN / "rows.jsonl").read_text().splitlines() if l.strip()]
    if rows != make_rows(128):
        sys.exit("tests/fixtures_train/rows.jsonl is not what train_reference.py writes: regenerate it first")
    return rows


def overflow_rows() -> list[dict]:
    """rows_overflow.jsonl: ids drawn like train_reference.make_rows (seeded, in [3, 128)); rows 0-1
    label only their last token (one shifted target each), rows 2-3 label every token."""
    import torch

    g = torch.Generator().manual_seed(OVERFLOW_ROWS_SEED)
    rows = []
    for i, n in enumerate(OVERFLOW_ROW_LENS):
        ids = torch.randint(3, 128, (n,), generator=g).tolist()
        rows.append({"input_ids": ids, "labels": list(ids) if i >= 2 else [-100] * (n - 1) + [ids[-1]]})
    return rows


def batch_rows(step: int, n_rows: int) -> list[int]:
    """Row indices of 0-based `step`: batch 2 in file order, epoch after epoch (no shuffle)."""
    per_epoch = math.ceil(n_rows / BATCH)
    b = step % per_epoch
    return list(range(b * BATCH, min((b + 1) * BATCH, n_rows)))


def stored_names(model_name: str) -> list[str]:
    from safetensors import safe_open

    with safe_open(FIXTURES / model_name / "model.safetensors", "pt") as f:
        return list(f.keys())


def load_model(model_name: str):
    import torch

    from train_reference import load

    torch.manual_seed(SEED)
    model = load(FIXTURES / model_name)
    # As train_reference.py: name the loss GPT-2 computes so num_items_in_batch is the shifted count.
    model.loss_type = "ForCausalLM"
    model.train()
    return model


def snapshot(model, names: list[str]) -> dict:
    state = model.state_dict()
    return {k: state[k].detach().clone().contiguous() for k in names}


def exact_gemm_mode():
    """Every 16-bit mm/addmm/bmm computed in float64 and rounded to its 16-bit type once: torch's
    rounding points with another (exact) accumulation. Measures what the summation order alone
    does to the updates."""
    import torch
    from torch.utils._python_dispatch import TorchDispatchMode

    aten = torch.ops.aten

    class ExactGemm(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            kwargs = kwargs or {}
            half = isinstance(args[0], torch.Tensor) and args[0].dtype in (torch.float16, torch.bfloat16)
            if half and not kwargs and func in (aten.mm.default, aten.bmm.default):
                return func(args[0].double(), args[1].double()).to(args[0].dtype)
            if half and not kwargs and func is aten.addmm.default and len(args) == 3:
                return torch.addmm(*(a.double() for a in args)).to(args[0].dtype)
            return func(*args, **kwargs)

    return ExactGemm()


def operands16_mode(dtype):
    """For a model run without autocast: the two matrix operands of every mm/addmm/bmm (forward and
    backward) rounded to `dtype`, products and sums in float32, results kept float32; every other op
    in float32. A plausible other design of mixed precision ("16-bit GEMM operands, f32
    everything else"), used only to show how far such a design lands from torch's autocast."""
    import torch
    from torch.utils._python_dispatch import TorchDispatchMode

    aten = torch.ops.aten

    def r(t):
        return t.to(dtype).to(torch.float32)

    class Operands16(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            kwargs = kwargs or {}
            f32 = isinstance(args[0], torch.Tensor) and args[0].dtype == torch.float32
            if f32 and func in (aten.mm.default, aten.bmm.default):
                args = (r(args[0]), r(args[1]), *args[2:])
            elif f32 and func is aten.addmm.default:
                args = (args[0], r(args[1]), r(args[2]), *args[3:])
            return func(*args, **kwargs)

    return Operands16()


def peak_fp16_mode():
    """Records the largest finite |value| of the float16 tensors the backward pass computes (views
    excluded) and the op that made it, and the first op whose float16 result had an inf/NaN."""
    import torch
    from torch.utils._python_dispatch import TorchDispatchMode
    from torch.utils._pytree import tree_leaves

    class PeakFp16(TorchDispatchMode):
        peak, where, first_nonfinite = 0.0, "", None

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            out = func(*args, **(kwargs or {}))
            if func.overloadpacket.__name__ in VIEW_OPS:
                return out
            for t in tree_leaves(out):
                if isinstance(t, torch.Tensor) and t.dtype == torch.float16 and t.numel():
                    fin = torch.isfinite(t)
                    if self.first_nonfinite is None and not bool(fin.all()):
                        self.first_nonfinite = f"{func} {list(t.shape)}"
                    if bool(fin.any()) and float(t[fin].abs().max()) > self.peak:
                        self.peak, self.where = float(t[fin].abs().max()), f"{func} {list(t.shape)}"
            return out

    return PeakFp16()


def train(model_name: str, rows: list[dict], steps: int, precision: str = "f32", init_scale: float | None = None,
          mode=None, skip: frozenset = frozenset(), peaks: bool = False, keep_grads: bool = False) -> dict:
    """The Trainer's loop, written out, for `steps` steps: zero_grad; forward and loss (sum over the
    shifted targets divided by their count, the Trainer's num_items_in_batch) under autocast;
    backward of the loss, multiplied by the scale when there is a GradScaler; AdamW step, through
    the scaler when there is one. `mode()` wraps forward and backward in a dispatch mode; steps in
    `skip` (0-based) compute the loss but take no optimizer step (the f32 mirror of skipped steps);
    `peaks` records the float16 backward's peak per step, `keep_grads` the (unscaled) gradients."""
    import torch

    from train_reference import collate

    names = stored_names(model_name)
    model = load_model(model_name)
    before = snapshot(model, names)
    opt = torch.optim.AdamW(model.parameters(), lr=LR, betas=BETAS, eps=EPS, weight_decay=WEIGHT_DECAY)
    first = next(iter(model.parameters()))
    dt = autocast_dtype(precision)
    scaler = None if init_scale is None else torch.amp.GradScaler("cpu", **{**SCALER, "init_scale": init_scale})
    rec = {"losses": [], "batches": [], "num_items_in_batch": [], "scale_before": [], "scale_after": [],
           "found_inf": [], "skipped_steps": [], "fp16_backward_peak": [], "fp16_backward_peak_op": [],
           "fp16_backward_first_nonfinite_op": [], "grads": []}
    for step in range(steps):
        idx = batch_rows(step, len(rows))
        batch = collate([rows[i] for i in idx])
        # As Trainer._get_num_items_in_batch: the count of shifted labels that are not -100, as a
        # tensor, divided by tp * cp * sp = 1 (which makes it a float tensor).
        n_items = batch["labels"][..., 1:].ne(-100).sum() / 1
        model.zero_grad()
        autocast = torch.autocast(device_type="cpu", dtype=dt) if dt is not None else contextlib.nullcontext()
        with mode() if mode is not None else contextlib.nullcontext():
            with autocast:
                loss = model(**batch, num_items_in_batch=n_items).loss
            peak = peak_fp16_mode() if peaks else contextlib.nullcontext()
            with peak:
                (scaler.scale(loss) if scaler is not None else loss).backward()
        rec["losses"].append(loss.item())
        if keep_grads:
            params = dict(model.named_parameters())
            rec["grads"].append({k: params[k].grad.detach().clone() for k in names})
        rec["batches"].append(idx)
        rec["num_items_in_batch"].append(int(n_items.item()))
        if peaks:
            rec["fp16_backward_peak"].append(peak.peak)
            rec["fp16_backward_peak_op"].append(peak.where)
            rec["fp16_backward_first_nonfinite_op"].append(peak.first_nonfinite)
        if scaler is not None:
            steps_before = int(opt.state[first]["step"]) if "step" in opt.state[first] else 0
            rec["scale_before"].append(scaler.get_scale())
            scaler.step(opt)
            found = sum(v.item() for v in scaler._found_inf_per_device(opt).values()) > 0
            scaler.update()
            rec["scale_after"].append(scaler.get_scale())
            rec["found_inf"].append(found)
            steps_after = int(opt.state[first]["step"]) if "step" in opt.state[first] else 0
            assert steps_after == steps_before + (0 if found else 1)
            if found:
                rec["skipped_steps"].append(step + 1)
        elif step not in skip:
            opt.step()
    after = snapshot(model, names)
    rec["update"] = {k: (after[k] - before[k]).contiguous() for k in names}
    rec["after"] = after
    rec["adam_steps"] = int(opt.state[first]["step"]) if "step" in opt.state[first] else 0
    return rec


def trainer_run(model_name: str, rows: list[dict], steps: int, **mixed) -> dict:
    """The real transformers.Trainer, with train_reference.py's arguments plus `mixed` (bf16=True
    or fp16=True): its weights, logged losses, accelerate's mixed_precision and GradScaler."""
    from transformers import Trainer, TrainingArguments
    from transformers.trainer_callback import PrinterCallback

    from train_reference import collate

    model = load_model(model_name)
    with tempfile.TemporaryDirectory() as tmp:
        args = TrainingArguments(
            output_dir=tmp, per_device_train_batch_size=BATCH, max_steps=steps, learning_rate=LR,
            lr_scheduler_type="constant", warmup_steps=0, optim="adamw_torch", adam_beta1=BETAS[0],
            adam_beta2=BETAS[1], adam_epsilon=EPS, weight_decay=WEIGHT_DECAY, max_grad_norm=0.0,
            train_sampling_strategy="sequential", use_cpu=True, report_to=[], save_strategy="no",
            logging_steps=1, seed=SEED, dataloader_num_workers=0, disable_tqdm=True, **mixed,
        )
        trainer = Trainer(model=model, args=args, train_dataset=rows, data_collator=collate)
        trainer.remove_callback(PrinterCallback)  # keep the logged dicts off stdout
        trainer.train()
    acc = trainer.accelerator
    return {"after": snapshot(model, stored_names(model_name)),
            "losses": [h["loss"] for h in trainer.state.log_history if "loss" in h],
            "mixed_precision": acc.mixed_precision, "native_amp": acc.native_amp, "grad_scaler": acc.scaler is not None}


def max_abs_diff(a: dict, b: dict) -> float:
    return max(float((a[k] - b[k]).abs().max()) for k in a)


def ill_conditioned(f32_grads: list[dict]) -> dict:
    """Per tensor, the flat indices of the elements whose f32 gradient is below AdamW's eps at every
    step without being exactly zero at every step: rounding noise (GPT-2's key biases, zero in exact
    arithmetic) that AdamW turns into updates of up to lr per step, and 16-bit noise far more often
    than f32 noise. train_parity.rs holds such elements only to Adam's step bound."""
    import torch

    out = {}
    for k in f32_grads[0]:
        g = torch.stack([s[k].flatten() for s in f32_grads])
        bad = (g.abs().amax(0) < TINY_GRAD) & (g != 0).any(0)
        if bool(bad.any()):
            out[k] = bad.nonzero().flatten().tolist()
    return out


def keep_mask(update: dict, excluded: dict) -> dict:
    import torch

    masks = {}
    for k, v in update.items():
        m = torch.ones(v.numel(), dtype=torch.bool)
        m[excluded.get(k, [])] = False
        masks[k] = m
    return masks


def cosines(a: dict, b: dict, per_tensor: bool = True, mask: dict | None = None) -> dict:
    """Per-tensor and global cosine of two updates, in float64, over the elements of `mask` (all
    when None). A tensor whose two updates are both zero counts as 1, one zero and one not as 0."""
    per, dot, na, nb = {}, 0.0, 0.0, 0.0
    for k in a:
        x, y = a[k].double().flatten(), b[k].double().flatten()
        if mask is not None:
            x, y = x[mask[k].flatten()], y[mask[k].flatten()]
        d, p, q = float(x @ y), float(x @ x), float(y @ y)
        dot, na, nb = dot + d, na + p, nb + q
        per[k] = 1.0 if p == 0 and q == 0 else (0.0 if p == 0 or q == 0 else d / math.sqrt(p * q))
    worst = min(per, key=per.get)
    glob = 1.0 if na == 0 and nb == 0 else (0.0 if na == 0 or nb == 0 else dot / math.sqrt(na * nb))
    out = {"global": glob, "min_tensor": per[worst], "min_tensor_name": worst}
    if per_tensor:
        out["tensors"] = per
    return out


def vkformers_args(model_name: str, precision: str, steps: int, init_scale: float | None, data: str) -> list[str]:
    """The `vkformers train` command line of a case: train_parity.rs's f32 one plus the precision
    flag (`OUT` is the output folder; paths relative to the repository). `--fp32` is explicit since
    bf16 is the default on devices with bf16 tensor cores. `--loss-scale N` (the GradScaler's
    init_scale, growth 2, back-off 0.5, interval 2000) is this reference's name for a flag the CLI
    does not have yet."""
    args = ["train", "--model", f"tests/fixtures/{model_name}", "--data", data,
            "--out", "OUT", "--max-steps", str(steps), "--batch-size", "2", "--no-shuffle", "--schedule", "constant",
            "--lr", "1e-3", "--eps", "1e-6", "--weight-decay", "0", "--max-grad-norm", "0", f"--{precision}"]
    if init_scale is not None and init_scale != SCALER["init_scale"]:
        args += ["--loss-scale", f"{int(init_scale)}"]
    return args


def probe(model_name: str, rows: list[dict]) -> dict:
    """Per batch, at the initial weights: the largest power-of-two loss scale whose parameter
    gradients stay finite under autocast and under the operands16 design; under autocast, the
    float16 backward's peak per unit of scale (measured at that largest finite scale, where the
    scaled gradients dominate) and the peak of the loss gradient with respect to the logits (the
    first tensor the backward casts to float16)."""
    import torch

    from train_reference import collate

    def finite_grads(model):
        return all(bool(torch.isfinite(p.grad).all()) for p in model.parameters() if p.grad is not None)

    out = {}
    for step in (0, 1):
        idx = batch_rows(step, len(rows))
        batch = collate([rows[i] for i in idx])
        n_items = batch["labels"][..., 1:].ne(-100).sum() / 1
        res = {"rows": idx}
        for design in ("autocast", "operands16"):
            last = None
            for k in range(41):
                model = load_model(model_name)
                if design == "autocast":
                    with torch.autocast(device_type="cpu", dtype=torch.float16):
                        out_ = model(**batch, num_items_in_batch=n_items)
                    out_.logits.retain_grad()
                    mode = peak_fp16_mode()
                    with mode:
                        (out_.loss * 2.0**k).backward()
                    if k == 0:
                        res["logits_grad_peak_per_unit_scale"] = float(out_.logits.grad.abs().max())
                else:
                    with operands16_mode(torch.float16):
                        (model(**batch, num_items_in_batch=n_items).loss * 2.0**k).backward()
                if not finite_grads(model):
                    res[f"{design}_largest_finite_log2_scale"] = k - 1
                    if design == "autocast" and last is not None:
                        res["peak_per_unit_scale"], res["peak_op"] = last.peak / 2.0 ** (k - 1), last.where
                        res["first_nonfinite_op_at_next_scale"] = mode.first_nonfinite
                    break
                last = mode if design == "autocast" else None
        out[f"rows {idx}"] = res
    return out


def skips_from(model_name: str, rows: list[dict], init_scale: float, limit: int = 48) -> dict:
    """Steps skipped, starting from `init_scale`, before the first one is taken."""
    import torch

    from train_reference import collate

    model = load_model(model_name)
    opt = torch.optim.AdamW(model.parameters(), lr=LR, betas=BETAS, eps=EPS, weight_decay=WEIGHT_DECAY)
    scaler = torch.amp.GradScaler("cpu", **{**SCALER, "init_scale": init_scale})
    for step in range(limit):
        batch = collate([rows[i] for i in batch_rows(step, len(rows))])
        n_items = batch["labels"][..., 1:].ne(-100).sum() / 1
        model.zero_grad()
        with torch.autocast(device_type="cpu", dtype=torch.float16):
            loss = model(**batch, num_items_in_batch=n_items).loss
        scale = scaler.get_scale()
        scaler.scale(loss).backward()
        scaler.step(opt)
        found = sum(v.item() for v in scaler._found_inf_per_device(opt).values()) > 0
        scaler.update()
        if not found:
            return {"init_scale": init_scale, "skipped_before_first_taken": step, "first_taken_step": step + 1,
                    "scale_of_first_taken_step": scale}
    raise RuntimeError(f"no step taken in {limit} steps from scale {init_scale}")


def cpu_flags() -> list[str]:
    try:
        flags = next(l for l in Path("/proc/cpuinfo").read_text().splitlines() if l.startswith("flags")).split()
    except (OSError, StopIteration):
        return []
    return sorted(f for f in flags if f in {"avx2", "avx512f", "avx512_bf16", "avx512_fp16", "amx_bf16", "amx_fp16", "f16c"})


def write_case(out_dir: Path, case: str, meta: dict, update: dict, f32_update: dict | None) -> None:
    from safetensors.torch import load_file, save_file

    d = out_dir / case
    d.mkdir(parents=True, exist_ok=True)
    files = {"update.safetensors": update}
    if f32_update is not None:
        files["f32_update.safetensors"] = f32_update
    for fname, tensors in files.items():
        save_file(tensors, str(d / fname), metadata={"format": "pt"})
        back = load_file(str(d / fname))
        assert list(back) == list(tensors) and all(back[k].dtype == tensors[k].dtype and back[k].shape == tensors[k].shape
                                                   and bool(back[k].isfinite().all()) for k in tensors), fname
    (d / "meta.json").write_text(json.dumps(meta, indent=2) + "\n")


def r6(c: dict) -> dict:
    """A cosine dict with values rounded to 6 decimals (for the JSON)."""
    return {k: (round(v, 6) if isinstance(v, float) else {n: round(x, 6) for n, x in v.items()} if isinstance(v, dict)
                else v) for k, v in c.items()}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", type=Path, default=DEFAULT_OUT)
    ap.add_argument("--only", nargs="+", choices=sorted(CASES))
    ap.add_argument("--probe", action="store_true", help="print the fp16 overflow thresholds and exit")
    a = ap.parse_args()
    sys.path.insert(0, str(HERE))
    from make_fixtures import check_versions

    versions = check_versions()
    import torch
    from safetensors.torch import load_file

    torch.set_num_threads(1)
    torch.use_deterministic_algorithms(True)
    data = {"rows": read_rows(), "rows_overflow": overflow_rows()}
    rows = data["rows"]
    if a.probe:
        print(json.dumps({name: probe("llama", r) for name, r in data.items()}, indent=2))
        return
    a.out.mkdir(parents=True, exist_ok=True)
    (a.out / "rows_overflow.jsonl").write_text("".join(json.dumps(r) + "\n" for r in data["rows_overflow"]))

    # The f32 runs (every case's reference) and the Trainer checks of the written-out loop.
    f32, checks = {}, {}
    for m in ("llama", "gpt2"):
        f32[m] = train(m, rows, 2, keep_grads=True)
        plain = trainer_run(m, rows, 2)
        bf16 = trainer_run(m, rows, 2, bf16=True)
        fp16 = trainer_run(m, rows, 2, fp16=True)
        loop_bf16 = train(m, rows, 2, "bf16")
        committed = load_file(str(TRAIN / m / "step2.safetensors"))
        checks[m] = {
            "f32": {"trainer_losses": plain["losses"], "max_abs_weight_diff_vs_loop": max_abs_diff(plain["after"], f32[m]["after"]),
                    "max_abs_weight_diff_vs_committed_fixtures_train_step2": max_abs_diff(committed, f32[m]["after"])},
            "bf16": {"trainer_losses": bf16["losses"], "mixed_precision": bf16["mixed_precision"],
                     "native_amp": bf16["native_amp"],
                     "max_abs_weight_diff_vs_loop": max_abs_diff(bf16["after"], loop_bf16["after"])},
            "fp16": {"trainer_losses": fp16["losses"], "mixed_precision": fp16["mixed_precision"],
                     "native_amp": fp16["native_amp"], "grad_scaler": fp16["grad_scaler"],
                     "max_abs_weight_diff_vs_f32_loop": max_abs_diff(fp16["after"], f32[m]["after"]),
                     "note": "accelerate makes no autocast and no GradScaler for fp16 on CPU: the Trainer trains in "
                             "float32, so the fp16 cases come from the written-out loop only"},
        }
        c = checks[m]
        assert c["f32"]["max_abs_weight_diff_vs_loop"] == 0.0 and plain["losses"] == f32[m]["losses"], (m, c["f32"])
        assert c["bf16"]["max_abs_weight_diff_vs_loop"] == 0.0 and bf16["losses"] == loop_bf16["losses"], (m, c["bf16"])
        assert c["fp16"]["max_abs_weight_diff_vs_f32_loop"] == 0.0 and not fp16["native_amp"], (m, c["fp16"])
        print(f"{m}: Trainer == loop for f32 and bf16; Trainer fp16 on CPU == f32", flush=True)

    common = {
        "batch_size": BATCH, "shuffle": False, "lr": LR, "lr_schedule": "constant", "warmup_steps": 0,
        "optimizer": {"name": "torch.optim.AdamW", "betas": list(BETAS), "eps": EPS, "weight_decay": WEIGHT_DECAY,
                      "amsgrad": False, "foreach": "default (off on CPU)"},
        "max_grad_norm": 0.0,
        "loss": "sum of the shifted-token cross-entropies (float32, logits upcast to float32) / targets in the batch",
        "versions": versions,
        "torch_cpu_capability": torch.backends.cpu.get_cpu_capability(),
        "cpu_flags": cpu_flags(),
        "threads": 1,
    }
    for case in a.only or list(CASES):
        model_name, precision, steps, init_scale, data_name = CASES[case]
        rows = data[data_name]
        amp = precision != "f32"
        rec = train(model_name, rows, steps, precision, init_scale, peaks=precision == "fp16") if amp else f32[model_name]
        skipped = frozenset(s - 1 for s in rec.get("skipped_steps", []))
        # The f32 run with the same steps skipped: the same (weights, batch) pair for every loss and
        # the same batches for the optimizer steps that were taken.
        default = data_name == "rows" and not skipped
        ref = f32[model_name] if default else train(model_name, rows, steps, skip=skipped, keep_grads=True)
        bad = ill_conditioned(ref["grads"])
        mask = keep_mask(rec["update"], bad)
        meta = {
            "case": case, "model": model_name, "precision": precision,
            "initial_weights": f"tests/fixtures/{model_name}/model.safetensors",
            "data": DATA[data_name],
            "steps": steps,
            **common,
            "autocast": {"device_type": "cpu", "dtype": str(autocast_dtype(precision)).replace("torch.", ""),
                         "scope": "forward and loss; backward outside"} if amp else None,
            "grad_scaler": {**SCALER, "init_scale": init_scale} if init_scale is not None else None,
            "batches": rec["batches"],
            "num_items_in_batch": rec["num_items_in_batch"],
            "losses": rec["losses"],
            "f32_losses": ref["losses"],
            "adam_steps_taken": rec["adam_steps"],
        }
        if init_scale is not None:
            meta.update({
                "scale_before": rec["scale_before"], "scale_after": rec["scale_after"], "found_inf": rec["found_inf"],
                "skipped_steps": rec["skipped_steps"],
                "fp16_backward_peak": rec["fp16_backward_peak"],
                "fp16_backward_peak_fraction_of_max": [round(p / FP16_MAX, 6) for p in rec["fp16_backward_peak"]],
                "fp16_backward_peak_op": rec["fp16_backward_peak_op"],
                "fp16_backward_first_nonfinite_op": rec["fp16_backward_first_nonfinite_op"],
            })
        all_skipped = len(skipped) == steps
        meta["update"] = f"tests/fixtures_amp/{case}/update.safetensors"
        meta["f32_update"] = (f"tests/fixtures_amp/{model_name}_f32/update.safetensors" if default else None
                              if all_skipped else f"tests/fixtures_amp/{case}/f32_update.safetensors")
        if all_skipped:
            meta["update_is_zero"] = True
        meta["ill_conditioned"] = {
            "rule": "elements whose gradient in this case's f32 run is below 1e-6 in magnitude at every step and not "
                    "exactly zero at every step: rounding noise that AdamW scales up to ~lr per step (GPT-2's key biases, "
                    "zero in exact arithmetic). The *_well_conditioned cosines leave them out",
            "flat_indices": bad,
        }
        if amp and not all_skipped:
            meta["cosine_vs_f32_update"] = r6(cosines(rec["update"], ref["update"]))
            meta["cosine_vs_f32_update_well_conditioned"] = r6(cosines(rec["update"], ref["update"], mask=mask))
        if amp:
            exact = train(model_name, rows, steps, precision, init_scale, mode=exact_gemm_mode)
            ops16 = train(model_name, rows, steps, "f32", init_scale, mode=lambda: operands16_mode(autocast_dtype(precision)))
            meta["sanity"] = {
                "exact_accumulation_gemms": {
                    "what": "torch autocast with every 16-bit GEMM accumulated exactly (float64) and rounded once",
                    "losses": exact["losses"],
                    "skipped_steps": exact["skipped_steps"],
                    "cosine_vs_this_update": r6(cosines(exact["update"], rec["update"], per_tensor=False)),
                    "cosine_vs_this_update_well_conditioned":
                        r6(cosines(exact["update"], rec["update"], per_tensor=False, mask=mask)),
                    "max_abs_update_diff": max_abs_diff(exact["update"], rec["update"]),
                },
                "operands16_design": {
                    "what": "no autocast; only the two operands of every forward and backward GEMM rounded to "
                            f"{precision}, products, sums and all other ops in float32 (same scaler)",
                    "losses": ops16["losses"],
                    "skipped_steps": ops16["skipped_steps"],
                    "cosine_vs_this_update_well_conditioned":
                        r6(cosines(ops16["update"], rec["update"], per_tensor=False, mask=mask)),
                    "cosine_vs_f32_update_well_conditioned":
                        r6(cosines(ops16["update"], ref["update"], per_tensor=False, mask=mask)),
                },
            }
            if all_skipped:
                for v in meta["sanity"].values():
                    for k in [k for k in v if k.startswith("cosine")]:
                        del v[k]
        if init_scale is not None and init_scale != SCALER["init_scale"]:
            meta["sanity"]["skip_counts"] = [skips_from(model_name, rows, s) for s in SKIP_COUNT_FROM]
        if case == "llama_fp16_overflow":
            one = train(model_name, [rows[i] for i in (2, 3, 0, 1)], 1, "fp16", SCALER["init_scale"])
            meta["sanity"]["taken_step_vs_one_step_on_rows_2_3"] = {
                "what": "this update vs one fp16 step on rows 2-3 from the initial weights at scale 65536: equal, "
                        "since the skipped step left the weights and the AdamW state as they were",
                "max_abs_diff": max_abs_diff(rec["update"], one["update"]),
            }
        meta["trainer_checks"] = checks[model_name]
        meta["vkformers_args"] = vkformers_args(model_name, precision, steps, init_scale, DATA[data_name])
        if all_skipped:
            assert all(not bool(v.any()) for v in rec["update"].values()), case
        write_case(a.out, case, meta, rec["update"], None if default or all_skipped else ref["update"])
        cv = meta.get("cosine_vs_f32_update_well_conditioned", {})
        print(f"{case}: losses {rec['losses']} (f32 {ref['losses']})"
              + (f", scales {rec['scale_before']} -> {rec['scale_after']}, skipped {rec['skipped_steps']}" if init_scale else "")
              + (f", cos vs f32 (well-conditioned) global {cv['global']:.6f} min {cv['min_tensor']:.6f} "
                 f"({cv['min_tensor_name']})" if cv else ""), flush=True)


if __name__ == "__main__":
    main()
