"""O(1) scoring of single-table moves for the evolutionary planner (numba).

A move takes a table-wise table from rank ``a`` to rank ``b`` (or changes its memory tier,
``a == b``). It changes the per-rank values of two ranks and the owned-weight sums of at most two
domains per tier, so the new step time follows from the current per-rank state and a few
top-3 lists (largest values per quantity, with their rank / domain), without visiting the other
ranks: O(tiers) per move, independent of tables and ranks. The score is exactly the step time
:func:`trainscape.dlrm.reference.evaluate_plan` gives the moved plan (``tests/test_dlrm_planner``
checks this). Accepting a move rebuilds the lists in O(W x tiers).
"""

from __future__ import annotations

import math

import numba
import numpy as np

from ..layout import SYS_HBM_BYTES, SYS_HBM_RESERVE_BYTES
from ..layout import N_TIER, SYS_N_TIERS, SYS_TIER_BASE, TIER_SIZE
from . import layout as D
from .numba_kernel import JIT

lookup_bytes = JIT["lookup_bytes"]
lookup_seconds_per_byte = JIT["lookup_seconds_per_byte"]
shard_state_bytes = JIT["shard_state_bytes"]
tier_span = JIT["tier_span"]
tier_link_bandwidth = JIT["tier_link_bandwidth"]
tier_latency = JIT["tier_latency"]
group_top_tier = JIT["group_top_tier"]
evaluate_plan = JIT["evaluate_plan"]

MAXT = 6
NEG = -1.0e300
# scalar slots of the state vector
C_TOP, C_LAT, C_UNIT_IDX, C_UNIT_FWD, C_UNIT_BWD, C_CONST_FWD, C_CONST_BWD, C_DENSE_AR, \
    C_USABLE, C_DDR_CAP, C_WORLD, C_UNI_IDX = range(12)
N_C = 12
# rank rows of the state matrix
R_LF, R_LB, R_HBM, R_DDR, R_OWN0, R_OWN, R_IDX, R_CNT0, R_LOAD = range(9)
N_R = 9
# structure ids: 0 lf, 1 lb, 2 hbm, 3 ddr, then send[q][i], recv[q][i]
S_LF, S_LB, S_HBM, S_DDR = range(4)
S_SEND = 4
S_RECV = 4 + 2 * MAXT
N_S = 4 + 4 * MAXT


@numba.njit(cache=True)
def _dom(r, span, world):
    if span >= world:
        return 0
    return int(math.floor(r / span))


@numba.njit(cache=True)
def _dom_cnt(r, span, world):
    if span >= world:
        return world * 1.0
    lo = math.floor(r / span) * span
    return min(world * 1.0, lo + span) - lo


@numba.njit(cache=True)
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


@numba.njit(cache=True)
def _top_excl(tv, ti, s, e1, e2):
    for k in range(3):
        if ti[s, k] != e1 and ti[s, k] != e2:
            return tv[s, k]
    return NEG


@numba.njit(cache=True)
def _send_factor(sys, world, r, i):
    """Peers rank ``r`` sends to across tier ``i`` per unit of owned weight."""
    if i == 0:
        return _dom_cnt(r, tier_span(sys, 0), world) - 1.0
    return world - _dom_cnt(r, tier_span(sys, i - 1), world)


@numba.njit(cache=True)
def rebuild(sys, c, rk, dom, tv, ti, nb_v, nb_i):
    """Recompute domain sums and all top-3 lists from the per-rank rows (O(W x tiers))."""
    world = int(c[C_WORLD])
    top = int(c[C_TOP])
    tv[:, :] = NEG
    ti[:, :] = -1
    dom[:, :, :] = 0.0
    nb_v[:, :, :] = 1.0e300
    nb_i[:, :, :] = -1
    for r in range(world):
        _push_top(tv, ti, S_LF, rk[R_LF, r], r)
        _push_top(tv, ti, S_LB, rk[R_LB, r], r)
        _push_top(tv, ti, S_HBM, rk[R_HBM, r], r)
        _push_top(tv, ti, S_DDR, rk[R_DDR, r], r)
        for i in range(top + 1):
            f = _send_factor(sys, world, r, i)
            if i == 0:
                _push_top(tv, ti, S_SEND + i, rk[R_OWN0, r] * f, r)
            else:
                _push_top(tv, ti, S_SEND + i, rk[R_OWN, r] * f, r)
            _push_top(tv, ti, S_SEND + MAXT + i, rk[R_IDX, r] * f, r)
        # domain sums at every level l (tier-l domains); level 0 also for own0 (slot q=2)
        for lv in range(max(top, 1)):
            d = _dom(r, tier_span(sys, lv), world)
            dom[0, lv, d] += rk[R_OWN, r]
            dom[1, lv, d] += rk[R_IDX, r]
        d0 = _dom(r, tier_span(sys, 0), world)
        dom[2, 0, d0] += rk[R_OWN0, r]
        # node bottom-3 of own0 (q=0) and own idx (q=1): push negated values
        for q in range(2):
            v = rk[R_OWN0, r] if q == 0 else rk[R_IDX, r]
            # keep smallest: store -v in a top list
            if -v > -nb_v[q, d0, 2]:
                if -v > -nb_v[q, d0, 1]:
                    nb_v[q, d0, 2] = nb_v[q, d0, 1]
                    nb_i[q, d0, 2] = nb_i[q, d0, 1]
                    if -v > -nb_v[q, d0, 0]:
                        nb_v[q, d0, 1] = nb_v[q, d0, 0]
                        nb_i[q, d0, 1] = nb_i[q, d0, 0]
                        nb_v[q, d0, 0] = v
                        nb_i[q, d0, 0] = r
                    else:
                        nb_v[q, d0, 1] = v
                        nb_i[q, d0, 1] = r
                else:
                    nb_v[q, d0, 2] = v
                    nb_i[q, d0, 2] = r
    n_dom0 = _dom(world - 1, tier_span(sys, 0), world) + 1
    for q in range(2):
        # tier-0 receive per node: Dom0 - min own0 in the node
        for n in range(n_dom0):
            d0sum = dom[2, 0, n] if q == 0 else dom[1, 0, n]
            _push_top(tv, ti, S_RECV + q * MAXT, d0sum - nb_v[q, n, 0], n)
        for i in range(1, top + 1):
            lv = i - 1
            n_dom = _dom(world - 1, tier_span(sys, lv), world) + 1
            tot = 0.0
            for n in range(n_dom):
                tot += dom[q, lv, n]
            for n in range(n_dom):
                _push_top(tv, ti, S_RECV + q * MAXT + i, tot - dom[q, lv, n], n)


@numba.njit(cache=True)
def _node_min_excl(nb_v, nb_i, q, n, e1, e2):
    for k in range(3):
        if nb_i[q, n, k] != e1 and nb_i[q, n, k] != e2:
            return nb_v[q, n, k]
    return 1.0e300


@numba.njit(cache=True)
def _x_units(sys, c, rk, dom, tv, ti, nb_v, nb_i, q, a, b, w):
    """Busiest rank's all-to-all (per unit byte) after moving weight ``w`` of kind ``q``
    (0 pooled dims, 1 indices) from rank ``a`` to ``b``."""
    world = int(c[C_WORLD])
    top = int(c[C_TOP])
    row0 = R_OWN0 if q == 0 else R_IDX
    row = R_OWN if q == 0 else R_IDX
    dq = 2 if q == 0 else 1
    worst = 0.0
    for i in range(top + 1):
        f_a = _send_factor(sys, world, a, i)
        f_b = _send_factor(sys, world, b, i)
        rr = row0 if i == 0 else row
        if a == b:
            send = max(_top_excl(tv, ti, S_SEND + q * MAXT + i, a, a), rk[rr, a] * f_a)
        else:
            send = max(_top_excl(tv, ti, S_SEND + q * MAXT + i, a, b),
                       max((rk[rr, a] - w) * f_a, (rk[rr, b] + w) * f_b))
        s_id = S_RECV + q * MAXT + i
        if i == 0:
            span = tier_span(sys, 0)
            na = _dom(a, span, world)
            nb = _dom(b, span, world)
            if a == b:
                recv = tv[s_id, 0]
            elif na == nb:
                mn = min(_node_min_excl(nb_v, nb_i, q, na, a, b),
                         min(rk[row0, a] - w, rk[row0, b] + w))
                recv = max(_top_excl(tv, ti, s_id, na, na), dom[dq, 0, na] - mn)
            else:
                mna = min(_node_min_excl(nb_v, nb_i, q, na, a, a), rk[row0, a] - w)
                mnb = min(_node_min_excl(nb_v, nb_i, q, nb, b, b), rk[row0, b] + w)
                recv = max(_top_excl(tv, ti, s_id, na, nb),
                           max(dom[dq, 0, na] - w - mna, dom[dq, 0, nb] + w - mnb))
        else:
            lv = i - 1
            span = tier_span(sys, lv)
            da = _dom(a, span, world)
            db = _dom(b, span, world)
            if a == b or da == db:
                recv = tv[s_id, 0]
            else:
                # total unchanged: recv = tot - dom; top list holds tot - dom
                tot_minus_da = tv_value_of(tv, ti, s_id, da, dom, q, lv)
                recv = max(_top_excl(tv, ti, s_id, da, db),
                           max(tot_minus_da + w, tv_value_of(tv, ti, s_id, db, dom, q, lv) - w))
        t = max(send, recv) / tier_link_bandwidth(sys, i)
        if t > worst:
            worst = t
    return worst


@numba.njit(cache=True)
def tv_value_of(tv, ti, s_id, d, dom, q, lv):
    """``total - dom`` of domain ``d`` at level ``lv`` (the total is the top entry's sum)."""
    # total = value + dom of any listed domain
    k0 = ti[s_id, 0]
    tot = tv[s_id, 0] + dom[q, lv, k0]
    return tot - dom[q, lv, d]


@numba.njit(cache=True)
def score_move(sys, c, rk, dom, tv, ti, nb_v, nb_i, a, b, w_pool, w_idx,
               dlf_a, dlf_b, dlb_a, dlb_b, dh_a, dh_b, dd_a, dd_b):
    """Step time after a move (``inf`` when it runs out of memory). ``a == b``: deltas in
    ``*_a`` only."""
    if a == b:
        lf = max(_top_excl(tv, ti, S_LF, a, a), rk[R_LF, a] + dlf_a)
        lb = max(_top_excl(tv, ti, S_LB, a, a), rk[R_LB, a] + dlb_a)
        hb = max(_top_excl(tv, ti, S_HBM, a, a), rk[R_HBM, a] + dh_a)
        dd = max(_top_excl(tv, ti, S_DDR, a, a), rk[R_DDR, a] + dd_a)
    else:
        lf = max(_top_excl(tv, ti, S_LF, a, b), max(rk[R_LF, a] + dlf_a, rk[R_LF, b] + dlf_b))
        lb = max(_top_excl(tv, ti, S_LB, a, b), max(rk[R_LB, a] + dlb_a, rk[R_LB, b] + dlb_b))
        hb = max(_top_excl(tv, ti, S_HBM, a, b), max(rk[R_HBM, a] + dh_a, rk[R_HBM, b] + dh_b))
        dd = max(_top_excl(tv, ti, S_DDR, a, b), max(rk[R_DDR, a] + dd_a, rk[R_DDR, b] + dd_b))
    if hb > c[C_USABLE] or dd > c[C_DDR_CAP]:
        return math.inf
    xp = _x_units(sys, c, rk, dom, tv, ti, nb_v, nb_i, 0, a, b, w_pool)
    xi = _x_units(sys, c, rk, dom, tv, ti, nb_v, nb_i, 1, a, b, w_idx)
    idx = 0.0
    if xi > 0.0:
        idx = c[C_LAT] + c[C_UNIT_IDX] * xi
    af = 0.0
    ab = 0.0
    if xp > 0.0:
        af = c[C_LAT] + c[C_UNIT_FWD] * xp
        ab = c[C_LAT] + c[C_UNIT_BWD] * xp
    emb_bwd = ab + lb + c[C_CONST_BWD]
    return idx + lf + af + c[C_CONST_FWD] + emb_bwd + max(0.0, c[C_DENSE_AR] - emb_bwd)


@numba.njit(cache=True)
def init_state(sys, job, tables, plan, work, out1):
    """Evaluate ``plan`` fully and build the incremental state. Returns (c, rk, dom, tv, ti,
    nb_v, nb_i, status)."""
    world = int(job[D.DJOB_WORLD])
    status = evaluate_plan(sys, job, tables, plan, work, out1, 0)
    c = np.zeros(N_C)
    rk = np.zeros((N_R, world))
    n_t = int(sys[SYS_N_TIERS])
    dom = np.zeros((3, max(n_t, 1), world))
    tv = np.zeros((N_S, 3))
    ti = np.zeros((N_S, 3), dtype=np.int64)
    nb_v = np.zeros((2, world, 3))
    nb_i = np.zeros((2, world, 3), dtype=np.int64)
    wf = world * 1.0
    uni_idx = 0.0
    for t in range(tables.shape[1]):
        if plan[D.PL_KIND, t] == D.SH_RW:
            uni_idx += tables[D.TAB_POOLING, t] / wf
    top = group_top_tier(sys, wf, 1.0, 1.0, 1.0, 1.0, 1.0)
    c[C_TOP] = top
    c[C_LAT] = tier_latency(sys, top) if top >= 0 else 0.0
    local = job[D.DJOB_GLOBAL_BATCH] / wf
    c[C_UNIT_IDX] = local * job[D.DJOB_INDEX_BYTES]
    c[C_UNIT_FWD] = local * job[D.DJOB_COMM_FWD_BYTES]
    c[C_UNIT_BWD] = local * job[D.DJOB_COMM_BWD_BYTES]
    c[C_CONST_FWD] = out1[D.DO_RS_FWD_S, 0] + out1[D.DO_DENSE_FWD_S, 0] + out1[D.DO_DENSE_BWD_S, 0]
    c[C_CONST_BWD] = out1[D.DO_AG_BWD_S, 0] + out1[D.DO_DP_ALLREDUCE_S, 0]
    c[C_DENSE_AR] = out1[D.DO_DENSE_ALLREDUCE_S, 0]
    c[C_USABLE] = sys[SYS_HBM_BYTES] - sys[SYS_HBM_RESERVE_BYTES]
    c[C_DDR_CAP] = job[D.DJOB_DDR_BYTES]
    c[C_WORLD] = world
    c[C_UNI_IDX] = uni_idx
    for r in range(world):
        rk[R_LF, r] = work[D.RK_LOOKUP_FWD_S, r]
        rk[R_LB, r] = work[D.RK_LOOKUP_BWD_S, r]
        rk[R_HBM, r] = work[D.RK_HBM_BYTES, r]
        rk[R_DDR, r] = work[D.RK_DDR_BYTES, r]
        rk[R_OWN0, r] = work[D.RK_OWN_DIM0, r]
        rk[R_OWN, r] = work[D.RK_OWN_DIM, r]
        rk[R_IDX, r] = work[D.RK_OWN_IDX, r] + uni_idx
    rebuild(sys, c, rk, dom, tv, ti, nb_v, nb_i)
    return c, rk, dom, tv, ti, nb_v, nb_i, status


@numba.njit(cache=True)
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
    fwd = lookup_bytes(batch * pool, dim, eb, ib, batch, cbf) * spb
    state = shard_state_bytes(rows, dim, eb, job[D.DJOB_OPT_ROW_BYTES], job[D.DJOB_OPT_ELEM_BYTES])
    buf = batch * pool * ib + 2.0 * batch * dim * cbf
    if tier == D.MT_HBM:
        return fwd, job[D.DJOB_BWD_MULTIPLIER] * fwd, state + buf, 0.0
    if tier == D.MT_UVM:
        return fwd, job[D.DJOB_BWD_MULTIPLIER] * fwd, \
            job[D.DJOB_UVM_CACHE_FRACTION] * rows * dim * eb + buf, state
    return fwd, job[D.DJOB_BWD_MULTIPLIER] * fwd, buf, state


@numba.njit(cache=True)
def propose_score(sys, job, tables, plan, c, rk, dom, tv, ti, nb_v, nb_i, t, b, tier):
    """Score moving table-wise table ``t`` to rank ``b`` and tier ``tier``."""
    a = plan[D.PL_RANK, t]
    old = plan[D.PL_TIER, t]
    f0, b0, h0, d0 = table_terms(sys, job, tables, t, old)
    f1, b1, h1, d1 = table_terms(sys, job, tables, t, tier)
    if a == b:
        return score_move(sys, c, rk, dom, tv, ti, nb_v, nb_i, a, a, 0.0, 0.0,
                          f1 - f0, 0.0, b1 - b0, 0.0, h1 - h0, 0.0, d1 - d0, 0.0)
    return score_move(sys, c, rk, dom, tv, ti, nb_v, nb_i, a, b, tables[D.TAB_DIM, t],
                      tables[D.TAB_POOLING, t], -f0, f1, -b0, b1, -h0, h1, -d0, d1)


@numba.njit(cache=True)
def apply_move(sys, job, tables, plan, c, rk, dom, tv, ti, nb_v, nb_i, t, b, tier):
    a = plan[D.PL_RANK, t]
    old = plan[D.PL_TIER, t]
    f0, b0, h0, d0 = table_terms(sys, job, tables, t, old)
    f1, b1, h1, d1 = table_terms(sys, job, tables, t, tier)
    dim = tables[D.TAB_DIM, t]
    pool = tables[D.TAB_POOLING, t]
    rk[R_LF, a] -= f0
    rk[R_LB, a] -= b0
    rk[R_HBM, a] -= h0
    rk[R_DDR, a] -= d0
    rk[R_LF, b] += f1
    rk[R_LB, b] += b1
    rk[R_HBM, b] += h1
    rk[R_DDR, b] += d1
    if a != b:
        rk[R_OWN0, a] -= dim
        rk[R_OWN, a] -= dim
        rk[R_IDX, a] -= pool
        rk[R_OWN0, b] += dim
        rk[R_OWN, b] += dim
        rk[R_IDX, b] += pool
    plan[D.PL_RANK, t] = b
    plan[D.PL_TIER, t] = tier
    rebuild(sys, c, rk, dom, tv, ti, nb_v, nb_i)


@numba.njit(cache=True)
def evolve(sys, job, tables, plan, movable, iters, seed, tier_moves, time_budget_iters):
    """Hill climbing with sideways moves toward balance over single-table moves of the
    table-wise tables in ``movable``. Returns (best step, moves scored, moves accepted); ``plan``
    holds the best plan."""
    np.random.seed(seed)
    world = int(job[D.DJOB_WORLD])
    work = np.zeros((D.N_RANK, world + 1))
    out1 = np.zeros((D.N_DOUT, 1))
    c, rk, dom, tv, ti, nb_v, nb_i, status = init_state(sys, job, tables, plan, work, out1)
    cur = out1[D.DO_STEP_TIME_S, 0]
    if status != 0:
        cur = math.inf
    n_m = movable.shape[0]
    if n_m == 0 or world < 2:
        return cur, 0, 0
    scored = 0
    accepted = 0
    for it in range(iters):
        t = movable[np.random.randint(n_m)]
        a = plan[D.PL_RANK, t]
        tier = plan[D.PL_TIER, t]
        if tier_moves and np.random.random() < 0.1:
            b = a
            tier = np.random.randint(3)
        else:
            b = np.random.randint(world - 1)
            if b >= a:
                b += 1
        s = propose_score(sys, job, tables, plan, c, rk, dom, tv, ti, nb_v, nb_i, t, b, tier)
        scored += 1
        if s < cur * (1.0 - 1e-12):
            apply_move(sys, job, tables, plan, c, rk, dom, tv, ti, nb_v, nb_i, t, b, tier)
            cur = s
            accepted += 1
        elif s <= cur and a != b:
            # sideways: accept when it makes the pair more even (lookups + owned traffic)
            la = rk[R_LF, a] + rk[R_LB, a]
            lb_ = rk[R_LF, b] + rk[R_LB, b]
            f0, b0, h0, d0 = table_terms(sys, job, tables, t, plan[D.PL_TIER, t])
            f1, b1, h1, d1 = table_terms(sys, job, tables, t, tier)
            if max(la - f0 - b0, lb_ + f1 + b1) < max(la, lb_):
                apply_move(sys, job, tables, plan, c, rk, dom, tv, ti, nb_v, nb_i, t, b, tier)
                cur = s
                accepted += 1
    return cur, scored, accepted


@numba.njit(cache=True)
def score_random_moves(sys, job, tables, plan, movable, n, seed):
    """Bench helper: score ``n`` random moves without applying them; returns the sum."""
    np.random.seed(seed)
    world = int(job[D.DJOB_WORLD])
    work = np.zeros((D.N_RANK, world + 1))
    out1 = np.zeros((D.N_DOUT, 1))
    c, rk, dom, tv, ti, nb_v, nb_i, status = init_state(sys, job, tables, plan, work, out1)
    acc = 0.0
    n_m = movable.shape[0]
    for k in range(n):
        t = movable[np.random.randint(n_m)]
        b = np.random.randint(world)
        s = propose_score(sys, job, tables, plan, c, rk, dom, tv, ti, nb_v, nb_i, t, b,
                          plan[D.PL_TIER, t])
        if s < math.inf:
            acc += s
    return acc


_unused = (N_TIER, SYS_TIER_BASE, TIER_SIZE)


@numba.njit(cache=True)
def score_moves(sys, job, tables, plan, moves):
    """Incremental scores of ``moves`` (int64 ``(n, 3)``: table, rank, tier), each from
    ``plan``; for tests and benches."""
    world = int(job[D.DJOB_WORLD])
    work = np.zeros((D.N_RANK, world + 1))
    out1 = np.zeros((D.N_DOUT, 1))
    c, rk, dom, tv, ti, nb_v, nb_i, status = init_state(sys, job, tables, plan, work, out1)
    res = np.empty(moves.shape[0])
    for k in range(moves.shape[0]):
        res[k] = propose_score(sys, job, tables, plan, c, rk, dom, tv, ti, nb_v, nb_i,
                               moves[k, 0], moves[k, 1], moves[k, 2])
    return res
