#!/usr/bin/env python3
"""Writes tests/fixtures_generate/processors.json: transformers' own logits processors (the list that
`generate` builds with `do_sample=True`, in its order) applied to fixed seeded logit rows, so the Rust
processors of crates/vkformers-generate are checked against them without Python.
Same pinned venv as make_fixtures.py (see tools/parity/README.md). Offline; no model download.

Every f32 (input logits, processed scores) is stored as its IEEE-754 bit pattern (u32) so the Rust side
reads exactly the values torch held; probabilities (float32 softmax of the processed scores) as decimals.
A case lists only the entries it keeps (finite after processing); every other entry is -inf.

torch's CPU `sort` is not stable for long rows, so when tied logits straddle the top-p boundary which of
them transformers removes depends on that sort's internals. Each case therefore also records the result
of the same rule with a stable sort (`stable_*`) and `tie_order_dependent` when the two differ.
"""
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from make_fixtures import check_versions  # noqa: E402

import numpy as np  # noqa: E402
import torch  # noqa: E402
from transformers import GenerationConfig, LlamaConfig, LlamaForCausalLM  # noqa: E402
from transformers.generation import logits_process as lp  # noqa: E402

SEED = 4321
OUT = Path(__file__).resolve().parent.parent.parent / "tests" / "fixtures_generate" / "processors.json"


def rows() -> dict:
    """Fixed logit rows: odd sizes, ties, very negative values, -inf."""
    g = torch.Generator().manual_seed(SEED)
    out = {"v7_ties": torch.tensor([1.0, 3.0, 3.0, -2.0, 0.5, 3.0, -1.0e4])}
    x = torch.randn(64, generator=g) * 3.0
    x[10] = x[20] = x[30] = x[5]  # a tie group
    x[3], x[40] = -1.0e9, float("-inf")
    out["v64_ties_neg"] = x
    x = torch.randn(257, generator=g) * 2.0
    x[100:140] = x[99]  # a large tie group in the middle of the distribution
    out["v257_bigtie"] = x
    x = torch.randn(301, generator=g)
    x[7], x[250], x[299] = 9.0, 8.5, 9.0  # peaked, tied at the top
    x[200:210] = -3.0e4
    out["v301_peaked"] = x
    x = (torch.randn(160, generator=g) * 1.5).round()  # many ties everywhere
    out["v160_rounded"] = x
    return {k: v.float() for k, v in out.items()}


HISTORY = {  # prompt + generated ids; duplicates, and one id beyond every vocab (ignored)
    "ids": [3, 5, 5, 1, 0, 6, 2, 40, 10, 63, 100, 120, 7, 299, 250, 150, 5000],
}

CONFIGS = {
    "temp_0.7": dict(temperature=0.7),
    "temp_1.5": dict(temperature=1.5),
    "topk_1": dict(top_k=1),
    "topk_5": dict(top_k=5),
    "topk_50": dict(top_k=50),
    "topp_0.9": dict(top_p=0.9),
    "topp_0.5": dict(top_p=0.5),
    "topp_0.05": dict(top_p=0.05),
    "minp_0.05": dict(min_p=0.05),
    "minp_0.3": dict(min_p=0.3),
    "rep_1.3": dict(repetition_penalty=1.3),
    "rep_0.8": dict(repetition_penalty=0.8),
    "temp0.7_topk50_topp0.9": dict(temperature=0.7, top_k=50, top_p=0.9),
    "temp0.7_minp0.05": dict(temperature=0.7, min_p=0.05),
    "all": dict(repetition_penalty=1.3, temperature=0.7, top_k=50, top_p=0.9, min_p=0.05),
}

# Processors called directly, for min_tokens_to_keep (generate only sets it > 1 for beam search).
DIRECT = {
    "topk_3_keep5": (lambda: lp.TopKLogitsWarper(3, min_tokens_to_keep=5), dict(top_k=3, min_tokens_to_keep=5)),
    "topp_0.3_keep3": (lambda: lp.TopPLogitsWarper(0.3, min_tokens_to_keep=3), dict(top_p=0.3, min_tokens_to_keep=3)),
    "minp_0.5_keep2": (lambda: lp.MinPLogitsWarper(0.5, min_tokens_to_keep=2), dict(min_p=0.5, min_tokens_to_keep=2)),
}


def bits(t: torch.Tensor) -> list:
    return [int(b) for b in t.contiguous().float().numpy().view(np.uint32)]


def stable_top_p(scores: torch.Tensor, top_p: float, keep: int) -> torch.Tensor:
    """TopPLogitsWarper with a stable sort."""
    sorted_logits, sorted_indices = torch.sort(scores, descending=False, stable=True)
    cum = sorted_logits.softmax(dim=-1).cumsum(dim=-1)
    remove = cum <= (1 - top_p)
    remove[..., -keep:] = 0
    remove = remove.scatter(1, sorted_indices, remove)
    return scores.masked_fill(remove, -float("inf"))


def run_list(procs, ids, scores, stable: bool):
    for p in procs:
        if stable and isinstance(p, lp.TopPLogitsWarper):
            scores = stable_top_p(scores, p.top_p, p.min_tokens_to_keep)
        else:
            scores = p(ids, scores)
    return scores


def record(procs, ids, row: torch.Tensor) -> dict:
    scores = row[None, :].clone()
    out = run_list(procs, ids, scores.clone(), stable=False)[0]
    st = run_list(procs, ids, scores.clone(), stable=True)[0]
    probs = out.softmax(-1)
    kept = torch.isfinite(out).nonzero()[:, 0]
    rec = {
        "kept": kept.tolist(),
        "kept_bits": bits(out[kept]),
        "kept_probs": [float(str(np.float32(p))) for p in probs[kept].numpy()],
        "tie_order_dependent": bool(not torch.equal(out, st)),
    }
    if rec["tie_order_dependent"]:
        rec["stable_kept"] = torch.isfinite(st).nonzero()[:, 0].tolist()
    return rec


def main() -> None:
    versions = check_versions()
    torch.manual_seed(SEED)
    tiny = LlamaForCausalLM(LlamaConfig(vocab_size=16, hidden_size=8, intermediate_size=16, num_hidden_layers=1,
                                        num_attention_heads=2, num_key_value_heads=2))
    ids = torch.tensor([HISTORY["ids"]])
    data = rows()
    out = {"versions": versions, "history": HISTORY["ids"],
           "rows": {k: bits(v) for k, v in data.items()},
           "argmax": {k: int(torch.argmax(v)) for k, v in data.items()}, "cases": []}
    for name, kw in CONFIGS.items():
        # generate()'s defaults are top_k=50, top_p=1.0, temperature=1.0: disable what is not asked for.
        gc = GenerationConfig(do_sample=True, top_k=kw.get("top_k", 0), top_p=kw.get("top_p", 1.0),
                              temperature=kw.get("temperature", 1.0), min_p=kw.get("min_p"),
                              repetition_penalty=kw.get("repetition_penalty", 1.0))
        procs = tiny._get_logits_processor(generation_config=gc, input_ids_seq_length=ids.shape[1],
                                           encoder_input_ids=ids, prefix_allowed_tokens_fn=None,
                                           logits_processor=None, device="cpu", model_kwargs={})
        order = [type(p).__name__ for p in procs]
        for row_name, row in data.items():
            out["cases"].append({"config": name, "params": kw, "order": order, "row": row_name,
                                 **record(procs, ids, row)})
    for name, (make, kw) in DIRECT.items():
        p = make()
        for row_name, row in data.items():
            out["cases"].append({"config": name, "params": kw, "order": [type(p).__name__], "row": row_name,
                                 **record([p], ids, row)})
    OUT.write_text(json.dumps(out, separators=(",", ":")) + "\n")
    n_dep = sum(c["tie_order_dependent"] for c in out["cases"])
    print(f"wrote {OUT}: {len(out['cases'])} cases, {n_dep} depend on torch's unstable sort order")


if __name__ == "__main__":
    main()
