#!/usr/bin/env python3
"""Golden fixtures for encoder (masked-LM) models, beside make_fixtures.py's decoder ones.

Builds tiny random `AutoModelForMaskedLM` models from configs (never from the hub), runs forward /
masked-LM loss / backward / two AdamW steps on a padded batch, and writes tests/fixtures/<name>/
in the decoder fixtures' format (see tools/parity/README.md), with these differences:
  - labels are masked-LM labels: -100 except at the masked positions, where they hold the
    original token (the input there is MASK_ID); the loss is the unshifted mean over them;
  - `token_type_ids` is stored when the model has more than one token type (the batch mixes
    segments 0 and 1, so the token-type table's rows both get gradients);
  - no greedy.json (no generation); no generation_config.json (save_pretrained writes none).

Modes:
  make_encoder_fixtures.py [--out DIR] [--only NAME ...]
  make_encoder_fixtures.py --check-reload DIR --fixture NAME   a folder saved by vkformers against
                                                               the fixture's logits
"""

from __future__ import annotations

import sys
from pathlib import Path

import fixture_common as fc
import make_fixtures as mf  # sets the offline environment before transformers is imported

MASK_ID = 3  # the masked positions' input id (real ids are drawn from [4, vocab))
MASKED = [[1, 4, 6], [0, 3]]  # (row, positions) of the MLM targets; row 1 has 5 real tokens

ENC = dict(
    vocab_size=128,
    hidden_size=32,
    intermediate_size=64,
    num_hidden_layers=2,
    num_attention_heads=4,
    max_position_embeddings=64,
    initializer_range=mf.INIT_STD,
    hidden_dropout_prob=0.0,
    attention_probs_dropout_prob=0.0,
    layer_norm_eps=1e-12,
)

# EuroBERT's (Llama-style) config names; pad 0 (its default 128001 is outside this vocabulary).
EURO = dict(vocab_size=128, hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
            num_key_value_heads=2, max_position_embeddings=64, initializer_range=mf.INIT_STD, pad_token_id=0,
            bos_token_id=2, eos_token_id=1, mask_token_id=MASK_ID)

# ModernBERT's config names; its special ids moved into this vocabulary; a window of ±2 so that
# T = 8 sees the local layers' mask.
MODERN = dict(vocab_size=128, hidden_size=32, intermediate_size=48, num_hidden_layers=3, num_attention_heads=4,
              max_position_embeddings=64, initializer_range=mf.INIT_STD, pad_token_id=0, bos_token_id=2,
              eos_token_id=1, cls_token_id=2, sep_token_id=1, local_attention=4)

# DeBERTa-v3's attention (see SPECS["deberta_v2"]).
DEBERTA_V3 = dict(ENC, relative_attention=True, pos_att_type=["p2c", "c2p"], position_buckets=6,
                  max_relative_positions=24, norm_rel_ebd="layer_norm", share_att_key=True,
                  position_biased_input=False, type_vocab_size=0, pad_token_id=0)

# MobileBERT: hidden 32 between layers, bottlenecks of 16, 16-wide word table (trigram input),
# NoNorm, shared q/k bottleneck, 3 FFNs per layer.
MOBILE = dict(ENC, embedding_size=16, intra_bottleneck_size=16, intermediate_size=24, num_feedforward_networks=3,
              type_vocab_size=2, pad_token_id=0)

# fixture name -> (model_type, config kwargs); fixtures named `*_seqcls*` use
# AutoModelForSequenceClassification (see `CLS_SPECS`).
SPECS = {
    # pad 0, two token types, tied decoder (the BertConfig defaults).
    "bert": ("bert", {**ENC, "type_vocab_size": 2, "pad_token_id": 0}),
    # position ids count from padding_idx + 1 over non-pad tokens; pad 1 as in real RoBERTa.
    "roberta": ("roberta", {**ENC, "type_vocab_size": 1, "pad_token_id": 1, "max_position_embeddings": 66}),
    # RoBERTa's modules under other names; each varies one thing the head or the layers read.
    # GELU-tanh in the layers: the head keeps exact GELU whatever hidden_act says.
    "xlm-roberta": (
        "xlm-roberta",
        {**ENC, "type_vocab_size": 1, "pad_token_id": 1, "max_position_embeddings": 66, "hidden_act": "gelu_new"},
    ),
    "camembert": ("camembert", {**ENC, "type_vocab_size": 1, "pad_token_id": 1, "max_position_embeddings": 66,
                                "hidden_act": "relu"}),
    # two token types with RoBERTa positions
    "data2vec-text": ("data2vec-text", {**ENC, "type_vocab_size": 2, "pad_token_id": 1, "max_position_embeddings": 66}),
    # pre-LN layers (`attention.LayerNorm`, `intermediate.LayerNorm`) and a final LayerNorm.
    "roberta-prelayernorm": (
        "roberta-prelayernorm",
        {**ENC, "type_vocab_size": 2, "pad_token_id": 1, "max_position_embeddings": 66},
    ),
    # RoBERTa's modules, pre-LN (`self_attn_layer_norm`, the layer's `LayerNorm`), a final
    # `encoder.LayerNorm` and no LayerNorm on the embeddings.
    "xlm-roberta-xl": (
        "xlm-roberta-xl",
        {**ENC, "type_vocab_size": 1, "pad_token_id": 1, "max_position_embeddings": 66},
    ),
    # BERT's modules, pre-LN (`attention.ln`, `ln`), a final `encoder.ln`, no embedding norm.
    "megatron-bert": ("megatron-bert", {**ENC, "type_vocab_size": 2, "pad_token_id": 0}),
    # BERT's modules under `ernie.`; its head transform uses hidden_act (GELU-tanh here).
    "ernie": ("ernie", {**ENC, "type_vocab_size": 2, "pad_token_id": 0, "hidden_act": "gelu_new"}),
    # DistilBERT's own config names; no token types; the head applies `activation` (GELU-tanh).
    "distilbert": (
        "distilbert",
        dict(vocab_size=128, dim=32, n_layers=2, n_heads=4, hidden_dim=64, max_position_embeddings=64,
             dropout=0.0, attention_dropout=0.0, activation="gelu_new", initializer_range=mf.INIT_STD,
             pad_token_id=0),
    ),
    # embedding_size 16 < hidden 32: `electra.embeddings_project` and a head back to 16.
    "electra": ("electra", {**ENC, "embedding_size": 16, "type_vocab_size": 2, "pad_token_id": 0}),
    # untied generator head: its own `generator_lm_head.weight`.
    "electra_untied": (
        "electra",
        {**ENC, "embedding_size": 16, "type_vocab_size": 2, "pad_token_id": 0, "tie_word_embeddings": False},
    ),
    # rotary q/k (pairs 2i, 2i+1), no position table (its fixed sinusoids are a stored buffer),
    # embedding_size 16 projected to 32 by `roformer.embeddings_project`.
    "roformer": ("roformer", {**ENC, "embedding_size": 16, "type_vocab_size": 2, "pad_token_id": 0}),
    # `rotary_value`: the values rotate too; GELU-tanh in the layers and the head transform.
    "roformer_rotary_value": (
        "roformer",
        {**ENC, "type_vocab_size": 2, "pad_token_id": 0, "rotary_value": True, "hidden_act": "gelu_new"},
    ),
    # bias-free rotary attention (rotate_half pairs, rope_theta 1000 by default), a bias-free
    # SwiGLU MLP, post-LN, no position table; the head's transform uses hidden_act (SiLU).
    "nomic_bert": ("nomic_bert", {**ENC, "type_vocab_size": 2, "pad_token_id": 0}),
    # ESM-2: pre-LN, rotary q/k (rotate_half) on pre-scaled queries, token_dropout (the MASK_ID
    # inputs zeroed, rows rescaled), embeddings times the attention mask, final
    # `emb_layer_norm_after`; its `lm_head`; `contact_head` stored but never reached.
    "esm": ("esm", {**ENC, "pad_token_id": 1, "mask_token_id": MASK_ID, "position_embedding_type": "rotary",
                    "token_dropout": True, "emb_layer_norm_before": False}),
    # ESM-1b: a learned table counted from padding_idx + 1, a LayerNorm on the embeddings, no
    # token_dropout.
    "esm_absolute": ("esm", {**ENC, "pad_token_id": 1, "mask_token_id": MASK_ID, "max_position_embeddings": 66,
                             "position_embedding_type": "absolute", "emb_layer_norm_before": True}),
    # RoBERTa's layout under `mpnet.` with a relative position bias shared by every layer (T5's
    # bidirectional buckets; T = 8 keeps to the exact ones, the log ones are unit-tested).
    "mpnet": ("mpnet", {**ENC, "pad_token_id": 1, "max_position_embeddings": 66}),
    # Factorised embeddings (16 wide, mapped to 32) and one layer shared by all 3 (its gradient
    # sums 3 uses); the head's dense maps back to 16; GELU-tanh (ALBERT's default).
    "albert": ("albert", {**ENC, "embedding_size": 16, "num_hidden_layers": 3, "type_vocab_size": 2,
                          "pad_token_id": 0, "hidden_act": "gelu_new"}),
    # 3 layers over 2 groups of 2 layers: layers 0 and 1 run group 0 (int(l / 1.5)), layer 2 group 1.
    "albert_groups": ("albert", {**ENC, "embedding_size": 16, "num_hidden_layers": 3, "num_hidden_groups": 2,
                                 "inner_group_num": 2, "type_vocab_size": 2, "pad_token_id": 0,
                                 "hidden_act": "gelu"}),
    # Pre-RMSNorm Llama layers (GQA 4/2, rotate_half rotary, SwiGLU) without causal masking, a
    # final norm, an untied bias-free `lm_head` straight on the hidden state.
    # Layer 0 global (rope_theta 160000, no attn_norm), layers 1-2 local (10000, |q - k| <= 2);
    # fused Wqkv and Wi; bias-free norms, attention, MLP and head dense; the decoder's bias.
    "modernbert": ("modernbert", MODERN),
    # every bias on, GELU-tanh gates, SiLU in the head, a decoder without bias, global every 2nd.
    "modernbert_bias": ("modernbert", {**MODERN, "norm_bias": True, "attention_bias": True, "mlp_bias": True,
                                       "classifier_bias": True, "decoder_bias": False,
                                       "hidden_activation": "gelu_pytorch_tanh", "classifier_activation": "silu",
                                       "global_attn_every_n_layers": 2}),
    # sparse_prediction: the head only on the 5 masked positions (logits [5, V]), the same loss.
    "modernbert_sparse": ("modernbert", {**MODERN, "sparse_prediction": True}),
    "eurobert": ("eurobert", EURO),
    "mobilebert": ("mobilebert", MOBILE),
    # DeBERTa v1: the per-head fused `in_proj` + q_bias / v_bias, `pos_proj` (no bias) and
    # `pos_q_proj`; 6 relative positions each way, fewer than T = 8 (clamped).
    "deberta": ("deberta", {**ENC, "relative_attention": True, "pos_att_type": ["c2p", "p2c"],
                            "max_relative_positions": 6, "pad_token_id": 0}),
    # DeBERTa-v3's shape: c2p + p2c through the shared key / query projections of a LayerNormed
    # table, log buckets (6 up to 24: T = 8 reaches the logarithmic ones), no absolute positions.
    "deberta_v2": ("deberta-v2", DEBERTA_V3),
    # DeBERTa-v2's: pos_key_proj / pos_query_proj, 2·64 table rows (no buckets), absolute
    # positions, two token types, the non-legacy `lm_predictions` head, RELU.
    "deberta_v2_plain": ("deberta-v2", {**ENC, "relative_attention": True, "pos_att_type": "p2c|c2p",
                                        "type_vocab_size": 2, "pad_token_id": 0, "legacy": False,
                                        "hidden_act": "relu"}),
    # tied `lm_head` with its bias (mlp_bias), biased attention, GeGLU.
    "eurobert_tied_bias": ("eurobert", {**EURO, "tie_word_embeddings": True, "mlp_bias": True,
                                        "attention_bias": True, "hidden_act": "gelu"}),
}


# Sequence classification: labels [B] (int class ids, or floats when num_labels is 1, which
# transformers treats as regression with MSE); problem_type left to transformers' rules.
CLS_SPECS = {
    "bert_seqcls": ("bert", {**ENC, "type_vocab_size": 2, "pad_token_id": 0, "num_labels": 3}),
    "roberta_seqcls_regression": (
        "roberta",
        {**ENC, "type_vocab_size": 1, "pad_token_id": 1, "max_position_embeddings": 66, "num_labels": 1},
    ),
    # the pooler (dense + tanh on the first token) and `classifier`, as BERT's; GELU in the MLP.
    "nomic_bert_seqcls": (
        "nomic_bert",
        {**ENC, "type_vocab_size": 2, "pad_token_id": 0, "num_labels": 3, "hidden_act": "gelu"},
    ),
    # 40 rows of relative bias, still bucketed by 32 (rows 32.. get no gradient); RELU layers.
    "mpnet_seqcls": ("mpnet", {**ENC, "pad_token_id": 1, "max_position_embeddings": 66, "num_labels": 3,
                               "relative_attention_num_buckets": 40, "hidden_act": "relu"}),
    # ALBERT's pooler (`albert.pooler`, dense + tanh) and `classifier`; 2 layers sharing one.
    "albert_seqcls": ("albert", {**ENC, "embedding_size": 16, "type_vocab_size": 2, "pad_token_id": 0,
                                 "num_labels": 3}),
    # EuroBERT's default `late` pooling: dense + GELU + classifier per token, logits averaged
    # over real tokens; then `mean` (hidden states averaged first).
    "eurobert_seqcls": ("eurobert", {**EURO, "num_labels": 3}),
    "eurobert_seqcls_mean": ("eurobert", {**EURO, "num_labels": 3, "classifier_pooling": "mean"}),
    # ModernBERT's classifier: head.dense (no bias) + GELU + head.norm + classifier on the
    # first token; then on the mean over real tokens, with the dense bias.
    "modernbert_seqcls": ("modernbert", {**MODERN, "num_labels": 3}),
    "modernbert_seqcls_mean": ("modernbert", {**MODERN, "num_labels": 3, "classifier_pooling": "mean",
                                              "classifier_bias": True, "norm_bias": True}),
    # DeBERTa's ContextPooler (`pooler.dense` + pooler_hidden_act) and `classifier`; c2p only.
    "deberta_v2_seqcls": ("deberta-v2", {**DEBERTA_V3, "pos_att_type": ["c2p"], "num_labels": 3,
                                         "pooler_hidden_act": "tanh"}),
    # v1's pooler and classifier; p2c only, the whole 2·64-row table, two token types.
    "deberta_seqcls": ("deberta", {**ENC, "relative_attention": True, "pos_att_type": "p2c", "type_vocab_size": 2,
                                   "pad_token_id": 0, "num_labels": 3}),
    # MobileBERT with LayerNorms (three of them at torch's default eps), no trigram (a plain
    # projection 16 -> 32), q, k and v all on the input bottleneck; pooler + tanh, classifier.
    "mobilebert_seqcls": ("mobilebert", {**MOBILE, "normalization_type": "layer_norm", "trigram_input": False,
                                         "use_bottleneck_attention": True, "key_query_shared_bottleneck": False,
                                         "layer_norm_eps": 1e-7, "num_labels": 3}),
    # ESM's classifier (dense + tanh + out_proj on the first token), rotary, token_dropout.
    "esm_seqcls": ("esm", {**ENC, "pad_token_id": 1, "mask_token_id": MASK_ID, "position_embedding_type": "rotary",
                           "token_dropout": True, "num_labels": 3}),
}
# Token classification (`"head": "token"`): labels [B, T], -100 on padding.
CLS_SPECS["distilbert_tokcls"] = (
    "distilbert",
    dict(vocab_size=128, dim=32, n_layers=2, n_heads=4, hidden_dim=64, max_position_embeddings=64, dropout=0.0,
         attention_dropout=0.0, initializer_range=mf.INIT_STD, pad_token_id=0, num_labels=5, head="token"),
)
# `classifier` on every position of the families added since (ESM with token_dropout and its
# zeroed padding rows, MPNet's relative bias, ALBERT's shared layer, EuroBERT's final norm).
for _name, (_mt, _kw) in {
    "esm_tokcls": ("esm", SPECS["esm"][1]),
    "mpnet_tokcls": ("mpnet", SPECS["mpnet"][1]),
    "albert_tokcls": ("albert", SPECS["albert"][1]),
    "eurobert_tokcls": ("eurobert", EURO),
    # ModernBERT's `head` (dense, GELU, norm) on every token before the classifier.
    "modernbert_tokcls": ("modernbert", MODERN),
    "deberta_v2_tokcls": ("deberta-v2", DEBERTA_V3),
    "mobilebert_tokcls": ("mobilebert", MOBILE),
}.items():
    CLS_SPECS[_name] = (_mt, {**_kw, "num_labels": 5, "head": "token"})
SPECS.update(CLS_SPECS)
# Parameters no loss here reaches (ESM's contact prediction, from attention maps).
UNREACHED = ("esm.contact_head.",)
CLS_LABELS = [2, 0]
REGRESSION_LABELS = [0.75, -1.5]


def pad_id(cfg) -> int:
    return cfg.pad_token_id if cfg.pad_token_id is not None else 0


def make_batch(cfg):
    """ids [B, T] (row 1 right-padded with pad_token_id), mask, MLM labels, token types or None."""
    import torch

    g = torch.Generator().manual_seed(mf.SEED + 2)
    ids = torch.randint(MASK_ID + 1, cfg.vocab_size, (mf.BATCH, mf.T), generator=g)
    mask = torch.ones(mf.BATCH, mf.T, dtype=torch.long)
    mask[1, mf.T - mf.N_PAD :] = 0
    ids[1, mf.T - mf.N_PAD :] = pad_id(cfg)
    labels = torch.full_like(ids, -100)
    for row, positions in enumerate(MASKED):
        for p in positions:
            labels[row, p] = ids[row, p]
            ids[row, p] = MASK_ID
    types = None
    if getattr(cfg, "type_vocab_size", 1) > 1:
        types = torch.zeros_like(ids)
        types[0, 4:] = 1
        types[1, 2:5] = 1
    return ids, mask, labels, types


def is_cls(cfg_kwargs: dict) -> bool:
    return "num_labels" in cfg_kwargs


def is_token_cls(cfg_kwargs: dict) -> bool:
    return cfg_kwargs.get("head") == "token"


def cls_labels(cfg):
    import torch

    if cfg.num_labels == 1:
        return torch.tensor(REGRESSION_LABELS, dtype=torch.float32)
    return torch.tensor(CLS_LABELS, dtype=torch.long)


def build_model(model_type: str, cfg_kwargs: dict):
    import torch
    from transformers import AutoConfig, AutoModelForMaskedLM, AutoModelForSequenceClassification

    from transformers import AutoModelForTokenClassification

    config = AutoConfig.for_model(model_type, **{k: v for k, v in cfg_kwargs.items() if k != "head"})
    torch.manual_seed(mf.SEED)
    auto = AutoModelForSequenceClassification if is_cls(cfg_kwargs) else AutoModelForMaskedLM
    if is_token_cls(cfg_kwargs):
        auto = AutoModelForTokenClassification
    model = auto.from_config(config, attn_implementation="eager", dtype=torch.float32)
    fc.perturb_1d(model)
    model.eval()
    return model


def run(model, ids, mask, labels, types):
    kw = dict(input_ids=ids, attention_mask=mask, labels=labels)
    if types is not None:
        kw["token_type_ids"] = types
    return model(**kw)


def stored_names(model, path: Path, names: list[str]) -> dict:
    """Parameter -> stored key, or (key, first row) for a parameter saved as rows of a fused
    tensor (nomic_bert's q, k, v in `attn.Wqkv`, which transformers fuses again on save)."""
    from safetensors import safe_open

    params = dict(model.named_parameters())
    with safe_open(str(path), framework="pt") as f:
        keys = set(f.keys())
        direct = [n for n in names if n in keys]
        out = {n: n for n in direct}
        for n in names:
            if n in out:
                continue
            p = params[n].detach()
            hits = []
            for k in sorted(keys - set(direct)):
                t = f.get_tensor(k)
                if t.shape[1:] != p.shape[1:] or t.shape[0] < p.shape[0]:
                    continue
                rows = p.shape[0]
                hits += [(k, lo) for lo in range(0, t.shape[0] - rows + 1, rows) if bool((t[lo:lo + rows] == p).all())]
            assert len(hits) == 1, f"{n}: no unique saved tensor or rows ({hits})"
            out[n] = hits[0] if f.get_slice(hits[0][0]).get_shape() != list(p.shape) else hits[0][0]
    return out


def hub_esm_names(path: Path) -> None:
    """transformers 5 saves ESM through its load-time renamings reversed: `LayerNorm.gamma` /
    `.beta` and one `encoder.layer.*.attention.self.rotary_embeddings.inv_freq`. Rewritten to the
    names the hub's ESM checkpoints use (`LayerNorm.weight` / `.bias`), without the rotary buffer
    (transformers recomputes it from rope_theta when a folder lacks it)."""
    from safetensors.torch import load_file, save_file

    tensors = load_file(str(path))
    out = {}
    for k, t in tensors.items():
        if k.endswith("rotary_embeddings.inv_freq"):
            continue
        out[k.replace("LayerNorm.gamma", "LayerNorm.weight").replace("LayerNorm.beta", "LayerNorm.bias")] = t
    save_file(out, str(path), metadata={"format": "pt"})


def fuse_parts(stored: dict, grads: dict, step2: dict):
    """(stored, grads, step2) keyed so that each stored tensor appears once: the parts of a fused
    tensor concatenated along rows in their stored order."""
    import torch

    parts = {}
    for n, s in stored.items():
        key, lo = s if isinstance(s, tuple) else (s, 0)
        parts.setdefault(key, []).append((lo, n))
    cat = lambda src, ns: torch.cat([src[n] for _, n in sorted(ns)])  # noqa: E731
    return ({k: k for k in parts}, {k: cat(grads, ns) for k, ns in parts.items()},
            {k: cat(step2, ns) for k, ns in parts.items()})


def make_fixture(name: str, model_type: str, cfg_kwargs: dict, out_dir: Path, versions: dict) -> None:
    import torch
    from safetensors.torch import save_file

    model = build_model(model_type, cfg_kwargs)
    d = out_dir / name
    d.mkdir(parents=True, exist_ok=True)
    for stale in ("config.json", "model.safetensors", "generation_config.json", "greedy.json"):
        (d / stale).unlink(missing_ok=True)
    model.save_pretrained(d, safe_serialization=True)
    if model_type == "esm":
        hub_esm_names(d / "model.safetensors")
    # Trained parameters only (RoFormer's frozen sinusoid table is a stored buffer, no gradient;
    # ESM's contact head gets none from these losses, so AdamW leaves it as it is).
    names = [n for n, p in model.named_parameters() if p.requires_grad and not n.startswith(UNREACHED)]
    stored = stored_names(model, d / "model.safetensors", names)
    ids, mask, labels, types = make_batch(model.config)
    if is_token_cls(cfg_kwargs):
        g = torch.Generator().manual_seed(mf.SEED + 4)
        labels = torch.randint(0, model.config.num_labels, ids.shape, generator=g).masked_fill(mask == 0, -100)
    elif is_cls(cfg_kwargs):
        labels = cls_labels(model.config)

    forward = lambda m: run(m, ids, mask, labels, types)  # noqa: E731
    logits, loss, grads = fc.forward_backward(model, names, forward)
    step2 = fc.two_adamw_steps(model, names, forward)

    i32 = lambda t: t.to(torch.int32).contiguous()  # noqa: E731
    ref = {
        "input_ids": i32(ids),
        "attention_mask": i32(mask),
        "labels": labels.float().contiguous() if labels.is_floating_point() else i32(labels),
        "logits": logits.float().contiguous(),
        "loss": loss.reshape(1).float().contiguous(),
    }
    if types is not None:
        ref["token_type_ids"] = i32(types)
    fc.add_grads_and_steps(ref, *fuse_parts({n: stored[n] for n in names}, grads, step2))
    save_file(ref, str(d / "reference.safetensors"), metadata={"format": "pt"})

    key = lambda s: s[0] if isinstance(s, tuple) else s  # noqa: E731
    meta = fc.fixture_meta(name, model_type, model, versions, d, {n: key(stored[n]) for n in names}, {
        "init": {"initializer_range": mf.INIT_STD, "one_d_param_noise_std": mf.ONE_D_NOISE},
        "T": mf.T,
        "batch": mf.BATCH,
        "pad_token_id": pad_id(model.config),
        "padding": {"side": "right", "positions": [[1, t] for t in range(mf.T - mf.N_PAD, mf.T)]},
        "loss": {
            "reduction": "mean over unshifted targets whose label != -100 (masked-LM)",
            "num_targets": int((labels != -100).sum()),
            "problem_type": model.config.problem_type,
            "mask_input_id": MASK_ID,
        },
        "token_type_ids": types is not None,
    })
    meta["parameter_names"] = list(dict.fromkeys(meta["parameter_names"]))
    mf.write_json(d / "meta.json", meta)
    print(f"{name:14s} {type(model).__name__:24s} params={meta['num_parameters']:6d} loss={loss.item():.6f}")


# Bare models (`AutoModel`, tensors without the base prefix) for sentence embeddings; written
# to tests/fixtures_embed/<name>/ with the last hidden state and its mean / CLS poolings.
EMBED_SPECS = {
    "bert_model": ("bert", {**ENC, "type_vocab_size": 2, "pad_token_id": 0}),
    "xlm-roberta_model": ("xlm-roberta", {**ENC, "type_vocab_size": 1, "pad_token_id": 1, "max_position_embeddings": 66}),
    # Bare models of the families whose tensors then lose their prefix (and keep a pooler).
    "esm_model": ("esm", SPECS["esm"][1]),
    "mpnet_model": ("mpnet", SPECS["mpnet"][1]),
    "albert_model": ("albert", SPECS["albert"][1]),
    "eurobert_model": ("eurobert", EURO),
    "modernbert_model": ("modernbert", MODERN),
    # DeBERTa's bare models (no pooler): the pair mask leaves padded rows their own values.
    "deberta_v2_model": ("deberta-v2", DEBERTA_V3),
    "deberta_model": ("deberta", SPECS["deberta"][1]),
    "mobilebert_model": ("mobilebert", MOBILE),
}


def make_embed_fixture(name: str, model_type: str, cfg_kwargs: dict, out_dir: Path) -> None:
    """sentence-transformers' Pooling (mean over attention-mask tokens, clamped count; CLS) and
    Normalize (F.normalize), written out in torch ops here."""
    import torch
    from safetensors.torch import save_file
    from transformers import AutoConfig, AutoModel

    config = AutoConfig.for_model(model_type, **cfg_kwargs)
    torch.manual_seed(mf.SEED)
    model = AutoModel.from_config(config, attn_implementation="eager", dtype=torch.float32)
    fc.perturb_1d(model)
    model.eval()
    d = out_dir / name
    d.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(d, safe_serialization=True)
    if model_type == "esm":
        hub_esm_names(d / "model.safetensors")
    ids, mask, _, types = make_batch(model.config)
    kw = dict(input_ids=ids, attention_mask=mask)
    if types is not None:
        kw["token_type_ids"] = types
    with torch.no_grad():
        hidden = model(**kw).last_hidden_state
    m = mask.unsqueeze(-1).float()
    mean = (hidden * m).sum(1) / torch.clamp(m.sum(1), min=1e-9)
    ref = {
        "input_ids": ids.to(torch.int32).contiguous(),
        "attention_mask": mask.to(torch.int32).contiguous(),
        "hidden": hidden.contiguous(),
        "mean": mean.contiguous(),
        "mean_normalized": torch.nn.functional.normalize(mean, p=2, dim=1).contiguous(),
        "cls": hidden[:, 0].contiguous(),
    }
    if types is not None:
        ref["token_type_ids"] = types.to(torch.int32).contiguous()
    save_file(ref, str(d / "reference.safetensors"), metadata={"format": "pt"})
    print(f"{name:14s} {type(model).__name__:24s} embeddings {tuple(mean.shape)}")


def check_reload(args) -> int:
    torch = mf.setup_torch()
    from safetensors.torch import load_file
    import transformers
    from transformers import AutoConfig

    cfg = AutoConfig.from_pretrained(str(Path(args.check_reload).resolve()), local_files_only=True)
    auto = getattr(transformers, cfg.architectures[0])
    ref = load_file(str(Path(args.fixtures).resolve() / args.fixture / "reference.safetensors"))
    model = auto.from_pretrained(
        str(Path(args.check_reload).resolve()), local_files_only=True, attn_implementation="eager",
        dtype=torch.float32,
    )
    model.eval()
    kw = dict(input_ids=ref["input_ids"].long(), attention_mask=ref["attention_mask"].long())
    if "token_type_ids" in ref:
        kw["token_type_ids"] = ref["token_type_ids"].long()
    if getattr(cfg, "sparse_prediction", False):
        kw["labels"] = ref["labels"].long()  # logits only at the targets, as the fixture's
    with torch.no_grad():
        logits = model(**kw).logits.float()
    return fc.check_logits(args.fixture, logits, ref["logits"])


def embed_option(ap, args) -> bool:
    """`--embed`: write the bare-model embedding fixtures instead."""
    if args is None:
        ap.add_argument("--embed", action="store_true", help="write the bare-model embedding fixtures")
        return False
    if args.embed:
        for name, (model_type, cfg_kwargs) in EMBED_SPECS.items():
            make_embed_fixture(name, model_type, cfg_kwargs, mf.REPO / "tests" / "fixtures_embed")
    return args.embed


def main() -> None:
    fc.main(__doc__, SPECS, make_fixture, check_reload, embed_option)

if __name__ == "__main__":
    main()
