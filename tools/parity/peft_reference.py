#!/usr/bin/env python3
"""LoRA golden fixtures from PEFT for vkformers.

For each base fixture in tests/fixtures/<name> (config + weights + reference batch written by
make_fixtures.py) this applies a LoRA config with PEFT, gives B small random values (PEFT's own
init leaves B = 0, which would make the adapter invisible in the logits), and writes to
tests/fixtures_lora/<name>/:

  adapter_config.json, adapter_model.safetensors   the adapter, as PeftModel.save_pretrained writes it
  reference.safetensors   input_ids, attention_mask, labels (the base fixture's batch), logits and loss
                          with the adapter, grad.<adapter key> for every LoRA tensor, step2.<adapter key>
                          after two AdamW steps (lr 1e-3, eps 1e-6, weight decay 0.01) on that batch
  merged.safetensors      the base model's stored tensors after merge_and_unload() (adapter as saved,
                          before any step)

Modes:
  peft_reference.py [--only NAME ...]                         write the fixtures
  peft_reference.py --check-adapter DIR --model MODEL_DIR --logits FILE
        load the model folder with the PEFT adapter in DIR (PeftModel.from_pretrained), run the
        `input_ids` stored in FILE (written by vkformers, mask all ones) and compare with its
        `logits`; exit 1 if max|diff| / max|ref| > 1e-5
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("HF_HUB_DISABLE_TELEMETRY", "1")
os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")

HERE = Path(__file__).resolve().parent
REPO = HERE.parent.parent
BASE = REPO / "tests" / "fixtures"
OUT = REPO / "tests" / "fixtures_lora"

SEED = 4321
B_INIT_STD = 0.2  # std of the random B given to every adapter so that its logits differ from the base
ADAMW = dict(lr=1e-3, betas=(0.9, 0.999), eps=1e-6, weight_decay=0.01)
RTOL = 1e-5

# fixture -> LoraConfig kwargs beyond r=4, alpha=8, dropout 0. Each family targets an attention and
# an MLP projection; together they cover a name list, a full-match regex, "all-linear", rsLoRA and a
# fused Conv1D module (GPT-2's c_attn, fan_in_fan_out). A name with `:` is `<fixture>:<base fixture>`.
CONFIGS = {
    "llama": dict(target_modules=["q_proj", "v_proj", "down_proj"]),
    "mistral": dict(target_modules=["k_proj", "o_proj", "gate_proj"]),
    "qwen2": dict(target_modules=["q_proj", "k_proj", "v_proj", "up_proj"]),
    "qwen3": dict(target_modules="all-linear"),
    "gemma": dict(target_modules=r".*layers\.1\.(self_attn\.q_proj|mlp\.up_proj)", use_rslora=True),
    "gpt2": dict(target_modules=["c_attn", "c_fc"], fan_in_fan_out=True),
    "llama_modules_to_save:llama": dict(target_modules=["o_proj", "up_proj"], modules_to_save=["lm_head"]),
    # An image-text wrapper: PEFT names its text modules `model.language_model.*` (stored as
    # `language_model.model.*`); the regex keeps LoRA off the vision tower, as users target it.
    "gemma3": dict(target_modules=r".*language_model.*\.(q_proj|v_proj|down_proj)"),
    # Encoder-decoders: encoder, decoder self- and cross-attention modules share these names.
    "t5": dict(target_modules=["q", "v", "wo"]),
    "bart": dict(target_modules="all-linear"),
    # Two Gemma 2 stacks: the encoder's and decoder's self-attention and the cross-attention
    # (`cross_attn.q_proj`, ...) share these names, as do both stacks' MLPs.
    "t5gemma": dict(target_modules=["q_proj", "v_proj", "o_proj", "down_proj"]),
    # Attention, the dense feed-forward and every expert of the sparse layers (wi, wo).
    "switch_transformers": dict(target_modules=["q", "v", "wi", "wo"]),
    # Multi-head latent attention's projections (issue 18), low-rank and full-rank query.
    "deepseek_v2_qlora": dict(target_modules=["q_a_proj", "q_b_proj", "kv_a_proj_with_mqa", "kv_b_proj"]),
    "deepseek_v2": dict(target_modules=["q_proj", "kv_b_proj", "o_proj"]),
    # Routed MoE (issue 17): attention and the shared expert's sigmoid gate (PEFT turns
    # gate_proj / up_proj / down_proj / gate on these models into packed-expert parameter targets).
    "qwen2_moe": dict(target_modules=["q_proj", "v_proj", "shared_expert_gate"]),
    # Hunyuan's router `mlp.gate.wg` is an nn.Linear: LoRA on the router by name.
    "hunyuan_v1_moe": dict(target_modules=["k_proj", "o_proj", "wg"]),
    # The packed expert tensors themselves (PEFT's target_parameters: one ParamWrapper per
    # parameter, nested on the experts module), beside an attention projection.
    "qwen3_moe_experts:qwen3_moe": dict(
        target_modules=["q_proj"], target_parameters=["experts.gate_up_proj", "experts.down_proj"]
    ),
    # Llama 4's experts are stored in-out ([E, H, 2I], [E, I, H]) but its experts module does not
    # say `is_transposed`, so PEFT reads them as [E, out, in] like the others: lora_A [E·r, 2I],
    # lora_B [H, E·r] on gate_up_proj; the router (a Linear returning a tuple) is left alone.
    "llama4_text_experts:llama4_text": dict(
        target_modules=["q_proj", "o_proj"], target_parameters=["experts.gate_up_proj", "experts.down_proj"]
    ),
    # gpt-oss's experts module says `is_transposed`: PEFT adapts its [E, H, 2I] / [E, I, H] stacks
    # in-out (lora_A [E·r, H], lora_B [2I, E·r]; the delta is (B_e A_e)ᵀ); the biases are not
    # targeted (`experts.gate_up_proj` does not match `gate_up_proj_bias`).
    "gpt_oss_experts:gpt_oss": dict(
        target_modules=["q_proj"], target_parameters=["experts.gate_up_proj", "experts.down_proj"]
    ),
    # JetMoE: the fused kv_proj and the attention router (Linear modules), and by
    # target_parameters the attention experts' and the MLP's packed stacks
    # (`self_attention.experts.{input,output}_linear.weight`, `mlp.{input,output}_linear.weight`:
    # [E, out, in], one parameter per module, so no nesting).
    "jetmoe_experts:jetmoe": dict(
        target_modules=["kv_proj", "experts.router.layer"],
        target_parameters=["input_linear.weight", "output_linear.weight"],
    ),
    # One packed parameter (no nesting), Mixtral's w1/w3 stored per expert.
    "mixtral_experts:mixtral": dict(target_modules=["k_proj"], target_parameters=["gate_up_proj"]),
    # Encoders (masked LM, PEFT's BERT-family names): `dense` also matches the attention output,
    # both MLP layers and the head's transform; all-linear leaves out only the tied decoder.
    "bert": dict(target_modules=["query", "key", "value", "dense"]),
    "roberta": dict(target_modules="all-linear"),
}
ENCODERS = {"bert", "roberta"}


def split_name(key: str) -> tuple[str, str]:
    """`name` or `name:base` -> (fixture name, base fixture name)."""
    name, _, base = key.partition(":")
    return name, base or name


def setup():
    import torch

    torch.set_num_threads(1)
    torch.use_deterministic_algorithms(True)
    from transformers.utils import logging as hf_logging

    hf_logging.set_verbosity_error()
    sys.path.insert(0, str(HERE))
    import make_fixtures

    make_fixtures.check_versions()
    return torch


def load_base(name: str):
    return load_model(BASE / name)


def is_seq2seq(path: Path) -> bool:
    return bool(json.loads((path / "config.json").read_text()).get("is_encoder_decoder"))


def load_model(path: Path):
    import torch
    import transformers
    from make_fixtures import lm_class
    from transformers import AutoConfig, AutoModelForSeq2SeqLM

    config = AutoConfig.from_pretrained(str(path), local_files_only=True)
    arch = (config.architectures or [""])[0]
    if is_seq2seq(path):
        auto = AutoModelForSeq2SeqLM
    elif arch.endswith("ForMaskedLM"):
        auto = getattr(transformers, arch)
    else:
        auto = lm_class(config)
    model = auto.from_pretrained(
        str(path), local_files_only=True, attn_implementation="eager", dtype=torch.float32
    )
    model.eval()
    return model


def adapter_key(param_name: str) -> str:
    """`base_model.model.<module>.lora_A.default.weight` -> the saved key (adapter name dropped);
    `<module>.modules_to_save.default.weight` -> `<module>.weight`."""
    return param_name.replace(".modules_to_save.default.", ".").replace(".default.", ".")


def make_fixture(key: str) -> None:
    import torch
    from peft import LoraConfig, get_peft_model
    from safetensors import safe_open
    from safetensors.torch import load_file, save_file

    name, base_name = split_name(key)
    torch.manual_seed(SEED)
    task = None if base_name in ENCODERS else ("SEQ_2_SEQ_LM" if is_seq2seq(BASE / base_name) else "CAUSAL_LM")
    cfg = LoraConfig(r=4, lora_alpha=8, lora_dropout=0.0, task_type=task, bias="none", **CONFIGS[key])
    model = get_peft_model(load_base(base_name), cfg)
    g = torch.Generator().manual_seed(SEED + 1)
    lora = {n: p for n, p in model.named_parameters() if p.requires_grad}
    saved = cfg.modules_to_save or []
    assert lora and all(".lora_A." in n or ".lora_B." in n or ".modules_to_save." in n for n in lora), list(lora)
    with torch.no_grad():
        for n, p in lora.items():
            if ".lora_B." in n:
                p.copy_(torch.randn(p.shape, generator=g) * B_INIT_STD)
    d = OUT / name
    d.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(str(d))
    (d / "README.md").unlink(missing_ok=True)  # PEFT's model card template: not needed
    # PEFT records the absolute base path; keep the committed file independent of the checkout.
    cfg_path = d / "adapter_config.json"
    saved_cfg = json.loads(cfg_path.read_text())
    saved_cfg["base_model_name_or_path"] = f"tests/fixtures/{base_name}"
    if isinstance(saved_cfg["target_modules"], list):
        saved_cfg["target_modules"] = sorted(saved_cfg["target_modules"])  # PEFT writes a set's order
    if saved_cfg.get("target_parameters"):
        saved_cfg["target_parameters"] = sorted(saved_cfg["target_parameters"])
    cfg_path.write_text(json.dumps(saved_cfg, indent=2, sort_keys=True) + "\n")

    ref = load_file(str(BASE / base_name / "reference.safetensors"))
    ids, mask, labels = (ref[k].long() for k in ("input_ids", "attention_mask", "labels"))
    extra = {"use_cache": False} if base_name not in ENCODERS else {}
    if "token_type_ids" in ref:
        extra["token_type_ids"] = ref["token_type_ids"].long()
    model.train()  # dropout is 0: train mode only matters for PEFT's bookkeeping
    out = model(input_ids=ids, attention_mask=mask, labels=labels, **extra)
    out.loss.backward()
    res = {
        **({"token_type_ids": ref["token_type_ids"]} if "token_type_ids" in ref else {}),
        "input_ids": ref["input_ids"],
        "attention_mask": ref["attention_mask"],
        "labels": ref["labels"],
        "logits": out.logits.detach().float().contiguous(),
        "loss": out.loss.detach().reshape(1).float().contiguous(),
    }
    for n, p in lora.items():
        res[f"grad.{adapter_key(n)}"] = p.grad.detach().clone().contiguous()

    write_merged(d, base_name)

    opt = torch.optim.AdamW(list(lora.values()), **ADAMW)
    for _ in range(2):
        opt.zero_grad(set_to_none=True)
        model(input_ids=ids, attention_mask=mask, labels=labels, **extra).loss.backward()
        opt.step()
    for n, p in lora.items():
        res[f"step2.{adapter_key(n)}"] = p.detach().clone().contiguous()
    save_file(res, str(d / "reference.safetensors"), metadata={"format": "pt"})
    base_loss = float(ref["loss"][0])
    print(f"{name:22s} trainable tensors={len(lora):3d} (saved whole: {saved}) loss={out.loss.item():.6f} (base {base_loss:.6f})")


def write_merged(d: Path, base_name: str) -> None:
    """merged.safetensors: the base model's stored tensors after merge_and_unload() of the adapter
    saved in `d`."""
    from peft import PeftModel
    from safetensors import safe_open
    from safetensors.torch import load_file, save_file

    # The merged model, from the adapter as saved (before the optimizer touches it).
    merged_model = load_base(base_name)
    merged = PeftModel.from_pretrained(merged_model, str(d)).merge_and_unload()
    # Under the stored names (save_pretrained's, which differ from the module names for a wrapper).
    with tempfile.TemporaryDirectory() as tmp:
        merged.save_pretrained(tmp, safe_serialization=True)
        sd = load_file(str(Path(tmp) / "model.safetensors"))
    with safe_open(str(BASE / base_name / "model.safetensors"), framework="pt") as f:
        keys = list(f.keys())
        # Routed experts are packed in memory and stored per expert; a family whose save_pretrained
        # writes other names keeps the base's stored tensors (no config here targets its experts).
        untouched = {k: f.get_tensor(k) for k in keys if k not in sd}
    assert all(".experts." in k for k in untouched), sorted(untouched)
    save_file({k: (untouched[k] if k in untouched else sd[k]).detach().clone().contiguous() for k in keys},
              str(d / "merged.safetensors"), metadata={"format": "pt"})


def check_adapter(args) -> int:
    import torch
    from peft import PeftModel
    from safetensors.torch import load_file

    ours = load_file(args.logits)
    ids = ours["input_ids"].long()
    base_model = load_model(Path(args.model))
    with torch.no_grad():
        base = base_model(input_ids=ids, use_cache=False).logits.float()
    model = PeftModel.from_pretrained(base_model, args.check_adapter)
    model.eval()
    with torch.no_grad():
        logits = model(input_ids=ids, use_cache=False).logits.float()
    want = ours["logits"].reshape(logits.shape)
    rel = float((logits - want).abs().max() / want.abs().max())
    moved = float((logits - base).abs().max() / base.abs().max())
    print(f"adapter={args.check_adapter} model={args.model}: PEFT vs vkformers max rel {rel:.3e} "
          f"(threshold {RTOL:.0e}); adapter moved the logits by {moved:.3e} relative to the base")
    return 0 if rel <= RTOL else 1


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--only", nargs="+", metavar="NAME")
    ap.add_argument("--check-adapter", metavar="DIR")
    ap.add_argument("--model", metavar="DIR")
    ap.add_argument("--logits", metavar="FILE")
    args = ap.parse_args()
    setup()
    if args.check_adapter:
        if not (args.model and args.logits):
            ap.error("--check-adapter needs --model and --logits")
        sys.exit(check_adapter(args))
    keys = {split_name(k)[0]: k for k in CONFIGS}
    for name in args.only or list(keys):
        if name not in keys:
            sys.exit(f"unknown fixture {name!r}; known: {', '.join(keys)}")
        make_fixture(keys[name])


if __name__ == "__main__":
    main()
