#!/usr/bin/env python3
"""Reference tokenization of dataset rows for vkformers-data.

Reads the tokenizer that vkformers' `train_bpe_tokenizer` wrote to tests/fixtures_data/bpe
(loading it with `transformers.AutoTokenizer` is itself part of the check), writes two
variants of it next to it, and for each variant writes the ids and labels that transformers
gives each row of crates/vkformers-data/tests/data/*.jsonl to tests/fixtures_data/reference.json:

- bpe: `<s>` added by the post-processor, a Zephyr-like chat template that ends turns with `</s>`.
- chatml: no BOS, `<|im_start|>`/`<|im_end|>` special tokens, a ChatML template, and GPT-2's
  ByteLevel post-processor with trimmed offsets.
- llama3: `<|begin_of_text|>` added by the post-processor and written by a Llama-3-like template
  (default system turn, trimmed contents, header tokens, `<|eot_id|>` ends turns and is EOS).
- plain: the bpe tokenizer without a chat template (instruction and Q&A rows use the plain layout).

Labels come from transformers, not from vkformers' method: chat rows from
`apply_chat_template(..., return_assistant_tokens_mask=True)` with a copy of the template whose
assistant turns are wrapped in `{% generation %}` (checked to render the same text as the
unmarked template vkformers is given); prompt/completion rows the way TRL masks them (the
prompt's own tokenization is a prefix of the full text's, asserted); text rows are
`tokenizer(text)` plus EOS.

Usage: data_reference.py    (offline; about 2 s)
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from make_fixtures import check_versions  # noqa: E402

ROOT = HERE.parent.parent
FIXTURES = ROOT / "tests" / "fixtures_data"
DATA = ROOT / "crates" / "vkformers-data" / "tests" / "data"
IGNORE = -100

BPE_MARKED = (
    "{{ bos_token }}{% for message in messages %}{% if message['role'] == 'assistant' %}"
    "{{ '<|assistant|>\\n' }}{% generation %}{{ message['content'] + eos_token }}{% endgeneration %}{{ '\\n' }}"
    "{% else %}{{ '<|' + message['role'] + '|>\\n' + message['content'] + eos_token + '\\n' }}{% endif %}"
    "{% endfor %}{% if add_generation_prompt %}{{ '<|assistant|>\\n' }}{% endif %}"
)

CHATML = (
    "{% for message in messages %}{{ '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>\\n' }}"
    "{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"
)
CHATML_MARKED = (
    "{% for message in messages %}{% if message['role'] == 'assistant' %}"
    "{{ '<|im_start|>assistant\\n' }}{% generation %}{{ message['content'] + '<|im_end|>' }}{% endgeneration %}"
    "{{ '\\n' }}{% else %}{{ '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>\\n' }}"
    "{% endif %}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"
)

# Llama-3 like: BOS written by the template, a default system turn, trimmed contents, header
# tokens; the generation prompt is the assistant header.
LLAMA3_HEAD = (
    "{{- bos_token }}{%- if messages[0]['role'] == 'system' %}"
    "{%- set system_message = messages[0]['content'] | trim %}{%- set messages = messages[1:] %}"
    "{%- else %}{%- set system_message = 'You are a helpful assistant.' %}{%- endif %}"
    "{{- '<|start_header_id|>system<|end_header_id|>\\n\\n' + system_message + '<|eot_id|>' }}"
    "{%- for message in messages %}"
)
LLAMA3_TAIL = (
    "{%- endfor %}{%- if add_generation_prompt %}"
    "{{- '<|start_header_id|>assistant<|end_header_id|>\\n\\n' }}{%- endif %}"
)
LLAMA3_TURN = "{{- '<|start_header_id|>' + message['role'] + '<|end_header_id|>\\n\\n' + message['content'] | trim + '<|eot_id|>' }}"
LLAMA3 = LLAMA3_HEAD + LLAMA3_TURN + LLAMA3_TAIL
LLAMA3_MARKED = (
    LLAMA3_HEAD
    + "{%- if message['role'] == 'assistant' %}"
    + "{{- '<|start_header_id|>assistant<|end_header_id|>\\n\\n' }}"
    + "{% generation %}{{- message['content'] | trim + '<|eot_id|>' }}{% endgeneration %}"
    + "{%- else %}"
    + LLAMA3_TURN
    + "{%- endif %}"
    + LLAMA3_TAIL
)


def write_json(path: Path, value) -> None:
    path.write_text(json.dumps(value, indent=1, ensure_ascii=False, sort_keys=True) + "\n")


def make_variants() -> None:
    """chatml/ and plain/ from bpe/."""
    from tokenizers import Tokenizer, processors
    from tokenizers import AddedToken

    base = json.loads((FIXTURES / "bpe" / "tokenizer_config.json").read_text())

    plain = FIXTURES / "plain"
    plain.mkdir(exist_ok=True)
    (plain / "tokenizer.json").write_text((FIXTURES / "bpe" / "tokenizer.json").read_text())
    write_json(plain / "tokenizer_config.json", {k: v for k, v in base.items() if k != "chat_template"})

    chatml = FIXTURES / "chatml"
    chatml.mkdir(exist_ok=True)
    tok = Tokenizer.from_file(str(FIXTURES / "bpe" / "tokenizer.json"))
    tok.add_special_tokens([AddedToken("<|im_start|>", special=True), AddedToken("<|im_end|>", special=True)])
    tok.post_processor = processors.ByteLevel(trim_offsets=True)
    tok.save(str(chatml / "tokenizer.json"))
    config = {k: v for k, v in base.items() if k not in ("bos_token", "added_tokens_decoder")}
    config.update(add_bos_token=False, eos_token="<|im_end|>", chat_template=CHATML)
    write_json(chatml / "tokenizer_config.json", config)

    llama3 = FIXTURES / "llama3"
    llama3.mkdir(exist_ok=True)
    tok = Tokenizer.from_file(str(FIXTURES / "bpe" / "tokenizer.json"))
    specials = ["<|begin_of_text|>", "<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>"]
    tok.add_special_tokens([AddedToken(t, special=True) for t in specials])
    bos = "<|begin_of_text|>"
    tok.post_processor = processors.TemplateProcessing(single=f"{bos} $A", special_tokens=[(bos, tok.token_to_id(bos))])
    tok.save(str(llama3 / "tokenizer.json"))
    config = {k: v for k, v in base.items() if k != "added_tokens_decoder"}
    config.update(bos_token=bos, eos_token="<|eot_id|>", chat_template=LLAMA3)
    write_json(llama3 / "tokenizer_config.json", config)


def rows(path: Path):
    for line in path.read_text().splitlines():
        if line.strip():
            yield json.loads(line)


class Reference:
    def __init__(self, name: str, marked: str | None):
        from transformers import AutoTokenizer

        self.tok = AutoTokenizer.from_pretrained(str(FIXTURES / name))
        self.marked = marked
        self.eos = self.tok.eos_token_id

    def with_eos(self, ids, labels):
        if ids[-1] != self.eos:
            ids, labels = ids + [self.eos], labels + [self.eos]
        return {"input_ids": ids, "labels": labels}

    def text(self, text):
        ids = self.tok(text)["input_ids"]
        return self.with_eos(ids, list(ids))

    def prompt_completion(self, prompt, completion):
        prompt_ids = self.tok(prompt)["input_ids"]
        ids = self.tok(prompt + completion)["input_ids"]
        assert ids[: len(prompt_ids)] == prompt_ids, f"not a clean boundary: {prompt!r} + {completion!r}"
        return self.with_eos(ids, [IGNORE] * len(prompt_ids) + ids[len(prompt_ids) :])

    def chat(self, messages):
        ids = self.tok.apply_chat_template(messages, tokenize=True, return_dict=True)["input_ids"]
        text = self.tok.apply_chat_template(messages, tokenize=False)
        assert text == self.tok.apply_chat_template(messages, tokenize=False, chat_template=self.marked)
        out = self.tok.apply_chat_template(
            messages, tokenize=True, return_dict=True, return_assistant_tokens_mask=True, chat_template=self.marked
        )
        assert out["input_ids"] == ids
        mask = out["assistant_masks"]
        assert any(mask), messages
        return {"input_ids": ids, "labels": [i if m else IGNORE for i, m in zip(ids, mask)]}

    def row(self, row):
        if "input_ids" in row:
            return {"input_ids": row["input_ids"], "labels": row.get("labels", row["input_ids"])}
        if "messages" in row:
            return self.chat(row["messages"])
        if isinstance(row.get("prompt"), list):
            return self.chat(row["prompt"] + row["completion"])
        if "prompt" in row:
            return self.prompt_completion(row["prompt"], row["completion"])
        if "instruction" in row:
            user = row["instruction"] + (f"\n\n{row['input']}" if row.get("input") else "")
            if self.marked:
                return self.chat([{"role": "user", "content": user}, {"role": "assistant", "content": row["output"]}])
            prompt = f"### Instruction:\n{row['instruction']}\n\n"
            if row.get("input"):
                prompt += f"### Input:\n{row['input']}\n\n"
            return self.prompt_completion(prompt + "### Response:\n", row["output"])
        if "question" in row:
            if self.marked:
                messages = [{"role": "user", "content": row["question"]}, {"role": "assistant", "content": row["answer"]}]
                return self.chat(messages)
            return self.prompt_completion(f"Question: {row['question']}\nAnswer:", f" {row['answer']}")
        return self.text(row.get("text", row.get("content")))


SAMPLES = [
    "What is the capital of France? The capital of France is Paris.",
    "Unicode: café, naïve, 東京, ✓ and an end token</s> inside.",
    "fn main() { println!(\"hello, world\"); }\n\n\tlet x = 42;",
]


def main() -> None:
    check_versions()
    make_variants()
    out = {}
    for name, marked in [("bpe", BPE_MARKED), ("chatml", CHATML_MARKED), ("llama3", LLAMA3_MARKED), ("plain", None)]:
        ref = Reference(name, marked)
        files = {}
        for path in sorted(DATA.glob("*.jsonl")):
            if path.name == "chat.jsonl" and marked is None:
                continue  # chat rows need a chat template: an error (tested on the Rust side)
            files[path.name] = [ref.row(r) for r in rows(path)]
        samples = [{"text": s, "ids": ref.tok(s)["input_ids"]} for s in SAMPLES]
        out[name] = {"files": files, "samples": samples}
    write_json(FIXTURES / "reference.json", out)
    print(f"wrote {FIXTURES / 'reference.json'}")


if __name__ == "__main__":
    main()
