"""Trains two tokenizers of a real model's size and layout on local text, for the detokenization
cost harness (crates/vkformers-generate/examples/detok_cost.rs) where no real one is at hand:

- OUT/sentencepiece/tokenizer.json: Llama-2's layout, 32,000 ids: BPE over `▁`-joined text with
  byte fallback (<0x00>..<0xFF>), decoder Replace(▁→space) / ByteFallback / Fuse / Strip;
- OUT/byte_level/tokenizer.json: GPT-2/Llama-3's layout, 32,000 ids: byte-level BPE, decoder
  ByteLevel.

Usage: python tools/bench/detok_tokenizers.py OUT FILE... (the training text: any text files).
Needs the `tokenizers` package (the parity venv has it).
"""

import os
import sys

from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, trainers

VOCAB = 32000


def sentencepiece(files):
    tok = Tokenizer(models.BPE(unk_token="<unk>", byte_fallback=True, fuse_unk=True))
    tok.normalizer = normalizers.Sequence([normalizers.Prepend("▁"), normalizers.Replace(" ", "▁")])
    tok.pre_tokenizer = pre_tokenizers.Split("▁", behavior="merged_with_next")
    tok.decoder = decoders.Sequence(
        [decoders.Replace("▁", " "), decoders.ByteFallback(), decoders.Fuse(), decoders.Strip(" ", 1, 0)]
    )
    byte_tokens = [f"<0x{b:02X}>" for b in range(256)]
    trainer = trainers.BpeTrainer(
        vocab_size=VOCAB, special_tokens=["<unk>", "<s>", "</s>"] + byte_tokens, show_progress=False
    )
    tok.train(files, trainer)
    return tok


def byte_level(files):
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=VOCAB,
        special_tokens=["<|endoftext|>"],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train(files, trainer)
    return tok


def main():
    out, files = sys.argv[1], sys.argv[2:]
    for name, make in [("sentencepiece", sentencepiece), ("byte_level", byte_level)]:
        tok = make(files)
        os.makedirs(os.path.join(out, name), exist_ok=True)
        tok.save(os.path.join(out, name, "tokenizer.json"))
        print(name, tok.get_vocab_size(), "ids")


if __name__ == "__main__":
    main()
