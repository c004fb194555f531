#!/usr/bin/env python3
"""Sentence-embedding throughput, vkformers against sentence-transformers on the same GPU in one
run (issue 19): a random-init BERT-base folder in bf16 (768 hidden, 12 layers, 12 heads, 3072
intermediate, vocab 30522) laid out as a sentence-transformers model (mean pooling, Normalize),
N texts of exactly `--seq` tokens, batches of `--batch`.

  vkformers             `vkformers embed --model DIR --file texts.txt --batch-size B --json`; its
                        `timings.texts_per_second` (tokenizing, forwards and read-back; not the
                        model load), median of --repeats runs; each run also prints the seconds
                        the host waited for the tokenizer and for the device (batch i+1 is
                        recorded while batch i runs: the device wait is what recording did not
                        fill; VKFORMERS_EMBED_OVERLAP=0 turns the overlap off for A/B).
  sentence-transformers `SentenceTransformer(DIR, model_kwargs={"torch_dtype": bfloat16})
                        .encode(texts, batch_size=B)` after one warm-up call, median of --repeats;
                        where the package is missing, the same computation written out with
                        transformers (AutoModel, mean pooling, normalize), and the table says so.
The first texts' vectors of both sides are compared (cosine), so both compute the same thing.

  python3 tools/bench/embed.py --vkformers target/release/vkformers [--json out.json]
  python3 tools/bench/embed.py --dry-run     # tiny BERT, CPU torch: checks the plumbing
"""
from __future__ import annotations

import argparse
import json
import random
import statistics
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
import common as C  # noqa: E402

BERT = dict(hidden_size=768, num_hidden_layers=12, num_attention_heads=12, intermediate_size=3072,
            vocab_size=30522, max_position_embeddings=512)
TINY = dict(hidden_size=64, num_hidden_layers=2, num_attention_heads=4, intermediate_size=128,
            vocab_size=512, max_position_embeddings=128)


def build_folder(workdir: Path, shape: dict) -> Path:
    """A random-init BertModel in bf16 with a WordLevel tokenizer (`t<i>` is id i, no special
    tokens) and sentence-transformers' modules (Transformer, mean Pooling, Normalize)."""
    from transformers import BertConfig, BertModel

    out = workdir / f"bert-st-{shape['hidden_size']}x{shape['num_hidden_layers']}"
    if (out / "modules.json").is_file():
        return out
    torch.manual_seed(0)
    cfg = BertConfig(**shape, type_vocab_size=2, hidden_act="gelu", layer_norm_eps=1e-12, pad_token_id=0)
    model = BertModel(cfg).to(torch.bfloat16)
    out.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(out)
    C.write_wordlevel_tokenizer(out, shape["vocab_size"])
    (out / "tokenizer_config.json").write_text(json.dumps(
        {"tokenizer_class": "PreTrainedTokenizerFast", "pad_token": "t0",
         "model_max_length": shape["max_position_embeddings"]}))
    (out / "sentence_bert_config.json").write_text(json.dumps(
        {"max_seq_length": shape["max_position_embeddings"], "do_lower_case": False}))
    (out / "1_Pooling").mkdir(exist_ok=True)
    (out / "1_Pooling" / "config.json").write_text(json.dumps(
        {"word_embedding_dimension": shape["hidden_size"], "pooling_mode_mean_tokens": True,
         "pooling_mode_cls_token": False, "pooling_mode_max_tokens": False}))
    (out / "2_Normalize").mkdir(exist_ok=True)
    modules = [
        {"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"},
        {"idx": 1, "name": "1", "path": "1_Pooling", "type": "sentence_transformers.models.Pooling"},
        {"idx": 2, "name": "2", "path": "2_Normalize", "type": "sentence_transformers.models.Normalize"},
    ]
    (out / "modules.json").write_text(json.dumps(modules, indent=1))
    return out


def texts_of(n: int, seq: int, vocab: int) -> list[str]:
    rng = random.Random(0)
    return [" ".join(f"t{rng.randrange(1, vocab)}" for _ in range(seq)) for _ in range(n)]


def run_vkformers(binary: Path, folder: Path, file: Path, a) -> tuple[float | None, np.ndarray | None]:
    rates, first = [], None
    for r in range(a.repeats):
        cmd = [str(binary), "embed", "--model", str(folder), "--file", str(file), "--batch-size", str(a.batch), "--json"]
        if a.vk_device:
            cmd += ["--device", a.vk_device]
        done = subprocess.run(cmd, capture_output=True, text=True)
        if done.returncode != 0:
            print(f"vkformers embed failed ({done.returncode}): {done.stderr[-1500:]}", flush=True)
            return None, None
        out = json.loads(done.stdout)
        rates.append(out["timings"]["texts_per_second"])
        if first is None:
            first = np.array([d["embedding"] for d in out["data"][: a.check]], dtype=np.float64)
        t = out["timings"]
        print(f"  vkformers run {r + 1}: {rates[-1]:,.0f} texts/s "
              f"(of {t['embed_seconds']:.3f} s: waited {t.get('tokenize_wait_seconds', float('nan')):.3f} s "
              f"for the tokenizer, {t.get('device_wait_seconds', float('nan')):.3f} s for the device)", flush=True)
    return statistics.median(rates), first


def torch_encoder(folder: Path, dev: str, batch: int):
    """encode(texts) -> np.ndarray, and the system's name."""
    try:
        from sentence_transformers import SentenceTransformer

        st = SentenceTransformer(str(folder), device=dev, model_kwargs={"torch_dtype": torch.bfloat16})
        return (lambda texts: st.encode(texts, batch_size=batch, convert_to_numpy=True)), "sentence-transformers"
    except ImportError:
        pass
    from transformers import AutoModel, AutoTokenizer

    tok = AutoTokenizer.from_pretrained(str(folder))
    model = AutoModel.from_pretrained(str(folder), torch_dtype=torch.bfloat16).to(dev).eval()

    @torch.inference_mode()
    def encode(texts):
        out = []
        for i in range(0, len(texts), batch):
            enc = tok(texts[i:i + batch], padding=True, truncation=True, return_tensors="pt").to(dev)
            h = model(**enc).last_hidden_state.float()
            m = enc["attention_mask"].unsqueeze(-1).float()
            v = (h * m).sum(1) / m.sum(1).clamp(min=1e-9)
            out.append(torch.nn.functional.normalize(v, dim=-1).cpu())
        return torch.cat(out).numpy()

    return encode, "transformers (mean pool)"


def run_torch(folder: Path, texts: list[str], dev: str, a) -> tuple[float, np.ndarray, str]:
    encode, name = torch_encoder(folder, dev, a.batch)
    encode(texts[: a.batch])  # warm-up
    rates, first = [], None
    for r in range(a.repeats):
        if dev == "cuda":
            torch.cuda.synchronize()
        t0 = time.perf_counter()
        vecs = encode(texts)
        if dev == "cuda":
            torch.cuda.synchronize()
        rates.append(len(texts) / (time.perf_counter() - t0))
        first = np.asarray(vecs[: a.check], dtype=np.float64)
        print(f"  {name} run {r + 1}: {rates[-1]:,.0f} texts/s", flush=True)
    return statistics.median(rates), first, name


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--vkformers", help="vkformers binary (default target/release/vkformers)")
    p.add_argument("--vk-device", help="vkformers --device (index or part of the name)")
    p.add_argument("--batch", type=int, default=128)
    p.add_argument("--seq", type=int, default=128, help="tokens per text")
    p.add_argument("--texts", type=int, default=4096)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--check", type=int, default=8, help="texts whose vectors are compared")
    p.add_argument("--workdir", type=Path, default=C.DEFAULT_WORKDIR)
    p.add_argument("--json", help="write the results here")
    p.add_argument("--dry-run", action="store_true", help="tiny BERT, 64 texts of 16 tokens, CPU torch")
    a = p.parse_args()
    shape = BERT
    if a.dry_run:
        shape, a.seq, a.texts, a.batch, a.repeats = TINY, 16, 64, 16, 1
    dev = C.device_of(a.dry_run)
    binary = C.find_binary(a.vkformers, a.dry_run)
    if binary is None:
        sys.exit("no vkformers binary: build it (cargo build --release -p vkformers-cli) or give --vkformers")
    a.workdir.mkdir(parents=True, exist_ok=True)
    folder = build_folder(a.workdir, shape)
    texts = texts_of(a.texts, a.seq, shape["vocab_size"])
    file = a.workdir / f"embed-texts-{a.texts}x{a.seq}.txt"
    file.write_text("\n".join(texts) + "\n")

    vk_rate, vk_first = run_vkformers(binary, folder, file, a)
    pt_rate, pt_first, pt_name = run_torch(folder, texts, dev, a)
    cos = None
    if vk_first is not None:
        dots = (vk_first * pt_first).sum(1) / (np.linalg.norm(vk_first, axis=1) * np.linalg.norm(pt_first, axis=1))
        cos = float(dots.min())
    print(f"\nBERT-base bf16 ({shape['num_hidden_layers']} layers), {a.texts} texts x {a.seq} tokens, batch {a.batch}")
    rows = [["vkformers", C.fmt_num(vk_rate), C.fmt_num(vk_rate and vk_rate * a.seq), C.ratio(vk_rate, pt_rate)],
            [pt_name, C.fmt_num(pt_rate), C.fmt_num(pt_rate * a.seq), "1.00"]]
    C.print_table(["system", "texts/s", "tokens/s", "x torch"], rows)
    print(f"smallest cosine of the first {a.check} vectors, vkformers vs {pt_name}: "
          f"{'n/a' if cos is None else f'{cos:.5f}'}")
    if a.json:
        Path(a.json).write_text(json.dumps({"vkformers_texts_per_s": vk_rate, "torch_texts_per_s": pt_rate,
                                            "torch_system": pt_name, "batch": a.batch, "seq": a.seq,
                                            "texts": a.texts, "min_cosine": cos}, indent=1))


if __name__ == "__main__":
    main()
