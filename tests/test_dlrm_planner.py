"""Planner: O(1) move scores equal the full evaluation; the balancer's state is the
reference's; no plan beats the lower bound (and when the even-spread figure is one);
planners return valid plans no worse than the greedy baselines; the `shard` command."""

from __future__ import annotations

import json
import math
import os

import numpy as np
import pytest
from click.testing import CliRunner
from hypothesis import given, settings
from hypothesis import strategies as st

from trainscape import dlrm
from trainscape.dlrm import layout as D
from trainscape.dlrm import balance, bounds, planner
from _dlrm_common import write_tiny_scenario

TIERS = [
    {"name": "node", "size": 4, "bandwidth_GBps": 300.0, "latency_us": 2.0, "efficiency": 0.9},
    {"name": "pod", "size": 2, "bandwidth_GBps": 50.0, "latency_us": 8.0, "efficiency": 0.8},
    {"name": "dc", "size": 3, "bandwidth_GBps": 25.0, "latency_us": 20.0,
     "oversubscription": 2.0},
]
THOROUGH = os.environ.get("HYPOTHESIS_PROFILE") == "thorough"


def n_examples(n: int) -> int:
    return 20 * n if THOROUGH else n


def make(seed, gpus=20, n_t=30, ddr=64.0, tiers=None, gpu="a100-sxm-40gb",
         optimizer="rowwise_adagrad", wide=False, ssd=None):
    """A scenario of ``n_t`` drawn tables; ``wide`` draws wider ranges (a few rows, dims 4
    and 96, no lookups at all now and then); ``ssd`` an ``[ssd]`` section."""
    rng = np.random.default_rng(seed)
    if wide:
        tables = [{"name": f"t{i}", "rows": int(10 ** rng.uniform(0.5, 7.3)),
                   "dim": int(rng.choice([4, 16, 32, 64, 128, 96])),
                   "pooling": float(rng.choice([0.0, rng.uniform(0.1, 60)], p=[0.05, 0.95])),
                   "hit_rate": float(rng.uniform(0.0, 1))}
                  for i in range(n_t)]
    else:
        tables = [{"name": f"t{i}", "rows": int(10 ** rng.uniform(3, 7.3)),
                   "dim": int(rng.choice([16, 32, 64, 128])),
                   "pooling": float(rng.uniform(1, 40)), "hit_rate": float(rng.uniform(0.3, 1))}
                  for i in range(n_t)]
    raw = {"model": {"tables": tables, "interaction": "dcn", "dense_arch": [128, 64],
                     "over_arch": [256, 1], "dcn_layers": 2, "dcn_low_rank": 64},
           "job": {"global_batch": gpus * 256, "comm_dtype": "fp16", "optimizer": optimizer},
           "cluster": {"gpu": gpu, "gpus": gpus, "tiers": TIERS if tiers is None else tiers,
                       "host_ddr_gb": ddr, "host_to_device_GBps": 32.0}}
    if ssd is not None:
        raw["ssd"] = ssd
    return dlrm.load(raw)


@st.composite
def clusters(draw, max_gpus=24):
    """Tiers (one to three, node sizes 1 to 8) and a world that fits them, whole nodes or
    not."""
    n_tiers = draw(st.integers(1, 3))
    node = draw(st.sampled_from([1, 2, 3, 4, 8]))
    tiers = [dict(t) for t in TIERS[:n_tiers]]
    tiers[0]["size"] = node
    cap = int(np.prod([t["size"] for t in tiers]))
    gpus = draw(st.integers(1, min(cap, max_gpus)))
    return tiers, gpus


def random_plans(sc, rng, n, kinds=(0, 1, 2, 3, 4, 5), tiers=(0, 1, 2), row_groups=True):
    """``n`` plans with every table's kind, rank, tier, column shards, stride and row group
    drawn."""
    n_t, w = sc.n_tables, sc.world
    plans = np.zeros((n, D.N_PLAN, n_t), np.int32)
    plans[:, D.PL_KIND] = rng.choice(kinds, (n, n_t))
    plans[:, D.PL_RANK] = rng.integers(0, w, (n, n_t))
    plans[:, D.PL_TIER] = rng.choice(tiers, (n, n_t))
    plans[:, D.PL_SHARDS] = 1
    dim = sc.tables[D.TAB_DIM].astype(int)
    groups = [0] + [g for g in range(1, w + 1) if w % g == 0]
    for p in range(n):
        for i in range(n_t):
            if plans[p, D.PL_KIND, i] in (D.SH_CW, D.SH_GRID):
                ks = [k for k in range(1, min(w, dim[i]) + 1) if dim[i] % k == 0]
                plans[p, D.PL_SHARDS, i] = rng.choice(ks)
                plans[p, D.PL_STRIDE, i] = rng.integers(0, w + 1)
            if row_groups and plans[p, D.PL_KIND, i] in (D.SH_TWRW, D.SH_GRID):
                plans[p, D.PL_GROUP, i] = rng.choice(groups)
    return plans


def uniform_plan(sc, kind, tier=0):
    q = np.zeros((D.N_PLAN, sc.n_tables), np.int32)
    q[D.PL_SHARDS] = 1
    q[D.PL_KIND] = kind
    q[D.PL_TIER] = tier
    return q


# ---------------------------------------------------------------------------------------------
# O(1) move scores (incremental.py / C)
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("backend", ["numba", "c"])
@settings(max_examples=n_examples(15), deadline=None)
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
@settings(max_examples=n_examples(15), deadline=None)
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


# ---------------------------------------------------------------------------------------------
# The balancer mirrors the reference
# ---------------------------------------------------------------------------------------------


@settings(max_examples=n_examples(25), deadline=None)
@given(seed=st.integers(0, 10**6), cl=clusters(), n_t=st.integers(1, 25),
       ddr=st.sampled_from([1.0, 512.0]))
def test_balancer_state_is_the_reference(seed, cl, n_t, ddr):
    tiers, gpus = cl
    sc = make(seed, gpus=gpus, n_t=n_t, ddr=ddr, tiers=tiers, wide=True)
    # the balancer models the forms before row groups and grid (those are refine / polish moves)
    plan = random_plans(sc, np.random.default_rng(seed), 1, kinds=(0, 1, 2, 3, 4),
                        row_groups=False)[0]
    bal = balance.Balancer(sc, plan)
    out = dlrm.evaluate_plans(sc, plan, backend="python")
    step, ok = bal.exact()
    assert ok == (out[D.DO_FEASIBLE, 0] > 0)
    assert step == pytest.approx(out[D.DO_STEP_TIME_S, 0], rel=1e-9)
    assert np.array_equal(bal.plan()[[D.PL_KIND, D.PL_TIER, D.PL_SHARDS]],
                          plan[[D.PL_KIND, D.PL_TIER, D.PL_SHARDS]])
    # after a phase, the best state it kept is what the kernel says of its plan, and the
    # surrogate it returns is the one computed from scratch for the state it ends in
    val, _ = bal.run(40.0, 3000, seed, form_frac=0.2)
    best = bal.plan()
    dlrm.spec.check_plan_array(sc, best)
    out = dlrm.evaluate_plans(sc, best, backend="python")
    assert bal.best[0] == pytest.approx(out[D.DO_STEP_TIME_S, 0], rel=1e-9)
    assert (bal.best[1] > 0) == (out[D.DO_FEASIBLE, 0] > 0)
    assert val == pytest.approx(surrogate_from_scratch(bal, 40.0), rel=1e-7)


def surrogate_from_scratch(bal, tau):
    bal._build()
    st_, twn, dsp, dsi, did, g = bal.state
    _, dsz, dlo, fac, ibw = bal.geo
    beta = tau / bal.scale
    ntop = max(int(bal.bp[balance.BP_TOP]), 0) + 1
    ref = np.zeros(balance.N_RS)
    acc = np.zeros(balance.N_RS)
    ecr = np.zeros((1 + 2 * ntop, bal.sc.world))
    ecd = np.zeros((2, ntop, bal.sc.world))
    ecn = np.zeros((3, int(bal.bp[balance.BP_N_NODES])))
    pen = balance._all_sums(st_, twn, dsp, dsi, did, dsz, dlo, fac, ibw, bal.bp, g, beta, ref,
                            acc, ecr, ecd, ecn)
    return balance._objective(acc, beta, ref, pen, bal.bp, g)


def test_form_loads_add_up_to_the_reference_ranks():
    # every table in one form: the balancer's per-rank rows are the kernel's work rows
    sc = make(7, gpus=16, n_t=20, ddr=512.0)
    for kind in (D.SH_TW, D.SH_TWRW, D.SH_RW, D.SH_DP):
        plan = uniform_plan(sc, kind, tier=1)
        plan[D.PL_RANK] = np.arange(sc.n_tables) % sc.world
        work = dlrm.new_work(sc.world)
        dlrm.evaluate_plans(sc, plan, backend="python", work=work)
        st_, _, _, _, _, g = balance.Balancer(sc, plan).state
        lf = st_[balance.BS_LF] + g[balance.G_ULF]
        hbm = st_[balance.BS_HBM] + g[balance.G_UHBM]
        np.testing.assert_allclose(lf, work[D.RK_LOOKUP_FWD_S, : sc.world], rtol=1e-12)
        np.testing.assert_allclose(hbm, work[D.RK_HBM_BYTES, : sc.world], rtol=1e-12)
        np.testing.assert_allclose(st_[balance.BS_O1], work[D.RK_OWN_DIM, : sc.world],
                                   rtol=1e-12, atol=1e-12)


def test_split_hot_splits_what_no_rank_can_hold():
    sc = make(11, gpus=16, n_t=40, ddr=512.0)
    plan = planner.greedy(sc, "cost")
    plan[D.PL_KIND] = np.where(plan[D.PL_KIND] == D.SH_CW, D.SH_TW, plan[D.PL_KIND])
    plan[D.PL_SHARDS] = 1
    out = planner.split_hot(sc, plan)
    st_, _, _, _, _, g = balance.Balancer(sc, plan, forms=False).state
    share = st_[balance.BS_LF].mean() + g[balance.G_ULF]
    tw = balance.form_loads(sc, balance.IK_TW, 1, 0, 1)[:, balance.IL_LF]
    dim = sc.tables[D.TAB_DIM].astype(int)
    hot = (plan[D.PL_KIND] == D.SH_TW) & (plan[D.PL_TIER] == 0) & (tw > share)
    assert hot.any()

    def cw(t, k):
        return balance.form_loads(sc, balance.IK_CW, k, 0, 1)[t, balance.IL_LF]

    def allowed(t, k):
        return k <= sc.world and dim[t] % k == 0 and dim[t] // k >= 4

    for t in range(sc.n_tables):
        if not hot[t] or not allowed(t, 2):
            assert np.array_equal(out[:, t], plan[:, t])
            continue
        k = int(out[D.PL_SHARDS, t])
        assert out[D.PL_KIND, t] == D.SH_CW and k >= 2 and allowed(t, k)
        assert out[D.PL_STRIDE, t] == sc.world // k
        # the fewest shards that bring a shard under the share, else the most allowed
        assert cw(t, k) <= share or not allowed(t, 2 * k)
        assert k == 2 or cw(t, k // 2) > share


# ---------------------------------------------------------------------------------------------
# Lower bounds
# ---------------------------------------------------------------------------------------------


@settings(max_examples=n_examples(30), deadline=None)
@given(seed=st.integers(0, 10**6), cl=clusters(), ddr=st.sampled_from([1.0, 8.0, 512.0]),
       n_t=st.integers(1, 24), gpu=st.sampled_from(["a100-sxm-40gb", "h100-sxm-80gb"]),
       optimizer=st.sampled_from(["rowwise_adagrad", "adam", "sgd"]))
def test_no_plan_beats_the_lower_bound(seed, cl, ddr, n_t, gpu, optimizer):
    tiers, gpus = cl
    rng = np.random.default_rng(seed)
    # half the cases with an SSD tier (key_value drawn too), prefetched or not
    ssd = None if seed % 2 else {"capacity_gb": float(rng.choice([0.01, 1.0, 100.0])),
                                 "bandwidth_GBps": 4.0, "prefetch_depth": int(seed % 3)}
    sc = make(seed, gpus=gpus, n_t=n_t, ddr=ddr, tiers=tiers, gpu=gpu, optimizer=optimizer,
              wide=True, ssd=ssd)
    plans = [random_plans(sc, rng, 200, tiers=(0, 1, 2) if ssd is None else (0, 1, 2, 4))]
    # the greedy plans, every table of one kind in each tier, and the planner's own
    extra = [planner.greedy(sc, k) for k in planner.GREEDY_KEYS]
    extra += [uniform_plan(sc, kind, tier) for kind in range(5) for tier in range(3)]
    extra.append(planner.plan(sc, "evolve", iterations=3000, seed=seed).plan)
    plans.append(np.stack(extra))
    out = dlrm.evaluate_plans(sc, np.concatenate(plans), backend="c")
    ok = out[D.DO_FEASIBLE] > 0
    parts = bounds.lower_bound_parts(sc)
    lb = parts["lower_bound_s"]
    assert lb > 0 and lb == max(parts["sum_bound_s"], parts["rank_bound_s"],
                                parts["table_bound_s"])
    assert np.all(out[D.DO_STEP_TIME_S, ok] >= lb * (1 - 1e-12))


@settings(max_examples=n_examples(20), deadline=None)
@given(seed=st.integers(0, 10**6), n_tiers=st.integers(1, 3), node=st.sampled_from([1, 2, 4]),
       nodes=st.integers(1, 3), n_t=st.integers(1, 15))
def test_even_spread_bounds_the_all_to_all_plans_in_hbm(seed, n_tiers, node, nodes, n_t):
    # whole tier-0 domains, every table table-, column- or table-row-wise in HBM (the last
    # only when the outer tiers' all-to-all bound dominates tier 0): no plan beats it
    tiers = [dict(t) for t in TIERS[:n_tiers]]
    tiers[0]["size"] = node
    cap = int(np.prod([t["size"] for t in tiers]))
    gpus = node if n_tiers == 1 else min(cap, node * nodes)
    sc = make(seed, gpus=gpus, n_t=n_t, ddr=512.0, tiers=tiers, wide=True)
    k0, k1, _ = bounds._a2a_kappas(sc)
    kinds = (D.SH_TW, D.SH_CW, D.SH_TWRW) if k1 >= k0 and gpus > sc.node_size else (
        D.SH_TW, D.SH_CW)
    plans = random_plans(sc, np.random.default_rng(seed), 300, kinds=kinds, tiers=(0,))
    out = dlrm.evaluate_plans(sc, plans, backend="c")
    assert np.all(out[D.DO_STEP_TIME_S] >= bounds.even_spread_bound(sc) * (1 - 1e-12))


def test_even_spread_is_not_a_lower_bound_in_general():
    # small tables kept data-parallel skip both all-to-alls; their all-reduce hides behind
    # the dense one
    tables = [{"name": f"t{i}", "rows": 50 + i, "dim": 64, "pooling": 20.0} for i in range(16)]
    raw = {"model": {"tables": tables, "interaction": "dcn", "dense_arch": [512, 256],
                     "over_arch": [512, 1]},
           "job": {"global_batch": 16 * 512},
           "cluster": {"gpu": "h100-sxm-80gb", "gpus": 16,
                       "tiers": [dict(TIERS[0]), dict(TIERS[1], size=4)],
                       "host_ddr_gb": 100.0, "host_to_device_GBps": 32.0}}
    sc = dlrm.load(raw)
    dp = dlrm.evaluate(sc, uniform_plan(sc, D.SH_DP))
    assert dp["feasible"]
    assert dp["step_time_s"] < bounds.even_spread_bound(sc)
    assert bounds.lower_bound(sc) <= dp["step_time_s"] * (1 + 1e-12)
    best = planner.plan(sc, "evolve", iterations=5000)
    assert best.step_time_s <= dp["step_time_s"] * (1 + 1e-12)


def test_lower_bound_equals_a_balanced_plan():
    # W table-wise tables, identical, one per rank: the plan is perfectly balanced (full
    # 128-column kernel blocks: narrower tables pay TorchRec's block penalty, which the bound,
    # valid for row-wise shards too, leaves out)
    tables = [{"name": f"t{i}", "rows": 1000, "dim": 128, "pooling": 4.0} for i in range(8)]
    raw = {"model": {"tables": tables, "interaction": "dcn", "dense_arch": [64, 32],
                     "over_arch": [64, 1]},
           "job": {"global_batch": 8 * 128},
           "cluster": {"gpu": "h100-sxm-80gb", "gpus": 8, "tiers": TIERS[:1] + TIERS[1:2],
                       "host_ddr_gb": 100.0, "host_to_device_GBps": 32.0}}
    sc = dlrm.load(raw)
    plan = dlrm.plan_from_entries(sc, {f"t{i}": {"type": "table_wise", "rank": i}
                                       for i in range(8)})
    step = dlrm.evaluate(sc, plan)["step_time_s"]
    assert bounds.even_spread_bound(sc) == pytest.approx(step, rel=1e-12)
    assert bounds.lower_bound(sc) <= step * (1 + 1e-12)


def test_table_bound_sees_one_hot_table():
    # one table with 100 lookups per sample among small ones: its busiest holder alone
    # bounds the step above the averages. Its dim is prime (127 > 64 ranks): no column
    # split (column-wise, grid) can spread it; a 128-wide one a grid of 4 blocks on groups of
    # 2 nodes spreads below the averages
    tables = [{"name": "hot", "rows": 4_000_000, "dim": 127, "pooling": 100.0}]
    tables += [{"name": f"t{i}", "rows": 1000, "dim": 128, "pooling": 1.0} for i in range(5)]
    raw = {"model": {"tables": tables, "interaction": "dcn", "dense_arch": [64, 32],
                     "over_arch": [64, 1]},
           "job": {"global_batch": 65536, "embedding_dtype": "fp32"},
           "cluster": {"gpu": "h100-sxm-80gb", "gpus": 64,
                       "tiers": [dict(TIERS[0], size=8), dict(TIERS[1], size=8)],
                       "host_ddr_gb": 512.0, "host_to_device_GBps": 32.0}}
    sc = dlrm.load(raw)
    parts = bounds.lower_bound_parts(sc)
    assert parts["table_bound_s"] > parts["sum_bound_s"]
    r = planner.plan(sc, "evolve", iterations=5000)
    assert parts["lower_bound_s"] <= r.step_time_s * (1 + 1e-12)


# ---------------------------------------------------------------------------------------------
# Planners
# ---------------------------------------------------------------------------------------------


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
    assert results["evolve"].moves_scored >= 20000


def test_evolve_balances_a_production_like_model():
    # 200 tables from the synthetic generator's distribution on 32 ranks (4 nodes): the
    # balancer's plan is far ahead of the greedy baselines and near the even spread
    rng = np.random.default_rng(2022)
    n = 200
    rows = np.clip(10 ** rng.normal(5.0, 1.1, n), 1e3, 1e8).astype(int)
    dims = rng.choice([16, 32, 64, 128, 256], size=n, p=[0.15, 0.25, 0.3, 0.2, 0.1])
    pools = np.clip(np.rint(10 ** rng.uniform(0.0, 2.0, n)), 1, 100)
    raw = {"model": {"tables": [{"name": f"t{i}", "rows": int(r), "dim": int(d),
                                 "pooling": float(p)} for i, (r, d, p) in
                                enumerate(zip(rows, dims, pools))],
                     "interaction": "dcn", "dense_arch": [512, 256, 128],
                     "over_arch": [1024, 512, 1], "dense_in_features": 512},
           "job": {"global_batch": 32768, "embedding_dtype": "fp16", "comm_dtype": "fp16"},
           "cluster": {"preset": "zionex", "gpus": 32}}
    sc = dlrm.load(raw)
    r = planner.plan(sc, "evolve", iterations=200_000)
    assert r.result["feasible"]
    assert r.step_time_s <= 0.9 * min(r.baselines.values())
    assert r.step_time_s <= 1.05 * bounds.even_spread_bound(sc)


def test_polish_never_worsens():
    sc = make(5, gpus=12, n_t=20, ddr=512.0)
    plan = planner.greedy(sc, "size")
    before = dlrm.evaluate(sc, plan, backend="c")["step_time_s"]
    out, step, n = planner.polish(sc, plan, 5000)
    assert n <= 5000 + 20
    assert step <= before
    assert dlrm.evaluate(sc, out, backend="c")["step_time_s"] == pytest.approx(step, rel=1e-12)


def test_shard_command(tmp_path):
    from trainscape.cli import main

    scen = write_tiny_scenario(tmp_path)
    group = main
    runner = CliRunner()
    res = runner.invoke(group, ["shard", str(scen), "--method", "beam", "--json",
                                "--plot", str(tmp_path / "load.png")])
    assert res.exit_code == 0, res.output
    data = json.loads(res.output)
    assert len(data["plan"]) == 12 and data["feasible"]
    assert 0 < data["lower_bound_s"] <= data["step_time_s"] * (1 + 1e-12)
    assert set(data["breakdown"]) == set(D.DBREAKDOWN_FIELDS)
    assert (tmp_path / "load.png").stat().st_size > 1000
    bad = tmp_path / "bad.toml"
    bad.write_text(scen.read_text() + '[plan.c3]\ntype = "column_wise"\nshards = 3\n')
    res = runner.invoke(group, ["shard", str(bad)])
    assert res.exit_code == 2
    assert "tables[c3].shards: 3 does not divide dim 64" in res.output
