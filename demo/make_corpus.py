#!/usr/bin/env python3
"""Writes demo/corpus.jsonl and demo/eval.jsonl: the demo's text, taken from this repository's own
docs and Rust sources, as `{"text": ...}` rows of about 1,500 characters cut at blank lines; every
EVAL_EVERY-th row is held out for evaluation. Rerun it to refresh the files; the demo itself reads
only the committed files (no Python at run time)."""

import json
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
ROW_CHARS = 1500
MAX_CHARS = 400_000
EVAL_EVERY = 25


def sources() -> list[Path]:
    docs = [REPO / "README.md", *sorted((REPO / "tools").rglob("README.md"))]
    code = sorted(p for p in (REPO / "crates").rglob("*.rs") if "/tests/" not in str(p))
    return [p for p in docs + code if p.is_file()]


def rows() -> list[str]:
    out, total = [], 0
    for path in sources():
        row = ""
        for para in path.read_text(encoding="utf-8").split("\n\n"):
            if row and len(row) + len(para) > ROW_CHARS:
                out.append(row)
                row = ""
            row = f"{row}\n\n{para}" if row else para
        if row:
            out.append(row)
        total = sum(len(r) for r in out)
        if total >= MAX_CHARS:
            break
    return out


if __name__ == "__main__":
    data = rows()
    held = [r for i, r in enumerate(data) if i % EVAL_EVERY == EVAL_EVERY - 1]
    train = [r for i, r in enumerate(data) if i % EVAL_EVERY != EVAL_EVERY - 1]
    for name, part in (("corpus.jsonl", train), ("eval.jsonl", held)):
        target = REPO / "demo" / name
        target.write_text("".join(json.dumps({"text": r}) + "\n" for r in part), encoding="utf-8")
        print(f"{target}: {len(part)} rows, {sum(len(r) for r in part)} characters")
