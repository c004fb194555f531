#!/usr/bin/env python3
"""Encoder-decoder training references for vkformers (`cargo test -p vkformers-cli --test
seq2seq_train`).

Offline, with the pinned versions of requirements.txt, on the `t5` and `marian` fixtures of
tests/fixtures/ (make_seq2seq_fixtures.py). Writes tests/fixtures_train/seq2seq/:

- `<name>_tokenizer/`: a tiny SentencePiece-style tokenizer (Unigram pieces, `▁` word starts,
  `</s>` appended by the post-processor as T5's and Marian's tokenizers do) whose ids fit the
  fixture's vocabulary of 64 and whose pad/eos/unk ids are the fixture config's; loaded through
  `PreTrainedTokenizerFast`;
- `<name>_pairs.jsonl`: text pairs (t5: `input`/`output` and `source`/`target` rows; marian:
  `{"translation": {"en", "de"}}` rows read with --source-lang en --target-lang de) and
  `<name>_tokenized.jsonl`: what `tokenizer(source, text_target=target)` makes of them
  (`input_ids`, `labels`);
- `<name>/`: the real `Seq2SeqTrainer` for two optimizer steps on the pairs with
  `DataCollatorForSeq2Seq` (labels padded with -100, decoder inputs from
  `prepare_decoder_input_ids_from_labels`), the settings of encoder_train_reference.trainer_steps
  (batch 2, sequential, constant lr 1e-3, AdamW eps 1e-6, no decay, no clipping): the weights after
  them (`step2.safetensors`), the first step's gradients (`grad1.safetensors`), the logged losses
  and the untrained model's loss on the tokenized rows (whole batch and each row; `eval.json`).
  Marian's sinusoidal position tables stay frozen (see `load`).
- `t5_lora/`: the same two `Seq2SeqTrainer` steps on the t5 pairs of a PEFT model continuing the
  t5 LoRA adapter of tests/fixtures_lora/t5 (q, v, wo; r 4; B non-zero): the adapter's tensors
  after them under PEFT's saved names (`step2.safetensors`), its first-step gradients
  (`grad1.safetensors`) and the logged losses (`eval.json`), for `vkformers finetune --adapter`.
"""

from __future__ import annotations

import sys
from pathlib import Path

import make_fixtures as mf  # sets the offline environment before transformers is imported
from encoder_train_reference import SEED, trainer_steps, write_json, write_jsonl
from encoder_train_reference import load as load_trainable

OUT = mf.REPO / "tests" / "fixtures_train" / "seq2seq"
FIXTURES = mf.REPO / "tests" / "fixtures"

# Word pieces of both languages; `▁` starts a word. Sub-word pieces make some words split.
WORDS = ["the", "cat", "sat", "on", "mat", "dog", "runs", "house", "is", "big", "small", "red", "a",
         "die", "katze", "sitzt", "auf", "der", "matte", "hund", "läuft", "das", "haus", "ist", "groß",
         "klein", "rot", "ein", "translate", "english", "to", "german"]
PIECES = ["s", "e", "n", "t", "r", "h", "d", "l", "k", "a", "i", "o", "u", "m", "g", ".", ":"]

# fixture -> (special tokens in id order, the pairs)
SPECIAL = {"t5": ["<pad>", "</s>", "<unk>"], "marian": ["<unk>", "<pad>", "</s>"]}
T5_PAIRS = [
    {"input": "translate english to german: the cat sat on the mat.", "output": "die katze sitzt auf der matte."},
    {"source": "the dog runs", "target": "der hund läuft"},
    {"input": "translate english to german: the red house is big.", "output": "das rote haus ist groß."},
    {"source": "a small cat", "target": "eine kleine katze"},
]
MARIAN_PAIRS = [
    {"translation": {"en": "the cat sat on the mat.", "de": "die katze sitzt auf der matte."}},
    {"translation": {"en": "the dog runs", "de": "der hund läuft"}},
    {"translation": {"de": "das haus ist rot.", "en": "the house is red."}},
    {"translation": {"en": "a small red cat", "de": "eine kleine rote katze"}},
]


def load(path: Path):
    """The fixture as `from_pretrained` loads it, with Marian's sinusoidal position tables frozen
    as their module declares them (`nn.Embedding(..., _freeze=True)`): transformers 5.24's
    `from_pretrained` leaves them trainable, so its Trainer would move a table that
    `save_pretrained` then drops (`_keys_to_ignore_on_save`) and every reload recomputes. vkformers
    treats them as the constants they are."""
    model = load_trainable(path)
    for module in model.modules():
        if type(module).__name__.endswith("SinusoidalPositionalEmbedding"):
            module.weight.requires_grad_(False)
    return model


def make_tokenizer(name: str):
    """A Unigram tokenizer of the fixture's special ids, saved and loaded back through transformers."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors
    from transformers import PreTrainedTokenizerFast

    special = SPECIAL[name]
    # Longer pieces score higher, so whole words win over their letters.
    vocab = [(t, 0.0) for t in special]
    vocab += [("▁" + w, -1.0 - 0.1 * i) for i, w in enumerate(WORDS)]
    vocab += [("▁", -8.0)] + [(p, -6.0 - 0.1 * i) for i, p in enumerate(PIECES)]
    assert len(vocab) <= 64, len(vocab)
    unk = special.index("<unk>")
    tok = Tokenizer(models.Unigram(vocab, unk_id=unk, byte_fallback=False))
    tok.pre_tokenizer = pre_tokenizers.Metaspace(replacement="▁", prepend_scheme="always")
    tok.decoder = decoders.Metaspace(replacement="▁", prepend_scheme="always")
    eos = special.index("</s>")
    tok.post_processor = processors.TemplateProcessing(single="$A </s>", pair="$A </s> $B </s>",
                                                       special_tokens=[("</s>", eos)])
    tok.add_special_tokens(special)
    d = OUT / f"{name}_tokenizer"
    d.mkdir(parents=True, exist_ok=True)
    tok.save(str(d / "tokenizer.json"))
    write_json(d / "tokenizer_config.json", {
        "tokenizer_class": "PreTrainedTokenizerFast", "pad_token": "<pad>", "eos_token": "</s>",
        "unk_token": "<unk>", "model_max_length": 512})
    return PreTrainedTokenizerFast.from_pretrained(d)


def tokenized(name: str, tok) -> list[dict]:
    """`tokenizer(source, text_target=target)` of each pair."""
    pairs = T5_PAIRS if name == "t5" else MARIAN_PAIRS
    write_jsonl(OUT / f"{name}_pairs.jsonl", pairs)
    rows = []
    for p in pairs:
        if "translation" in p:
            src, tgt = p["translation"]["en"], p["translation"]["de"]
        else:
            src, tgt = p.get("input", p.get("source")), p.get("output", p.get("target"))
        e = tok(src, text_target=tgt)
        if tok.unk_token_id in e["input_ids"] + e["labels"]:
            sys.exit(f"{name}: {tok.tokenize(src)} / {tok.tokenize(tgt)}: an unknown piece: extend WORDS or PIECES")
        rows.append({"input_ids": e["input_ids"], "labels": e["labels"]})
    write_jsonl(OUT / f"{name}_tokenized.jsonl", rows)
    return rows


def two_steps(name: str, tok, rows: list[dict]) -> None:
    import torch
    from safetensors import safe_open
    from safetensors.torch import save_file
    from transformers import DataCollatorForSeq2Seq

    torch.manual_seed(SEED)
    model = load(FIXTURES / name)
    collate = DataCollatorForSeq2Seq(tok, model=model, label_pad_token_id=-100, return_tensors="pt")
    losses = trainer_steps(model, rows, collate, seq2seq=True)
    # Stored trained parameters (buffers such as BART's final_logits_bias have no gradient).
    params = {n for n, p in model.named_parameters() if p.requires_grad}
    with safe_open(FIXTURES / name / "model.safetensors", "pt") as f:
        stored = [k for k in f.keys() if k in params]
    out = OUT / name
    out.mkdir(parents=True, exist_ok=True)
    state = model.state_dict()
    save_file({k: state[k].detach().clone().contiguous() for k in stored}, out / "step2.safetensors")
    first = load(FIXTURES / name)
    first.train()
    first(**DataCollatorForSeq2Seq(tok, model=first, label_pad_token_id=-100)(rows[:2])).loss.backward()
    grads = dict(first.named_parameters())
    save_file({k: grads[k].grad.detach().clone().contiguous() for k in stored}, out / "grad1.safetensors")
    untrained = load(FIXTURES / name)
    plain = DataCollatorForSeq2Seq(tok, model=untrained, label_pad_token_id=-100)
    with torch.no_grad():
        loss = float(untrained(**plain(rows)).loss)
        per_row = [float(untrained(**plain([r])).loss) for r in rows]
    counts = [sum(1 for l in r["labels"] if l != -100) for r in rows]
    write_json(out / "eval.json", {
        "loss": loss, "rows": [{"loss": l, "tokens": c} for l, c in zip(per_row, counts)], "tokens": sum(counts),
        "trainer_step_losses": losses,
        "note": f"eval: untrained {name} on {name}_tokenized.jsonl; train: transformers.Seq2SeqTrainer, 2 steps",
    })
    print(f"{name}: step losses {losses}, eval loss {loss:.6f} over {sum(counts)} targets")


def lora_two_steps(tok, rows: list[dict]) -> None:
    import torch
    from peft import PeftModel
    from safetensors.torch import save_file
    from transformers import DataCollatorForSeq2Seq

    adapter = mf.REPO / "tests" / "fixtures_lora" / "t5"
    peft = lambda: PeftModel.from_pretrained(load(FIXTURES / "t5"), str(adapter), is_trainable=True)  # noqa: E731
    saved = lambda n: n.replace(".default.", ".")  # noqa: E731  (PEFT's saved keys drop the adapter name)
    torch.manual_seed(SEED)
    model = peft()
    collate = DataCollatorForSeq2Seq(tok, model=model.base_model.model, label_pad_token_id=-100)
    losses = trainer_steps(model, rows, collate, seq2seq=True)
    out = OUT / "t5_lora"
    out.mkdir(parents=True, exist_ok=True)
    trained = {saved(n): p.detach().clone().contiguous() for n, p in model.named_parameters() if p.requires_grad}
    save_file(trained, out / "step2.safetensors")
    first = peft()
    first.train()
    first(**collate(rows[:2])).loss.backward()
    grads = {saved(n): p.grad.detach().clone().contiguous() for n, p in first.named_parameters() if p.requires_grad}
    save_file(grads, out / "grad1.safetensors")
    write_json(out / "eval.json", {"trainer_step_losses": losses,
                                   "note": "Seq2SeqTrainer, 2 steps of the t5 LoRA adapter of tests/fixtures_lora/t5"})
    print(f"t5 LoRA: step losses {losses}, {len(trained)} adapter tensors")


def main() -> None:
    mf.check_versions()
    mf.quiet_torch()
    OUT.mkdir(parents=True, exist_ok=True)
    for name in ("t5", "marian"):
        tok = make_tokenizer(name)
        rows = tokenized(name, tok)
        two_steps(name, tok, rows)
        if name == "t5":
            lora_two_steps(tok, rows)


if __name__ == "__main__":
    main()
