#!/usr/bin/env python3
"""Regenerate the golden files: reference outputs for the example scenarios.

    python scripts/regen_golden.py          # rewrite tests/golden/*.json
    python scripts/regen_golden.py --check  # exit 1 if any differs (what tests/test_golden.py does)

For each LLM example, the pure-Python reference costs its ``[config]`` and 24 configurations
sampled (seed 0) from its ``[space]``; every output column is stored. A change to the model then
shows up as a reviewed diff of these files in the commit that makes it.
"""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

import numpy as np  # noqa: E402

import trainscape  # noqa: E402
from trainscape import layout as L  # noqa: E402
from trainscape.spec import pack, pack_configs  # noqa: E402

GOLDEN = ROOT / "tests" / "golden"
SAMPLES = 24


def _number(x: float):
    return x if math.isfinite(x) else str(x)  # JSON has no inf


def golden(example: Path) -> dict:
    sc = trainscape.load(example)
    sys_, mdl, job = pack(sc)
    cfg = np.concatenate([pack_configs([sc.config], gpus=sc.cluster.gpus),
                          sc.space.sample(SAMPLES, seed=0)], axis=1)
    out = trainscape.evaluate_columns(sys_, mdl, job, cfg, backend="python")
    return {
        "scenario": example.name,
        "configs": [{f: int(cfg[i, j]) for i, f in enumerate(L.CONFIG_FIELDS)}
                    for j in range(cfg.shape[1])],
        "outputs": [{f: _number(float(out[i, j])) for i, f in enumerate(L.OUTPUT_FIELDS)}
                    for j in range(cfg.shape[1])],
    }


def render(example: Path) -> str:
    return json.dumps(golden(example), indent=1, sort_keys=False) + "\n"


def examples() -> list[Path]:
    return sorted((ROOT / "examples").glob("*.toml"))


def main() -> int:
    check = "--check" in sys.argv
    stale = []
    for ex in examples():
        path = GOLDEN / (ex.stem + ".json")
        text = render(ex)
        if check:
            if not path.exists() or path.read_text() != text:
                stale.append(path.name)
        else:
            path.write_text(text)
            print(f"wrote {path}")
    if stale:
        print("golden files differ from the model: " + ", ".join(stale)
              + " (review the change, then run python scripts/regen_golden.py)", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
