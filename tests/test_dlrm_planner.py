"""Planner: O(1) move scores equal the full evaluation; planners return valid plans no worse
than the greedy baselines; the `shard` command."""

from __future__ import annotations

import json
import math

import click
import numpy as np
import pytest
from click.testing import CliRunner
from hypothesis import given, settings
from hypothesis import strategies as st

from trainscape import dlrm
from trainscape.dlrm import layout as D
from trainscape.dlrm import planner

TIERS = [
    {"name": "node", "size": 4, "bandwidth_GBps": 300.0, "latency_us": 2.0, "efficiency": 0.9},
    {"name": "pod", "size": 2, "bandwidth_GBps": 50.0, "latency_us": 8.0, "efficiency": 0.8},
    {"name": "dc", "size": 3, "bandwidth_GBps": 25.0, "latency_us": 20.0,
     "oversubscription": 2.0},
]


def make(seed, gpus=20, n_t=30, ddr=64.0):
    rng = np.random.default_rng(seed)
    tables = [{"name": f"t{i}", "rows": int(10 ** rng.uniform(3, 7.3)),
               "dim": int(rng.choice([16, 32, 64, 128])),
               "pooling": float(rng.uniform(1, 40)), "hit_rate": float(rng.uniform(0.3, 1))}
              for i in range(n_t)]
    raw = {"model": {"tables": tables, "interaction": "dcn", "dense_arch": [128, 64],
                     "over_arch": [256, 1], "dcn_layers": 2, "dcn_low_rank": 64},
           "job": {"global_batch": gpus * 256, "comm_dtype": "fp16"},
           "cluster": {"gpu": "a100-sxm-40gb", "gpus": gpus, "tiers": TIERS,
                       "host_ddr_gb": ddr, "host_to_device_GBps": 32.0}}
    return dlrm.load(raw)


@pytest.mark.parametrize("backend", ["numba", "c"])
@settings(max_examples=15, deadline=None)
@given(seed=st.integers(0, 10**6), gpus=st.integers(2, 24), ddr=st.sampled_from([1.0, 512.0]))
def test_incremental_move_score_equals_full_evaluation(backend, seed, gpus, ddr):
    from trainscape.dlrm.incremental import score_moves

    sc = make(seed, gpus=gpus, ddr=ddr)
    rng = np.random.default_rng(seed)
    plan = np.zeros((D.N_PLAN, sc.n_tables), np.int32)
    plan[D.PL_SHARDS] = 1
    plan[D.PL_RANK] = rng.integers(0, gpus, sc.n_tables)
    plan[D.PL_TIER] = rng.choice([0, 0, 0, 1, 2], sc.n_tables)
    # a few non-movable tables of the other kinds around the table-wise ones
    plan[D.PL_KIND, :3] = [D.SH_RW, D.SH_TWRW, D.SH_DP]
    moves = np.stack([rng.integers(3, sc.n_tables, 40), rng.integers(0, gpus, 40),
                      rng.integers(0, 3, 40)], axis=1).astype(np.int64)
    moved = np.repeat(plan[None], len(moves), axis=0)
    for k, (t, b, tier) in enumerate(moves):
        moved[k, D.PL_RANK, t] = b
        moved[k, D.PL_TIER, t] = tier
    full = dlrm.evaluate_plans(sc, moved, backend="python")
    expect = np.where(full[D.DO_FEASIBLE] > 0, full[D.DO_STEP_TIME_S], np.inf)
    got = score_moves(sc.sys, sc.job, np.ascontiguousarray(sc.tables), plan, moves, backend)
    assert np.array_equal(np.isinf(got), np.isinf(expect))
    fin = np.isfinite(expect)
    np.testing.assert_allclose(got[fin], expect[fin], rtol=1e-9)


@pytest.mark.parametrize("backend", ["numba", "c"])
@settings(max_examples=15, deadline=None)
@given(seed=st.integers(0, 10**6), gpus=st.integers(2, 24), ddr=st.sampled_from([1.0, 512.0]))
def test_incremental_swap_and_tier_move_scores_equal_full_evaluation(backend, seed, gpus, ddr):
    from trainscape.dlrm.incremental import score_candidates

    sc = make(seed, gpus=gpus, ddr=ddr)
    rng = np.random.default_rng(seed + 1)
    plan = np.zeros((D.N_PLAN, sc.n_tables), np.int32)
    plan[D.PL_SHARDS] = 1
    plan[D.PL_RANK] = rng.integers(0, gpus, sc.n_tables)
    plan[D.PL_TIER] = rng.choice([0, 0, 0, 1, 2], sc.n_tables)
    plan[D.PL_KIND, :3] = [D.SH_RW, D.SH_TWRW, D.SH_DP]
    n = 60
    cand = np.stack([rng.integers(3, sc.n_tables, n), rng.integers(0, gpus, n),
                     np.where(rng.random(n) < 0.5, rng.integers(3, sc.n_tables, n), -1),
                     rng.integers(0, 3, n)], axis=1).astype(np.int64)
    moved = np.repeat(plan[None], n, axis=0)
    for k, (t, b, u, tier) in enumerate(cand):
        if u >= 0:  # swap ranks, tiers stay with their tables
            moved[k, D.PL_RANK, t], moved[k, D.PL_RANK, u] = plan[D.PL_RANK, u], plan[D.PL_RANK, t]
        else:  # move, possibly with a tier change
            moved[k, D.PL_RANK, t] = b
            moved[k, D.PL_TIER, t] = tier
    full = dlrm.evaluate_plans(sc, moved, backend="python")
    expect = np.where(full[D.DO_FEASIBLE] > 0, full[D.DO_STEP_TIME_S], np.inf)
    got = score_candidates(sc.sys, sc.job, np.ascontiguousarray(sc.tables), plan, cand,
                           backend)
    assert np.array_equal(np.isinf(got), np.isinf(expect))
    fin = np.isfinite(expect)
    np.testing.assert_allclose(got[fin], expect[fin], rtol=1e-9)


@settings(max_examples=25, deadline=None)
@given(seed=st.integers(0, 10**6), gpus=st.integers(1, 24), ddr=st.sampled_from([1.0, 512.0]),
       n_t=st.integers(1, 30))
def test_no_plan_beats_the_lower_bound(seed, gpus, ddr, n_t):
    sc = make(seed, gpus=gpus, n_t=n_t, ddr=ddr)
    rng = np.random.default_rng(seed)
    n = 200
    plans = np.zeros((n, D.N_PLAN, n_t), np.int32)
    plans[:, D.PL_KIND] = rng.integers(0, 5, (n, n_t))
    plans[:, D.PL_RANK] = rng.integers(0, gpus, (n, n_t))
    plans[:, D.PL_TIER] = rng.integers(0, 3, (n, n_t))
    plans[:, D.PL_SHARDS] = 1
    dim = sc.tables[D.TAB_DIM].astype(int)
    for p in range(n):
        for i in range(n_t):
            if plans[p, D.PL_KIND, i] == D.SH_CW:
                ks = [k for k in (1, 2, 4, 8, 16) if dim[i] % k == 0 and k <= gpus]
                plans[p, D.PL_SHARDS, i] = rng.choice(ks)
                plans[p, D.PL_STRIDE, i] = rng.integers(0, gpus + 1)
    # plus the greedy plans and all-data-parallel / all-row-wise plans
    extra = [planner.greedy(sc, k) for k in planner.GREEDY_KEYS]
    for kind in (D.SH_DP, D.SH_RW, D.SH_TWRW):
        q = np.zeros((D.N_PLAN, n_t), np.int32)
        q[D.PL_SHARDS] = 1
        q[D.PL_KIND] = kind
        extra.append(q)
    plans = np.concatenate([plans, np.stack(extra)])
    out = dlrm.evaluate_plans(sc, plans, backend="c")
    ok = out[D.DO_FEASIBLE] > 0
    lb = planner.lower_bound(sc)
    assert lb > 0
    assert np.all(out[D.DO_STEP_TIME_S, ok] >= lb * (1 - 1e-12))


def test_planners_valid_and_no_worse_than_greedy():
    sc = make(3, gpus=16, n_t=60, ddr=512.0)
    results = {m: planner.plan(sc, m, iterations=20000) for m in planner.METHODS}
    best_greedy = min(results["greedy"].baselines.values())
    assert math.isfinite(best_greedy)
    for m, r in results.items():
        assert r.result["feasible"]
        dlrm.spec.check_plan_array(sc, r.plan)  # every entry valid
        assert r.step_time_s <= best_greedy * (1 + 1e-12)
        assert 0 < r.lower_bound_s <= r.step_time_s * (1 + 1e-12)
        full = dlrm.evaluate(sc, r.plan)["step_time_s"]
        assert full == pytest.approx(r.step_time_s, rel=1e-12)
    assert results["evolve"].step_time_s <= results["beam"].step_time_s * (1 + 1e-12)
    assert results["evolve"].moves_scored == 20000


def test_lower_bound_equals_a_balanced_plan():
    # W table-wise tables, identical, one per rank: the plan is perfectly balanced
    tables = [{"name": f"t{i}", "rows": 1000, "dim": 64, "pooling": 4.0} for i in range(8)]
    raw = {"model": {"tables": tables, "interaction": "dcn", "dense_arch": [64, 32],
                     "over_arch": [64, 1]},
           "job": {"global_batch": 8 * 128},
           "cluster": {"gpu": "h100-sxm-80gb", "gpus": 8, "tiers": TIERS[:1] + TIERS[1:2],
                       "host_ddr_gb": 100.0, "host_to_device_GBps": 32.0}}
    sc = dlrm.load(raw)
    plan = dlrm.plan_from_entries(sc, {f"t{i}": {"type": "table_wise", "rank": i}
                                       for i in range(8)})
    step = dlrm.evaluate(sc, plan)["step_time_s"]
    assert planner.even_spread_bound(sc) == pytest.approx(step, rel=1e-12)
    assert planner.lower_bound(sc) <= step * (1 + 1e-12)


def test_shard_command(tmp_path):
    from trainscape.dlrm.cli import register

    csv = tmp_path / "t.csv"
    csv.write_text("table,rows,dim,multi_hot\n" + "\n".join(
        f"c{i},{1000 * (i + 1)},64,{i % 5 + 1}" for i in range(12)) + "\n")
    scen = tmp_path / "s.toml"
    scen.write_text(
        'name = "tiny"\n[model]\ntables_csv = "t.csv"\ninteraction = "dcn"\n'
        "[job]\nglobal_batch = 1024\n"
        '[cluster]\npreset = "zionex"\ngpus = 8\n')
    group = click.Group()
    register(group)
    runner = CliRunner()
    res = runner.invoke(group, ["shard", str(scen), "--method", "beam", "--json",
                                "--plot", str(tmp_path / "load.png")])
    assert res.exit_code == 0, res.output
    data = json.loads(res.output)
    assert len(data["plan"]) == 12 and data["feasible"]
    assert data["lower_bound_s"] <= data["step_time_s"] * 1.000001 or data["lower_bound_s"] > 0
    assert set(data["breakdown"]) == set(D.DBREAKDOWN_FIELDS)
    assert (tmp_path / "load.png").stat().st_size > 1000
    bad = tmp_path / "bad.toml"
    bad.write_text(scen.read_text() + '[plan.c3]\ntype = "column_wise"\nshards = 3\n')
    res = runner.invoke(group, ["shard", str(bad)])
    assert res.exit_code == 2
    assert "tables[c3].shards: 3 does not divide dim 64" in res.output
