"""Sensitivity grid of the cross-site tier (issue 13 item 7): the speedup of the best layout of
the space over the scenario's [config] across the outermost tier's bandwidth x latency."""

from __future__ import annotations

import copy
import csv
import json

import numpy as np
import pytest
from click.testing import CliRunner
from rich.console import Console

import trainscape
from trainscape import layout as L
from trainscape.cli import main
from trainscape.explore.sensitivity import (explore_sensitivity, plot_sensitivity,
                                             sensitivity_grid, sensitivity_table, write_csv)
from trainscape.spec.errors import ScenarioError

from _explore_common import SMALL

PNG = b"\x89PNG\r\n\x1a\n"

# A layout whose data-parallel group spans the outer ("dc") tier: tp 2 x pp 2 inside a node,
# dp 8 over the 4 nodes; DP overlap off so its all-reduce is on the critical path.
CONFIG = {"tp": 2, "cp": 1, "pp": 2, "mbs": 1, "schedule": "1f1b", "recompute": "none",
          "zero": 1, "sp": True, "order": "tp-pp-dp", "dp_overlap": False}
BWS = (5.0, 12.5, 25.0, 50.0)
LATS = (10.0, 1000.0, 20000.0)


def raw(**space):
    r = copy.deepcopy(SMALL)
    r["config"] = dict(CONFIG)
    r["space"].update(space)
    r["space"]["dp_overlap"] = [True, False]
    return r


@pytest.fixture(scope="module")
def grid():
    sc = trainscape.load(raw())
    return sc, sensitivity_grid(sc, bandwidth_GBps=BWS, latency_us=LATS)


def test_best_layout_is_never_slower_than_the_config_it_competes_with(grid):
    sc, g = grid
    assert g.config_in_space  # the config is a point of the swept space ...
    assert g.speedup.shape == (len(BWS), len(LATS))
    assert np.all(g.config_feasible)  # ... and fits, so the best can only match or beat it
    assert np.all(np.isfinite(g.speedup))
    assert np.all(g.speedup >= 1.0)
    np.testing.assert_allclose(g.speedup, g.config_step_s / g.best_step_s)


def test_one_cell_matches_a_brute_force_minimum(grid):
    """The slowest-link corner: the sweep's best equals the minimum feasible step of every
    configuration of the space evaluated one by one with the cell's tier values."""
    from trainscape.api import evaluate_columns
    from trainscape.space import design_space
    from trainscape.spec.pack import pack

    sc, g = grid
    cell = trainscape.load(sc, [f"cluster.tiers[1].bandwidth_GBps={BWS[0]}",
                                f"cluster.tiers[1].latency_us={LATS[-1]}"])
    space = design_space(cell)
    cfg = space.enumerate()
    out = evaluate_columns(*pack(cell), cfg)
    feas = out[L.OUT_FEASIBLE] == 1.0
    step = np.where(feas, out[L.OUT_STEP_TIME_S], np.inf)
    j = int(np.argmin(step))
    assert g.best_step_s[0, -1] == pytest.approx(step[j], rel=1e-12)
    assert trainscape.evaluate(cell).step_time_s == pytest.approx(g.config_step_s[0, -1],
                                                                  rel=1e-12)
    # the layout reported for the cell is one that achieves that minimum
    best = trainscape.evaluate(cell, config=g.best_layout[0][-1])
    assert best.step_time_s == pytest.approx(step[j], rel=1e-12)


def test_config_step_rises_as_cross_site_bandwidth_falls(grid):
    _, g = grid
    # rows are sorted by bandwidth ascending: every column strictly decreases down the rows
    assert np.all(np.diff(g.config_step_s, axis=0) < 0)
    # and more latency never makes the config faster
    assert np.all(np.diff(g.config_step_s, axis=1) >= 0)


def test_default_axes_scale_the_scenario_link():
    sc = trainscape.load(raw(tp=[2], pp=[2], cp=[1], mbs=[1], vpp=[1], schedule=["1f1b"],
                             recompute=["none"], zero=[1], sp=[True], order=["tp-pp-dp"]))
    g = sensitivity_grid(sc)
    assert g.bandwidth_GBps == (50 / 8, 25.0, 50.0, 100.0)
    assert g.latency_us == (64.0, 1000.0, 5000.0, 20000.0)
    assert g.tier == 1 and g.tier_name == "dc"


def test_table_csv_and_plot(grid, tmp_path):
    _, g = grid
    con = Console(record=True, width=220)
    con.print(sensitivity_table(g))
    text = con.export_text()
    assert "[config]" in text and f"{g.speedup[0, 0]:.2f}x" in text
    p = plot_sensitivity(g, tmp_path / "s.png")
    assert p.read_bytes()[:8] == PNG and p.stat().st_size > 5000
    rows = list(csv.DictReader(open(write_csv(g, tmp_path / "s.csv"))))
    assert len(rows) == len(BWS) * len(LATS)
    assert float(rows[0]["speedup"]) == pytest.approx(g.speedup[0, 0])
    assert {"bandwidth_GBps", "latency_us", "best_tp", "best_order", "config_step_s"} <= set(rows[0])


def test_fewer_than_two_tiers_and_bad_axes_are_refused():
    r = raw()
    r["cluster"]["tiers"] = r["cluster"]["tiers"][:1]
    r["cluster"]["gpus"] = 8
    r["config"].update(tp=2, pp=2)
    with pytest.raises(ScenarioError, match="cluster.tiers"):
        sensitivity_grid(trainscape.load(r))
    sc = trainscape.load(raw())
    with pytest.raises(ScenarioError, match="sensitivity.latency_us"):
        sensitivity_grid(sc, latency_us=[float("nan")])


def test_explore_hook_skips_over_budget_and_when_disabled(tmp_path):
    sc = trainscape.load(raw())
    con = Console(record=True, width=200)
    assert explore_sensitivity(sc, tmp_path, con, None, 0.0) == {}
    assert "sensitivity grid skipped" in con.export_text()
    assert explore_sensitivity(sc, tmp_path, con, False, 1e9) == {}
    assert not (tmp_path / "sensitivity.csv").exists()


def test_explore_cli_writes_the_grid(tmp_path):
    path = tmp_path / "small.json"
    path.write_text(json.dumps(raw()))
    out = tmp_path / "rep"
    r = CliRunner().invoke(main, ["explore", str(path), "--out-dir", str(out), "--top", "3",
                                  "--sensitivity"], catch_exceptions=False)
    assert r.exit_code == 0, r.output
    assert "Sensitivity to tier 1 'dc'" in r.output
    assert (out / "sensitivity.png").read_bytes()[:8] == PNG
    rows = list(csv.DictReader(open(out / "sensitivity.csv")))
    assert len(rows) == 16 and all(float(x["speedup"]) >= 1.0 for x in rows)
    out2 = tmp_path / "rep2"
    r = CliRunner().invoke(main, ["explore", str(path), "--out-dir", str(out2), "--top", "3",
                                  "--no-sensitivity"], catch_exceptions=False)
    assert r.exit_code == 0, r.output
    assert not (out2 / "sensitivity.csv").exists() and "Sensitivity" not in r.output
