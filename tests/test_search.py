"""Evolutionary and beam search: valid by construction, within budget, reproducible for a seed,
and close to the exhaustive optimum on a small space."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from trainscape import layout as L
from trainscape.explore.genome import Encoding, hill_climb
from trainscape.explore.search import Evaluator, run_beam, run_evolve, run_search
from trainscape.explore.sweep import run_sweep
from trainscape.model.llm import config_error
from trainscape.space import design_space
from trainscape.spec import ScenarioError, pack

from _explore_common import small


@pytest.fixture(scope="module")
def sc():
    return small(mbs=[1, 2, 4], zero=[0, 1, 2, 3], dp_overlap=[True, False],
                 recompute=["none", "selective", "full"])


@pytest.fixture(scope="module")
def exhaustive(sc):
    return run_sweep(sc, top=5, backend="numba")


RUNS = {
    "evolve": lambda sc, seed, budget: run_evolve(sc, seed=seed, budget=budget),
    "nsga2": lambda sc, seed, budget: run_evolve(sc, seed=seed, budget=budget, multi=True),
    "beam": lambda sc, seed, budget: run_beam(sc, seed=seed, budget=budget),
}


@pytest.mark.parametrize("method", sorted(RUNS))
def test_search_is_reproducible_for_a_seed(sc, method):
    a = RUNS[method](sc, 11, 300)
    b = RUNS[method](sc, 11, 300)
    c = RUNS[method](sc, 12, 300)
    assert np.array_equal(a.top.index, b.top.index)
    assert np.array_equal(a.front.index, b.front.index)
    assert a.evaluated == b.evaluated
    assert not (np.array_equal(a.top.index, c.top.index) and a.evaluated == c.evaluated
                and np.array_equal(a.front.index, c.front.index))


@pytest.mark.parametrize("method", sorted(RUNS))
def test_search_stays_valid_and_within_budget(sc, method):
    res = RUNS[method](sc, 3, 250)
    assert res.evaluated <= 250
    assert res.invalid == 0
    sys, mdl, job = pack(sc)
    ds = design_space(sc)
    for rows in (res.top, res.front, res.by_order):
        assert (ds.index_of(rows.cfg) == rows.index).all()
        assert all(config_error(sys, mdl, job, rows.cfg, j) == 0 for j in range(len(rows)))


@pytest.mark.parametrize("method", ["evolve", "beam"])
def test_search_gets_within_1_percent_of_the_optimum(sc, exhaustive, method):
    """With 5% of this small space (the bench holds the 1%-of-space target on large ones)."""
    ds = design_space(sc)
    budget = ds.size // 20
    best = exhaustive.top.out[L.OUT_STEP_TIME_S, 0]
    found = RUNS[method](sc, 0, budget).top.out[L.OUT_STEP_TIME_S, 0]
    assert found <= best * 1.01


def _hypervolume(step, mem, ref_s, ref_m):
    """Area dominated by a (step, memory) front up to the reference point (both minimized)."""
    pts = sorted(zip(step, mem))
    # staircase area: sweep in step order; each non-dominated point adds its strip up to the
    # next point's step
    area = 0.0
    front = []
    for s, m in pts:
        if not front or m < front[-1][1]:
            front.append((s, m))
    for k, (s, m) in enumerate(front):
        s_next = front[k + 1][0] if k + 1 < len(front) else ref_s
        area += max(0.0, min(s_next, ref_s) - s) * max(0.0, ref_m - m)
    return area


def test_nsga2_front_is_real_nondominated_and_close_to_the_true_front(sc, exhaustive):
    """The NSGA-II front: (1) each point re-costed by the pure-Python reference gives the
    reported step time and memory (a search reporting too-good values fails here, whatever
    backend ran it); (2) sorted and mutually non-dominated; (3) its hypervolume is at least
    90% of the exhaustive front's (reference point 10% beyond the true front's worst corner).
    Before, the only check was that the exhaustive front -- computed by the same backend --
    bounds the found points, which holds for any real evaluation and cannot fail."""
    from trainscape.api import evaluate_columns

    res = run_evolve(sc, seed=1, budget=400, multi=True)
    s, m = res.front.out[L.OUT_STEP_TIME_S], res.front.out[L.OUT_MEMORY_GIB]
    assert len(s) >= 2
    sys, mdl, job = pack(sc)
    again = evaluate_columns(sys, mdl, job, np.ascontiguousarray(res.front.cfg),
                             backend="python")
    np.testing.assert_allclose(again[L.OUT_STEP_TIME_S], s, rtol=1e-9)
    np.testing.assert_allclose(again[L.OUT_MEMORY_GIB], m, rtol=1e-9)
    assert np.all(np.diff(s) > 0) and np.all(np.diff(m) < 0)
    ts, tm = exhaustive.front.out[L.OUT_STEP_TIME_S], exhaustive.front.out[L.OUT_MEMORY_GIB]
    ref_s, ref_m = 1.1 * ts.max(), 1.1 * tm.max()
    true_hv = _hypervolume(ts, tm, ref_s, ref_m)
    assert true_hv > 0
    assert _hypervolume(s, m, ref_s, ref_m) >= 0.9 * true_hv


def test_unknown_method_is_a_one_line_error(sc):
    with pytest.raises(ScenarioError, match=r"--method: unknown search method"):
        run_search(sc, "anneal")


# ---- the genome encoding ------------------------------------------------------------------

@pytest.fixture(scope="module")
def enc(sc):
    return Encoding(design_space(sc))


def test_genome_round_trip(enc):
    rng = np.random.default_rng(0)
    idx = rng.integers(0, enc.space.size, size=2000)
    assert np.array_equal(enc.to_index(enc.from_index(idx), rng), idx)


@settings(max_examples=25, deadline=None)
@given(seed=st.integers(0, 2**32 - 1))
def test_any_genome_encodes_to_a_valid_configuration(sc, enc, seed):
    """Random value indices per axis (mostly invalid core combinations) are repaired into the
    space; a pinned axis keeps its value when some valid row has it (every value comes from
    a valid row, and the repair only gives a pin up when no nearby row keeps all pins)."""
    rng = np.random.default_rng(seed)
    g = np.stack([rng.integers(0, int(v), size=64) for v in enc.nv])
    pin = np.zeros((enc.k, 64), dtype=bool)
    pin[0] = True
    idx = enc.to_index(g, rng, pin)
    assert ((idx >= 0) & (idx < enc.space.size)).all()
    cfg = enc.space.decode(idx)
    sys, mdl, job = pack(sc)
    assert all(config_error(sys, mdl, job, cfg, j) == 0 for j in range(64))
    assert np.array_equal(enc.from_index(idx)[0], g[0])


def test_neighbours_are_valid_distinct_moves(enc):
    rng = np.random.default_rng(1)
    i0 = int(rng.integers(enc.space.size))
    g0 = enc.from_index(np.array([i0]))[:, 0]
    single = enc.neighbours(i0, rng)
    pairs = enc.neighbours(i0, rng, pairs=True)
    for nb in (single, pairs):
        assert nb.size and np.unique(nb).size == nb.size and i0 not in nb
        assert ((nb >= 0) & (nb < enc.space.size)).all()
    # every single move that changes only a free axis differs from the start in that gene
    changed = (enc.from_index(single) != g0[:, None]).sum(axis=0)
    assert changed.min() >= 1
    fixed = enc.neighbours(i0, rng, fixed=(enc.G_ZERO,))
    assert (enc.from_index(fixed)[enc.G_ZERO] == g0[enc.G_ZERO]).all()


def test_hill_climb_never_gets_worse_and_stays_in_budget(sc, enc):
    from trainscape.spec import pack as pack_

    rng = np.random.default_rng(2)
    ev = Evaluator(enc.space, pack_(sc), L.OUT_STEP_TIME_S, 1.0, budget=150)
    start = int(rng.integers(enc.space.size))
    end = hill_climb(enc, ev, start, rng, batch=8)
    k0, k1 = ev(np.array([start]))[0][0], ev(np.array([end]))[0][0]
    assert k1 <= k0 and ev.count <= 150


# ---- an isolated optimum ------------------------------------------------------------------

ISOLATED = {"tp": [1, 2, 4, 8], "cp": [1, 2], "pp": [1, 2, 4, 8, 16], "mbs": [1, 2],
            "schedule": ["1f1b", "zb-v"], "recompute": ["none", "full"], "zero": [0, 1, 2, 3],
            "order": "all", "dp_overlap": [True, False]}


@pytest.fixture(scope="module")
def isolated():
    """GPT-3 175B on 1,536 A100: the optimum (pp = 1, ZeRO-3, tp = 4, no recomputation,
    order dp-tp) is 2 points of ~27,000; every configuration within 1.4% of it differs from
    the runner-up basin (pp >= 2 with ZeRO-1/2) in several axes at once, since a
    pipeline-free layout only fits in memory with ZeRO-3. (The gap was 4.7% while overlapped TP
    traffic was free; the optimum's TP groups span nodes and now pay the exposed fraction and the
    GEMM slowdown of TP overlap. It stays wider than the 1% the searches below must reach.)"""
    import trainscape

    root = Path(__file__).resolve().parent.parent
    # the landscape this fixture was built on: the A100's microbenchmark constants (the example
    # itself now resolves the calibrated ones, which move the runner-up within 4%)
    gpt3 = trainscape.load(root / "examples" / "gpt3-175b-a100.toml",
                           overrides=["cluster.gpu.calibrated=false"])
    ds = design_space(gpt3, ISOLATED)
    ex = run_sweep(gpt3, space=ds, top=3)
    return gpt3, ds, ex


def test_the_isolated_optimum_is_isolated(isolated):
    _sc, ds, ex = isolated
    s = ex.top.out[L.OUT_STEP_TIME_S]
    assert s[2] > s[0] * 1.012
    top = ds.config_dicts(ex.top.cfg[:, :1])[0]
    assert (top["pp"], top["zero"], top["tp"], top["recompute"]) == (1, 3, 4, "none")


@pytest.mark.parametrize("method", ["evolve", "beam"])
def test_search_finds_the_isolated_optimum(isolated, method):
    """With 5% of the space, every one of 10 seeds ends within 1% of the optimum."""
    sc_, ds, ex = isolated
    best = ex.top.out[L.OUT_STEP_TIME_S, 0]
    run = run_evolve if method == "evolve" else run_beam
    hits = 0
    for seed in range(10):
        res = run(sc_, space=ds, seed=seed, budget=ds.size // 20, top=1)
        assert res.evaluated <= ds.size // 20
        hits += res.top.out[L.OUT_STEP_TIME_S, 0] <= best * 1.01
    assert hits == 10


# ---- the target: 1% of a large space --------------------------------------------------

#: The GPT-3 case of ``bench/sweep.py`` (128,784 valid configurations): its optimum (pp = 1,
#: ZeRO-3) is 14 points in a corner the runner-up basin does not reach by single moves.
GPT3_BENCH = {**ISOLATED, "cp": [1, 2], "pp": [1, 2, 4, 8, 16, 32], "mbs": [1, 2, 4],
              "vpp": [1, 2, 4], "schedule": ["1f1b", "interleaved", "zb-h1", "zb-h2", "zb-v"],
              "recompute": ["none", "selective", "full"]}


@pytest.fixture(scope="module")
def gpt3_bench():
    import trainscape

    root = Path(__file__).resolve().parent.parent
    gpt3 = trainscape.load(root / "examples" / "gpt3-175b-a100.toml",
                           overrides=["cluster.gpu.calibrated=false"])  # as `isolated`
    ds = design_space(gpt3, GPT3_BENCH)
    return gpt3, ds, run_sweep(gpt3, space=ds, top=1)


@pytest.mark.parametrize("method", ["evolve", "beam"])
def test_search_within_1_percent_evaluating_1_percent_of_a_large_space(gpt3_bench, method):
    sc_, ds, ex = gpt3_bench
    assert ds.size > 100_000
    best = ex.top.out[L.OUT_STEP_TIME_S, 0]
    run = run_evolve if method == "evolve" else run_beam
    for seed in range(5):
        res = run(sc_, space=ds, seed=seed, budget=ds.size // 100, top=1)
        assert res.evaluated <= ds.size // 100
        assert res.top.out[L.OUT_STEP_TIME_S, 0] <= best * 1.01, seed
