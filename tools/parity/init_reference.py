#!/usr/bin/env python3
"""Init references for `init_from_config` (`vkformers train --init-from-config`).

Offline, with the pinned versions of requirements.txt. For each fixture config under
tests/fixtures/<name>/config.json, transformers builds the model from the config alone (its
`_init_weights`, seeded) and this script records, per stored matrix (2-D tensors of at least 256
values), the standard deviation of its initial values. The Rust test compares the std of each
matrix that vkformers draws with this one, so per-tensor rules (GPT-2's residual projections at
initializer_range / sqrt(2 * n_layer), nanochat's o_proj) are checked against transformers itself
rather than restated in the test.

Writes tests/fixtures_init/init_std.json: {"<fixture>": {"<stored name>": std, ...}, ...}.

  init_reference.py            all fixtures listed in FIXTURES
  init_reference.py --out DIR  somewhere else
"""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path

os.environ["HF_HUB_OFFLINE"] = "1"

import torch  # noqa: E402
import transformers  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
# Families with a per-tensor init rule, and plain ones beside them (every matrix at one std).
FIXTURES = ["llama", "gpt2", "gpt_bigcode", "gpt-sw3", "nanochat", "gpt_neo", "openai-gpt", "gptj"]
MIN_VALUES = 256


def stds(name: str) -> dict[str, float]:
    config = transformers.AutoConfig.from_pretrained(ROOT / "tests/fixtures" / name)
    torch.manual_seed(0)
    model = transformers.AutoModelForCausalLM.from_config(config)
    out = {}
    for key, t in model.state_dict().items():
        if t.dim() == 2 and t.numel() >= MIN_VALUES and t.is_floating_point():
            out[key] = round(float(t.float().std()), 6)
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", type=Path, default=ROOT / "tests/fixtures_init")
    args = ap.parse_args()
    assert transformers.__version__ == "5.24.0", transformers.__version__
    result = {name: stds(name) for name in FIXTURES}
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "init_std.json").write_text(json.dumps(result, indent=1, sort_keys=True) + "\n")


if __name__ == "__main__":
    main()
