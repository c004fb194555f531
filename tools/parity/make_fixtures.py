#!/usr/bin/env python3
"""Golden-fixture generator for vkformers parity tests.

Builds tiny random Hugging Face `transformers` causal-LM models from configs (never from the hub),
runs forward / loss / backward / two AdamW steps / greedy generation, and writes the results to
tests/fixtures/<name>/. See tools/parity/README.md for the file formats.

Modes:
  make_fixtures.py [--out DIR] [--only NAME ...]        generate fixtures (default DIR: tests/fixtures)
  make_fixtures.py --check-reload DIR --fixture NAME    compare a model folder saved by vkformers
                                                        against the fixture's logits
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import offline_env  # noqa: F401  (offline and quiet before transformers is imported)

HERE = Path(__file__).resolve().parent
REPO = HERE.parent.parent
DEFAULT_OUT = REPO / "tests" / "fixtures"

SEED = 1234
T = 8  # sequence length of the reference batch
BATCH = 2
N_PAD = 3  # row 1's last N_PAD positions are padding
PAD_ID, BOS_ID, EOS_ID = 0, 1, 2
FIRST_REGULAR_ID = 3  # random token ids are drawn from [3, vocab)
PROMPT_LENS = (5, 9)
NEW_TOKENS = 32
INIT_STD = 0.2  # initializer_range: large enough that attention is far from uniform
ONE_D_NOISE = 0.1  # std of noise added to every 1-D parameter (norm weights, biases)
CORRECTION_BIAS_STD = 0.3  # std of DeepSeek-V3's e_score_correction_bias buffer in the fixtures
ADAMW = dict(lr=1e-3, betas=(0.9, 0.999), eps=1e-6, weight_decay=0.01)
RELOAD_RTOL = 1e-5
# Smallest gap allowed between the k-th and (k+1)-th router probability of an MoE fixture (any
# routed row of the reference forward, the AdamW steps or greedy generation): f32 differences of
# ~1e-7 must never flip an expert. A config or seed below it is changed, never the bound.
MIN_ROUTER_MARGIN = 1e-4


def check_versions() -> dict:
    """Fail clearly unless the installed packages match requirements.txt exactly."""
    from importlib.metadata import PackageNotFoundError, version

    wanted = {}
    for line in (HERE / "requirements.txt").read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if line:
            name, ver = line.split("==")
            wanted[name.strip()] = ver.strip()
    found, bad = {}, []
    for name, ver in wanted.items():
        try:
            have = version(name)
        except PackageNotFoundError:
            have = None
        found[name] = have
        # torch wheels may carry a local tag such as 2.15.0+cpu; compare the public part.
        if have is None or have.split("+", 1)[0] != ver:
            bad.append(f"  {name}: need {ver}, have {have}")
    if bad:
        sys.exit(
            "make_fixtures.py: installed versions do not match tools/parity/requirements.txt:\n"
            + "\n".join(bad)
            + "\nCreate the venv as described in tools/parity/README.md."
        )
    found["python"] = sys.version.split()[0]
    return found


# --------------------------------------------------------------------------------------------
# Architectures
# --------------------------------------------------------------------------------------------

# The reference batch's special ids, under the names every family's config class reads.
SPECIAL_IDS = dict(pad_token_id=PAD_ID, bos_token_id=BOS_ID, eos_token_id=EOS_ID)

# Llama 3's RoPE scaling at the fixtures' size (llama_llama3, cwm, apertus).
LLAMA3_ROPE = {
    "rope_type": "llama3",
    "rope_theta": 10000.0,
    "factor": 8.0,
    "low_freq_factor": 1.0,
    "high_freq_factor": 4.0,
    "original_max_position_embeddings": 16,
}

# What a Llama-like fixture config sets beside its sizes (COMMON's, or LongCat-Flash's own).
LLAMA_SETTINGS = dict(
    max_position_embeddings=64,
    initializer_range=INIT_STD,
    rms_norm_eps=1e-6,
    **SPECIAL_IDS,
    tie_word_embeddings=False,
    attention_dropout=0.0,
    rope_parameters={"rope_type": "default", "rope_theta": 10000.0},
)

COMMON = dict(
    vocab_size=128,
    hidden_size=32,
    intermediate_size=64,
    num_hidden_layers=2,
    num_attention_heads=4,
    num_key_value_heads=4,
    head_dim=8,
    **LLAMA_SETTINGS,
)

def gemma3_layers() -> dict:
    """Gemma 3's text layout at the fixtures' size (gemma3_text, and the gemma3 wrapper's text
    model): a sliding layer (window 4) then a global one, query_pre_attn_scalar 12, a RoPE per
    layer type. A new dict each call: no two configs share the nested RoPE dicts."""
    return {
        "sliding_window": 4,
        "layer_types": ["sliding_attention", "full_attention"],
        "query_pre_attn_scalar": 12,
        "rope_parameters": {
            "sliding_attention": {"rope_type": "default", "rope_theta": 10000.0},
            "full_attention": {"rope_type": "default", "rope_theta": 100.0},
        },
    }


# The GPT-2 family's shared config (its own key names; no dropout): gpt2 and the fixture_specs
# built on it (gptj, codegen, gpt_bigcode, gpt-sw3) add their activation, n_inner and head tying.
GPT2_COMMON = dict(
    vocab_size=128,
    n_embd=32,
    n_layer=2,
    n_head=4,
    n_positions=64,
    resid_pdrop=0.0,
    embd_pdrop=0.0,
    attn_pdrop=0.0,
    layer_norm_epsilon=1e-5,
    initializer_range=INIT_STD,
    **SPECIAL_IDS,
)


def extra_fixture_specs() -> dict:
    """More fixtures from tools/parity/fixture_specs/*.py, each defining SPECS = {name: (model_type,
    config kwargs)}; they may use COMMON, LLAMA_SETTINGS, SPECIAL_IDS, LLAMA3_ROPE, gemma3_layers,
    INIT_STD, PAD_ID, BOS_ID and EOS_ID from this module."""
    import importlib.util

    specs = {}
    for path in sorted((HERE / "fixture_specs").glob("*.py")):
        spec = importlib.util.spec_from_file_location(f"fixture_specs_{path.stem}", path)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        specs.update(module.SPECS)
    return specs


def fixture_specs() -> dict:
    """fixture name -> (model_type, config kwargs)."""
    return {**base_fixture_specs(), **extra_fixture_specs()}


def base_fixture_specs() -> dict:
    """fixture name -> (model_type, config kwargs)."""
    return {
        "llama": ("llama", {**COMMON, "num_key_value_heads": 2}),
        "llama_llama3": (
            "llama",
            {**COMMON, "num_key_value_heads": 2, "rope_parameters": LLAMA3_ROPE, "tie_word_embeddings": True},
        ),
        "mistral": ("mistral", {**COMMON, "num_key_value_heads": 2, "sliding_window": 4}),
        "qwen2": ("qwen2", {**COMMON, "num_key_value_heads": 2}),  # QKV bias is built into Qwen2Attention
        "qwen3": ("qwen3", {**COMMON, "num_key_value_heads": 2, "attention_bias": False}),
        "gemma": (
            "gemma",
            # Real Gemma checkpoints tie lm_head to the embedding (the GemmaConfig default).
            {**COMMON, "num_key_value_heads": 2, "hidden_act": "gelu_pytorch_tanh", "tie_word_embeddings": True},
        ),
        "gpt2": (
            "gpt2",
            # n_inner None: 4 * n_embd = 128.
            {**GPT2_COMMON, "n_inner": None, "activation_function": "gelu_new", "tie_word_embeddings": True},
        ),
    }


# --------------------------------------------------------------------------------------------
# Generation mode
# --------------------------------------------------------------------------------------------


def setup_torch():
    import torch

    torch.set_num_threads(1)  # bitwise-reproducible CPU reductions
    torch.use_deterministic_algorithms(True)
    torch.set_default_dtype(torch.float32)
    return torch


def quiet_torch():
    """`setup_torch`, with transformers' logging down to errors (the scripts' usual start)."""
    torch = setup_torch()
    from transformers.utils import logging as hf_logging

    hf_logging.set_verbosity_error()
    return torch


def lm_class(config):
    """The class a folder of `config` loads as: AutoModelForCausalLM, or for an image-text wrapper
    it does not map (mistral3) AutoModelForImageTextToText."""
    from transformers import AutoModelForCausalLM, AutoModelForImageTextToText

    if type(config) in AutoModelForCausalLM._model_mapping:
        return AutoModelForCausalLM
    return AutoModelForImageTextToText


def build_model(model_type: str, cfg_kwargs: dict):
    import torch
    from transformers import AutoConfig

    config = AutoConfig.for_model(model_type, **cfg_kwargs)
    torch.manual_seed(SEED)
    model = lm_class(config).from_config(config, attn_implementation="eager", dtype=torch.float32)
    # Default init leaves norm weights at 1 (0 for gemma's 1+w) and biases at 0; perturb every 1-D
    # parameter so that a reimplementation that ignores a bias or a norm weight shows up in the logits.
    g = torch.Generator().manual_seed(SEED + 1)
    with torch.no_grad():
        for n, p in model.named_parameters():
            # gpt-oss's per-expert biases (`experts.gate_up_proj_bias [E, 2I]`, `down_proj_bias [E, H]`)
            # are biases too, though 2-D.
            if p.dim() == 1 or n.endswith("proj_bias"):
                p.add_(torch.randn(p.shape, generator=g) * ONE_D_NOISE)
        # DeepSeek-V3's router correction bias is a stored buffer that starts at zero: give it values
        # large enough to change which experts and groups are chosen.
        # ERNIE 4.5's is a frozen parameter (requires_grad False) of shape [1, E].
        frozen = [(n, p) for n, p in model.named_parameters() if not p.requires_grad]
        for n, b in list(model.named_buffers()) + frozen:
            if n.endswith("e_score_correction_bias"):
                b.add_(torch.randn(b.shape, generator=g) * CORRECTION_BIAS_STD)
    model.eval()  # every dropout probability is 0 anyway
    return model


def make_batch(vocab: int):
    import torch

    g = torch.Generator().manual_seed(SEED + 2)
    ids = torch.randint(FIRST_REGULAR_ID, vocab, (BATCH, T), generator=g)
    mask = torch.ones(BATCH, T, dtype=torch.long)
    mask[1, T - N_PAD :] = 0
    ids[1, T - N_PAD :] = PAD_ID
    labels = ids.masked_fill(mask == 0, -100)
    return ids, mask, labels


def make_prompts(vocab: int):
    import torch

    g = torch.Generator().manual_seed(SEED + 3)
    return [torch.randint(FIRST_REGULAR_ID, vocab, (n,), generator=g).tolist() for n in PROMPT_LENS]


def cached_greedy(model, ids, mask):
    """transformers' cached greedy generation of NEW_TOKENS for the batch `ids` (padded with
    PAD_ID where `mask` is 0), with each step's logits."""
    return model.generate(
        ids,
        attention_mask=mask,
        do_sample=False,
        max_new_tokens=NEW_TOKENS,
        min_new_tokens=NEW_TOKENS,
        eos_token_id=None,
        pad_token_id=PAD_ID,
        use_cache=True,
        output_logits=True,
        return_dict_in_generate=True,
    )


def greedy(model, prompt: list[int]):
    """Greedy generation with the KV cache; returns (new tokens, min top1-top2 logit gap)."""
    import torch

    ids = torch.tensor([prompt])
    with torch.no_grad():
        out = cached_greedy(model, ids, torch.ones_like(ids))
    new = out.sequences[0, len(prompt) :].tolist()
    assert len(new) == NEW_TOKENS, (len(new), new)
    gaps = []
    for step_logits in out.logits:
        top2 = torch.topk(step_logits[0].float(), 2).values
        gaps.append(float(top2[0] - top2[1]))
    # Cross-check against generation without any cache: full recompute, argmax of the last position.
    seq = list(prompt)
    with torch.no_grad():
        for _ in range(NEW_TOKENS):
            logits = model(torch.tensor([seq]), use_cache=False).logits
            seq.append(int(logits[0, -1].argmax()))
    if seq[len(prompt) :] != new:
        raise RuntimeError(f"cached and uncached greedy generation disagree: {new} vs {seq[len(prompt):]}")
    return new, min(gaps)


def write_json(path: Path, obj) -> None:
    path.write_text(json.dumps(obj, indent=2, sort_keys=False) + "\n")


def make_fixture(name: str, model_type: str, cfg_kwargs: dict, out_dir: Path, versions: dict) -> None:
    import torch
    from safetensors.torch import save_file

    model = build_model(model_type, cfg_kwargs)
    cfg = model.config
    vocab = cfg.get_text_config().vocab_size
    d = out_dir / name
    d.mkdir(parents=True, exist_ok=True)
    for stale in ("config.json", "model.safetensors", "generation_config.json"):
        (d / stale).unlink(missing_ok=True)
    model.save_pretrained(d, safe_serialization=True)
    if cfg.model_type != model_type:
        # An alias type (`gpt-sw3` uses GPT2Config, which saves "gpt2"): keep the requested name in
        # config.json, as such checkpoints ship it; transformers maps it back to the same class.
        saved = json.loads((d / "config.json").read_text())
        saved["model_type"] = model_type
        write_json(d / "config.json", saved)

    names = [n for n, _ in model.named_parameters()]
    stored = _stored_names(model, d / "model.safetensors")
    ids, mask, labels = make_batch(vocab)
    margins = RouterMargins(model)

    # Forward + loss + backward.
    model.zero_grad(set_to_none=True)
    out = model(input_ids=ids, attention_mask=mask, labels=labels, use_cache=False)
    logits = out.logits.detach().clone()
    loss = out.loss.detach().clone()
    out.loss.backward()
    params = dict(model.named_parameters())
    # An image-text wrapper's vision tower and projector get no gradient from a text batch: they
    # are carried (not compared), and AdamW leaves them alone.
    carried = [n for n in names if params[n].grad is None]
    names = [n for n in names if params[n].grad is not None]
    grads = {n: params[n].grad.detach().clone() for n in names}

    # Sanity: logits from a plain forward (no labels) are identical.
    with torch.no_grad():
        logits2 = model(input_ids=ids, attention_mask=mask, use_cache=False).logits
    assert torch.equal(logits, logits2)

    # Two AdamW steps on the same batch.
    opt = torch.optim.AdamW(model.parameters(), **ADAMW)
    for _ in range(2):
        opt.zero_grad(set_to_none=True)
        step_out = model(input_ids=ids, attention_mask=mask, labels=labels, use_cache=False)
        step_out.loss.backward()
        opt.step()
    step2 = {n: params[n].detach().clone() for n in names}
    train_margin = margins.take()

    ref = {
        "input_ids": ids.to(torch.int32).contiguous(),
        "attention_mask": mask.to(torch.int32).contiguous(),
        "labels": labels.to(torch.int32).contiguous(),
        "logits": logits.float().contiguous(),
        "loss": loss.reshape(1).float().contiguous(),
    }
    for n in names:
        for key, part in _stored_parts(stored[n], grads[n]):
            ref[f"grad.{key}"] = part
        for key, part in _stored_parts(stored[n], step2[n]):
            ref[f"step2.{key}"] = part
    save_file(ref, str(d / "reference.safetensors"), metadata={"format": "pt"})
    # (one metadata key only: safetensors stores metadata in a hash map, so several keys come out in
    # random order and the file bytes would not be reproducible)

    # Greedy generation uses the untrained model: rebuild it from the saved folder contents.
    gen_model = build_model(model_type, cfg_kwargs)
    gen_margins = RouterMargins(gen_model)
    prompts = make_prompts(vocab)
    new_tokens, gaps = [], []
    for p in prompts:
        toks, gap = greedy(gen_model, p)
        new_tokens.append(toks)
        gaps.append(gap)
    greedy_margin = gen_margins.take()
    write_json(d / "greedy.json", {"prompts": prompts, "new_tokens": new_tokens})

    saved_keys = sorted(_safetensors_keys(d / "model.safetensors"))
    tied = sorted(set(_all_param_keys(model)) - set(names))
    meta = {
        "fixture": name,
        "model_type": model_type,
        "architecture": type(model).__name__,
        "versions": versions,
        "seed": SEED,
        "dtype": "float32",
        "attn_implementation": "eager",
        "init": {
            "initializer_range": INIT_STD,
            "one_d_param_noise_std": ONE_D_NOISE,
            "note": "after transformers' own init, N(0, one_d_param_noise_std) noise was added to every 1-D parameter "
                    "(and to gpt-oss's 2-D expert biases, `*proj_bias`)",
        },
        "T": T,
        "batch": BATCH,
        "pad_token_id": PAD_ID,
        "padding": {
            "side": "right",
            "positions": [[1, t] for t in range(T - N_PAD, T)],
            "note": "[row, position] pairs with attention_mask 0; input_ids there are pad_token_id and labels -100",
        },
        "loss": {
            "reduction": "mean over shifted targets whose label != -100",
            "num_targets": int((labels[:, 1:] != -100).sum()),
        },
        "adamw": {**{k: list(v) if isinstance(v, tuple) else v for k, v in ADAMW.items()}, "steps": 2,
                  "torch_defaults": {"amsgrad": False, "maximize": False}},
        "greedy": {
            "max_new_tokens": NEW_TOKENS,
            "do_sample": False,
            "eos_token_id": None,
            "use_cache": True,
            "min_top1_top2_logit_gap": gaps,
        },
        "parameter_names": [key for n in names for key, _ in _stored_parts(stored[n], params[n].detach())],
        "tied_parameter_aliases": tied,
        "carried_parameters": [stored[n] for n in carried],
        "model_safetensors_keys": saved_keys,
        "num_parameters": int(sum(params[n].numel() for n in names)),
    }
    if margins.found:
        assert min(train_margin, greedy_margin) >= MIN_ROUTER_MARGIN, (
            f"{name}: router top-k margin {train_margin:.3g} (steps) / {greedy_margin:.3g} (greedy) is below "
            f"{MIN_ROUTER_MARGIN}; change the fixture's config")
        meta["router"] = {
            "min_topk_margin_forward_and_steps": train_margin,
            "min_topk_margin_greedy": greedy_margin,
            "note": "smallest p_k - p_(k+1) of the softmax router probabilities (DeepSeek-V3 routers: sigmoid "
                    "scores + correction bias; group-limited routers: also the last kept vs first dropped group "
                    "score, and p_k - p_(k+1) within the kept groups) over every routed row of the reference "
                    "forward and the two AdamW steps (and, apart, of greedy generation)",
        }
    write_json(d / "meta.json", meta)
    size = sum(f.stat().st_size for f in d.iterdir())
    extra = f" router_margin={train_margin:.3g} greedy_router_margin={greedy_margin:.3g}" if margins.found else ""
    print(f"{name:14s} {type(model).__name__:20s} params={meta['num_parameters']:6d} loss={loss.item():.6f} "
          f"bytes={size} greedy_min_gap={min(gaps):.3g}{extra}")


class RouterMargins:
    """Smallest gap between the k-th and (k+1)-th router score over every row any top-k router of
    `model` routes (forward hooks; see `_observe` for grouped and biased routers), so a fixture whose
    routing f32 noise could flip is seen."""

    def __init__(self, model):
        import torch

        self.margin = float("inf")
        self.found = False
        for module in model.modules():
            # DeepSeek spells it `TopkRouter`; Hunyuan's is `HunYuanMoEV1Gate` (logits first too);
            # DBRX's `DbrxRouter` returns the logits alone and its top-k is in the ffn_config.
            kind = type(module).__name__.lower()
            if kind.endswith(("topkrouter", "moev1gate", "dbrxrouter", "topkgating", "llama4router")):
                self.found = True
                k = getattr(module, "top_k", None) or model.config.ffn_config.moe_top_k
                # JetMoE's `JetMoeTopKGating` returns the logits last (after the grouping), Llama 4's
                # router (scores, logits).
                at = 4 if kind.endswith("topkgating") else 1 if kind.endswith("llama4router") else 0

                def hook(mod, args, out, k=k, at=at):
                    logits = out[at] if isinstance(out, tuple) else out
                    self._observe(mod, logits.detach().float(), k)

                module.register_forward_hook(hook)

    def _observe(self, mod, logits, k):
        """Margins of the choices a router makes from `logits [n, E]`: the softmax probabilities (or, with
        DeepSeek-V3's `e_score_correction_bias`, sigmoid scores plus the bias); with groups (`num_group`
        and `topk_group`, DeepSeek's group-limited routing), first the gap between the last kept and the
        first dropped group score, then the top-k margin within the kept groups."""
        import torch

        biased = hasattr(mod, "e_score_correction_bias")
        if type(mod).__name__ == "LongcatFlashTopkRouter":  # softmax scores plus the bias, no groups
            s, fill, per_group, biased = torch.softmax(logits, dim=-1) + mod.e_score_correction_bias.float(), 0.0, 1, False
        elif biased:
            s, fill, per_group = logits.sigmoid() + mod.e_score_correction_bias.float(), float("-inf"), 2
        elif hasattr(mod, "moe_statics"):  # ERNIE 4.5: softmax plus the bias, no groups
            s, fill, per_group = torch.softmax(logits, dim=-1) + mod.moe_statics.e_score_correction_bias.float(), 0.0, 1
        else:
            s, fill, per_group = torch.softmax(logits, dim=-1), 0.0, 1
        grouped = biased or getattr(mod, "topk_method", None) == "group_limited_greedy"
        groups, keep = getattr(mod, "num_group", None), getattr(mod, "topk_group", None)
        if grouped and groups and keep and groups > 1:
            g = s.view(s.shape[0], groups, -1).topk(per_group, dim=-1).values.sum(dim=-1)
            if keep < groups:
                top = g.topk(keep + 1, dim=-1).values
                self.margin = min(self.margin, float((top[:, keep - 1] - top[:, keep]).min()))
            mask = torch.zeros_like(g).scatter_(1, g.topk(keep, dim=-1).indices, 1).bool()
            s = s.view(s.shape[0], groups, -1).masked_fill(~mask[..., None], fill).view(s.shape[0], -1)
        if type(mod).__name__ == "PhimoeTopKRouter":
            self._observe_sparsemixer(logits, 2 * mod.router_jitter_noise)
        top = torch.topk(s, min(k + 1, s.shape[-1]), dim=-1).values
        if top.shape[-1] > k:
            self.margin = min(self.margin, float((top[:, k - 1] - top[:, k]).min()))

    def _observe_sparsemixer(self, s, threshold):
        """PhiMoE's sparsemixer masks expert e of choice m when (m - s_e) / max(|s_e|, m) > 2 eps: the
        smallest distance of that ratio to 2 eps, for both choices (the second without the first)."""
        import torch

        top2 = s.topk(2, dim=-1)
        for j in range(2):
            m = top2.values[:, j:j + 1]
            ratio = (m - s) / s.abs().clamp(min=m)
            if j == 1:
                ratio = ratio.scatter(1, top2.indices[:, :1], float("inf"))
            self.margin = min(self.margin, float((ratio - threshold).abs().min()))

    def take(self) -> float:
        m, self.margin = self.margin, float("inf")
        return m


def _stored_parts(key, t):
    """(stored name, tensor) pairs of one parameter: itself, or for a packed expert tensor
    (`[E, rows, cols]`, stored per expert) its per-expert row blocks under their saved names."""
    if isinstance(key, str):
        return [(key, t.float().contiguous())]
    return [(k, t[e, lo:hi].float().contiguous()) for k, (e, lo, hi) in key]


def _safetensors_keys(path: Path) -> list[str]:
    from safetensors import safe_open

    with safe_open(str(path), framework="pt") as f:
        return list(f.keys())


def _stored_names(model, path: Path) -> dict:
    """named_parameters() name -> its key in model.safetensors. Usually the same; some models rename
    on save (GPT-NeoX writes `lm_head` as `embed_out`): such a parameter is matched to the one saved
    tensor with equal contents."""
    from safetensors import safe_open

    out = {}
    with safe_open(str(path), framework="pt") as f:
        keys = set(f.keys())
        for n, p in model.named_parameters():
            if n in keys:
                out[n] = n
                continue
            # Packed experts saved per expert; a packed tensor saved under another name
            # (granitemoe's `input_linear`) is matched by contents below.
            if p.dim() == 3 and "experts" in n and any(".experts." in k for k in keys):
                out[n] = _expert_parts(n, p.detach(), f, keys)
                continue
            same = [k for k in keys if f.get_slice(k).get_shape() == list(p.shape)
                    and bool((f.get_tensor(k) == p.detach()).all())]
            assert len(same) == 1, f"{n}: no unique saved tensor ({same})"
            out[n] = same[0]
    return out


def _expert_parts(n, p, f, keys):
    """A packed expert tensor p [E, rows, cols] that transformers saves per expert: the saved
    tensors (under `.experts.{e}.`) equal to a block of rows of p[e], as [(key, (e, lo, hi))]."""
    prefix = n.rsplit(".experts.", 1)[0]
    parts = []
    for e in range(p.shape[0]):
        for k in sorted(k for k in keys if k.startswith(f"{prefix}.") and f".experts.{e}." in k
                        or k.replace("block_sparse_moe", "mlp").startswith(f"{prefix}.") and f".experts.{e}." in k):
            shape = f.get_slice(k).get_shape()
            if len(shape) != 2 or shape[1] != p.shape[2] or p.shape[1] % shape[0]:
                continue
            t = f.get_tensor(k)
            for lo in range(0, p.shape[1], shape[0]):
                if bool((p[e, lo:lo + shape[0]] == t).all()):
                    parts.append((k, (e, lo, lo + shape[0])))
    covered = sum(hi - lo for _, (_, lo, hi) in parts)
    assert covered == p.shape[0] * p.shape[1], f"{n}: saved expert tensors cover {covered} of {p.shape[0] * p.shape[1]} rows"
    return parts


def _all_param_keys(model) -> list[str]:
    return [n for n, _ in model.named_parameters(remove_duplicate=False)]


def verify_fixture(d: Path) -> None:
    """Load every file back and check names, shapes and dtypes."""
    import numpy as np
    from safetensors.numpy import load_file

    meta = json.loads((d / "meta.json").read_text())
    ref = load_file(str(d / "reference.safetensors"))
    weights = load_file(str(d / "model.safetensors"))
    cfg = json.loads((d / "config.json").read_text())
    greedy_ = json.loads((d / "greedy.json").read_text())
    V = cfg.get("vocab_size") or cfg["text_config"]["vocab_size"]
    for k in ("input_ids", "attention_mask", "labels"):
        assert ref[k].shape == (BATCH, T) and ref[k].dtype == np.int32, (k, ref[k].shape, ref[k].dtype)
    assert ref["logits"].shape == (BATCH, T, V) and ref["logits"].dtype == np.float32
    assert ref["loss"].shape == (1,) and ref["loss"].dtype == np.float32
    assert np.isfinite(ref["logits"]).all() and np.isfinite(ref["loss"]).all()
    names = meta["parameter_names"]
    expected = {"input_ids", "attention_mask", "labels", "logits", "loss"}
    expected |= {f"grad.{n}" for n in names} | {f"step2.{n}" for n in names}
    assert set(ref) == expected, set(ref) ^ expected
    for n in names:
        assert n in weights, f"{n} missing from model.safetensors"
        w = weights[n]
        assert ref[f"grad.{n}"].shape == w.shape and ref[f"step2.{n}"].shape == w.shape, n
        assert w.dtype == np.float32
        assert np.isfinite(ref[f"grad.{n}"]).all() and np.isfinite(ref[f"step2.{n}"]).all()
    assert [len(p) for p in greedy_["prompts"]] == list(PROMPT_LENS)
    assert all(len(t) == NEW_TOKENS for t in greedy_["new_tokens"])


def chosen(specs: dict, only: list[str] | None) -> list[str]:
    """The fixtures named by --only (all when absent); an unknown name exits listing the known ones."""
    todo = only or list(specs)
    for name in todo:
        if name not in specs:
            sys.exit(f"unknown fixture {name!r}; known: {', '.join(specs)}")
    return todo


def generate(args, versions: dict) -> None:
    quiet_torch()
    out_dir = Path(args.out).resolve()
    specs = fixture_specs()
    todo = chosen(specs, args.only)
    for name in todo:
        model_type, cfg_kwargs = specs[name]
        make_fixture(name, model_type, cfg_kwargs, out_dir, versions)
        verify_fixture(out_dir / name)
    print(f"wrote {len(todo)} fixture(s) to {out_dir}")


# --------------------------------------------------------------------------------------------
# --check-reload mode
# --------------------------------------------------------------------------------------------


def check_reload(args) -> int:
    torch = setup_torch()
    from safetensors.torch import load_file
    from transformers import AutoConfig
    from transformers.utils import logging as hf_logging

    hf_logging.set_verbosity_error()
    fixture_dir = Path(args.fixtures).resolve() / args.fixture
    ref_path = fixture_dir / "reference.safetensors"
    if not ref_path.is_file():
        sys.exit(f"no fixture at {fixture_dir}")
    model_dir = Path(args.check_reload).resolve()
    if not (model_dir / "config.json").is_file():
        sys.exit(f"{model_dir} has no config.json")
    ref = load_file(str(ref_path))
    model = lm_class(AutoConfig.from_pretrained(str(model_dir))).from_pretrained(
        str(model_dir), local_files_only=True, attn_implementation="eager", dtype=torch.float32
    )
    model.eval()
    with torch.no_grad():
        logits = model(
            input_ids=ref["input_ids"].long(), attention_mask=ref["attention_mask"].long(), use_cache=False
        ).logits.float()
    want = ref["logits"]
    if logits.shape != want.shape:
        print(f"shape mismatch: reloaded {tuple(logits.shape)} vs fixture {tuple(want.shape)}")
        return 1
    diff = (logits - want).abs()
    max_abs = float(diff.max())
    scale = float(want.abs().max())
    max_rel = max_abs / scale if scale > 0 else max_abs
    elem_rel = float((diff / want.abs().clamp_min(1e-6)).max())
    print(f"fixture={args.fixture} model={model_dir}")
    print(f"max_abs_diff={max_abs:.3e} max_rel_diff={max_rel:.3e} (max|diff| / max|ref|; "
          f"elementwise max {elem_rel:.3e}) threshold={RELOAD_RTOL:.0e}")
    if not max_rel <= RELOAD_RTOL:
        print("FAIL")
        return 1
    print("OK")
    return 0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default=str(DEFAULT_OUT), help="fixture root to write (default: tests/fixtures)")
    ap.add_argument("--only", nargs="+", metavar="NAME", help="generate only these fixtures")
    ap.add_argument("--check-reload", metavar="DIR", help="model folder saved by vkformers to check")
    ap.add_argument("--fixture", metavar="NAME", help="fixture to compare against (with --check-reload)")
    ap.add_argument("--fixtures", default=str(DEFAULT_OUT), help="fixture root to read (with --check-reload)")
    args = ap.parse_args()
    versions = check_versions()
    if args.check_reload:
        if not args.fixture:
            ap.error("--check-reload needs --fixture NAME")
        sys.exit(check_reload(args))
    if args.fixture:
        ap.error("--fixture only makes sense with --check-reload")
    generate(args, versions)


if __name__ == "__main__":
    main()
