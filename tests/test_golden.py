"""Golden files: the reference's outputs for the example scenarios, committed.

A change to the model changes these numbers; the commit that makes it must regenerate them
(``python scripts/regen_golden.py``) so the change shows up as a reviewed diff. The test
re-evaluates the stored configurations (no re-sampling), so it does not depend on the RNG.
"""

import json
import math
from pathlib import Path

import numpy as np
import pytest

import trainscape
from trainscape import layout as L
from trainscape.spec import pack

ROOT = Path(__file__).resolve().parents[1]
GOLDEN = sorted((ROOT / "tests" / "golden").glob("*.json"))


def test_every_example_has_a_golden_file():
    examples = {p.stem for p in (ROOT / "examples").glob("*.toml")}
    assert examples == {p.stem for p in GOLDEN}


@pytest.mark.parametrize("path", GOLDEN, ids=lambda p: p.stem)
def test_reference_outputs_equal_the_golden_file(path):
    data = json.loads(path.read_text())
    sc = trainscape.load(ROOT / "examples" / data["scenario"])
    sys_, mdl, job = pack(sc)
    cfg = np.array([[c[f] for c in data["configs"]] for f in L.CONFIG_FIELDS], dtype=np.int32)
    out = trainscape.evaluate_columns(sys_, mdl, job, cfg, backend="python")
    for j, want in enumerate(data["outputs"]):
        for i, field in enumerate(L.OUTPUT_FIELDS):
            w = float(want[field])
            got = out[i, j]
            if math.isinf(w):
                assert got == w, (path.name, j, field)
            else:
                assert got == pytest.approx(w, rel=1e-12, abs=1e-300), (
                    f"{path.name}: config {j} {field} = {got!r}, golden {w!r}; if the model "
                    "change is intended, run python scripts/regen_golden.py and review the diff")
