"""The C move scorer (``dl_score_moves``): equal to numba's ``score_batch`` and to a full
evaluation of the moved plan, for moves, swaps and tier changes from drawn states -- with the
candidates aimed at the ranks and domains that head the top-3 lists, where the exclusions
are hardest; bad candidates and bad state get an error, never an out-of-bounds read; the
planner's hill climb gives the same plan with either scorer."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from trainscape import dlrm
from trainscape.dlrm import incremental as inc
from trainscape.dlrm import layout as D
from trainscape.native import dlrm as native

from test_dlrm_planner import clusters, make


def _state(seed, gpus, ddr, n_t=30, tiers=None, rng=None):
    sc = make(seed, gpus=gpus, n_t=n_t, ddr=ddr, tiers=tiers)
    rng = np.random.default_rng(seed + 7) if rng is None else rng
    plan = np.zeros((D.N_PLAN, sc.n_tables), np.int32)
    plan[D.PL_SHARDS] = 1
    # skewed ranks: a few ranks hold most tables, so the top-3 lists have clear heads
    plan[D.PL_RANK] = np.minimum(rng.geometric(0.3, sc.n_tables) - 1, gpus - 1)
    plan[D.PL_TIER] = rng.choice([0, 0, 0, 1, 2], sc.n_tables)
    plan[D.PL_KIND, :3] = [D.SH_RW, D.SH_TWRW, D.SH_DP]
    tables = np.ascontiguousarray(sc.tables)
    return sc, tables, plan, inc.prepare(sc.sys, sc.job, tables, plan)


def _aimed(st_, prank, movable, rng, n):
    """Candidates between the first two entries of every list (ranks, or ranks of the two
    domains), plus random ones, as moves, swaps and tier changes."""
    c, rk, fac, did, n_dom, dsum, tv, ti, nb_v, nb_i, tt, rec, rmask, status = st_
    world = rk.shape[1]
    top = int(c[inc.C_TOP])
    pairs = []
    for s in range(4):
        pairs.append((ti[s, 0], ti[s, 1]))
    for q in range(2):
        for i in range(top + 1):
            s = inc.S_SEND + q * inc.MAXT + i
            pairs.append((ti[s, 0], ti[s, 1]))
            s = inc.S_RECV + q * inc.MAXT + i
            d0, d1 = ti[s, 0], ti[s, 1]
            r0 = np.flatnonzero(did[i] == d0)
            r1 = np.flatnonzero(did[i] == d1)
            if len(r0) and len(r1):
                pairs.append((rng.choice(r0), rng.choice(r1)))
        for nd in range(n_dom[0] if top >= 0 else 0):
            pairs.append((nb_i[q, nd, 0], nb_i[q, nd, 1]))
            # the node's smallest with another rank of its node
            peers = np.flatnonzero(did[0] == nd)
            for j in range(2):
                if nb_i[q, nd, j] >= 0:
                    pairs.append((nb_i[q, nd, j], rng.choice(peers)))
    pairs = [(int(x), int(y)) for x, y in pairs if x >= 0 and y >= 0]
    pairs += [(int(x), int(y)) for x, y in rng.integers(0, world, (n, 2))]
    out = []
    for x, y in pairs:
        for r0, r1 in ((x, y), (y, x)):
            on0 = movable[prank[movable] == r0]
            on1 = movable[prank[movable] == r1]
            if len(on0) == 0:
                continue
            t = int(rng.choice(on0))
            out.append((t, r1, -1, int(rng.integers(0, 3))))  # move (maybe with a tier change)
            out.append((t, r0, -1, int(rng.integers(0, 3))))  # tier change in place
            if len(on1):
                out.append((t, r1, int(rng.choice(on1)), 0))  # swap
    return np.array(out, np.int64).reshape(-1, 4)


def _moved(plan, cand):
    moved = np.repeat(plan[None], len(cand), axis=0)
    for k, (t, b, u, tier) in enumerate(cand):
        if u >= 0:
            moved[k, D.PL_RANK, t], moved[k, D.PL_RANK, u] = plan[D.PL_RANK, u], \
                plan[D.PL_RANK, t]
        else:
            moved[k, D.PL_RANK, t] = b
            moved[k, D.PL_TIER, t] = tier
    return moved


@settings(max_examples=30, deadline=None)
@given(seed=st.integers(0, 10**6), gpus=st.integers(1, 24),
       ddr=st.sampled_from([0.05, 1.0, 512.0]))
def test_c_scores_equal_numba_and_full_evaluation(seed, gpus, ddr):
    sc, tables, plan, (st_, tdim, tpool, prank, ptier) = _state(seed, gpus, ddr)
    rng = np.random.default_rng(seed)
    movable = np.arange(3, sc.n_tables)
    cand = _aimed(st_, prank, movable, rng, 40)
    # (a draw with no candidate is rejected, not passed: hypothesis fails the test when too
    # many are, so it cannot pass without asserting)
    assume(len(cand) > 0)
    c, rk, fac, did, n_dom, dsum, tv, ti, nb_v, nb_i, tt, rec, rmask, status = st_
    want = np.empty(len(cand))
    inc.score_batch(c, rk, fac, did, dsum, tv, ti, nb_v, nb_i, tt, tdim, tpool, prank, ptier,
                    cand, want)
    got = native.score_moves(st_, tdim, tpool, prank, ptier, cand)
    # the same operations in the same order: equal bit for bit, infinities included
    assert np.array_equal(got, want)
    full = dlrm.evaluate_plans(sc, _moved(plan, cand), backend="python")
    expect = np.where(full[D.DO_FEASIBLE] > 0, full[D.DO_STEP_TIME_S], np.inf)
    assert np.array_equal(np.isinf(got), np.isinf(expect))
    fin = np.isfinite(expect)
    np.testing.assert_allclose(got[fin], expect[fin], rtol=1e-9)


@settings(max_examples=10, deadline=None)
@given(seed=st.integers(0, 10**6), gpus=st.integers(2, 24), ddr=st.sampled_from([1.0, 512.0]))
def test_planner_mix_scores_equal_numba_and_full_evaluation(seed, gpus, ddr):
    """The candidates the hill climb draws (and the bench scores): swaps, tier changes, moves,
    hot tables; C equal to numba bit for bit, both equal to the full evaluation."""
    sc = make(seed, gpus=gpus, n_t=40, ddr=ddr)
    from trainscape.dlrm import planner

    plan = planner.greedy(sc, "cost")
    plan[D.PL_KIND] = np.where(plan[D.PL_KIND] == D.SH_CW, D.SH_TW, plan[D.PL_KIND])
    plan[D.PL_SHARDS] = 1
    movable = np.flatnonzero(plan[D.PL_KIND] == D.SH_TW).astype(np.int64)
    tables = np.ascontiguousarray(sc.tables)
    st_, tdim, tpool, prank, ptier = inc.prepare(sc.sys, sc.job, tables, plan)
    c, rk, fac, did, n_dom, dsum, tv, ti, nb_v, nb_i, tt, rec, rmask, status = st_
    cand = inc.planner_candidates(ti, c, plan, movable, 400, seed)
    assert cand.shape == ((400, 4) if len(movable) else (0, 4))
    assume(len(movable) > 0)
    assert np.all(np.isin(cand[:, 0], movable))
    swap = cand[:, 2] >= 0
    assert np.all(np.isin(cand[swap, 2], movable))
    assert 0.1 < swap.mean() < 0.4
    stay = ~swap & (cand[:, 1] == prank[cand[:, 0]])  # tier changes in place
    assert stay.any() and (~swap & ~stay).any()
    want = np.empty(len(cand))
    inc.score_batch(c, rk, fac, did, dsum, tv, ti, nb_v, nb_i, tt, tdim, tpool, prank, ptier,
                    cand, want)
    got = native.score_moves(st_, tdim, tpool, prank, ptier, cand)
    assert np.array_equal(got, want)
    full = dlrm.evaluate_plans(sc, _moved(plan, cand), backend="c")
    expect = np.where(full[D.DO_FEASIBLE] > 0, full[D.DO_STEP_TIME_S], np.inf)
    assert np.array_equal(np.isinf(got), np.isinf(expect))
    fin = np.isfinite(expect)
    np.testing.assert_allclose(got[fin], expect[fin], rtol=1e-9)


def test_c_rejects_bad_candidates_and_bad_state():
    sc, tables, plan, (st_, tdim, tpool, prank, ptier) = _state(5, 12, 512.0)
    n_t, world = sc.n_tables, sc.world
    good = np.array([[5, 3, -1, 0], [6, 0, 7, 0]], np.int64)
    ok = native.score_moves(st_, tdim, tpool, prank, ptier, good)
    assert np.all(np.isfinite(ok))
    for bad in ([n_t, 0, -1, 0], [-1, 0, -1, 0], [5, world, -1, 0], [5, -1, -1, 0],
                [5, 0, n_t, 0], [5, 0, -2, 0], [5, 0, -1, len(D.MEMORY_TIERS)], [5, 0, -1, -1]):
        cand = np.concatenate([good, np.array([bad], np.int64)])
        with pytest.raises(ValueError, match=r"cand\[2\] = \(table "):
            native.score_moves(st_, tdim, tpool, prank, ptier, cand)
    # the raw kernel: NaN for the bad one, the others scored, the count returned
    ffi, lib = native.load()
    cand = np.array([[5, 3, -1, 0], [5, world + 100000, -1, 0], [n_t + 10**9, 0, -1, 0]],
                    np.int64)
    out = np.empty(3)
    c, rk, fac, did, n_dom, dsum, tv, ti, nb_v, nb_i, tt, rec, rmask, status = st_
    P = lambda ct, a: ffi.cast(ct, ffi.from_buffer(a))  # noqa: E731
    args = [P("double *", c), P("double *", rk), P("double *", fac), P("int64_t *", did),
            P("double *", dsum), P("double *", tv), P("int64_t *", ti), P("double *", nb_v),
            P("int64_t *", nb_i), P("double *", tt), P("double *", rec),
            P("int64_t *", rmask), rec.shape[1], P("double *", tdim), P("double *", tpool),
            P("int64_t *", prank), P("int64_t *", ptier), world, n_t, P("int64_t *", cand), 3,
            P("double *", out)]
    assert lib.dl_score_moves(*args) == 2
    assert out[0] == ok[0] and np.isnan(out[1]) and np.isnan(out[2])
    # a plan rank out of range in the state: that candidate is bad too
    prank2 = prank.copy()
    prank2[5] = world
    with pytest.raises(ValueError, match=r"cand\[0\]"):
        native.score_moves(st_, tdim, tpool, prank2, ptier, good)
    # a corrupt domain index or record width: the whole call is refused
    did[0, 0] = world
    with pytest.raises(ValueError, match="inconsistent state"):
        native.score_moves(st_, tdim, tpool, prank, ptier, good)
    did[0, 0] = 0
    args[12] = rec.shape[1] - 1
    assert lib.dl_score_moves(*args) == -1 and np.all(np.isnan(out))


@settings(max_examples=30, deadline=None)
@given(seed=st.integers(0, 10**6), cl=clusters(), ddr=st.sampled_from([0.05, 1.0, 512.0]))
def test_c_avx_and_base_kernels_equal_numba(seed, cl, ddr):
    """Both builds of the fast path -- four lanes a vector (AVX, where the CPU has it) and two
    (``dl_score_moves_base``: SSE2 and scalar) -- equal numba bit for bit, for one to three
    tiers (an odd number leaves a tier without a partner lane pair) and the planner's mix and
    the aimed candidates."""
    tiers, gpus = cl
    rng = np.random.default_rng(seed)
    sc, _tables, plan, (st_, tdim, tpool, prank, ptier) = _state(seed, gpus, ddr, tiers=tiers,
                                                                 rng=rng)
    movable = np.arange(3, sc.n_tables)
    c, rk, fac, did, n_dom, dsum, tv, ti, nb_v, nb_i, tt, rec, rmask, status = st_
    cand = np.concatenate([_aimed(st_, prank, movable, rng, 40).reshape(-1, 4),
                           inc.planner_candidates(ti, c, plan, movable, 200, seed)])
    want = np.empty(len(cand))
    inc.score_batch(c, rk, fac, did, dsum, tv, ti, nb_v, nb_i, tt, tdim, tpool, prank, ptier,
                    cand, want)
    for kernel in ("auto", "base"):
        got = native.score_moves(st_, tdim, tpool, prank, ptier, cand, kernel=kernel)
        assert np.array_equal(got, want), kernel


@pytest.mark.parametrize("gpus,ddr", [(16, 512.0), (20, 1.0)])
def test_hill_climb_same_plan_with_c_or_numba_scores(gpus, ddr):
    sc = make(11, gpus=gpus, n_t=60, ddr=ddr)
    from trainscape.dlrm import planner

    plan = planner.greedy(sc, "cost")
    movable = np.flatnonzero(plan[D.PL_KIND] == D.SH_TW).astype(np.int64)
    tables = np.ascontiguousarray(sc.tables)
    res = {}
    for be in ("numba", "c"):
        p = plan.copy()
        res[be] = inc.evolve(sc.sys, sc.job, tables, p, movable, 20000, 3, 64, True, 0.25,
                             0.5, backend=be), p
    (step_n, scored_n, acc_n), p_n = res["numba"]
    (step_c, scored_c, acc_c), p_c = res["c"]
    assert scored_n == scored_c == 20000
    assert step_n == step_c and acc_n == acc_c and acc_c > 0
    assert np.array_equal(p_n, p_c)
    full = dlrm.evaluate(sc, p_c)
    assert full["step_time_s"] == pytest.approx(step_c, rel=1e-9)
