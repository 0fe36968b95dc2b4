"""``shard`` progress, time limit and Ctrl-C (issue 14 item 4, issue 17 item 7), and the
beam search's head / greedy tail at scale."""

from __future__ import annotations

import json

import numpy as np
from click.testing import CliRunner

from trainscape import dlrm
from trainscape.cli import shard as shard_cli
from trainscape.dlrm import layout as D
from trainscape.dlrm import planner
from _dlrm_common import write_tiny_scenario


def _invoke(args):
    from trainscape.cli import main

    return CliRunner().invoke(main, ["shard", *args])


def test_quiet_when_piped_and_with_json(tmp_path):
    """CliRunner's streams are not terminals: no progress line, the JSON alone on stdout."""
    scen = write_tiny_scenario(tmp_path)
    res = _invoke([str(scen), "--method", "beam", "--json"])
    assert res.exit_code == 0, res.output
    json.loads(res.output)  # nothing else mixed in
    assert "cand." not in res.output
    res = _invoke([str(scen), "--method", "greedy"])
    assert res.exit_code == 0 and "cand." not in res.output


def test_progress_reports_phases_in_order(tmp_path, monkeypatch):
    """On a terminal the progress line follows the planner: its phases in order, the
    candidates evaluated never falling; the planner's own count at the end."""
    calls = []
    monkeypatch.setattr(shard_cli, "_on_terminal", lambda: True)
    orig = shard_cli._PlanProgress.update

    def spy(self, phase, n):
        calls.append((phase, n))
        orig(self, phase, n)

    monkeypatch.setattr(shard_cli._PlanProgress, "update", spy)
    scen = write_tiny_scenario(tmp_path)
    res = _invoke([str(scen), "--method", "evolve", "--wait-compile", "--iterations", "3000",
                   "--time-limit", "60"])
    assert res.exit_code == 0, res.output
    phases = [p for p, _ in calls]
    order = ["baselines", "balance", "refine", "polish", "done"]
    assert [p for p in order if p in phases] == order
    assert phases.index("baselines") < phases.index("balance") < phases.index("refine") \
        < phases.index("polish") < phases.index("done")
    counts = [n for _, n in calls]
    assert counts == sorted(counts) and counts[-1] > 3000


def test_ctrl_c_exits_130_with_one_line(tmp_path, monkeypatch):
    def interrupted(*a, **k):
        k["progress"]("balance", 10)
        raise KeyboardInterrupt

    monkeypatch.setattr(planner, "plan", interrupted)
    scen = write_tiny_scenario(tmp_path)
    res = _invoke([str(scen), "--method", "greedy"])
    assert res.exit_code == 130
    lines = [ln for ln in res.output.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("shard: interrupted (Ctrl-C) in phase "
                                                   "balance after ")
    assert "no plan written" in lines[0] and "Traceback" not in res.output


def _scenario(n_t, gpus, seed=3):
    rng = np.random.default_rng(seed)
    tables = [{"name": f"t{i}", "rows": int(10 ** rng.uniform(3, 6.5)),
               "dim": int(rng.choice([16, 32, 64, 128])), "pooling": float(rng.uniform(1, 40))}
              for i in range(n_t)]
    return dlrm.load({"model": {"tables": tables, "interaction": "dcn", "dense_arch": [64, 32],
                                "over_arch": [64, 1], "dcn_layers": 1, "dcn_low_rank": 32},
                      "job": {"global_batch": gpus * 128},
                      "cluster": {"preset": "zionex", "gpus": gpus}})


def test_beam_head_and_greedy_tail():
    """With a budget of one beam step per table the whole order is the head (the plain beam);
    with a budget for 5 tables, 5 are placed by the beam (5 x width x candidates evaluations
    at most) and the rest greedily by cost: a complete, valid plan either way, no worse than
    the best greedy baseline once planned."""
    sc = _scenario(40, 16)
    full, n_full = planner.beam(sc, width=4, candidates=4, max_evals=10**6)
    head, n_head = planner.beam(sc, width=4, candidates=4, max_evals=5 * 16)
    assert n_head <= 5 * 16 < n_full
    for p in (full, head):
        dlrm.spec.check_plan_array(sc, p)
        assert dlrm.evaluate(sc, p)["feasible"]
    res = planner.plan(sc, method="beam")
    assert res.step_time_s <= min(res.baselines.values()) * (1 + 1e-12)


def test_beam_honours_the_deadline():
    """A deadline already past: the beam places its first table and hands the rest to the
    greedy tail (one step of evaluations)."""
    sc = _scenario(60, 16)
    p, n = planner.beam(sc, width=8, candidates=8, deadline=0.0)
    dlrm.spec.check_plan_array(sc, p)
    assert n <= 8 * 8
    assert (p[D.PL_KIND] >= 0).all()


def test_balance_under_a_far_deadline_is_the_same_search():
    """The time share only trims temperatures that would not fit: with hours left the
    balancer runs every planned candidate and returns the very plan it returns unbounded; with
    the deadline already past it runs the first temperature alone."""
    import time

    sc = _scenario(30, 16)
    start = planner.greedy(sc, "cost")
    p0, s0, _, n0 = planner.balance(sc, start, 5000, seed=1)
    p1, s1, _, n1 = planner.balance(sc, start, 5000, seed=1,
                                    deadline=time.perf_counter() + 3600.0)
    assert n0 == n1 == 5000 and s0 == s1 and np.array_equal(p0, p1)
    _, _, _, n2 = planner.balance(sc, start, 5000, seed=1, deadline=0.0)
    assert n2 == 1000


def test_ctrl_c_while_reading_exits_130_with_one_line(tmp_path, monkeypatch):
    from trainscape.dlrm import spec

    def interrupted(*a, **k):
        raise KeyboardInterrupt

    monkeypatch.setattr(spec, "load", interrupted)
    res = _invoke([str(write_tiny_scenario(tmp_path))])
    assert res.exit_code == 130
    assert [ln for ln in res.output.splitlines() if ln.strip()] == [
        "shard: interrupted (Ctrl-C); no plan written"]


def test_text_report_of_a_large_plan_is_cut_with_a_summary(tmp_path, monkeypatch):
    """Past PLAN_ROWS tables the text report prints the first ones and a count per type and
    tier of all of them; the JSON keeps every table."""
    monkeypatch.setattr(shard_cli, "PLAN_ROWS", 5)
    scen = write_tiny_scenario(tmp_path)
    res = _invoke([str(scen), "--method", "greedy"])
    assert res.exit_code == 0, res.output
    assert "first 5 of 12 tables" in res.output
    summary = [ln for ln in res.output.splitlines() if ln.startswith("all tables: ")]
    assert len(summary) == 1
    counts = [int(x.split()[0]) for x in summary[0][len("all tables: "):].split(", ")]
    assert sum(counts) == 12
    assert "c11" not in res.output.split("first 5 of 12")[1].split("all tables")[0]
    res = _invoke([str(scen), "--method", "greedy", "--json"])
    assert len(json.loads(res.output)["plan"]) == 12
