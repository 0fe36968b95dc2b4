"""The pruned core enumeration (trainscape.space.core_enum) tabulates exactly what the plain
product checked row by row in the kernel would: the same valid rows in the same order (so the
same global indices) and the same rejection count per constraint; and spaces whose plain
product is far beyond what could be checked row by row are built, searched and explained."""

from __future__ import annotations

import copy
import itertools
import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import trainscape
from trainscape import layout as L
from trainscape.model.llm import config_error
from trainscape.space import design_space
from trainscape.space import design as D
from trainscape.space.canonical import collapse_core_rows
from trainscape.spec import ScenarioError, pack

from _explore_common import SMALL


def naive_core(scenario, ds):
    """The valid core rows and rejection counts by brute force: every combination of the core
    axis values (dp derived as gpus / (tp cp pp)), tp = 1 keeping only the canonical sp and
    tp_overlap, each checked with the reference's config_error; collapsed as the space does."""
    sys, mdl, job = pack(scenario)
    gpus = scenario.cluster.gpus
    axes = ds.axes
    lists = []
    for name in D.CORE_FIELDS:
        v = axes[name]
        if name == "dp" and v is None:
            lists.append([None])
        elif name == "sp" and v is None:
            lists.append([None])
        elif name == "schedule":
            lists.append([L.SCHEDULES.index(x) for x in v])
        else:
            lists.append([int(x) for x in v])
    sp_canon = 0 if axes["sp"] is None or 0 in [int(x) for x in axes["sp"]] \
        else int(axes["sp"][0])
    tpo_canon = int(axes["tp_overlap"][0])
    rows, rejections = [], {}
    col = np.zeros((L.N_CFG, 1), dtype=np.int32)
    for combo in itertools.product(*lists):
        tp, cp, pp, dp, ep, mbs, vpp, sched, sp, tpo = combo
        if dp is None:
            dp = max(gpus // (tp * cp * pp), 1)
        if sp is None:
            sp = int(tp > 1)
        elif tp == 1 and sp != sp_canon:
            continue
        if tp == 1 and tpo != tpo_canon:
            continue
        values = (tp, cp, pp, dp, ep, mbs, vpp, sched, sp, tpo)
        col[:] = 0
        for f, v in zip(D.CORE_CFG, values):
            col[f, 0] = v
        code = config_error(sys, mdl, job, col, 0)
        if code == 0 and dp % ep != 0:
            code = D.FOLDED_EP_NOT_SEARCHED  # the space keeps ep | dp (see design_space)
        if code:
            rejections[code] = rejections.get(code, 0) + 1
        else:
            rows.append(values)
    core = np.array(rows, dtype=np.int32).T.reshape(D.N_CORE, -1)
    core, _alias = collapse_core_rows(core)
    return core, rejections


def scenario(gpus: int, heads: int, kv: int, batch: int, layers: int, space: dict):
    raw = copy.deepcopy(SMALL)
    raw["model"].update(heads=heads, kv_heads=kv, layers=layers, hidden=64 * heads,
                        ffn_hidden=256 * heads)
    raw["job"]["global_batch"] = batch
    raw["cluster"]["gpus"] = gpus
    raw["cluster"]["tiers"][1]["size"] = max(1, -(-gpus // 8))
    raw["space"] = space
    return trainscape.load(raw)


def values(lo, hi):
    return st.lists(st.integers(lo, hi), min_size=1, max_size=5, unique=True)


@settings(max_examples=60, deadline=None)
@given(gpus=st.sampled_from([1, 6, 8, 12, 16, 24, 32, 48]), heads=st.sampled_from([4, 6, 8, 12]),
       kv=st.sampled_from([1, 2, 4]), batch=st.sampled_from([8, 12, 24, 64]),
       layers=st.sampled_from([2, 4, 6]), tp=values(1, 12), cp=values(1, 6),
       pp=values(1, 8), mbs=values(1, 6), vpp=values(1, 3),
       dp=st.none() | values(1, 24),
       schedule=st.lists(st.sampled_from(["1f1b", "interleaved", "zb-h1", "gpipe"]),
                         min_size=1, max_size=3, unique=True),
       sp=st.none() | st.lists(st.booleans(), min_size=1, max_size=2, unique=True),
       tpo=st.lists(st.booleans(), min_size=1, max_size=2, unique=True))
def test_pruned_core_table_is_the_brute_force_one(gpus, heads, kv, batch, layers, tp, cp, pp,
                                                  mbs, vpp, dp, schedule, sp, tpo):
    if heads % kv:
        kv = 1
    space = {"tp": tp, "cp": cp, "pp": pp, "mbs": mbs, "vpp": vpp, "schedule": schedule,
             "tp_overlap": tpo, "order": "all"}
    if dp is not None:
        space["dp"] = dp
    if sp is not None:
        space["sp"] = sp
    sc = scenario(gpus, heads, kv, batch, layers, space)
    ds = design_space(sc)
    core, rejections = naive_core(sc, ds)
    assert np.array_equal(ds.core, core)  # same rows, same order: same global indices
    assert ds.core_rejections == rejections
    assert ds.core_raw == math.prod(len(v) for v in (tp, cp, pp, dp or [0], [0], mbs, vpp,
                                                      schedule, sp or [0], tpo))


LLAMA = "examples/llama3-405b-2bldg.toml"


def wide_space(**extra):
    """Llama 3 405B on 16,384 GPUs with every integer degree listed: a plain product of about
    10^16 configurations, of which a few million are valid."""
    space = {"tp": list(range(1, 257)), "cp": list(range(1, 257)), "pp": list(range(1, 129)),
             "mbs": list(range(1, 257)), "vpp": list(range(1, 17)),
             "schedule": list(L.SCHEDULES), "recompute": list(L.RECOMPUTE),
             "zero": [0, 1, 2, 3], "dp_overlap": [False, True], "order": "all"}
    space.update(extra)
    sc = trainscape.load(LLAMA)
    return sc, space


def test_wide_space_is_tabulated_without_checking_its_product():
    sc, space = wide_space()
    ds = design_space(sc, space)
    assert ds.raw_size > 10**15
    assert 0 < ds.size < ds.raw_size
    # every tabulated row is valid by the reference, and the degrees multiply to the GPUs
    sys, mdl, job = pack(sc)
    cfg = ds.sample(2000, seed=3)
    assert all(config_error(sys, mdl, job, cfg, i) == 0 for i in range(cfg.shape[1]))
    assert np.all(cfg[L.CFG_TP].astype(np.int64) * cfg[L.CFG_CP] * cfg[L.CFG_PP]
                  * cfg[L.CFG_DP] == 16384)
    # the pruned combinations are counted, not lost: the rejections and the rows they
    # collapsed to account for the whole product of degrees (sp / tp_overlap single-valued)
    assert sum(ds.core_rejections.values()) + ds.core.shape[1] <= ds.core_raw


def test_search_finds_a_good_layout_in_a_wide_space():
    """search on a space of more than 10^15 configurations ends within its budget of 3,000
    evaluations (10^-4 of the valid space) with a layout at least as fast as the one Llama 3
    ran (TP 8, PP 16, interleaved, which the wide space contains), whatever the seed; eight
    restarts (24,000 evaluations) come within 5 % of the exhaustive optimum (the sweep of all
    valid configurations).

    One run alone does not reliably: the optimum is an isolated point (PP 1, ZeRO-3, TP 8 x
    CP 4, MBS 4, 3 % ahead of the next layout), and single runs of seeds 0-7 stop 0-9.9 %
    above it (median 7.2 %, seed 7 alone reaching it, on the constants of stop 45's refit; 4.5-
    10.7 %, median 6.9 %, before it, when four restarts sufficed; on the constants before stop
    27's refit 0-11 %, median 6.3 %, seed 0 alone reaching it)."""
    from trainscape.explore.search import run_search
    from trainscape.explore.sweep import run_sweep

    sc, space = wide_space()
    ds = design_space(sc, space)
    assert ds.raw_size > 10**15
    budget = 3000
    production = trainscape.evaluate(sc).step_time_s
    bests = []
    for seed in range(8):
        res = run_search(sc, "evolve", space=ds, budget=budget, seed=seed)
        assert 0 < res.evaluated <= budget and len(res.top) > 0
        bests.append(float(res.top.out[L.OUT_STEP_TIME_S, 0]))
        assert 0 < bests[-1] <= production
    optimum = float(run_sweep(sc, space=ds).top.out[L.OUT_STEP_TIME_S, 0])
    assert optimum <= min(bests) <= 1.05 * optimum


def test_space_too_wide_even_after_pruning_names_the_axes():
    sc, space = wide_space(vpp=list(range(1, 2001)), mbs=[1, 2, 4, 8, 16],
                           schedule=list(L.SCHEDULES), tp_overlap=[False, True],
                           sp=[False, True])
    sc = trainscape.load(LLAMA)
    with pytest.raises(ScenarioError, match=r"^space: too many combinations.*space\.vpp "
                                            r"\(2000 values\)"):
        design_space(sc, {**space, "ep": list(range(1, 200))})
