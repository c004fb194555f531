"""What the encoder and encoder-decoder fixture scripts (make_encoder_fixtures.py,
make_seq2seq_fixtures.py) share beside make_fixtures.py: the 1-D parameter noise, the reference's
forward / backward / two AdamW steps, the tensors and meta fields every fixture stores, the
logits check of `--check-reload`, and the command line.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import make_fixtures as mf  # sets the offline environment before transformers is imported


def perturb_1d(model) -> None:
    """As make_fixtures.py: noise on every 1-D parameter, so that an ignored bias or norm weight shows."""
    import torch

    g = torch.Generator().manual_seed(mf.SEED + 1)
    with torch.no_grad():
        for _, p in model.named_parameters():
            if p.dim() == 1:
                p.add_(torch.randn(p.shape, generator=g) * mf.ONE_D_NOISE)


def forward_backward(model, names: list[str], run):
    """`run(model)` (a model output with `.loss`) once with its gradients: (logits, loss, grads)."""
    model.zero_grad(set_to_none=True)
    out = run(model)
    logits, loss = out.logits.detach().clone(), out.loss.detach().clone()
    out.loss.backward()
    params = dict(model.named_parameters())
    return logits, loss, {n: params[n].grad.detach().clone() for n in names}


def two_adamw_steps(model, names: list[str], run) -> dict:
    """Two `torch.optim.AdamW` steps (make_fixtures.ADAMW) on `run(model).loss`: the weights after them."""
    import torch

    opt = torch.optim.AdamW(model.parameters(), **mf.ADAMW)
    for _ in range(2):
        opt.zero_grad(set_to_none=True)
        run(model).loss.backward()
        opt.step()
    params = dict(model.named_parameters())
    return {n: params[n].detach().clone() for n in names}


def add_grads_and_steps(ref: dict, stored: dict, grads: dict, step2: dict) -> None:
    """`grad.<stored name>` and `step2.<stored name>` of every trained parameter, as f32."""
    for n, s in stored.items():
        ref[f"grad.{s}"] = grads[n].float().contiguous()
        ref[f"step2.{s}"] = step2[n].float().contiguous()


def fixture_meta(name: str, model_type: str, model, versions: dict, d: Path, stored: dict, specific: dict) -> dict:
    """meta.json: the fields every fixture has around the script's own (`specific`); `stored` maps
    each trained parameter's name to its stored one, in parameter order."""
    params = dict(model.named_parameters())
    return {
        "fixture": name,
        "model_type": model_type,
        "architecture": type(model).__name__,
        "versions": versions,
        "seed": mf.SEED,
        "dtype": "float32",
        "attn_implementation": "eager",
        **specific,
        "adamw": {**{k: list(v) if isinstance(v, tuple) else v for k, v in mf.ADAMW.items()}, "steps": 2},
        "parameter_names": list(stored.values()),
        "tied_parameter_aliases": sorted(set(mf._all_param_keys(model)) - set(stored)),
        "model_safetensors_keys": sorted(mf._safetensors_keys(d / "model.safetensors")),
        "num_parameters": int(sum(params[n].numel() for n in stored)),
    }


def check_logits(fixture: str, logits, want) -> int:
    """`--check-reload`'s verdict: the reloaded folder's logits against the fixture's."""
    rel = float((logits - want).abs().max() / want.abs().max())
    ok = logits.shape == want.shape and rel <= mf.RELOAD_RTOL
    print(f"fixture={fixture} max|diff|/max|ref|={rel:.3e} threshold={mf.RELOAD_RTOL:.0e} "
          f"{'OK' if ok else 'FAIL'}")
    return 0 if ok else 1


def main(doc: str, specs: dict, make_fixture, check_reload, extra=None) -> None:
    """The fixture scripts' command line: `[--out DIR] [--only NAME ...]` makes fixtures,
    `--check-reload DIR --fixture NAME [--fixtures DIR]` checks a saved folder. `extra(ap)` adds
    options and, called again with the parsed arguments, may handle the run itself (True)."""
    ap = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default=str(mf.DEFAULT_OUT))
    ap.add_argument("--only", nargs="+", metavar="NAME")
    ap.add_argument("--check-reload", metavar="DIR")
    ap.add_argument("--fixture", metavar="NAME")
    ap.add_argument("--fixtures", default=str(mf.DEFAULT_OUT))
    if extra:
        extra(ap, None)
    args = ap.parse_args()
    versions = mf.check_versions()
    if args.check_reload:
        sys.exit(check_reload(args))
    mf.quiet_torch()
    if extra and extra(ap, args):
        return
    for name in mf.chosen(specs, args.only):
        model_type, cfg_kwargs = specs[name]
        make_fixture(name, model_type, cfg_kwargs, Path(args.out).resolve(), versions)
