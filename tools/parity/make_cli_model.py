#!/usr/bin/env python3
"""A tiny model folder for the CLI tests of `vkformers generate` / `vkformers chat`:
the llama parity fixture's weights (vocab 128) with a character-level tokenizer and a ChatML chat
template, so that prompts, stop strings and chat turns are text. Writes tests/fixtures_generate/cli_model/.

Token ids: 0 <pad>, 1 <s>, 2 </s>, 3 <|im_start|>, 4 <|im_end|>, 5.. "\\n" and printable ASCII,
the rest Latin-1 letters from U+00C0. The context is raised to 256 positions (RoPE has no
position table) so a few chat turns fit. Checks that transformers loads the folder and renders the template.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from tokenizers import Tokenizer, decoders, models

REPO = Path(__file__).resolve().parent.parent.parent
SRC = REPO / "tests" / "fixtures" / "llama"
OUT = REPO / "tests" / "fixtures_generate" / "cli_model"
SPECIAL = ["<pad>", "<s>", "</s>", "<|im_start|>", "<|im_end|>"]
TEMPLATE = (
    "{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)


def main() -> None:
    OUT.mkdir(parents=True, exist_ok=True)
    config = json.loads((SRC / "config.json").read_text())
    vocab_size = config["vocab_size"]
    config["max_position_embeddings"] = 256
    (OUT / "config.json").write_text(json.dumps(config, indent=2) + "\n")
    shutil.copy(SRC / "model.safetensors", OUT / "model.safetensors")
    shutil.copy(SRC / "generation_config.json", OUT / "generation_config.json")

    chars = ["\n"] + [chr(c) for c in range(32, 127)]
    tokens = SPECIAL + chars
    # The rest are Latin-1 letters, so every id decodes to one character that encodes back to it
    # (a chat turn then re-renders the reply as the same ids and the KV cache carries over).
    tokens += [chr(0xC0 + i) for i in range(vocab_size - len(tokens))]
    vocab = {t: i for i, t in enumerate(tokens)}
    tok = Tokenizer(models.BPE(vocab=vocab, merges=[], unk_token=None))
    tok.decoder = decoders.Fuse()
    tok.add_special_tokens(SPECIAL)
    from tokenizers.processors import TemplateProcessing

    tok.post_processor = TemplateProcessing(single="<s> $A", pair="<s> $A <s> $B", special_tokens=[("<s>", 1)])
    tok.save(str(OUT / "tokenizer.json"))
    tok_config = {
        "bos_token": "<s>",
        "eos_token": "</s>",
        "pad_token": "<pad>",
        "unk_token": None,
        "add_bos_token": True,
        "chat_template": TEMPLATE,
        "tokenizer_class": "PreTrainedTokenizerFast",
        "model_max_length": 256,
    }
    (OUT / "tokenizer_config.json").write_text(json.dumps(tok_config, indent=2) + "\n")

    from transformers import AutoTokenizer

    t = AutoTokenizer.from_pretrained(OUT)
    ids = t("Hi there")["input_ids"]
    assert ids[0] == 1 and t.decode(ids[1:]) == "Hi there", ids
    text = t.apply_chat_template([{"role": "user", "content": "hello"}], tokenize=False, add_generation_prompt=True)
    assert text == "<|im_start|>user\nhello<|im_end|>\n<|im_start|>assistant\n", text
    print("wrote", OUT)


if __name__ == "__main__":
    main()
