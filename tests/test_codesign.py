"""Co-design: hardware axes in [space] (gpu, gpus, any --set path), every answer carries its
hardware values, each point's answer is the layout search of the scenario with those values
set, and the time x cost front holds exactly the points no other point beats on both."""

from __future__ import annotations

import copy

import numpy as np
import pytest

import trainscape
from trainscape import layout as L
from trainscape.explore.hardware import hardware_points, run_codesign, time_cost_front
from trainscape.explore.sweep import run_sweep
from trainscape.spec import ScenarioError

from _explore_common import SMALL


def _raw(**hw):
    raw = copy.deepcopy(SMALL)
    raw["space"].update(hw)
    return raw


def test_space_takes_gpu_gpus_and_paths():
    sc = trainscape.load(_raw(gpu=["h100-sxm-80gb", "a100-sxm-80gb"], gpus=[16, 32],
                              **{"cluster.tiers[1].bandwidth_GBps": [25, 50]}))
    assert sc.space.hardware == {"cluster.gpu": ["h100-sxm-80gb", "a100-sxm-80gb"],
                                 "cluster.gpus": [16, 32],
                                 "cluster.tiers[1].bandwidth_GBps": [25, 50]}
    assert "hardware" not in sc.space.axes()  # config axes only
    pts = hardware_points(sc)
    assert len(pts) == 8
    assert {(p.scenario.cluster.gpus, p.scenario.cluster.tiers[1].bandwidth_GBps)
            for p in pts} == {(16, 25), (16, 50), (32, 25), (32, 50)}
    assert {p.scenario.cluster.gpu.hbm_gb for p in pts} == {80.0}


@pytest.mark.parametrize("hw, path", [
    ({"cluster.tiers[1].bandwidth_GBps": [50, -1]}, 'space."cluster.tiers[1].bandwidth_GBps"'),
    ({"gpu": ["h100-sxm-80gb", "no-such-gpu"]}, 'space."cluster.gpu"'),
    ({"cluster.tiers[0].size": 8}, 'space."cluster.tiers[0].size"'),
])
def test_bad_hardware_values_name_their_path(hw, path):
    with pytest.raises(ScenarioError) as e:
        hardware_points(trainscape.load(_raw(**hw)))
    assert str(e.value).startswith(path)


def test_each_point_is_the_sweep_of_the_scenario_with_its_values():
    hw = {"gpus": [16, 32], "cluster.tiers[1].bandwidth_GBps": [10, 100]}
    sc = trainscape.load(_raw(**hw))
    res = run_codesign(sc, top=5, backend="numba", workers=1)
    rows = res.records("top")
    assert rows and all("cluster.gpus" in r and "cluster.tiers[1].bandwidth_GBps" in r
                        for r in rows)
    for pt, r in zip(res.points, res.results):
        direct = trainscape.load(copy.deepcopy(SMALL), overrides=[
            f"cluster.gpus={pt.values['cluster.gpus']}",
            f"cluster.tiers[1].bandwidth_GBps={pt.values['cluster.tiers[1].bandwidth_GBps']}"])
        want = run_sweep(direct, top=5, backend="numba", workers=1)
        assert np.array_equal(r.top.out, want.top.out)
        got = [x for x in rows if x["point"] == res.points.index(pt)]
        assert [x["step_time_s"] for x in got] == list(want.top.out[L.OUT_STEP_TIME_S])


def test_time_cost_front_is_the_set_nobody_beats():
    rng = np.random.default_rng(4)
    step = rng.uniform(1, 10, 60).round(1)
    cost = rng.uniform(1, 10, 60).round(1)
    cost[:5] = 0.0  # unknown price: never on the front
    front = set(time_cost_front(step, cost))
    known = [i for i in range(60) if cost[i] > 0]
    for i in known:
        beaten = any(step[j] <= step[i] and cost[j] <= cost[i]
                     and (step[j] < step[i] or cost[j] < cost[i] or j < i)
                     for j in known if j != i)
        assert (i in front) == (not beaten)
    assert not front & set(range(5))


def test_front_on_real_points_more_gpus_faster_not_cheaper():
    """16 vs 32 GPUs at the same price per GPU-hour: 32 is faster; cost per step is GPUs x
    step time, so it is on the front unless it is also cheaper."""
    sc = trainscape.load(_raw(gpus=[16, 32]))
    res = run_codesign(sc, top=3, backend="numba", workers=1)
    s = [r.top.out[L.OUT_STEP_TIME_S, 0] for r in res.results]
    c = [r.top.out[L.OUT_COST_PER_STEP_USD, 0] for r in res.results]
    assert s[1] < s[0]
    assert c[0] == pytest.approx(s[0] * 16 * 12.29 / 3600)
    assert sorted(res.front) == sorted(time_cost_front(np.array(s), np.array(c)))


def test_explore_cli_with_hardware_axes_writes_the_report(tmp_path):
    import json

    from click.testing import CliRunner

    from trainscape.cli import main
    from trainscape.explore.report import read_records

    path = tmp_path / "hw.json"
    raw = _raw(gpus=[16, 32], **{"cluster.tiers[0].size": [4, 8]})
    raw["cluster"]["tiers"][1]["size"] = 8  # room for 32 GPUs in nodes of 4
    path.write_text(json.dumps(raw))
    out = tmp_path / "rep"
    r = CliRunner().invoke(main, ["explore", str(path), "--out-dir", str(out), "--top", "3"])
    assert r.exit_code == 0, r.output
    assert "best layout per hardware point" in r.output
    best = read_records(out / "codesign_best.csv")
    assert len(best) == 4
    assert {(b["cluster.gpus"], b["cluster.tiers[0].size"]) for b in best} == {
        (16, 4), (16, 8), (32, 4), (32, 8)}
    assert all(b["cost_per_step_usd"] > 0 and b["tokens_per_joule"] > 0 for b in best)
    assert (out / "time_cost.png").stat().st_size > 0
    assert any(b["on_time_cost_front"] for b in best)


def test_explore_cli_bad_hardware_axis_exits_2(tmp_path):
    import json

    from click.testing import CliRunner

    from trainscape.cli import main

    path = tmp_path / "hw.json"
    path.write_text(json.dumps(_raw(**{"cluster.tiers[0].bandwidth_GBps": [450, "fast"]})))
    r = CliRunner().invoke(main, ["explore", str(path), "--out-dir", str(tmp_path / "o")])
    assert r.exit_code == 2
    assert 'space."cluster.tiers[0].bandwidth_GBps"' in r.output
    assert "Traceback" not in r.output


def test_sweep_with_hardware_axes_says_it_searches_the_base_hardware(tmp_path):
    import json

    from click.testing import CliRunner

    from trainscape.cli import main

    path = tmp_path / "hw.json"
    path.write_text(json.dumps(_raw(gpus=[16, 32])))
    r = CliRunner().invoke(main, ["sweep", str(path), "--top", "2"])
    assert r.exit_code == 0
    assert "hardware axes (gpus)" in r.output


def test_hbm_axis_and_cost_objective():
    """HBM capacity is a hardware axis like any numeric field; a cost objective ranks by
    cost per step (on one hardware point the same order as step time)."""
    sc = trainscape.load(_raw(**{"cluster.gpu.hbm_gb": [40, 80]}))
    pts = hardware_points(sc)
    assert [p.scenario.cluster.gpu.hbm_gb for p in pts] == [40, 80]
    a = run_sweep(pts[1].scenario, top=5, objective="cost", backend="numba", workers=1)
    b = run_sweep(pts[1].scenario, top=5, objective="step_time_s", backend="numba", workers=1)
    assert np.array_equal(a.top.index, b.top.index)
    assert (np.diff(a.top.out[L.OUT_COST_PER_STEP_USD]) >= 0).all()


def test_offload_is_an_axis_through_its_path():
    """``"job.offload_optimizer" = [false, true]`` in [space]: each point's best layout; the
    offloaded one keeps no optimizer state in HBM."""
    raw = _raw(**{"job.offload_optimizer": [False, True]})
    raw["cluster"]["host_to_device_GBps"] = 64.0
    raw["cluster"]["host_memory_GBps"] = 76.8
    res = run_codesign(trainscape.load(raw), top=3, backend="numba", workers=1)
    assert [p.values["job.offload_optimizer"] for p in res.points] == [False, True]
    on, off = res.results[1].top.out, res.results[0].top.out
    assert (on[L.OUT_MEM_OPTIMIZER_GIB] == 0).all() and (off[L.OUT_MEM_OPTIMIZER_GIB] > 0).all()
