#!/usr/bin/env python3
"""The first-step gradients of `vkformers train --bf16` on the marian fixture, computed in torch
from vkformers' rounding policy written out (`cargo test -p vkformers-cli --test amp_parity
marian_bf16_gradients`).

Offline, with the pinned versions of requirements.txt. The policy, each point one torch.autocast
rounds too (torch also rounds the products' outputs and its own gradients' outputs; vkformers
keeps those in f32):

- a linear (`y = x Wᵀ + b`) multiplies x and W rounded to bfloat16, y in f32 plus the f32 bias;
  its backward multiplies dy rounded to bfloat16 (dx = dy W, dW = dyᵀ x, both f32) and sums the
  f32 dy for the bias;
- attention reads q, k, v rounded and writes o rounded; its backward reads dO rounded, takes
  `delta = rowsum(dO ⊙ o)` from the rounded o, keeps P and dS in f32 and writes dq, dk, dv
  rounded;
- everything else (embeddings, residual adds, LayerNorm, SiLU, the logits bias, the loss) f32.

The batch is the Trainer's first (tokenized rows 0 and 1, `DataCollatorForSeq2Seq`), in train
mode. Writes tests/fixtures_amp/marian_bf16/policy_grad1.safetensors (the gradients under the
fixture's stored names) and policy.json (the loss, and how far torch's own bf16 gradients and
the policy's lie from the f32 ones, per tensor: what separates the three).
"""

from __future__ import annotations

import json

import make_fixtures as mf  # sets the offline environment before transformers is imported
from seq2seq_train_reference import load

FIXTURE = mf.REPO / "tests" / "fixtures" / "marian"
OUT = mf.REPO / "tests" / "fixtures_amp" / "marian_bf16"
DATA = mf.REPO / "tests" / "fixtures_train" / "seq2seq"


def policy_ops():
    """The policy's linear forward and attention function (torch is imported by then)."""
    import torch

    def r16(x):
        return x.to(torch.bfloat16).to(x.dtype)

    class Rounded(torch.autograd.Function):
        """x rounded, and its gradient rounded: a tensor the kernels store in 16 bits."""

        @staticmethod
        def forward(ctx, x):
            return r16(x)

        @staticmethod
        def backward(ctx, g):
            return r16(g)

    class Linear(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x, w, b):
            xr, wr = r16(x), r16(w)
            ctx.save_for_backward(xr, wr)
            ctx.has_bias = b is not None
            y = (xr.double() @ wr.double().T).float()
            return y + b if b is not None else y

        @staticmethod
        def backward(ctx, dy):
            xr, wr = ctx.saved_tensors
            rows = dy.reshape(-1, dy.shape[-1])
            dyr = r16(rows).double()
            dx = (dyr @ wr.double()).float().reshape(*dy.shape[:-1], wr.shape[1])
            dw = (dyr.T @ xr.reshape(-1, xr.shape[-1]).double()).float()
            db = rows.double().sum(0).float() if ctx.has_bias else None
            return dx, dw, db

    class Attention(torch.autograd.Function):
        """Softmax attention of rounded q, k, v `[B, H, T, D]` under an additive mask."""

        @staticmethod
        def forward(ctx, q, k, v, mask, scale):
            s = (q.double() @ k.double().transpose(2, 3)) * scale
            if mask is not None:
                s = s + mask.double()
            p = torch.softmax(s, -1)
            o = (p @ v.double()).float()
            ctx.save_for_backward(q, k, v, p, r16(o))
            ctx.scale = scale
            return o

        @staticmethod
        def backward(ctx, do):
            q, k, v, p, o16 = ctx.saved_tensors
            do = do.double()
            dv = p.transpose(2, 3) @ do
            delta = (do * o16.double()).sum(-1, keepdim=True)
            ds = p * (do @ v.double().transpose(2, 3) - delta)
            dq = ds @ k.double() * ctx.scale
            dk = ds.transpose(2, 3) @ q.double() * ctx.scale
            return dq.float(), dk.float(), dv.float(), None, None

    def linear_forward(self, x):
        return Linear.apply(x, self.weight, self.bias)

    def attention(module, q, k, v, mask, scaling=None, dropout=0.0, **kwargs):
        q, k, v = (Rounded.apply(t) for t in (q, k, v))
        o = Rounded.apply(Attention.apply(q, k, v, mask, scaling))
        return o.transpose(1, 2).contiguous(), None

    return linear_forward, attention


def first_step(policy: bool, autocast: bool = False):
    """Loss and gradients (stored names) of the Trainer's first batch, f32 unless `policy` or
    `autocast` (torch's own bf16)."""
    import torch
    from safetensors import safe_open
    from transformers import DataCollatorForSeq2Seq, PreTrainedTokenizerFast

    rows = [json.loads(l) for l in (DATA / "marian_tokenized.jsonl").read_text().splitlines() if l.strip()]
    tok = PreTrainedTokenizerFast.from_pretrained(DATA / "marian_tokenizer")
    model = load(FIXTURE)
    model.train()
    if policy:
        linear_forward, _ = policy_ops()
        model.set_attn_implementation("vkformers_bf16")
        for m in model.modules():
            if isinstance(m, torch.nn.Linear):
                m.forward = linear_forward.__get__(m)
    batch = DataCollatorForSeq2Seq(tok, model=model, label_pad_token_id=-100, return_tensors="pt")(rows[:2])
    with torch.autocast("cpu", dtype=torch.bfloat16, enabled=autocast):
        loss = model(**batch).loss
    loss.backward()
    with safe_open(FIXTURE / "model.safetensors", "pt") as f:
        stored = set(f.keys())
    grads = {n: p.grad.detach().clone().contiguous() for n, p in model.named_parameters() if n in stored}
    return float(loss), grads


def rel(a, b) -> float:
    return float((a.double() - b.double()).norm() / b.double().norm().clamp_min(1e-30))


def main() -> None:
    versions = mf.check_versions()
    mf.setup_torch()
    from safetensors.torch import save_file
    from transformers import AttentionInterface
    from transformers.masking_utils import AttentionMaskInterface, eager_mask
    from transformers.utils import logging as hf_logging

    hf_logging.set_verbosity_error()
    _, attention = policy_ops()
    AttentionInterface.register("vkformers_bf16", attention)
    # An additive float mask always (sdpa's mask may be None and leave causality to the kernel).
    AttentionMaskInterface.register("vkformers_bf16", eager_mask)
    f32_loss, f32 = first_step(policy=False)
    torch_loss, torch_bf16 = first_step(policy=False, autocast=True)
    loss, grads = first_step(policy=True)
    save_file(grads, str(OUT / "policy_grad1.safetensors"), metadata={"format": "pt"})
    meta = {
        "loss": loss, "f32_loss": f32_loss, "torch_autocast_bf16_loss": torch_loss,
        "policy": " ".join(__doc__.split("\n\n")[2].split()),
        "rel_l2_vs_f32": {k: {"policy": rel(grads[k], f32[k]), "torch_bf16": rel(torch_bf16[k], f32[k])}
                          for k in sorted(grads)},
        "versions": versions,
    }
    (OUT / "policy.json").write_text(json.dumps(meta, indent=2) + "\n")
    print(f"loss {loss} (f32 {f32_loss}, torch bf16 {torch_loss})")


if __name__ == "__main__":
    main()
