"""O(1) scoring of table moves and swaps for the evolutionary planner (numba).

A move takes a table-wise table from rank ``a`` to rank ``b`` (or changes its memory tier on
``a``); a swap exchanges two table-wise tables of ranks ``a`` and ``b``. Either changes the
per-rank values of two ranks only, and the owned-weight sums of at most two domains per tier.
The step time of :func:`trainscape.dlrm.reference.evaluate_plan` is a sum of maxima over ranks
(lookups forward / backward, the busiest rank of each all-to-all on each tier, memory), so the
moved plan's step follows from the current per-rank state and, per maximum, the three largest
entries with their rank (or domain): the largest entry not in {a, b} plus the two changed ones.
Per move that is O(tiers), independent of the numbers of tables and ranks.

Everything that does not depend on the plan is computed once per planning run
(:func:`init_state`): each table's table-wise terms for every memory tier (lookup seconds
forward and backward, HBM and DDR bytes, as the reference accumulates them), each rank's send
factor and domain on every tier, the reciprocal link bandwidths. Accepting a move updates the
two ranks and rebuilds the top-3 lists in O(W x tiers).

``tests/test_dlrm_planner`` checks every score equals the full evaluation of the moved plan.
"""

from __future__ import annotations

import math
import sys as _sys

import numba
import numpy as np

from ..layout import SYS_HBM_BYTES, SYS_HBM_RESERVE_BYTES, SYS_N_TIERS
from ..native.numba_cache import njit_for
from . import layout as D
from .incremental_layout import (
    MAXT, NEG, POS, C_TOP, C_LAT, C_UNIT_IDX, C_UNIT_FWD, C_UNIT_BWD, C_CONST_FWD, C_CONST_BWD,
    C_DENSE_AR, C_USABLE, C_DDR_CAP, C_WORLD, C_UNI_IDX, C_TOT_POOL, C_TOT_IDX, C_FEASIBLE,
    C_STEP, C_INV_BW, N_C, R_LF, R_LB, R_HBM, R_DDR, R_OWN0, R_OWN, R_IDX, N_R, S_LF, S_LB,
    S_HBM, S_DDR, S_SEND, S_RECV, N_S, TT_FWD, TT_BWD, TT_HBM, TT_DDR, N_TT, F_LF, F_XLF, F_G0,
    G_OWN, G_FAC, G_XS, G_DS, G_XR, G_DOM, G_NMX, N_G, B_LF, B_SEND, B_RECV, B_NB,
)
from .numba_kernel import JIT

# cached under a key of every source it reads; error_model="numpy": IEEE x / 0 (the reference's)
_njit = njit_for([_sys.modules[__name__]], error_model="numpy")

lookup_bytes = JIT["lookup_bytes"]
shard_lookup_bytes = JIT["shard_lookup_bytes"]
lookup_seconds_per_byte = JIT["lookup_seconds_per_byte"]
shard_state_bytes = JIT["shard_state_bytes"]
tier_span = JIT["tier_span"]
tier_link_bandwidth = JIT["tier_link_bandwidth"]
tier_latency = JIT["tier_latency"]
group_top_tier = JIT["group_top_tier"]
evaluate_plan = JIT["evaluate_plan"]



@_njit
def rec_cols(top):
    """Columns of the per-rank record for top tier ``top``."""
    return F_G0 + N_G * 2 * (top + 1)


@_njit(inline="always")
def _push_top(tv, ti, s, v, i):
    if v > tv[s, 2]:
        if v > tv[s, 1]:
            tv[s, 2] = tv[s, 1]
            ti[s, 2] = ti[s, 1]
            if v > tv[s, 0]:
                tv[s, 1] = tv[s, 0]
                ti[s, 1] = ti[s, 0]
                tv[s, 0] = v
                ti[s, 0] = i
            else:
                tv[s, 1] = v
                ti[s, 1] = i
        else:
            tv[s, 2] = v
            ti[s, 2] = i


@_njit(inline="always")
def _excl2(tv, ti, s, e1, e2):
    """Largest entry of list ``s`` whose index is neither ``e1`` nor ``e2``."""
    i0 = ti[s, 0]
    if i0 != e1 and i0 != e2:
        return tv[s, 0]
    i1 = ti[s, 1]
    if i1 != e1 and i1 != e2:
        return tv[s, 1]
    i2 = ti[s, 2]
    if i2 != e1 and i2 != e2:
        return tv[s, 2]
    return NEG


@_njit(inline="always")
def _min_excl2(nb_v, nb_i, q, n, e1, e2):
    """Smallest owned weight in node ``n`` among ranks other than ``e1``, ``e2``."""
    for k in range(3):
        j = nb_i[q, n, k]
        if j != e1 and j != e2:
            return nb_v[q, n, k]
    return POS


@_njit
def rebuild(c, rk, fac, did, n_dom, dsum, tv, ti, nb_v, nb_i, rec, rmask):
    """Domain sums, every top-3 list and the per-rank records from the per-rank rows
    (O(W x tiers))."""
    _rebuild_lists(c, rk, fac, did, n_dom, dsum, tv, ti, nb_v, nb_i)
    _records(c, rk, fac, did, dsum, tv, ti, nb_v, nb_i, rec, rmask)


@_njit
def _records(c, rk, fac, did, dsum, tv, ti, nb_v, nb_i, rec, rmask):
    """The per-rank records ``rec`` and position masks ``rmask`` (see ``F_*``, ``G_*``)."""
    world = int(c[C_WORLD])
    top = int(c[C_TOP])
    L = 2 * (top + 1)
    for r in range(world):
        p0 = 0
        p1 = 0
        for s in range(4):  # S_LF .. S_DDR, R_LF .. R_DDR, F_LF .. F_DDR, B_LF .. B_DDR
            rec[r, F_LF + s] = rk[R_LF + s, r]
            rec[r, F_XLF + s] = tv[s, 0] if ti[s, 0] != r else tv[s, 1]
            if ti[s, 0] == r:
                p0 |= 1 << (B_LF + s)
            if ti[s, 1] == r:
                p1 |= 1 << (B_LF + s)
        for i in range(top + 1):
            d = did[i, r]
            for q in range(2):
                lane = 2 * i + q
                row = R_IDX if q == 1 else (R_OWN0 if i == 0 else R_OWN)
                rec[r, F_G0 + G_OWN * L + lane] = rk[row, r]
                rec[r, F_G0 + G_FAC * L + lane] = fac[i, r]
                s = S_SEND + q * MAXT + i
                rec[r, F_G0 + G_XS * L + lane] = tv[s, 0] if ti[s, 0] != r else tv[s, 1]
                if ti[s, 0] == r:
                    p0 |= 1 << (B_SEND + lane)
                if ti[s, 1] == r:
                    p1 |= 1 << (B_SEND + lane)
                rec[r, F_G0 + G_DS * L + lane] = dsum[q, i, d]
                s = S_RECV + q * MAXT + i
                rec[r, F_G0 + G_XR * L + lane] = tv[s, 0] if ti[s, 0] != d else tv[s, 1]
                if ti[s, 0] == d:
                    p0 |= 1 << (B_RECV + lane)
                if ti[s, 1] == d:
                    p1 |= 1 << (B_RECV + lane)
                rec[r, F_G0 + G_DOM * L + lane] = d
                if i == 0:
                    rec[r, F_G0 + G_NMX * L + lane] = nb_v[q, d, 0] if nb_i[q, d, 0] != r \
                        else nb_v[q, d, 1]
                    if nb_i[q, d, 0] == r:
                        p0 |= 1 << (B_NB + q)
                    if nb_i[q, d, 1] == r:
                        p1 |= 1 << (B_NB + q)
                else:
                    rec[r, F_G0 + G_NMX * L + lane] = 0.0
        rmask[r, 0] = p0
        rmask[r, 1] = p1


@_njit
def _rebuild_lists(c, rk, fac, did, n_dom, dsum, tv, ti, nb_v, nb_i):
    """Domain sums and every top-3 list from the per-rank rows (O(W x tiers))."""
    world = int(c[C_WORLD])
    top = int(c[C_TOP])
    tv[:, :] = NEG
    ti[:, :] = -1
    dsum[:, :, :] = 0.0
    nb_v[:, :, :] = POS
    nb_i[:, :, :] = -1
    for r in range(world):
        _push_top(tv, ti, S_LF, rk[R_LF, r], r)
        _push_top(tv, ti, S_LB, rk[R_LB, r], r)
        _push_top(tv, ti, S_HBM, rk[R_HBM, r], r)
        _push_top(tv, ti, S_DDR, rk[R_DDR, r], r)
        for i in range(top + 1):
            own = rk[R_OWN0, r] if i == 0 else rk[R_OWN, r]
            _push_top(tv, ti, S_SEND + i, own * fac[i, r], r)
            _push_top(tv, ti, S_SEND + MAXT + i, rk[R_IDX, r] * fac[i, r], r)
            dsum[0, i, did[i, r]] += own
            dsum[1, i, did[i, r]] += rk[R_IDX, r]
        n0 = did[0, r]
        for q in range(2):
            v = rk[R_OWN0, r] if q == 0 else rk[R_IDX, r]
            # bottom-3 per node
            if v < nb_v[q, n0, 2]:
                if v < nb_v[q, n0, 1]:
                    nb_v[q, n0, 2] = nb_v[q, n0, 1]
                    nb_i[q, n0, 2] = nb_i[q, n0, 1]
                    if v < nb_v[q, n0, 0]:
                        nb_v[q, n0, 1] = nb_v[q, n0, 0]
                        nb_i[q, n0, 1] = nb_i[q, n0, 0]
                        nb_v[q, n0, 0] = v
                        nb_i[q, n0, 0] = r
                    else:
                        nb_v[q, n0, 1] = v
                        nb_i[q, n0, 1] = r
                else:
                    nb_v[q, n0, 2] = v
                    nb_i[q, n0, 2] = r
    if top >= 0:
        for q in range(2):
            for n in range(n_dom[0]):
                _push_top(tv, ti, S_RECV + q * MAXT, dsum[q, 0, n] - nb_v[q, n, 0], n)
            tot = c[C_TOT_POOL] if q == 0 else c[C_TOT_IDX]
            for i in range(1, top + 1):
                for n in range(n_dom[i]):
                    _push_top(tv, ti, S_RECV + q * MAXT + i, tot - dsum[q, i, n], n)


@_njit(inline="always")
def _x_pair(c, rk, fac, did, dsum, tv, ti, nb_v, nb_i, q, a, b, w):
    """Busiest rank's all-to-all (seconds per unit byte) after weight ``w`` of kind ``q``
    (0 pooled dims, 1 indices) moves from rank ``a`` to rank ``b != a``."""
    top = int(c[C_TOP])
    row = R_OWN if q == 0 else R_IDX
    row0 = R_OWN0 if q == 0 else R_IDX
    worst = 0.0
    for i in range(top + 1):
        rr = row0 if i == 0 else row
        s_send = S_SEND + q * MAXT + i
        s_recv = S_RECV + q * MAXT + i
        oa = rk[rr, a] - w
        ob = rk[rr, b] + w
        send = max(_excl2(tv, ti, s_send, a, b), max(oa * fac[i, a], ob * fac[i, b]))
        da = did[i, a]
        db = did[i, b]
        if i == 0:
            if da == db:
                mn = min(_min_excl2(nb_v, nb_i, q, da, a, b), min(oa, ob))
                recv = max(_excl2(tv, ti, s_recv, da, da), dsum[q, 0, da] - mn)
            else:
                mna = min(_min_excl2(nb_v, nb_i, q, da, a, a), oa)
                mnb = min(_min_excl2(nb_v, nb_i, q, db, b, b), ob)
                recv = max(_excl2(tv, ti, s_recv, da, db),
                           max(dsum[q, 0, da] - w - mna, dsum[q, 0, db] + w - mnb))
        elif da == db:
            recv = tv[s_recv, 0]
        else:
            tot = c[C_TOT_POOL] if q == 0 else c[C_TOT_IDX]
            recv = max(_excl2(tv, ti, s_recv, da, db),
                       max(tot - (dsum[q, i, da] - w), tot - (dsum[q, i, db] + w)))
        t = max(send, recv) * c[C_INV_BW + i]
        if t > worst:
            worst = t
    return worst


@_njit(inline="always")
def _x_now(c, tv, q):
    """Current busiest rank's all-to-all (seconds per unit byte) of kind ``q``."""
    top = int(c[C_TOP])
    worst = 0.0
    for i in range(top + 1):
        t = max(tv[S_SEND + q * MAXT + i, 0], tv[S_RECV + q * MAXT + i, 0]) * c[C_INV_BW + i]
        if t > worst:
            worst = t
    return worst


@_njit(inline="always")
def _step(c, lf, lb, xp, xi):
    """The reference's step from the maxima (``evaluate_plan``'s last lines); a step that is
    not finite scores as ``inf`` (infeasible), never NaN (``reference.guard_finite``)."""
    lat = c[C_LAT]
    idx = 0.0
    if xi > 0.0:
        idx = lat + c[C_UNIT_IDX] * xi
    af = 0.0
    ab = 0.0
    if xp > 0.0:
        af = lat + c[C_UNIT_FWD] * xp
        ab = lat + c[C_UNIT_BWD] * xp
    emb_bwd = ab + lb + c[C_CONST_BWD]
    s = idx + lf + af + c[C_CONST_FWD] + emb_bwd + max(0.0, c[C_DENSE_AR] - emb_bwd)
    if not s < math.inf:  # inf or NaN (C: finite_or_inf, one minsd)
        return math.inf
    return s


@_njit(inline="always")
def score_pair(c, rk, fac, did, dsum, tv, ti, nb_v, nb_i, a, b, dlf, dlb, dh, dd, wp, wi):
    """Step after rank ``a`` loses and rank ``b != a`` gains ``dlf, dlb, dh, dd`` (lookup
    seconds fwd / bwd, HBM / DDR bytes) and owned weights ``wp`` (pooled dims) and ``wi``
    (indices per sample); ``inf`` when a rank runs out of memory."""
    ha = rk[R_HBM, a] - dh
    hb = rk[R_HBM, b] + dh
    xa = rk[R_DDR, a] - dd
    xb = rk[R_DDR, b] + dd
    if c[C_FEASIBLE] > 0.0:  # every other rank fits already
        if max(ha, hb) > c[C_USABLE] or max(xa, xb) > c[C_DDR_CAP]:
            return math.inf
    else:
        if max(_excl2(tv, ti, S_HBM, a, b), max(ha, hb)) > c[C_USABLE] or \
                max(_excl2(tv, ti, S_DDR, a, b), max(xa, xb)) > c[C_DDR_CAP]:
            return math.inf
    lf = max(_excl2(tv, ti, S_LF, a, b), max(rk[R_LF, a] - dlf, rk[R_LF, b] + dlf))
    lb = max(_excl2(tv, ti, S_LB, a, b), max(rk[R_LB, a] - dlb, rk[R_LB, b] + dlb))
    xp = _x_pair(c, rk, fac, did, dsum, tv, ti, nb_v, nb_i, 0, a, b, wp)
    xi = _x_pair(c, rk, fac, did, dsum, tv, ti, nb_v, nb_i, 1, a, b, wi)
    return _step(c, max(0.0, lf), max(0.0, lb), xp, xi)


@_njit(inline="always")
def score_self(c, rk, tv, ti, a, dlf, dlb, dh, dd):
    """Step after rank ``a``'s values change by ``dlf, dlb, dh, dd`` (a memory-tier change)."""
    h = rk[R_HBM, a] + dh
    x = rk[R_DDR, a] + dd
    if max(_excl2(tv, ti, S_HBM, a, a), h) > c[C_USABLE] or \
            max(_excl2(tv, ti, S_DDR, a, a), x) > c[C_DDR_CAP]:
        return math.inf
    lf = max(_excl2(tv, ti, S_LF, a, a), rk[R_LF, a] + dlf)
    lb = max(_excl2(tv, ti, S_LB, a, a), rk[R_LB, a] + dlb)
    return _step(c, max(0.0, lf), max(0.0, lb), _x_now(c, tv, 0), _x_now(c, tv, 1))


@_njit
def table_terms(sys, job, tables, t, tier):
    """(fwd lookup s, bwd lookup s, HBM bytes, DDR bytes) a table-wise table adds to its rank,
    as :func:`reference.evaluate_plan` accumulates them."""
    batch = job[D.DJOB_GLOBAL_BATCH]
    rows = tables[D.TAB_ROWS, t]
    dim = tables[D.TAB_DIM, t]
    pool = tables[D.TAB_POOLING, t]
    eb = job[D.DJOB_EMB_BYTES]
    ib = job[D.DJOB_INDEX_BYTES]
    cbf = job[D.DJOB_COMM_FWD_BYTES]
    spb = lookup_seconds_per_byte(sys, job, tier, tables[D.TAB_HIT_RATE, t])
    fwd = shard_lookup_bytes(batch * pool, dim, eb, ib, batch, cbf) * spb
    state = shard_state_bytes(rows, dim, eb, job[D.DJOB_OPT_ROW_BYTES], job[D.DJOB_OPT_ELEM_BYTES])
    buf = batch * pool * ib + 2.0 * batch * dim * cbf
    if tier == D.MT_HBM or tier == D.MT_DENSE:
        return fwd, job[D.DJOB_BWD_MULTIPLIER] * fwd, state + buf, 0.0
    if tier == D.MT_UVM:
        return fwd, job[D.DJOB_BWD_MULTIPLIER] * fwd, \
            job[D.DJOB_UVM_CACHE_FRACTION] * rows * dim * eb + buf, state
    if tier == D.MT_KV:
        return fwd, job[D.DJOB_BWD_MULTIPLIER] * fwd, \
            job[D.DJOB_UVM_CACHE_FRACTION] * rows * dim * eb + buf, 0.0
    return fwd, job[D.DJOB_BWD_MULTIPLIER] * fwd, buf, state


@_njit
def init_state(sys, job, tables, plan):
    """Evaluate ``plan`` fully and build the incremental state (once per planning run, and
    after a structural change). Returns (c, rk, fac, did, n_dom, dsum, tv, ti, nb_v, nb_i, tt,
    rec, rmask, status)."""
    world = int(job[D.DJOB_WORLD])
    n_t = tables.shape[1]
    work = np.zeros((D.N_RANK, world + 1))
    out1 = np.zeros((D.N_DOUT, 1))
    status = evaluate_plan(sys, job, tables, plan, work, out1, 0)
    c = np.zeros(N_C)
    rk = np.zeros((N_R, world))
    fac = np.zeros((MAXT, world))
    did = np.zeros((MAXT, world), dtype=np.int64)
    n_dom = np.zeros(MAXT, dtype=np.int64)
    dsum = np.zeros((2, MAXT, world))
    tv = np.zeros((N_S, 3))
    ti = np.zeros((N_S, 3), dtype=np.int64)
    nb_v = np.zeros((2, world, 3))
    nb_i = np.zeros((2, world, 3), dtype=np.int64)
    tt = np.zeros((n_t, D.N_MT, N_TT))
    top0 = group_top_tier(sys, world * 1.0, 1.0, 1.0, 1.0, 1.0, 1.0)
    rec = np.zeros((world, rec_cols(min(top0, MAXT - 1))))
    rmask = np.zeros((world, 2), dtype=np.int64)
    wf = world * 1.0
    uni_idx = 0.0
    for t in range(n_t):
        if plan[D.PL_KIND, t] == D.SH_RW:
            uni_idx += tables[D.TAB_POOLING, t] / wf
        for tier in range(D.N_MT):
            f, b, h, d = table_terms(sys, job, tables, t, tier)
            tt[t, tier, TT_FWD] = f
            tt[t, tier, TT_BWD] = b
            tt[t, tier, TT_HBM] = h
            tt[t, tier, TT_DDR] = d
    top = group_top_tier(sys, wf, 1.0, 1.0, 1.0, 1.0, 1.0)
    c[C_TOP] = top
    c[C_LAT] = tier_latency(sys, top) if top >= 0 else 0.0
    local = job[D.DJOB_GLOBAL_BATCH] / wf
    c[C_UNIT_IDX] = local * job[D.DJOB_INDEX_BYTES]
    c[C_UNIT_FWD] = local * job[D.DJOB_COMM_FWD_BYTES]
    c[C_UNIT_BWD] = local * job[D.DJOB_COMM_BWD_BYTES]
    # (the SSD prefetch exposure is constant too: key_value tables are not moved)
    c[C_CONST_FWD] = out1[D.DO_RS_FWD_S, 0] + out1[D.DO_DENSE_FWD_S, 0] + \
        out1[D.DO_DENSE_BWD_S, 0] + out1[D.DO_SSD_PREFETCH_EXPOSED_S, 0]
    c[C_CONST_BWD] = out1[D.DO_AG_BWD_S, 0] + out1[D.DO_DP_ALLREDUCE_S, 0]
    c[C_DENSE_AR] = out1[D.DO_DENSE_ALLREDUCE_S, 0]
    c[C_USABLE] = sys[SYS_HBM_BYTES] - sys[SYS_HBM_RESERVE_BYTES]
    c[C_DDR_CAP] = job[D.DJOB_DDR_BYTES]
    c[C_WORLD] = world
    c[C_UNI_IDX] = uni_idx
    c[C_FEASIBLE] = 1.0 if status == 0 else 0.0
    c[C_STEP] = out1[D.DO_STEP_TIME_S, 0] if status == 0 else math.inf
    n_tiers = int(sys[SYS_N_TIERS])
    for i in range(min(top + 1, MAXT)):
        c[C_INV_BW + i] = 1.0 / tier_link_bandwidth(sys, i)
        span = tier_span(sys, 0) if i == 0 else tier_span(sys, i - 1)
        for r in range(world):
            if span >= world:
                lo = 0.0
                cnt = wf
                did[i, r] = 0
            else:
                lo = math.floor(r / span) * span
                cnt = min(wf, lo + span) - lo
                did[i, r] = int(math.floor(r / span))
            fac[i, r] = cnt - 1.0 if i == 0 else wf - cnt
        n_dom[i] = did[i, world - 1] + 1
    tot_p = 0.0
    tot_i = 0.0
    for r in range(world):
        rk[R_LF, r] = work[D.RK_LOOKUP_FWD_S, r]
        rk[R_LB, r] = work[D.RK_LOOKUP_BWD_S, r]
        rk[R_HBM, r] = work[D.RK_HBM_BYTES, r]
        rk[R_DDR, r] = work[D.RK_DDR_BYTES, r]
        rk[R_OWN0, r] = work[D.RK_OWN_DIM0, r]
        rk[R_OWN, r] = work[D.RK_OWN_DIM, r]
        rk[R_IDX, r] = work[D.RK_OWN_IDX, r] + uni_idx
        tot_p += rk[R_OWN, r]
        tot_i += rk[R_IDX, r]
    c[C_TOT_POOL] = tot_p
    c[C_TOT_IDX] = tot_i
    _unused = n_tiers
    rebuild(c, rk, fac, did, n_dom, dsum, tv, ti, nb_v, nb_i, rec, rmask)
    return c, rk, fac, did, n_dom, dsum, tv, ti, nb_v, nb_i, tt, rec, rmask, status


@_njit(inline="always")
def _score_one(c, rk, fac, did, dsum, tv, ti, nb_v, nb_i, tt, tdim, tpool, prank, ptier,
               t, b, u, tier):
    """Score one candidate: move table ``t`` to rank ``b`` (``u < 0``, ``tier`` its tier: a
    tier change when ``b`` is its rank), or swap it with table ``u`` (``u >= 0``)."""
    a = prank[t]
    ta = ptier[t]
    if u >= 0:
        b = prank[u]
        tb = ptier[u]
        if a == b:
            return c[C_STEP]
        return score_pair(c, rk, fac, did, dsum, tv, ti, nb_v, nb_i, a, b,
                          tt[t, ta, TT_FWD] - tt[u, tb, TT_FWD],
                          tt[t, ta, TT_BWD] - tt[u, tb, TT_BWD],
                          tt[t, ta, TT_HBM] - tt[u, tb, TT_HBM],
                          tt[t, ta, TT_DDR] - tt[u, tb, TT_DDR],
                          tdim[t] - tdim[u], tpool[t] - tpool[u])
    if a == b:
        if tier == ta:
            return c[C_STEP]
        return score_self(c, rk, tv, ti, a,
                          tt[t, tier, TT_FWD] - tt[t, ta, TT_FWD],
                          tt[t, tier, TT_BWD] - tt[t, ta, TT_BWD],
                          tt[t, tier, TT_HBM] - tt[t, ta, TT_HBM],
                          tt[t, tier, TT_DDR] - tt[t, ta, TT_DDR])
    if tier == ta:
        return score_pair(c, rk, fac, did, dsum, tv, ti, nb_v, nb_i, a, b,
                          tt[t, ta, TT_FWD], tt[t, ta, TT_BWD], tt[t, ta, TT_HBM],
                          tt[t, ta, TT_DDR], tdim[t], tpool[t])
    # move and tier change: rank a loses the old terms, b gains the new ones. Written as a
    # pair move of the old terms plus b's tier delta folded into b's values.
    ha = rk[R_HBM, a] - tt[t, ta, TT_HBM]
    hb = rk[R_HBM, b] + tt[t, tier, TT_HBM]
    xa = rk[R_DDR, a] - tt[t, ta, TT_DDR]
    xb = rk[R_DDR, b] + tt[t, tier, TT_DDR]
    if max(_excl2(tv, ti, S_HBM, a, b), max(ha, hb)) > c[C_USABLE] or \
            max(_excl2(tv, ti, S_DDR, a, b), max(xa, xb)) > c[C_DDR_CAP]:
        return math.inf
    lf = max(_excl2(tv, ti, S_LF, a, b),
             max(rk[R_LF, a] - tt[t, ta, TT_FWD], rk[R_LF, b] + tt[t, tier, TT_FWD]))
    lb = max(_excl2(tv, ti, S_LB, a, b),
             max(rk[R_LB, a] - tt[t, ta, TT_BWD], rk[R_LB, b] + tt[t, tier, TT_BWD]))
    xp = _x_pair(c, rk, fac, did, dsum, tv, ti, nb_v, nb_i, 0, a, b, tdim[t])
    xi = _x_pair(c, rk, fac, did, dsum, tv, ti, nb_v, nb_i, 1, a, b, tpool[t])
    return _step(c, max(0.0, lf), max(0.0, lb), xp, xi)


@_njit(inline="always")
def _ex2(v0, i0, v1, i1, v2, i2, e1, e2):
    """Largest of a top-3 list (values ``v``, indices ``i``) whose index is not ``e1``, ``e2``
    (scalars only, so the compiled loop keeps no array references per call)."""
    if i0 != e1 and i0 != e2:
        return v0
    if i1 != e1 and i1 != e2:
        return v1
    if i2 != e1 and i2 != e2:
        return v2
    return NEG


@_njit(inline="always")
def _mx(a, b):
    """``max`` as one select (``b`` on ties, as the reference's ``max`` keeps the first)."""
    return a if a > b else b


@_njit(inline="always")
def _mn(a, b):
    return a if a < b else b


@_njit
def score_batch(c, rk, fac, did, dsum, tv, ti, nb_v, nb_i, tt, tdim, tpool, prank, ptier,
                cand, out):
    """Score candidates ``cand`` (int64 ``(n, 4)``: table, rank, partner table or -1, tier)
    from the current state into ``out``; O(tiers) each, one flat loop (no per-candidate calls
    holding arrays). Same arithmetic as :func:`score_pair` / :func:`score_self`."""
    top = int(c[C_TOP])
    usable = c[C_USABLE]
    ddr_cap = c[C_DDR_CAP]
    feasible = c[C_FEASIBLE] > 0.0
    cur = c[C_STEP]
    for k in range(cand.shape[0]):
        t = cand[k, 0]
        b = cand[k, 1]
        u = cand[k, 2]
        tier = cand[k, 3]
        a = prank[t]
        ta = ptier[t]
        if u >= 0:
            b = prank[u]
            tb = ptier[u]
            if a == b:
                out[k] = cur
                continue
            # a loses t and gains u; b the reverse
            fa = tt[t, ta, TT_FWD] - tt[u, tb, TT_FWD]
            ba = tt[t, ta, TT_BWD] - tt[u, tb, TT_BWD]
            ha = tt[t, ta, TT_HBM] - tt[u, tb, TT_HBM]
            xa = tt[t, ta, TT_DDR] - tt[u, tb, TT_DDR]
            fb = fa
            bb = ba
            hb = ha
            xb = xa
            wp = tdim[t] - tdim[u]
            wi = tpool[t] - tpool[u]
        else:
            fa = tt[t, ta, TT_FWD]
            ba = tt[t, ta, TT_BWD]
            ha = tt[t, ta, TT_HBM]
            xa = tt[t, ta, TT_DDR]
            fb = tt[t, tier, TT_FWD]
            bb = tt[t, tier, TT_BWD]
            hb = tt[t, tier, TT_HBM]
            xb = tt[t, tier, TT_DDR]
            wp = tdim[t]
            wi = tpool[t]
            if a == b:
                if tier == ta:
                    out[k] = cur
                    continue
                # memory-tier change on rank a: the all-to-alls do not change
                h = rk[R_HBM, a] - ha + hb
                x = rk[R_DDR, a] - xa + xb
                if _mx(_ex2(tv[S_HBM, 0], ti[S_HBM, 0], tv[S_HBM, 1], ti[S_HBM, 1],
                            tv[S_HBM, 2], ti[S_HBM, 2], a, a), h) > usable or \
                        _mx(_ex2(tv[S_DDR, 0], ti[S_DDR, 0], tv[S_DDR, 1], ti[S_DDR, 1],
                                 tv[S_DDR, 2], ti[S_DDR, 2], a, a), x) > ddr_cap:
                    out[k] = math.inf
                    continue
                lf = _mx(_ex2(tv[S_LF, 0], ti[S_LF, 0], tv[S_LF, 1], ti[S_LF, 1],
                              tv[S_LF, 2], ti[S_LF, 2], a, a), rk[R_LF, a] - fa + fb)
                lb = _mx(_ex2(tv[S_LB, 0], ti[S_LB, 0], tv[S_LB, 1], ti[S_LB, 1],
                              tv[S_LB, 2], ti[S_LB, 2], a, a), rk[R_LB, a] - ba + bb)
                xq0 = 0.0
                xq1 = 0.0
                for i in range(top + 1):
                    v = _mx(tv[S_SEND + i, 0], tv[S_RECV + i, 0]) * c[C_INV_BW + i]
                    if v > xq0:
                        xq0 = v
                    v = _mx(tv[S_SEND + MAXT + i, 0], tv[S_RECV + MAXT + i, 0]) * c[C_INV_BW + i]
                    if v > xq1:
                        xq1 = v
                out[k] = _step(c, _mx(0.0, lf), _mx(0.0, lb), xq0, xq1)
                continue
        # rank a loses (fa, ba, ha, xa, wp, wi), rank b gains (fb, bb, hb, xb, wp, wi)
        h_a = rk[R_HBM, a] - ha
        h_b = rk[R_HBM, b] + hb
        x_a = rk[R_DDR, a] - xa
        x_b = rk[R_DDR, b] + xb
        hm = _mx(h_a, h_b)
        xm = _mx(x_a, x_b)
        if not feasible:  # other ranks may be over too
            hm = _mx(hm, _ex2(tv[S_HBM, 0], ti[S_HBM, 0], tv[S_HBM, 1], ti[S_HBM, 1],
                              tv[S_HBM, 2], ti[S_HBM, 2], a, b))
            xm = _mx(xm, _ex2(tv[S_DDR, 0], ti[S_DDR, 0], tv[S_DDR, 1], ti[S_DDR, 1],
                              tv[S_DDR, 2], ti[S_DDR, 2], a, b))
        if hm > usable or xm > ddr_cap:
            out[k] = math.inf
            continue
        lf = _mx(_ex2(tv[S_LF, 0], ti[S_LF, 0], tv[S_LF, 1], ti[S_LF, 1], tv[S_LF, 2],
                      ti[S_LF, 2], a, b), _mx(rk[R_LF, a] - fa, rk[R_LF, b] + fb))
        lb = _mx(_ex2(tv[S_LB, 0], ti[S_LB, 0], tv[S_LB, 1], ti[S_LB, 1], tv[S_LB, 2],
                      ti[S_LB, 2], a, b), _mx(rk[R_LB, a] - ba, rk[R_LB, b] + bb))
        xq0 = 0.0
        xq1 = 0.0
        for q in range(2):
            w = wp if q == 0 else wi
            row = R_OWN if q == 0 else R_IDX
            row0 = R_OWN0 if q == 0 else R_IDX
            tot = c[C_TOT_POOL] if q == 0 else c[C_TOT_IDX]
            worst = 0.0
            for i in range(top + 1):
                rr = row0 if i == 0 else row
                ss = S_SEND + q * MAXT + i
                sr = S_RECV + q * MAXT + i
                oa = rk[rr, a] - w
                ob = rk[rr, b] + w
                send = _mx(_ex2(tv[ss, 0], ti[ss, 0], tv[ss, 1], ti[ss, 1], tv[ss, 2],
                                ti[ss, 2], a, b), _mx(oa * fac[i, a], ob * fac[i, b]))
                da = did[i, a]
                db = did[i, b]
                if i == 0:
                    if da == db:
                        mn = NEG
                        for m in range(3):
                            j = nb_i[q, da, m]
                            if j != a and j != b:
                                mn = nb_v[q, da, m]
                                break
                        if mn == NEG:
                            mn = POS
                        mn = _mn(mn, _mn(oa, ob))
                        recv = _mx(_ex2(tv[sr, 0], ti[sr, 0], tv[sr, 1], ti[sr, 1],
                                        tv[sr, 2], ti[sr, 2], da, da), dsum[q, 0, da] - mn)
                    else:
                        mna = nb_v[q, da, 0] if nb_i[q, da, 0] != a else nb_v[q, da, 1]
                        mnb = nb_v[q, db, 0] if nb_i[q, db, 0] != b else nb_v[q, db, 1]
                        mna = _mn(mna, oa)
                        mnb = _mn(mnb, ob)
                        recv = _mx(_ex2(tv[sr, 0], ti[sr, 0], tv[sr, 1], ti[sr, 1],
                                        tv[sr, 2], ti[sr, 2], da, db),
                                   _mx(dsum[q, 0, da] - w - mna, dsum[q, 0, db] + w - mnb))
                elif da == db:
                    recv = tv[sr, 0]
                else:
                    recv = _mx(_ex2(tv[sr, 0], ti[sr, 0], tv[sr, 1], ti[sr, 1], tv[sr, 2],
                                    ti[sr, 2], da, db),
                               _mx(tot - (dsum[q, i, da] - w), tot - (dsum[q, i, db] + w)))
                v = _mx(send, recv) * c[C_INV_BW + i]
                if v > worst:
                    worst = v
            if q == 0:
                xq0 = worst
            else:
                xq1 = worst
        out[k] = _step(c, _mx(0.0, lf), _mx(0.0, lb), xq0, xq1)


@_njit
def apply_candidate(c, rk, fac, did, n_dom, dsum, tv, ti, nb_v, nb_i, tt, rec, rmask, tdim,
                    tpool, plan, prank, ptier, t, b, u, tier, step):
    """Apply a scored candidate to the plan and the state (O(W x tiers))."""
    a = prank[t]
    ta = ptier[t]
    if u >= 0:
        b = prank[u]
        tb = ptier[u]
        _shift(rk, tt, tdim, tpool, u, b, tb, -1.0)
        _shift(rk, tt, tdim, tpool, t, a, ta, -1.0)
        _shift(rk, tt, tdim, tpool, u, a, tb, 1.0)
        _shift(rk, tt, tdim, tpool, t, b, ta, 1.0)
        prank[u] = a
        prank[t] = b
        plan[D.PL_RANK, u] = a
        plan[D.PL_RANK, t] = b
    else:
        _shift(rk, tt, tdim, tpool, t, a, ta, -1.0)
        _shift(rk, tt, tdim, tpool, t, b, tier, 1.0)
        prank[t] = b
        ptier[t] = tier
        plan[D.PL_RANK, t] = b
        plan[D.PL_TIER, t] = tier
    c[C_STEP] = step
    c[C_FEASIBLE] = 1.0 if step < math.inf else 0.0
    rebuild(c, rk, fac, did, n_dom, dsum, tv, ti, nb_v, nb_i, rec, rmask)


@_njit(inline="always")
def _shift(rk, tt, tdim, tpool, t, r, tier, sgn):
    rk[R_LF, r] += sgn * tt[t, tier, TT_FWD]
    rk[R_LB, r] += sgn * tt[t, tier, TT_BWD]
    rk[R_HBM, r] += sgn * tt[t, tier, TT_HBM]
    rk[R_DDR, r] += sgn * tt[t, tier, TT_DDR]
    rk[R_OWN0, r] += sgn * tdim[t]
    rk[R_OWN, r] += sgn * tdim[t]
    rk[R_IDX, r] += sgn * tpool[t]


def prepare(sys, job, tables, plan):
    """Python helper: (state tuple, tdim, tpool, prank, ptier) for ``plan``."""
    st = init_state(sys, job, tables, plan)
    tdim = np.ascontiguousarray(tables[D.TAB_DIM], dtype=np.float64)
    tpool = np.ascontiguousarray(tables[D.TAB_POOLING], dtype=np.float64)
    prank = plan[D.PL_RANK].astype(np.int64)
    ptier = plan[D.PL_TIER].astype(np.int64)
    return st, tdim, tpool, prank, ptier


def score_candidates(sys, job, tables, plan, cand, backend="numba"):
    """Scores of candidates ``cand`` (int64 ``(n, 4)``: table, rank, partner or -1, tier), each
    from ``plan``; ``inf`` when out of memory. Table ``t`` (and a partner) must be
    table-wise. ``backend``: ``"numba"`` (:func:`score_batch`) or ``"c"``
    (``dl_score_moves``, which also checks every index)."""
    st, tdim, tpool, prank, ptier = prepare(sys, job, tables, plan)
    if backend == "c":
        from ..native.dlrm import score_moves as c_score

        return c_score(st, tdim, tpool, prank, ptier, cand)
    if backend != "numba":
        raise ValueError(f"backend: unknown {backend!r} for move scoring (allowed: c, numba)")
    c, rk, fac, did, n_dom, dsum, tv, ti, nb_v, nb_i, tt, rec, rmask, status = st
    out = np.empty(cand.shape[0])
    score_batch(c, rk, fac, did, dsum, tv, ti, nb_v, nb_i, tt, tdim, tpool, prank, ptier,
                np.ascontiguousarray(cand, dtype=np.int64), out)
    return out


def score_moves(sys, job, tables, plan, moves, backend="numba"):
    """Incremental scores of ``moves`` (int64 ``(n, 3)``: table, rank, tier), each from
    ``plan``; for tests and benches."""
    moves = np.asarray(moves, dtype=np.int64)
    cand = np.empty((moves.shape[0], 4), np.int64)
    cand[:, 0] = moves[:, 0]
    cand[:, 1] = moves[:, 1]
    cand[:, 2] = -1
    cand[:, 3] = moves[:, 2]
    return score_candidates(sys, job, tables, plan, cand, backend)


@_njit
def _load(rk, r):
    return rk[R_LF, r] + rk[R_LB, r]


def _no_c(*args):  # stands in for dl_score_moves when the numba scorer runs (never called)
    return -1


_NO_C = None


def scorer(backend=None):
    """(use_c, ctypes function) for :func:`evolve`: the C scorer ``dl_score_moves`` when
    ``backend`` is ``"c"`` or ``None`` with the C extension built, else numba's
    :func:`score_batch` (with a stand-in function of the same type, never called)."""
    global _NO_C
    from .evaluation import native_available

    if backend not in (None, "c", "numba"):
        raise ValueError(f"backend: unknown {backend!r} for move scoring (allowed: c, numba)")
    if backend == "c" or (backend is None and native_available()):
        from ..native.dlrm import score_moves_cfunc

        return True, score_moves_cfunc()
    if _NO_C is None:
        from ..native.dlrm import score_moves_proto

        _NO_C = score_moves_proto()(_no_c)
    return False, _NO_C


def evolve(sys, job, tables, plan, movable, n_scores, seed, batch, tier_moves, swap_frac,
           hot_frac, backend=None):
    """Batched hill climbing; see :func:`_evolve`. Candidates are scored by the C kernel
    (``dl_score_moves``) when it is built (``backend`` None or ``"c"``), else by numba's
    :func:`score_batch`; both give the same scores, so the same plan."""
    use_c, cfn = scorer(backend)
    return _evolve(sys, job, tables, plan, movable, n_scores, seed, batch, tier_moves,
                   swap_frac, hot_frac, cfn, use_c)


@_njit
def _evolve(sys, job, tables, plan, movable, n_scores, seed, batch, tier_moves, swap_frac,
            hot_frac, cfn, use_c):
    """Batched hill climbing over table-wise tables (``movable``): each round draws ``batch``
    candidates (moves to a rank, swaps with another table, memory-tier changes), a fraction
    ``hot_frac`` of them taking a table off a bottleneck rank (the top of the lookup or a send
    list), scores them in O(1) each, and applies the best if it lowers the step -- or, at an
    equal step, if it evens out the two ranks' lookup load (sideways moves across plateaus of
    the max). Returns (step, scored, accepted); ``plan`` holds the result."""
    np.random.seed(seed)
    world = int(job[D.DJOB_WORLD])
    c, rk, fac, did, n_dom, dsum, tv, ti, nb_v, nb_i, tt, rec, rmask, status = init_state(
        sys, job, tables, plan)
    n_m = movable.shape[0]
    if n_m == 0 or world < 2:
        return c[C_STEP], 0, 0
    n_t = tables.shape[1]
    tdim = np.empty(n_t)
    tpool = np.empty(n_t)
    prank = np.empty(n_t, dtype=np.int64)
    ptier = np.empty(n_t, dtype=np.int64)
    for t in range(n_t):
        tdim[t] = tables[D.TAB_DIM, t]
        tpool[t] = tables[D.TAB_POOLING, t]
        prank[t] = plan[D.PL_RANK, t]
        ptier[t] = plan[D.PL_TIER, t]
    # movable tables per rank (unordered lists with positions)
    cnt = np.zeros(world, dtype=np.int64)
    lists = np.empty((world, n_m), dtype=np.int64)
    pos = np.empty(n_t, dtype=np.int64)
    for j in range(n_m):
        t = movable[j]
        r = prank[t]
        lists[r, cnt[r]] = t
        pos[t] = cnt[r]
        cnt[r] += 1
    top = int(c[C_TOP])
    cand = np.empty((batch, 4), dtype=np.int64)
    out = np.empty(batch)
    scored = 0
    accepted = 0
    while scored < n_scores:
        k = min(batch, n_scores - scored)
        _draw(cand, k, movable, lists, cnt, prank, ptier, ti, top, world, tier_moves,
              swap_frac, hot_frac)
        if use_c:
            rc = cfn(c.ctypes, rk.ctypes, fac.ctypes, did.ctypes, dsum.ctypes, tv.ctypes,
                     ti.ctypes, nb_v.ctypes, nb_i.ctypes, tt.ctypes, rec.ctypes, rmask.ctypes,
                     rec.shape[1], tdim.ctypes, tpool.ctypes, prank.ctypes, ptier.ctypes,
                     world, n_t, cand.ctypes, k, out.ctypes)
            if rc != 0:
                raise ValueError("dl_score_moves: a candidate or the state out of range")
        else:
            score_batch(c, rk, fac, did, dsum, tv, ti, nb_v, nb_i, tt, tdim, tpool, prank,
                        ptier, cand[:k], out[:k])
        scored += k
        cur = c[C_STEP]
        best = -1
        best_s = math.inf
        best_tie = 0.0
        for j in range(k):
            s = out[j]
            if s > cur * (1.0 + 1e-12) or s == math.inf:
                continue
            # tie-break: change of the larger lookup load of the two ranks involved
            t = cand[j, 0]
            u = cand[j, 2]
            a = prank[t]
            if u >= 0:
                b = prank[u]
                d = tt[t, ptier[t], TT_FWD] + tt[t, ptier[t], TT_BWD] \
                    - tt[u, ptier[u], TT_FWD] - tt[u, ptier[u], TT_BWD]
            else:
                b = cand[j, 1]
                d = tt[t, ptier[t], TT_FWD] + tt[t, ptier[t], TT_BWD]
            if a == b:
                tie = 0.0 if u >= 0 else (tt[t, cand[j, 3], TT_FWD] - tt[t, ptier[t], TT_FWD])
            else:
                la = _load(rk, a)
                lb_ = _load(rk, b)
                tie = max(la - d, lb_ + d) - max(la, lb_)
            if s < best_s * (1.0 - 1e-12) or (s <= best_s * (1.0 + 1e-12) and tie < best_tie):
                best = j
                best_s = s
                best_tie = tie
        if best < 0:
            continue
        if best_s < cur * (1.0 - 1e-12) or best_tie < 0.0:
            t = cand[best, 0]
            u = cand[best, 2]
            a = prank[t]
            b = prank[u] if u >= 0 else cand[best, 1]
            apply_candidate(c, rk, fac, did, n_dom, dsum, tv, ti, nb_v, nb_i, tt, rec, rmask,
                            tdim, tpool, plan, prank, ptier, t, cand[best, 1], u, cand[best, 3],
                            best_s)
            if a != b:
                _relist(lists, cnt, pos, t, a, b)
                if u >= 0:
                    _relist(lists, cnt, pos, u, b, a)
            accepted += 1
    return c[C_STEP], scored, accepted


@_njit(inline="always")
def _draw(cand, k, movable, lists, cnt, prank, ptier, ti, top, world, tier_moves, swap_frac,
          hot_frac):
    """Draw :func:`_evolve`'s next ``k`` candidates into ``cand`` (numba's global RNG):
    a table-wise table (a fraction ``hot_frac`` off a bottleneck rank: the head of the lookup
    or a send list), then a swap with another (``swap_frac``), a memory-tier change in place
    (0.05, with ``tier_moves``) or a move to another rank."""
    n_m = movable.shape[0]
    for j in range(k):
        t = movable[np.random.randint(n_m)]
        if np.random.random() < hot_frac:
            s = np.random.randint(2 + 2 * (top + 1))
            if s == 0:
                h = ti[S_LF, 0]
            elif s == 1:
                h = ti[S_LB, 0]
            else:
                q = (s - 2) // (top + 1)
                h = ti[S_SEND + q * MAXT + (s - 2) % (top + 1), 0]
            if h >= 0 and cnt[h] > 0:
                t = lists[h, np.random.randint(cnt[h])]
        cand[j, 0] = t
        cand[j, 2] = -1
        cand[j, 3] = ptier[t]
        x = np.random.random()
        if x < swap_frac:
            cand[j, 2] = movable[np.random.randint(n_m)]
            cand[j, 1] = prank[t]
        elif tier_moves and x < swap_frac + 0.05:
            cand[j, 1] = prank[t]
            cand[j, 3] = np.random.randint(3)
        else:
            b = np.random.randint(world - 1)
            if b >= prank[t]:
                b += 1
            cand[j, 1] = b


@_njit
def planner_candidates(ti, c, plan, movable, n, seed, tier_moves=True, swap_frac=0.25,
                       hot_frac=0.5):
    """``n`` candidates drawn as :func:`_evolve` draws them (its defaults: the planner's
    mix) from the state ``(ti, c)`` of ``plan``, for benches: int64 ``(n, 4)``, or ``(0, 4)``
    when no table is movable or there is one rank."""
    np.random.seed(seed)
    world = int(c[C_WORLD])
    top = int(c[C_TOP])
    n_t = plan.shape[1]
    n_m = movable.shape[0]
    prank = np.empty(n_t, dtype=np.int64)
    ptier = np.empty(n_t, dtype=np.int64)
    for t in range(n_t):
        prank[t] = plan[D.PL_RANK, t]
        ptier[t] = plan[D.PL_TIER, t]
    cnt = np.zeros(world, dtype=np.int64)
    lists = np.empty((world, max(n_m, 1)), dtype=np.int64)
    for j in range(n_m):
        t = movable[j]
        r = prank[t]
        lists[r, cnt[r]] = t
        cnt[r] += 1
    if n_m == 0 or world < 2:  # nothing to move (as _evolve)
        return np.empty((0, 4), dtype=np.int64)
    cand = np.empty((n, 4), dtype=np.int64)
    _draw(cand, n, movable, lists, cnt, prank, ptier, ti, top, world, tier_moves, swap_frac,
          hot_frac)
    return cand


@_njit
def _relist(lists, cnt, pos, t, a, b):
    p = pos[t]
    last = lists[a, cnt[a] - 1]
    lists[a, p] = last
    pos[last] = p
    cnt[a] -= 1
    lists[b, cnt[b]] = t
    pos[t] = cnt[b]
    cnt[b] += 1


@_njit
def score_random(c, rk, fac, did, dsum, tv, ti, nb_v, nb_i, tt, tdim, tpool, prank, ptier,
                 cand, out, reps):
    """Bench helper: score the candidate batch ``reps`` times; returns the sum of the finite
    scores of the last pass (so nothing is optimized away)."""
    for _ in range(reps):
        score_batch(c, rk, fac, did, dsum, tv, ti, nb_v, nb_i, tt, tdim, tpool, prank, ptier,
                    cand, out)
    acc = 0.0
    for k in range(out.shape[0]):
        if out[k] < math.inf:
            acc += out[k]
    return acc

