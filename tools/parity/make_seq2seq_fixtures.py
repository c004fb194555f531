#!/usr/bin/env python3
"""Golden fixtures for encoder-decoder models (T5, BART and their families), beside
make_fixtures.py's decoder ones.

Builds tiny random `AutoModelForSeq2SeqLM` models from configs (never from the hub), runs forward /
loss / backward / two AdamW steps on a padded batch, and writes tests/fixtures/<name>/ in the
decoder fixtures' format (see tools/parity/README.md), with these differences:
  - `input_ids` / `attention_mask` [B, S] are the encoder's batch (row 1 right-padded);
  - `labels` [B, L] are the decoder's targets (row 1 ends in -100); the model shifts them into
    its decoder inputs itself (`decoder_input_ids`, stored for reference, is what it built);
  - `logits` [B, L, V] are the decoder's; the loss is the mean cross-entropy over labels != -100;
  - greedy_seq2seq.json holds `model.generate` on each row of the batch (cached, greedy) and the same
    tokens recomputed without a cache, argmax after argmax.

Modes:
  make_seq2seq_fixtures.py [--out DIR] [--only NAME ...]
  make_seq2seq_fixtures.py --check-reload DIR --fixture NAME   a folder saved by vkformers against
                                                               the fixture's logits
"""

from __future__ import annotations

import sys
from pathlib import Path

import fixture_common as fc
import make_fixtures as mf  # sets the offline environment before transformers is imported

S = 8  # encoder length
L = 6  # label length
N_PAD_SRC = 3  # row 1's last source positions are padding
N_PAD_TGT = 2  # row 1's last labels are -100
NEW_TOKENS = 8  # greedy tokens per row at most (max_new_tokens; EOS ends a row earlier)

T5 = dict(
    vocab_size=64,
    d_model=16,
    d_kv=4,
    d_ff=32,
    num_layers=2,
    num_decoder_layers=2,
    num_heads=4,
    relative_attention_num_buckets=8,
    relative_attention_max_distance=12,
    dropout_rate=0.0,
    initializer_factor=0.5,
    pad_token_id=0,
    eos_token_id=1,
    decoder_start_token_id=0,
)

BART = dict(
    vocab_size=64,
    d_model=16,
    encoder_layers=2,
    decoder_layers=2,
    encoder_attention_heads=4,
    decoder_attention_heads=4,
    encoder_ffn_dim=32,
    decoder_ffn_dim=32,
    max_position_embeddings=32,
    dropout=0.0,
    attention_dropout=0.0,
    activation_dropout=0.0,
    init_std=mf.INIT_STD,
    pad_token_id=1,
    bos_token_id=0,
    eos_token_id=2,
    decoder_start_token_id=2,
    forced_eos_token_id=None,
)

# One T5Gemma stack: Gemma 2 layers with grouped keys, windows short enough to matter (the
# encoder's bidirectional |q - k| <= 2, the decoder's causal q - k < 3) and softcaps low enough to
# bend the scores and logits.
T5GEMMA_STACK = dict(
    vocab_size=64,
    hidden_size=16,
    intermediate_size=32,
    num_hidden_layers=2,
    num_attention_heads=4,
    num_key_value_heads=2,
    head_dim=4,
    query_pre_attn_scalar=8,
    attn_logit_softcapping=2.0,
    final_logit_softcapping=3.0,
    hidden_activation="gelu_pytorch_tanh",
    max_position_embeddings=32,
    initializer_range=mf.INIT_STD,
    pad_token_id=0,
    eos_token_id=1,
    bos_token_id=2,
)
T5GEMMA = dict(
    encoder={**T5GEMMA_STACK, "sliding_window": 2},
    decoder={**T5GEMMA_STACK, "sliding_window": 3},
    vocab_size=64,
    pad_token_id=0,
    eos_token_id=1,
    bos_token_id=2,
)

T5_TYPES = ("t5", "mt5", "umt5", "switch_transformers")

# fixture name -> (model_type, config kwargs)
SPECS = {
    # T5 v1.0: ReLU MLP, tied head with the d_model^-0.5 rescale, relative position buckets.
    "t5": ("t5", {**T5, "feed_forward_proj": "relu"}),
    # T5 v1.1 style: gated-GELU MLP, `tie_word_embeddings: false` (no rescale).
    "t5_gated": ("t5", {**T5, "feed_forward_proj": "gated-gelu", "tie_word_embeddings": False}),
    # mT5: gated-GELU, tied head never rescaled.
    "mt5": ("mt5", {**T5, "feed_forward_proj": "gated-gelu"}),
    # UMT5: a relative bias table in every layer.
    "umt5": ("umt5", {**T5, "feed_forward_proj": "gated-gelu"}),
    # post-LN, learned positions (offset 2), `layernorm_embedding`, final_logits_bias, tied head.
    "bart": ("bart", {**BART, "activation_function": "gelu"}),
    # pre-LN with final layer norms; the decoder starts with each row's last label (language code).
    # (generation starts from `decoder_start_token_id` 0: from EOS these tiny models stop at once.)
    "mbart": ("mbart", {**BART, "activation_function": "gelu", "scale_embedding": True, "decoder_start_token_id": 0}),
    # BART's layers with mBART's shift; ReLU.
    "plbart": ("plbart", {**BART, "activation_function": "relu", "decoder_start_token_id": 0}),
    # pre-LN, positions from 0, no embedding norm.
    "blenderbot": ("blenderbot", {**BART, "activation_function": "gelu", "scale_embedding": True}),
    # post-LN, positions from 0, the decoder's embedding norm before its positions.
    "blenderbot-small": ("blenderbot-small", {**BART, "activation_function": "gelu"}),
    # post-LN without an embedding norm, fixed sinusoidal positions (not stored), scaled embeddings.
    "marian": ("marian", {**BART, "activation_function": "swish", "scale_embedding": True, "decoder_start_token_id": 1,
                          "pad_token_id": 1, "eos_token_id": 2}),
    # pre-LN, fixed sinusoidal positions (stored frozen, recomputed on load), final norms.
    "pegasus": ("pegasus", {**BART, "activation_function": "relu", "scale_embedding": True}),
    # pre-LN, fairseq positions from the ids past pad_token_id, no final_logits_bias.
    "m2m_100": ("m2m_100", {**BART, "activation_function": "relu", "scale_embedding": True}),
    # Gemma 2 stacks: sandwich norms, RoPE, grouped keys, windows, softcaps, own encoder table.
    "t5gemma": ("t5gemma", T5GEMMA),
    # T5 v1.0 with layer 1 of each stack a top-1 mixture of 2 experts, capacity 3 per sequence
    # (8 source tokens overflow an expert; dropped tokens pass through the residual; both experts
    # get tokens in both steps: an expert without any has no gradient, which AdamW skips).
    "switch_transformers": ("switch_transformers", {
        **T5, "num_experts": 2, "expert_capacity": 3, "num_sparse_encoder_layers": 1,
        "num_sparse_decoder_layers": 1, "router_jitter_noise": 0.0}),
    # The same with `output_router_logits` in the config: the fixture's loss (and every gradient)
    # adds the z and balancing losses, with coefficients large enough to move the routers.
    "switch_transformers_router": ("switch_transformers", {
        **T5, "num_experts": 2, "expert_capacity": 3, "num_sparse_encoder_layers": 1,
        "num_sparse_decoder_layers": 1, "router_jitter_noise": 0.0, "output_router_logits": True,
        "router_z_loss_coef": 0.05, "router_aux_loss_coef": 0.1}),
}


def first_regular(cfg) -> int:
    return 3


def make_batch(cfg):
    """Encoder ids [B, S] (row 1 right-padded with pad_token_id), its mask, labels [B, L] (row 1's
    last N_PAD_TGT are -100)."""
    import torch

    g = torch.Generator().manual_seed(mf.SEED + 2)
    ids = torch.randint(first_regular(cfg), cfg.vocab_size, (mf.BATCH, S), generator=g)
    mask = torch.ones(mf.BATCH, S, dtype=torch.long)
    mask[1, S - N_PAD_SRC :] = 0
    ids[1, S - N_PAD_SRC :] = cfg.pad_token_id
    labels = torch.randint(first_regular(cfg), cfg.vocab_size, (mf.BATCH, L), generator=g)
    labels[1, L - N_PAD_TGT :] = -100
    return ids, mask, labels


def build_model(model_type: str, cfg_kwargs: dict):
    import torch
    from transformers import AutoConfig, AutoModelForSeq2SeqLM

    config = AutoConfig.for_model(model_type, **cfg_kwargs)
    torch.manual_seed(mf.SEED)
    model = AutoModelForSeq2SeqLM.from_config(config, attn_implementation="eager", dtype=torch.float32)
    fc.perturb_1d(model)
    if model_type in T5_TYPES:
        with torch.no_grad():
            # Tiny random T5s echo their start token (pad, row 0 of the tied table) forever; a
            # smaller row 0 lets greedy generation pick varied tokens.
            model.get_input_embeddings().weight[config.pad_token_id].mul_(0.1)
    model.eval()
    return model


def shifted(model, labels):
    """The decoder inputs the model makes from labels (its module's `shift_tokens_right`)."""
    cfg = model.config
    prepare = getattr(model, "prepare_decoder_input_ids_from_labels", None)
    if prepare is not None:
        return prepare(labels=labels)
    shift = sys.modules[type(model).__module__].shift_tokens_right
    try:
        return shift(labels, cfg.pad_token_id, cfg.decoder_start_token_id)
    except TypeError:  # mBART / PLBART: no start token, the last label wraps around
        return shift(labels, cfg.pad_token_id)


def greedy(model, ids, mask):
    """Cached greedy generation of each row alone, and the same tokens recomputed without a cache."""
    import torch

    rows = []
    for r in range(ids.shape[0]):
        n = int(mask[r].sum())
        src, m = ids[r : r + 1, :n], mask[r : r + 1, :n]
        with torch.no_grad():
            out = model.generate(src, attention_mask=m, do_sample=False, num_beams=1, max_new_tokens=NEW_TOKENS,
                                 use_cache=True)
        seq = out[0].tolist()
        dec = [seq[0]]
        eos = model.generation_config.eos_token_id
        with torch.no_grad():
            while len(dec) <= NEW_TOKENS and (len(dec) == 1 or dec[-1] != eos):
                logits = model(input_ids=src, attention_mask=m, decoder_input_ids=torch.tensor([dec]),
                               use_cache=False).logits
                dec.append(int(logits[0, -1].argmax()))
        if dec != seq:
            raise RuntimeError(f"cached and uncached greedy generation disagree: {seq} vs {dec}")
        rows.append({"input_ids": src[0].tolist(), "sequences": seq})
    return rows


# Beam searches written to beam_seq2seq.json: generate's keyword arguments.
BEAM_RUNS = [
    dict(num_beams=4, length_penalty=1.0, early_stopping=False, no_repeat_ngram_size=0, num_return_sequences=1),
    dict(num_beams=4, length_penalty=0.6, early_stopping=True, no_repeat_ngram_size=2, num_return_sequences=2),
    dict(num_beams=3, length_penalty=2.0, early_stopping="never", no_repeat_ngram_size=3, num_return_sequences=3),
]


def beams(model, ids, mask):
    """transformers' beam search on each source row alone: sequences and their scores."""
    import torch

    runs = []
    for kw in BEAM_RUNS:
        rows = []
        for r in range(ids.shape[0]):
            n = int(mask[r].sum())
            with torch.no_grad():
                out = model.generate(ids[r : r + 1, :n], attention_mask=mask[r : r + 1, :n], do_sample=False,
                                     max_new_tokens=NEW_TOKENS, use_cache=True, output_scores=True,
                                     return_dict_in_generate=True, **kw)
            rows.append({"input_ids": ids[r, :n].tolist(), "sequences": out.sequences.tolist(),
                         "sequences_scores": [float(s) for s in out.sequences_scores]})
        runs.append({"options": kw, "rows": rows})
    return runs


def make_fixture(name: str, model_type: str, cfg_kwargs: dict, out_dir: Path, versions: dict) -> None:
    import torch
    from safetensors.torch import save_file

    model = build_model(model_type, cfg_kwargs)
    d = out_dir / name
    d.mkdir(parents=True, exist_ok=True)
    for stale in ("config.json", "model.safetensors", "generation_config.json", "greedy_seq2seq.json",
                  "beam_seq2seq.json"):
        (d / stale).unlink(missing_ok=True)
    model.save_pretrained(d, safe_serialization=True)
    # Frozen tables (Marian's and Pegasus' sinusoidal positions) are no trained parameters.
    names = [n for n, p in model.named_parameters() if p.requires_grad]
    # These families save every trained parameter under its own name.
    keys = set(mf._safetensors_keys(d / "model.safetensors"))
    missing = [n for n in names if n not in keys]
    assert not missing, f"{name}: parameters not saved under their names: {missing}"
    stored = {n: n for n in names}
    ids, mask, labels = make_batch(model.config)
    decoder_input_ids = shifted(model, labels)

    # Switch Transformers' router losses join the loss only when forward is asked for them.
    extra = {"output_router_logits": True} if getattr(model.config, "output_router_logits", False) else {}
    run = lambda m: m(input_ids=ids, attention_mask=mask, labels=labels, **extra)  # noqa: E731
    logits, loss, grads = fc.forward_backward(model, names, run)
    rows = greedy(model, ids, mask)
    beam_runs = beams(model, ids, mask)
    step2 = fc.two_adamw_steps(model, names, run)

    i32 = lambda t: t.to(torch.int32).contiguous()  # noqa: E731
    ref = {
        "input_ids": i32(ids),
        "attention_mask": i32(mask),
        "labels": i32(labels),
        "decoder_input_ids": i32(decoder_input_ids),
        "logits": logits.float().contiguous(),
        "loss": loss.reshape(1).float().contiguous(),
    }
    fc.add_grads_and_steps(ref, stored, grads, step2)
    save_file(ref, str(d / "reference.safetensors"), metadata={"format": "pt"})
    mf.write_json(d / "greedy_seq2seq.json", {"max_new_tokens": NEW_TOKENS, "rows": rows})
    mf.write_json(d / "beam_seq2seq.json", {"max_new_tokens": NEW_TOKENS, "runs": beam_runs})

    meta = fc.fixture_meta(name, model_type, model, versions, d, stored, {
        "init": {"one_d_param_noise_std": mf.ONE_D_NOISE},
        "source_len": S,
        "label_len": L,
        "batch": mf.BATCH,
        "padding": {"source": f"row 1, last {N_PAD_SRC}", "labels": f"row 1, last {N_PAD_TGT} are -100"},
        "loss": {"reduction": "mean over labels != -100", "num_targets": int((labels != -100).sum())},
    })
    meta["frozen_parameters"] = [n for n, p in model.named_parameters() if not p.requires_grad]
    mf.write_json(d / "meta.json", meta)
    print(f"{name:14s} {type(model).__name__:32s} params={meta['num_parameters']:6d} loss={loss.item():.6f}")


def check_reload(args) -> int:
    torch = mf.setup_torch()
    from safetensors.torch import load_file
    from transformers import AutoModelForSeq2SeqLM

    ref = load_file(str(Path(args.fixtures).resolve() / args.fixture / "reference.safetensors"))
    model = AutoModelForSeq2SeqLM.from_pretrained(
        str(Path(args.check_reload).resolve()), local_files_only=True, attn_implementation="eager",
        dtype=torch.float32,
    )
    model.eval()
    with torch.no_grad():
        logits = model(input_ids=ref["input_ids"].long(), attention_mask=ref["attention_mask"].long(),
                       labels=ref["labels"].long()).logits.float()
    return fc.check_logits(args.fixture, logits, ref["logits"])


def main() -> None:
    fc.main(__doc__, SPECS, make_fixture, check_reload)

if __name__ == "__main__":
    main()
