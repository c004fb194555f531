#!/usr/bin/env python3
"""Writes tests/fixtures_rope/inv_freq.json: transformers' own inverse frequencies and attention
factors for each rope_type, so the Rust implementation is checked against them without Python.
Same pinned venv as make_fixtures.py (see tools/parity/README.md)."""
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from make_fixtures import check_versions  # noqa: E402

import torch  # noqa: E402
from transformers import LlamaConfig  # noqa: E402
from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS  # noqa: E402

BASE = dict(hidden_size=64, num_attention_heads=4, head_dim=16, max_position_embeddings=256)
CASES = {
    "linear": {"rope_type": "linear", "rope_theta": 10000.0, "factor": 4.0},
    "dynamic": {"rope_type": "dynamic", "rope_theta": 10000.0, "factor": 2.0},
    "llama3": {"rope_type": "llama3", "rope_theta": 500000.0, "factor": 8.0, "low_freq_factor": 1.0,
               "high_freq_factor": 4.0, "original_max_position_embeddings": 64},
    "yarn": {"rope_type": "yarn", "rope_theta": 10000.0, "factor": 4.0, "original_max_position_embeddings": 64},
    "yarn_mscale": {"rope_type": "yarn", "rope_theta": 10000.0, "factor": 4.0, "original_max_position_embeddings": 64,
                    "mscale": 0.707, "mscale_all_dim": 0.707, "beta_fast": 32.0, "beta_slow": 1.0},
    "longrope": {"rope_type": "longrope", "rope_theta": 10000.0, "original_max_position_embeddings": 64,
                 "short_factor": [1.0, 1.1, 1.3, 1.6, 2.0, 2.5, 3.1, 3.8],
                 "long_factor": [1.0, 1.5, 2.5, 4.0, 6.0, 8.5, 11.5, 15.0]},
}


def main() -> None:
    check_versions()
    out = {}
    for name, params in CASES.items():
        cfg = LlamaConfig(**BASE, rope_parameters=params)
        inv, factor = ROPE_INIT_FUNCTIONS[params["rope_type"]](cfg, torch.device("cpu"))
        out[name] = {"config": {**BASE, "rope_parameters": params}, "inv_freq": [float(v) for v in inv.float()],
                     "attention_factor": float(factor)}
    path = Path(__file__).resolve().parent.parent.parent / "tests" / "fixtures_rope" / "inv_freq.json"
    path.write_text(json.dumps(out, indent=1, sort_keys=True) + "\n")
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
