"""Cold start of ``shard``: the C beam planner answers while evolve's numba kernels are not in
the cache, says so, and evolve runs once they are."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from trainscape import dlrm
from trainscape.dlrm import coldstart
from _dlrm_common import write_tiny_scenario


def test_choose_method(monkeypatch):
    monkeypatch.setenv("TRAINSCAPE_COLD_START", "no-background")
    started = []
    monkeypatch.setattr(coldstart, "start_background_compile", lambda: started.append(1))
    monkeypatch.setattr(coldstart, "evolve_ready", lambda: False)
    if not dlrm.native_available():
        assert coldstart.choose_method("evolve", None, False) == "evolve"
        pytest.skip("the C extension is not built: evolve is the only answer (no fallback)")
    assert coldstart.choose_method("evolve", None, False) == "beam"
    assert coldstart.choose_method("evolve", None, True) == "evolve"  # --wait-compile
    assert coldstart.choose_method("evolve", "numba", False) == "evolve"
    assert coldstart.choose_method("greedy", None, False) == "greedy"
    assert not started
    monkeypatch.setenv("TRAINSCAPE_COLD_START", "wait")
    assert coldstart.choose_method("evolve", None, False) == "evolve"
    monkeypatch.setenv("TRAINSCAPE_COLD_START", "background")
    assert coldstart.choose_method("evolve", None, False) == "beam" and started == [1]
    monkeypatch.setattr(coldstart, "evolve_ready", lambda: True)
    assert coldstart.choose_method("evolve", None, False) == "evolve"


def test_ready_after_warm_and_not_without_marker():
    coldstart.warm()  # plans a small scenario with evolve (compiles on an empty cache)
    assert coldstart.evolve_ready()
    marker = coldstart._dirs()[0] / coldstart.MARKER
    marker.unlink()
    try:
        assert not coldstart.evolve_ready()
    finally:
        coldstart.mark_ready()
    assert coldstart.evolve_ready()


def test_shard_reports_the_cold_fallback(tmp_path, monkeypatch):
    if not dlrm.native_available():
        pytest.skip("the C extension is not built: no C fallback to report")
    from trainscape.cli import main as group

    monkeypatch.setenv("TRAINSCAPE_COLD_START", "no-background")
    monkeypatch.setattr(coldstart, "evolve_ready", lambda: False)
    scen = write_tiny_scenario(tmp_path, '[planner]\nmethod = "evolve"\n')
    res = CliRunner().invoke(group, ["shard", str(scen), "--json"])
    assert res.exit_code == 0, res.output
    data = json.loads(res.stdout)
    assert data["method"] == "beam" and data["requested_method"] == "evolve"
    assert "not compiled yet" in data["note"] and "not compiled yet" in res.stderr
    beam = dlrm.plan(dlrm.load(str(scen)), method="beam")
    assert data["step_time_s"] == beam.step_time_s
