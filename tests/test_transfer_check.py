"""scripts/transfer_check.py: the published runs on GPUs without a fit of their own are costed
with the calibrated_from transfer, each with its own layout; nothing is fitted on them."""

from __future__ import annotations

import csv
import importlib.util
import json
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def load_script(monkeypatch):
    from trainscape.calibration import published

    # the script points more GPU ids at a cluster preset: keep that out of the other tests
    monkeypatch.setattr(published, "GPU_CLUSTER", dict(published.GPU_CLUSTER))
    spec = importlib.util.spec_from_file_location("transfer_check",
                                                  ROOT / "scripts" / "transfer_check.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_every_row_is_costed_or_skipped_with_a_reason(capsys, monkeypatch):
    tc = load_script(monkeypatch)
    monkeypatch.setattr("sys.argv", ["transfer_check.py", "--json"])
    assert tc.main() == 0
    out = json.loads(capsys.readouterr().out)
    with open(tc.DEFAULT, newline="") as f:
        cases = [row["case"] for row in csv.DictReader(f)]
    costed = [r["case"] for r in out["rows"]]
    skipped = [s["case"] for s in out["skipped"]]
    assert sorted(costed + skipped) == sorted(cases)
    assert all(s["why"] for s in out["skipped"])
    # the community torchtitan H200 rows: PyTorch FSDP, per-op selective checkpointing, fit
    h200 = [r for r in out["rows"] if r["gpu"] == "h200-141gb"]
    assert len(h200) == 2
    for r in h200:
        assert r["stack"] == "pytorch-fsdp" and r["config"]["recompute"] == "op_selective"
        assert r["config"]["zero"] == 3 and r["feasible"]
    # a printed FSDP degree without ZeRO text is fully sharded: Llama 3 8B FP8 on 8 H100 fits
    llama8 = [r for r in out["rows"] if r["case"] in ("nemo2511_llama3-8b_fp8_8",
                                                       "nemo2509_llama3-8b_fp8_8")]
    assert len(llama8) == 2 and all(r["feasible"] and r["config"]["zero"] == 3 for r in llama8)


def test_a_missing_file_exits_2(capsys, monkeypatch):
    tc = load_script(monkeypatch)
    monkeypatch.setattr("sys.argv", ["transfer_check.py", "/nonexistent/runs.csv"])
    assert tc.main() == 2
    err = capsys.readouterr().err
    assert "/nonexistent/runs.csv" in err and "Traceback" not in err
