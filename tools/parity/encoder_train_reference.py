#!/usr/bin/env python3
"""Encoder training references for vkformers (`cargo test -p vkformers-cli --test encoder_train`).

Offline, with the pinned versions of requirements.txt, on the encoder fixtures of
tests/fixtures/ (make_encoder_fixtures.py). Writes tests/fixtures_train/encoder/:

- `mlm_rows.jsonl` + `bert_mlm_eval.json`: pre-masked rows (`input_ids` with MASK_ID at the
  targets, `labels` the original ids there and -100 elsewhere, `token_type_ids`) and the `bert`
  fixture's masked-LM loss on them: transformers' loss of the whole batch (the mean over every
  target) and each row's own mean;
- `cls_rows.jsonl` (`input_ids`, `token_type_ids`, `label`) and `bert_seqcls/`: the real
  `transformers.Trainer`, two optimizer steps of `BertForSequenceClassification` (batch 2,
  sequential, constant lr 1e-3, AdamW eps 1e-6, no decay, no clipping): the weights after them
  (`step2.safetensors`), the first step's gradients (`grad1.safetensors`), the Trainer's
  logged losses and the untrained model's eval loss and accuracy (`eval.json`);
- the same two steps' losses (only) for the problem types transformers picks from the labels:
  `multi_label.json` (bert_seqcls with problem_type multi_label_classification, 0/1 lists),
  `regression.json` (roberta_seqcls_regression, float labels), and token classification
  `tokcls.json` (distilbert_tokcls on `tok_rows.jsonl`, eval loss and accuracy too).

- `tests/fixtures_data/wordpiece/`: a BERT-style WordPiece tokenizer of 37 tokens (`[PAD]` 0,
  `[UNK]` 1, `[CLS]` 2, `[MASK]` 3, `[SEP]` 4: ids the bert fixture's vocabulary of 128 holds),
  loaded through `AutoTokenizer`, and `text_rows.jsonl` / `text_expected.jsonl`: classification
  rows (`text` + `label`, `text` + `text_pair` + `label`, `tokens` + `labels`) and what
  transformers makes of them (ids, token types; word labels on each word's first sub-word,
  -100 elsewhere, as its token-classification recipe aligns them).

Mode `--check-export DIR`: loads a folder written by `vkformers train --task
sequence-classification` on bert_seqcls with `AutoModelForSequenceClassification` and checks its
logits on cls_rows equal those of the Trainer's weights after two steps.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

import make_fixtures as mf  # sets the offline environment before transformers is imported

OUT = mf.REPO / "tests" / "fixtures_train" / "encoder"
FIXTURES = mf.REPO / "tests" / "fixtures"
SEED = 1234
MASK_ID = 3
ROW_LENS = [7, 5, 9, 6]


def rand_ids(g, n: int, vocab: int) -> list[int]:
    import torch

    return torch.randint(MASK_ID + 1, vocab, (n,), generator=g).tolist()


def mlm_rows(vocab: int) -> list[dict]:
    import torch

    g = torch.Generator().manual_seed(SEED)
    rows = []
    for n in ROW_LENS:
        ids = rand_ids(g, n, vocab)
        labels = [-100] * n
        for p in torch.randperm(n, generator=g)[: max(1, n // 3)].tolist():
            labels[p], ids[p] = ids[p], MASK_ID
        types = [0] * (n // 2) + [1] * (n - n // 2)
        rows.append({"input_ids": ids, "labels": labels, "token_type_ids": types})
    return rows


def cls_rows(vocab: int, labels: list) -> list[dict]:
    import torch

    g = torch.Generator().manual_seed(SEED + 1)
    rows = []
    for n, label in zip(ROW_LENS, labels):
        types = [0] * (n // 2) + [1] * (n - n // 2)
        rows.append({"input_ids": rand_ids(g, n, vocab), "token_type_ids": types, "label": label})
    return rows


def tok_rows(vocab: int, num_labels: int) -> list[dict]:
    import torch

    g = torch.Generator().manual_seed(SEED + 2)
    rows = []
    for n in ROW_LENS:
        labels = torch.randint(0, num_labels, (n,), generator=g).tolist()
        labels[0] = -100  # as the [CLS] position of a real row
        rows.append({"input_ids": rand_ids(g, n, vocab), "labels": labels})
    return rows


def collate_with(pad_id: int):
    def collate(rows: list[dict]) -> dict:
        import torch

        t = max(len(r["input_ids"]) for r in rows)
        out = {"input_ids": [], "attention_mask": []}
        for r in rows:
            pad = t - len(r["input_ids"])
            out["input_ids"].append(r["input_ids"] + [pad_id] * pad)
            out["attention_mask"].append([1] * len(r["input_ids"]) + [0] * pad)
            if "token_type_ids" in r:
                out.setdefault("token_type_ids", []).append(r["token_type_ids"] + [0] * pad)
            if isinstance(r.get("labels"), list):
                out.setdefault("labels", []).append(r["labels"] + [-100] * pad)
        batch = {k: torch.tensor(v) for k, v in out.items()}
        if "label" in rows[0]:
            batch["labels"] = torch.tensor([r["label"] for r in rows])
        return batch

    return collate


def load(path: Path, **config):
    import torch
    import transformers
    from transformers import AutoConfig

    cfg = AutoConfig.from_pretrained(path, **config)
    auto = getattr(transformers, cfg.architectures[0])
    return auto.from_pretrained(path, config=cfg, attn_implementation="eager", dtype=torch.float32)


def trainer_steps(model, rows: list[dict], collate, seq2seq: bool = False) -> list[float]:
    """Two optimizer steps of the real Trainer (`Seq2SeqTrainer` with `seq2seq`), the harness's
    settings; returns the logged step losses."""
    from transformers import Seq2SeqTrainer, Seq2SeqTrainingArguments, Trainer, TrainingArguments

    trainer_cls, args_cls = (Seq2SeqTrainer, Seq2SeqTrainingArguments) if seq2seq else (Trainer, TrainingArguments)
    with tempfile.TemporaryDirectory() as tmp:
        args = args_cls(
            output_dir=tmp, per_device_train_batch_size=2, max_steps=2, learning_rate=1e-3,
            lr_scheduler_type="constant", warmup_steps=0, optim="adamw_torch", adam_beta1=0.9,
            adam_beta2=0.999, adam_epsilon=1e-6, weight_decay=0.0, max_grad_norm=0.0,
            train_sampling_strategy="sequential", use_cpu=True, report_to=[], save_strategy="no",
            logging_steps=1, seed=SEED, dataloader_num_workers=0,
        )
        trainer = trainer_cls(model=model, args=args, train_dataset=rows, data_collator=collate)
        trainer.train()
    return [h["loss"] for h in trainer.state.log_history if "loss" in h]


def write_json(path: Path, value) -> None:
    path.write_text(json.dumps(value, indent=1) + "\n")


def write_jsonl(path: Path, rows: list[dict]) -> None:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))


def mlm_eval() -> None:
    import torch

    model = load(FIXTURES / "bert")
    rows = mlm_rows(model.config.vocab_size)
    write_jsonl(OUT / "mlm_rows.jsonl", rows)
    collate = collate_with(model.config.pad_token_id)
    with torch.no_grad():
        loss = float(model(**collate(rows)).loss)
        per_row = [float(model(**collate([r])).loss) for r in rows]
    counts = [sum(1 for l in r["labels"] if l != -100) for r in rows]
    write_json(OUT / "bert_mlm_eval.json", {"loss": loss, "rows": [{"loss": l, "tokens": c} for l, c in zip(per_row, counts)]})
    print(f"bert masked-LM eval loss {loss:.6f} over {sum(counts)} targets")


def seqcls_two_steps(rows: list[dict]) -> None:
    import torch
    from safetensors import safe_open
    from safetensors.torch import save_file

    collate = collate_with(0)
    torch.manual_seed(SEED)
    model = load(FIXTURES / "bert_seqcls")
    losses = trainer_steps(model, rows, collate)
    with safe_open(FIXTURES / "bert_seqcls" / "model.safetensors", "pt") as f:
        stored = list(f.keys())
    out = OUT / "bert_seqcls"
    out.mkdir(parents=True, exist_ok=True)
    state = model.state_dict()
    save_file({k: state[k].detach().clone().contiguous() for k in stored}, out / "step2.safetensors")
    first = load(FIXTURES / "bert_seqcls")
    first.train()
    first(**collate(rows[:2])).loss.backward()
    grads = dict(first.named_parameters())
    save_file({k: grads[k].grad.detach().clone().contiguous() for k in stored}, out / "grad1.safetensors")
    untrained = load(FIXTURES / "bert_seqcls")
    with torch.no_grad():
        out_all = untrained(**collate(rows))
    hits = (out_all.logits.argmax(-1) == torch.tensor([r["label"] for r in rows])).float().mean()
    write_json(out / "eval.json", {
        "loss": float(out_all.loss), "accuracy": float(hits), "trainer_step_losses": losses,
        "note": "eval: untrained bert_seqcls on cls_rows; train: transformers.Trainer, 2 steps",
    })
    print(f"bert_seqcls: step losses {losses}")


LORA = dict(r=4, lora_alpha=8, lora_dropout=0.0)


def peft_key(param_name: str) -> str:
    """A PEFT parameter name as the adapter file stores it (adapter name dropped; a
    `modules_to_save` copy under the wrapped module's own name)."""
    return param_name.replace(".modules_to_save.default.", ".").replace(".default.", ".")


def lora_two_steps(rows: list[dict], fixture: str = "bert_seqcls", task: str = "SEQ_CLS",
                   targets: tuple = ("query", "value")) -> None:
    """`<fixture>_lora/`: LoRA (`targets`; r 4) on the fixture with PEFT's `task` wrapper
    (`classifier` trained in full through modules_to_save): the adapter it starts from (`init/`,
    B drawn non-zero so the first step moves A too), the Trainer's two steps from it (the
    adapter's tensors after them, `step2.safetensors`; the first step's gradients,
    `grad1.safetensors`; the step losses and the logits of the rows after them, `lora.json`)."""
    import torch
    from peft import LoraConfig, PeftModel, get_peft_model
    from safetensors.torch import save_file

    collate = collate_with(0)
    out = OUT / f"{fixture}_lora"
    torch.manual_seed(SEED)
    cfg = LoraConfig(task_type=task, target_modules=list(targets), **LORA)
    model = get_peft_model(load(FIXTURES / fixture), cfg)
    g = torch.Generator().manual_seed(SEED + 1)
    with torch.no_grad():
        for n, p in model.named_parameters():
            if ".lora_B." in n:
                p.copy_(torch.randn(p.shape, generator=g) * 0.05)
    model.save_pretrained(out / "init")
    (out / "init" / "README.md").unlink(missing_ok=True)
    cfg_path = out / "init" / "adapter_config.json"
    cfg = json.loads(cfg_path.read_text())
    cfg["base_model_name_or_path"] = f"tests/fixtures/{fixture}"  # not the absolute path of this checkout
    cfg["target_modules"] = sorted(cfg["target_modules"])  # PEFT writes a set's order
    cfg_path.write_text(json.dumps(cfg, indent=2, sort_keys=True) + "\n")

    def from_init():
        m = PeftModel.from_pretrained(load(FIXTURES / fixture), out / "init", is_trainable=True)
        return m, {n: p for n, p in m.named_parameters() if p.requires_grad}

    first, params = from_init()
    first.train()
    first(**collate(rows[:2])).loss.backward()
    save_file({peft_key(n): p.grad.detach().clone().contiguous() for n, p in params.items()}, out / "grad1.safetensors")
    model, params = from_init()
    losses = trainer_steps(model, rows, collate)
    save_file({peft_key(n): p.detach().clone().contiguous() for n, p in params.items()}, out / "step2.safetensors")
    model.eval()
    with torch.no_grad():
        logits = model(**collate(rows)).logits
    write_json(out / "lora.json", {
        "trainer_step_losses": losses, "logits": logits.flatten().tolist(),
        "note": f"PEFT LoRA {task} on {fixture} from init/, transformers.Trainer, 2 steps",
    })
    print(f"{fixture} LoRA: {len(params)} trainable tensors, step losses {losses}")


def check_lora(folder: Path) -> None:
    """The adapter `vkformers finetune` wrote, loaded by PEFT on
    AutoModelForSequenceClassification(bert_seqcls): its logits on cls_rows against the
    Trainer's after two steps (lora.json)."""
    import torch
    from peft import PeftModel
    from transformers import AutoModelForSequenceClassification

    rows = [json.loads(l) for l in (OUT / "cls_rows.jsonl").read_text().splitlines() if l.strip()]
    base = AutoModelForSequenceClassification.from_pretrained(
        FIXTURES / "bert_seqcls", attn_implementation="eager", dtype=torch.float32)
    model = PeftModel.from_pretrained(base, folder)
    model.eval()
    with torch.no_grad():
        got = model(**collate_with(0)(rows)).logits.flatten()
    want = torch.tensor(json.loads((OUT / "bert_seqcls_lora" / "lora.json").read_text())["logits"])
    rel = float((got - want).abs().max() / want.abs().max())
    print(f"{folder}: {type(model).__name__}, logits vs PEFT + Trainer's two steps: max|diff|/max|ref| = {rel:.2e}")
    if rel > 1e-5:
        sys.exit("LoRA adapter check FAILED")
    print("LoRA adapter check ok")


def loss_only(name: str, fixture: str, rows: list[dict], pad: int, **config) -> dict:
    import torch

    torch.manual_seed(SEED)
    losses = trainer_steps(load(FIXTURES / fixture, **config), rows, collate_with(pad))
    untrained = load(FIXTURES / fixture, **config)
    with torch.no_grad():
        out = untrained(**collate_with(pad)(rows))
    print(f"{name}: step losses {losses}, problem_type {untrained.config.problem_type}")
    return {"trainer_step_losses": losses, "loss": float(out.loss), "logits": out.logits.flatten().tolist()}


WORDS = ["the", "a", "cat", "dog", "sat", "on", "mat", "ran", "big", "small", "red", "house", "in", "is",
         "was", "and", "paris", "john", "lives", "went", "to", "london", "##s", "##ing", "walk", "good", "bad",
         "movie", "film", "very", ".", ","]


def wordpiece_fixture() -> None:
    from tokenizers import Tokenizer, models, normalizers, pre_tokenizers, processors
    from transformers import AutoTokenizer

    vocab = {t: i for i, t in enumerate(["[PAD]", "[UNK]", "[CLS]", "[MASK]", "[SEP]"] + WORDS)}
    tok = Tokenizer(models.WordPiece(vocab, unk_token="[UNK]"))
    tok.normalizer = normalizers.BertNormalizer(lowercase=True)
    tok.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    tok.post_processor = processors.TemplateProcessing(
        single="[CLS] $A [SEP]", pair="[CLS] $A [SEP] $B:1 [SEP]:1",
        special_tokens=[("[CLS]", vocab["[CLS]"]), ("[SEP]", vocab["[SEP]"])])
    tok.add_special_tokens(["[PAD]", "[UNK]", "[CLS]", "[MASK]", "[SEP]"])
    d = mf.REPO / "tests" / "fixtures_data" / "wordpiece"
    d.mkdir(parents=True, exist_ok=True)
    tok.save(str(d / "tokenizer.json"))
    write_json(d / "tokenizer_config.json", {
        "tokenizer_class": "BertTokenizer", "do_lower_case": True, "pad_token": "[PAD]", "unk_token": "[UNK]",
        "cls_token": "[CLS]", "sep_token": "[SEP]", "mask_token": "[MASK]", "model_max_length": 64})
    hf = AutoTokenizer.from_pretrained(d)
    rows = [
        {"text": "The cat sat on the mat.", "label": 1},
        {"text": "A very good movie", "text_pair": "a bad film, very bad", "label": "LABEL_0"},
        {"tokens": ["John", "lives", "in", "Paris", "walking"], "labels": [1, 0, 0, 2, 0]},
        {"tokens": ["the", "cats", "went", "to", "London"], "labels": ["LABEL_0", "LABEL_3", 0, 0, 2]},
    ]
    label2id = {f"LABEL_{i}": i for i in range(5)}
    expected = []
    for r in rows:
        if "tokens" in r:
            e = hf(r["tokens"], is_split_into_words=True)
            word_labels = [label2id.get(l, l) for l in r["labels"]]
            labels, prev = [], None
            for w in e.word_ids():
                labels.append(word_labels[w] if w is not None and w != prev else -100)
                prev = w
            expected.append({"input_ids": e["input_ids"], "token_type_ids": e["token_type_ids"], "labels": labels})
        else:
            e = hf(r["text"], r.get("text_pair"))
            expected.append({"input_ids": e["input_ids"], "token_type_ids": e["token_type_ids"],
                             "label": label2id.get(r["label"], r["label"])})
    write_jsonl(d / "text_rows.jsonl", rows)
    write_jsonl(d / "text_expected.jsonl", expected)
    print(f"wordpiece: {len(vocab)} tokens, {len(rows)} classification rows")


CLASSIFY = [("the cat sat on the mat.", None), ("a very good movie", "a bad film")]


def classify_reference() -> None:
    """transformers' text-classification pipeline (all labels) on bert_seqcls with the WordPiece
    tokenizer, and on the multi-label variant (sigmoid scores)."""
    import shutil

    from transformers import AutoTokenizer, pipeline

    out = {}
    for name, config in [("single", {}), ("multi", {"problem_type": "multi_label_classification"})]:
        with tempfile.TemporaryDirectory() as tmp:
            d = Path(tmp)
            for f in ("config.json", "model.safetensors"):
                shutil.copy(FIXTURES / "bert_seqcls" / f, d / f)
            for f in ("tokenizer.json", "tokenizer_config.json"):
                shutil.copy(mf.REPO / "tests" / "fixtures_data" / "wordpiece" / f, d / f)
            model = load(d, **config)
            pipe = pipeline("text-classification", model=model, tokenizer=AutoTokenizer.from_pretrained(d), top_k=None)
            inputs = [{"text": t, "text_pair": p} if p else t for t, p in CLASSIFY]
            # A plain string comes back as [[...]], a pair as [...]: one list of labels each.
            out[name] = [r[0] if isinstance(r[0], list) else r for r in (pipe(x) for x in inputs)]
    write_json(OUT / "classify.json", {"inputs": CLASSIFY, **out})
    print("classify: pipeline scores written")


def check_export(folder: Path) -> None:
    import torch
    from safetensors.torch import load_file
    from transformers import AutoModelForSequenceClassification

    rows = [json.loads(l) for l in (OUT / "cls_rows.jsonl").read_text().splitlines() if l.strip()]
    batch = collate_with(0)(rows)
    ours = AutoModelForSequenceClassification.from_pretrained(folder, attn_implementation="eager", dtype=torch.float32)
    ref = load(FIXTURES / "bert_seqcls")
    ref.load_state_dict(load_file(OUT / "bert_seqcls" / "step2.safetensors"), strict=False)
    with torch.no_grad():
        a, b = ours(**batch).logits, ref(**batch).logits
    rel = float((a - b).abs().max() / b.abs().max())
    print(f"{folder}: {type(ours).__name__}, logits vs the Trainer's two steps: max|diff|/max|ref| = {rel:.2e}")
    if rel > 1e-5:
        sys.exit("export check FAILED")
    print("export check ok")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--check-export", type=Path)
    ap.add_argument("--check-lora", type=Path, help="an adapter folder of vkformers finetune (bert_seqcls_lora)")
    ap.add_argument("--only-lora", action="store_true", help="write the *_lora/ references alone")
    a = ap.parse_args()
    mf.check_versions()
    torch = mf.quiet_torch()
    if a.check_export:
        check_export(a.check_export)
        return
    if a.check_lora:
        check_lora(a.check_lora)
        return
    rows_path = OUT / "cls_rows.jsonl"
    if a.only_lora:
        lora_two_steps([json.loads(l) for l in rows_path.read_text().splitlines() if l.strip()])
        tok = [json.loads(l) for l in (OUT / "tok_rows.jsonl").read_text().splitlines() if l.strip()]
        lora_two_steps(tok, "distilbert_tokcls", "TOKEN_CLS", ("q_lin", "v_lin"))
        return
    OUT.mkdir(parents=True, exist_ok=True)
    wordpiece_fixture()
    classify_reference()
    mlm_eval()
    rows = cls_rows(128, [2, 0, 1, 2])
    write_jsonl(OUT / "cls_rows.jsonl", rows)
    seqcls_two_steps(rows)
    lora_two_steps(rows)
    multi = cls_rows(128, [[1.0, 0.0, 1.0], [0.0, 0.0, 1.0], [1.0, 1.0, 0.0], [0.0, 1.0, 0.0]])
    write_jsonl(OUT / "multi_rows.jsonl", multi)
    res = loss_only("multi-label", "bert_seqcls", multi, 0, problem_type="multi_label_classification")
    res.pop("logits")
    write_json(OUT / "multi_label.json", res)
    reg = [{k: v for k, v in r.items() if k != "token_type_ids"} for r in cls_rows(128, [0.5, -1.25, 2.0, 0.0])]
    write_jsonl(OUT / "regression_rows.jsonl", reg)
    res = loss_only("regression", "roberta_seqcls_regression", reg, 1)
    res.pop("logits")
    write_json(OUT / "regression.json", res)
    tok = tok_rows(128, 5)
    write_jsonl(OUT / "tok_rows.jsonl", tok)
    res = loss_only("token classification", "distilbert_tokcls", tok, 0)
    logits = torch.tensor(res.pop("logits")).reshape(len(tok), max(ROW_LENS), 5)
    labels = collate_with(0)(tok)["labels"]
    counted = labels != -100
    res["accuracy"] = float((logits.argmax(-1)[counted] == labels[counted]).float().mean())
    write_json(OUT / "tokcls.json", res)
    lora_two_steps(tok, "distilbert_tokcls", "TOKEN_CLS", ("q_lin", "v_lin"))


if __name__ == "__main__":
    main()
