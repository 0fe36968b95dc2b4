"""Lower bounds of the DLRM step time over every plan: the proved :func:`lower_bound` (its
proof in the docstring) and the issue's even-spread figure, a bound only under the
conditions in :func:`even_spread_bound`'s docstring."""

from __future__ import annotations

import math

import numpy as np

from .. import layout as L
from ..model.collectives import (
    all_gather_time,
    all_reduce_time,
    all_to_all_time,
    reduce_scatter_time,
)
from ..model.network import group_top_tier, tier_link_bandwidth
from . import layout as D
from .reference import (
    dense_bwd_time,
    dense_fwd_time,
    dense_memory_bytes,
    exposed_after_overlap,
    lookup_bytes,
    lookup_seconds_per_byte,
    rw_collective_time,
)
from .estimates import _cols
from .spec import DlrmScenario


def even_spread_bound(sc: DlrmScenario) -> float:
    """The issue's "total work spread evenly": every table table-wise in HBM with its lookups
    and owned dims / indices spread evenly over the ranks (``all_to_all_time`` of the even
    shares). Kept for reports; :func:`lower_bound` is the bound for every plan.

    It *is* a lower bound of every plan whose tables are all table-, column- or
    table-row-wise in HBM, when the world is a whole number of tier-0 domains and, if a
    table-row-wise table is present, ``kappa1 >= kappa0`` (:func:`_a2a_kappas`): then the
    summed lookups are at least the even ones (column- and table-row-wise only add reads and
    writes), the index and pooled weights sum to at least ``sum p`` and ``sum d`` on every
    tier (tier 0 aside for table-row-wise, hence the condition), each busiest rank is at
    least the average, which is then exactly ``all_to_all_time`` of the even shares, every
    other term is >= 0 and ``max(Bk, AR)`` grows with ``Bk``. It is *not* one in general:
    data-parallel tables pay no all-to-all (their all-reduce overlaps the dense one) and
    row-wise ones a collective instead, so e.g. all-data-parallel small tables beat it
    (``tests/test_dlrm_planner.py`` has both cases); it also ignores HBM capacity."""
    sys, j, w = sc.sys, sc.job, sc.world
    rows, dim, pool, hit = _cols(sc)
    b = j[D.DJOB_GLOBAL_BATCH]
    spb = lookup_seconds_per_byte(sys, j, D.MT_HBM, 1.0)
    lf = sum(lookup_bytes(b * p, d, j[D.DJOB_EMB_BYTES], j[D.DJOB_INDEX_BYTES], b,
                          j[D.DJOB_COMM_FWD_BYTES]) for p, d in zip(pool, dim)) * spb / w
    lb = j[D.DJOB_BWD_MULTIPLIER] * lf
    wf = float(w)
    a2a_f = all_to_all_time(sys, b * dim.sum() / w * j[D.DJOB_COMM_FWD_BYTES], wf, 1, 1, 1, 1, 1)
    a2a_b = all_to_all_time(sys, b * dim.sum() / w * j[D.DJOB_COMM_BWD_BYTES], wf, 1, 1, 1, 1, 1)
    idx = all_to_all_time(sys, b * pool.sum() / w * j[D.DJOB_INDEX_BYTES], wf, 1, 1, 1, 1, 1)
    dense_ar = all_reduce_time(sys, j[D.DJOB_DENSE_PARAMS] * j[D.DJOB_GRAD_COMM_BYTES], wf,
                               1, 1, 1, 1, 1)
    emb_bwd = a2a_b + lb
    return (idx + lf + a2a_f + dense_fwd_time(sys, j) + dense_bwd_time(sys, j) + emb_bwd
            + exposed_after_overlap(dense_ar, emb_bwd))


def _collective_slope(sys, n, all_reduce):
    """Seconds per byte that every algorithm of an all-gather / reduce-scatter (or, with
    ``all_reduce``, an all-reduce) over ``n`` consecutive ranks costs at least: each
    :mod:`trainscape.model.collectives` form is latency terms (>= 0) plus ``bytes x slope``;
    the smallest slope bounds them all from below."""
    from ..model.network import group_fanout, group_top_tier, tier_path_bandwidth

    top = group_top_tier(sys, float(n), 1.0, 1.0, 1.0, 1.0, 1.0)
    if n <= 1 or top < 0:
        return 0.0
    bw = tier_path_bandwidth(sys, top)
    k = 2.0 if all_reduce else 1.0
    slopes = [k * (n - 1.0) / n / bw]
    if all_reduce:
        slopes.append(2.0 / bw)  # tree
    hier, inner = 0.0, 1.0
    for i in range(top + 1):
        f = group_fanout(sys, i, float(n), 1.0, 1.0, 1.0, 1.0, 1.0)
        if f > 1.0:
            hier += k * (f - 1.0) / f / inner / tier_path_bandwidth(sys, i)
            inner *= f
    slopes.append(hier)
    return min(slopes)


def _node_domains(sc: DlrmScenario) -> tuple[int, int, int]:
    """(ranks per tier-0 domain as the reference counts them, number of domains, ranks in the
    smallest one): ``node = min(tier_span(0), W)`` (the outermost tier is unbounded)."""
    from ..model.network import tier_span

    w = sc.world
    node = int(min(tier_span(sc.sys, 0), w))
    n_dom = -(-w // node)
    return node, n_dom, w - (n_dom - 1) * node


def _a2a_kappas(sc: DlrmScenario) -> tuple[float, float, float]:
    """``(kappa0, kappa1, lat)`` for the all-to-alls of the reference (``rank_a2a_units``).

    Rank ``r`` sends ``w0_r (n_0(r) - 1) / bw_0`` on tier 0 (``n_0(r)`` its tier-0 domain's
    size, ``>= n_min``) and ``w_r (W - n_{i-1}(r)) / bw_i`` on tier ``i >= 1`` (``n_{i-1}(r) <=
    span_{i-1}``); the busiest rank's value is at least the average over ranks of either, so
    ``max_r x_r >= kappa0 sum_r w0_r`` with ``kappa0 = (n_min - 1) / (W bw_0)`` and ``>= kappa1
    sum_r w_r`` with ``kappa1 = max_{1 <= i <= top} (W - span_{i-1}) / (W bw_i)``. ``lat`` is
    the latency of the outermost tier the world crosses (what every all-to-all adds)."""
    from ..model.network import group_top_tier, tier_latency, tier_span

    sys, w = sc.sys, float(sc.world)
    top = group_top_tier(sys, w, 1.0, 1.0, 1.0, 1.0, 1.0)
    if top < 0:
        return 0.0, 0.0, 0.0
    _, _, n_min = _node_domains(sc)
    k0 = (n_min - 1.0) / w / tier_link_bandwidth(sys, 0)
    k1 = 0.0
    for i in range(1, top + 1):
        span = min(tier_span(sys, i - 1), w)
        k1 = max(k1, (w - span) / w / tier_link_bandwidth(sys, i))
    return k0, k1, tier_latency(sys, top)


# options of the bound: table-/column-wise, table-row-wise, row-wise, data-parallel, and the
# row groups (table-row-wise over any group, grid: a relaxation of them all)
B_TWCW, B_TWRW, B_RW, B_DP, B_GRP = range(5)
N_BOPT = 5


def bound_tiers(sc: DlrmScenario) -> int:
    """Memory tiers the bound ranges over: hbm, uvm_cache, ddr, and key_value when the
    scenario declares an SSD (the planner moves tables there only then)."""
    return 4 if sc.job[D.DJOB_SSD_BYTES] > 0.0 else 3


def _per_hit(fn, hit: np.ndarray) -> np.ndarray:
    """``fn`` of every table's hit rate, computed once per distinct value."""
    u, inv = np.unique(hit, return_inverse=True)
    return np.array([fn(h) for h in u])[inv.reshape(-1)] if len(hit) else np.zeros(0)


def bound_terms(sc: DlrmScenario) -> dict:
    """Per table ``t``, bound option ``o`` (``B_*``) and memory tier: what the option adds at
    least to the averages over ranks of the step's terms, split into forward (``*_f``) and
    backward (``*_b``), lookups (``look_*``) and the rest (``net_*``: all-to-alls and
    collectives); ``hbm``: HBM bytes it takes at least summed over the ranks; ``busy_*``: the
    least lookup seconds of the busiest rank holding (a shard of) it; infeasible options cost
    ``inf``. Arrays are ``(T, N_BOPT, bound_tiers)``; see :func:`lower_bound` for the proof
    of each."""
    sys, j, w = sc.sys, sc.job, sc.world
    wf = float(w)
    rows, dim, pool, hit = (np.asarray(x, float) for x in _cols(sc))
    n_t = sc.n_tables
    b = j[D.DJOB_GLOBAL_BATCH]
    eb, ib, cf, cb = (j[D.DJOB_EMB_BYTES], j[D.DJOB_INDEX_BYTES], j[D.DJOB_COMM_FWD_BYTES],
                      j[D.DJOB_COMM_BWD_BYTES])
    bm = j[D.DJOB_BWD_MULTIPLIER]
    local = b / wf
    node, n_dom, n_min = _node_domains(sc)
    k0, k1, _ = _a2a_kappas(sc)
    # pooled exchange: table-/column-wise weights feed tier 0 and the tiers above,
    # table-row-wise ones only the tiers above; use tier 0 alone when it is the larger bound
    kp_tw, kp_tr = (k1, k1) if k1 >= k0 else (k0, 0.0)
    ki = max(k0, k1)  # the index exchange feeds every tier with the same weights
    # row-wise: one flat collective, the full output over the outermost link
    # (reference.rw_collective_time): its seconds per byte, latency aside
    top_w = group_top_tier(sys, wf, 1.0, 1.0, 1.0, 1.0, 1.0)
    rs_w = 1.0 / tier_link_bandwidth(sys, top_w) if top_w >= 0 else 0.0
    rs_n = _collective_slope(sys, node, False)
    ar_w = _collective_slope(sys, w, True)
    usable = sys[L.SYS_HBM_BYTES] - sys[L.SYS_HBM_RESERVE_BYTES]
    ddr_cap = j[D.DJOB_DDR_BYTES]
    fixed = 2.0 * local * (dim.sum() * cf + pool.sum() * ib) + dense_memory_bytes(j)
    room = usable - fixed  # HBM of one rank left for table shards
    opt_r, opt_e = j[D.DJOB_OPT_ROW_BYTES], j[D.DJOB_OPT_ELEM_BYTES]

    def state(r, d):
        return r * d * eb + r * opt_r + r * d * opt_e

    kmax = np.array([max(k for k in range(1, min(w, int(d)) + 1) if int(d) % k == 0)
                     for d in dim], float)
    n_big = float(node)
    shard = {  # (rows, dim, HBM buffers) of the smallest shard on one rank, per option
        B_TWCW: (rows, dim / kmax, b * pool * ib + 2.0 * b * dim / kmax * cf),
        B_TWRW: (np.ceil(rows / n_big), dim, b * pool / n_big * ib + 2.0 * b * dim * cf),
        B_RW: (np.ceil(rows / wf), dim, b * pool / wf * ib + 2.0 * b * dim * cf),
        B_DP: (rows, dim, 0.0 * rows),
        # row groups: the W ranks hold at most W distinct shards, so one holds at least
        # rows / W rows of full width in all (a rank with k blocks of one group holds them all)
        B_GRP: (rows / wf, dim, b * pool / wf * ib + 2.0 * b * dim / kmax * cf),
    }
    buffers = {  # HBM buffers summed over the ranks holding the table, at least
        B_TWCW: b * pool * ib + 2.0 * b * dim * cf,
        B_TWRW: b * pool * ib + 2.0 * n_min * b * dim * cf,
        B_RW: b * pool * ib + 2.0 * wf * b * dim * cf,
        B_DP: 0.0 * rows,
        B_GRP: b * pool * ib + 2.0 * b * dim * cf,
    }
    n_tiers = bound_tiers(sc)
    ssd_cap = j[D.DJOB_SSD_BYTES]
    shape = (n_t, N_BOPT, n_tiers)
    out = {k: np.zeros(shape) for k in ("look_f", "look_b", "net_f", "net_b", "hbm",
                                         "busy_f", "busy_b", "hold_f", "hold_b", "bad")}
    # the busiest rank holding a shard of the table, network terms: its own index weight and
    # pooled dims times the least per-rank send factor of a tier (kappa x W), the latency of
    # every all-to-all it takes part in, and its own collectives alone (each collective's time
    # does not fall as bytes are added)
    _, _, lat = _a2a_kappas(sc)
    phi_i, phi_tw, phi_tr = ki * wf, kp_tw * wf, k1 * wf
    lat_i = np.where(pool > 0.0, lat, 0.0)
    lat_tr = lat if k1 > 0.0 else 0.0
    by_dim = {}  # the first four depend on the dim alone: once per distinct dim
    for d in np.unique(dim):
        by_dim[d] = (rw_collective_time(sys, b * d * cf, wf),
                     rw_collective_time(sys, b * d * cb, wf),
                     reduce_scatter_time(sys, b * d * cf, float(node), 1, 1, 1, 1, 1),
                     all_gather_time(sys, b * d * cb, float(node), 1, 1, 1, 1, 1))
    one = [by_dim[d] + (all_reduce_time(sys, r * d * j[D.DJOB_GRAD_COMM_BYTES], wf, 1, 1, 1,
                                        1, 1),)
           for r, d in zip(rows, dim)]
    rs1, ag1, rsn1, agn1, ar1 = (np.array(x) for x in zip(*one)) if n_t else [np.zeros(0)] * 5
    # row groups: per (group size n, block width) the least collective of one table
    cands_n = sorted({n for n in range(1, w + 1) if w % n == 0} | {node, n_min})
    coll: dict = {}

    def coll_fb(n, width):
        key = (n, width)
        if key not in coll:
            if n <= 1:
                coll[key] = (0.0, 0.0)
            elif n > node:
                coll[key] = (rw_collective_time(sys, b * width * cf, float(n)),
                             rw_collective_time(sys, b * width * cb, float(n)))
            else:  # the node group's collective (a partial node's too) or the group's own
                coll[key] = tuple(min(f(sys, b * width * x, float(m), 1, 1, 1, 1, 1)
                                      for m in (n, node))
                                  for f, x in ((reduce_scatter_time, cf), (all_gather_time, cb)))
        return coll[key]

    def grp_hold(spb):
        """Least (forward, backward) lookups + own collectives of one holder of a row-group
        shard: over every group size n and column block count k (unpenalised bytes)."""
        best_f = np.full(n_t, np.inf)
        best_b = np.full(n_t, np.inf)
        for k in sorted({int(k) for d in dim for k in range(1, min(w, int(d)) + 1)
                         if int(d) % k == 0}):
            ok = (dim.astype(np.int64) % k == 0) & (k <= np.minimum(wf, dim))
            width = dim / k
            uw, inv = np.unique(width, return_inverse=True)
            for n in cands_n:
                lk = (b * pool / n * ib + b * pool / n * width * eb + b * width * cf) * spb
                cfb = np.array([coll_fb(n, float(x)) for x in uw]).reshape(-1, 2)[inv]
                best_f = np.where(ok, np.minimum(best_f, lk + cfb[:, 0]), best_f)
                best_b = np.where(ok, np.minimum(best_b, bm * lk + cfb[:, 1]), best_b)
        return best_f, best_b
    hold_net_f = {B_TWCW: lat_i + local * ib * phi_i * pool + lat
                  + local * cf * phi_tw * dim / kmax,
                  B_TWRW: lat_i + local * ib * phi_i * pool / n_big + lat_tr
                  + local * cf * phi_tr * dim / n_big + rsn1,
                  B_RW: lat_i + local * ib * phi_i * pool / wf + rs1,
                  B_DP: 0.0 * rows,
                  B_GRP: lat_i + local * ib * phi_i * pool / wf + lat_tr
                  + local * cf * phi_tr * dim / kmax / wf}  # + grp_hold's forward
    hold_net_b = {B_TWCW: lat + local * cb * phi_tw * dim / kmax,
                  B_TWRW: lat_tr + local * cb * phi_tr * dim / n_big + agn1,
                  B_RW: ag1,
                  B_DP: ar1,
                  B_GRP: lat_tr + local * cb * phi_tr * dim / kmax / wf}
    st_full = state(rows, dim)
    cache = j[D.DJOB_UVM_CACHE_FRACTION] * rows * dim * eb
    for tier in range(n_tiers):
        spb = _per_hit(lambda h: lookup_seconds_per_byte(sys, j, tier if tier < 3 else D.MT_KV,
                                                         h), hit)
        whole = (b * pool * ib + b * pool * dim * eb + b * dim * cf) * spb
        tr_sum = (b * pool * ib + b * pool * dim * eb + n_min * b * dim * cf) * spb
        rw_rank = (b * pool / wf * ib + b * pool / wf * dim * eb + b * dim * cf) * spb
        cw_rank = (b * pool * ib + (b * pool * eb + b * cf) * dim / kmax) * spb
        tr_rank = (b * pool / n_big * ib + b * pool / n_big * dim * eb + b * dim * cf) * spb
        upd = j[D.DJOB_DP_UPDATE_FACTOR] * rows * dim * eb * spb
        grp_rank = (b * pool / wf * ib + (b * pool / wf * eb + b * cf) * dim / kmax) * spb
        look = {B_TWCW: whole / wf, B_TWRW: tr_sum / wf, B_RW: rw_rank, B_DP: whole / wf,
                B_GRP: whole / wf}
        busy = {B_TWCW: np.minimum(whole, cw_rank), B_TWRW: tr_rank, B_RW: rw_rank,
                B_DP: whole / wf, B_GRP: grp_rank}
        net_f = {B_TWCW: local * ib * ki * pool + local * cf * kp_tw * dim,
                 B_TWRW: local * ib * ki * pool + local * cf * kp_tr * dim
                 + rs_n * b * dim * cf / n_dom,
                 B_RW: local * ib * ki * pool + rs_w * b * dim * cf,
                 B_DP: 0.0 * rows,
                 B_GRP: local * ib * ki * pool + local * cf * kp_tr * dim}
        net_b = {B_TWCW: local * cb * kp_tw * dim,
                 B_TWRW: local * cb * kp_tr * dim + rs_n * b * dim * cb / n_dom,
                 B_RW: rs_w * b * dim * cb,
                 B_DP: ar_w * rows * dim * j[D.DJOB_GRAD_COMM_BYTES],
                 B_GRP: local * cb * kp_tr * dim}
        if tier == D.MT_HBM:
            mem_all = st_full
        elif tier == D.MT_UVM or tier == 3:  # key_value: the same cache in HBM
            mem_all = cache
        else:
            mem_all = 0.0 * rows
        g_f, g_b = grp_hold(spb)
        for o in range(N_BOPT):
            sr, sd, sbuf = shard[o]
            s_state = state(sr, sd)
            if tier == D.MT_HBM:
                s_hbm, s_ddr = s_state, 0.0
            elif tier == D.MT_UVM:
                s_hbm = j[D.DJOB_UVM_CACHE_FRACTION] * sr * sd * eb
                s_ddr = s_state
            elif tier == 3:  # key_value on the SSD: HBM cache, state on the SSD
                s_hbm = j[D.DJOB_UVM_CACHE_FRACTION] * sr * sd * eb
                s_ddr = 0.0
            else:
                s_hbm, s_ddr = 0.0, s_state
            fits_ssd = (s_state <= ssd_cap) if tier == 3 else True
            out["bad"][:, o, tier] = np.where(
                (s_hbm + sbuf <= room) & (s_ddr <= ddr_cap) & fits_ssd, 0.0, np.inf)
            out["look_f"][:, o, tier] = look[o]
            out["look_b"][:, o, tier] = bm * look[o] + (upd if o == B_DP else 0.0)
            out["net_f"][:, o, tier] = net_f[o]
            out["net_b"][:, o, tier] = net_b[o]
            out["busy_f"][:, o, tier] = busy[o]
            out["busy_b"][:, o, tier] = bm * busy[o] + (upd if o == B_DP else 0.0)
            out["hold_f"][:, o, tier] = busy[o] + hold_net_f[o]
            out["hold_b"][:, o, tier] = out["busy_b"][:, o, tier] + hold_net_b[o]
            if o == B_GRP:  # the least lookups + collectives over group sizes and blocks
                out["hold_f"][:, o, tier] = g_f + hold_net_f[o]
                out["hold_b"][:, o, tier] = g_b + hold_net_b[o]
            out["hbm"][:, o, tier] = (mem_all * (wf if o == B_DP else 1.0)) + buffers[o]
    out["cap"] = wf * room
    return out


def _dual(cost: np.ndarray, mem: np.ndarray, cap: float, with_lam: bool = False):
    """``max_{lam >= 0} sum_t min_o (cost + lam mem) - lam cap`` (rows ``t``, columns the
    choices): by weak Lagrangian duality (Boyd & Vandenberghe, *Convex Optimization* §5.2.2)
    at most ``min sum_t cost`` over the choices whose memory sums to at most ``cap``. The function is concave in ``lam`` and its supergradient is the chosen
    memory minus ``cap``, so a bisection on ``log lam`` finds the top; every value tried is a
    valid bound, the largest is returned (with its ``lam`` when ``with_lam``)."""
    rows = np.arange(cost.shape[0])

    def g(lam):
        v = cost + lam * mem
        k = np.argmin(v, axis=1)
        return float(v[rows, k].sum() - lam * cap), float(mem[rows, k].sum() - cap)

    best, grad = g(0.0)
    best_lam = 0.0
    if math.isfinite(best) and grad > 0.0 and cap > 0.0:
        lo, hi = math.log(1e-30), math.log(1.0)
        for _ in range(48):
            mid = 0.5 * (lo + hi)
            val, grad = g(math.exp(mid))
            if val > best:
                best, best_lam = val, math.exp(mid)
            if grad > 0.0:
                lo = mid
            else:
                hi = mid
    return (best, best_lam) if with_lam else best



def lower_bound_parts(sc: DlrmScenario) -> dict:
    """The lower bound and its arguments (see :func:`lower_bound`): ``sum_bound_s`` (averages
    over ranks), ``rank_bound_s`` (the busiest rank of the hottest table plus the averages of
    the other terms), ``theta`` of each, and the unproved ``even_spread_s`` for reports."""
    sys, j, w = sc.sys, sc.job, sc.world
    wf = float(w)
    dense = dense_fwd_time(sys, j) + dense_bwd_time(sys, j)
    dense_ar = all_reduce_time(sys, j[D.DJOB_DENSE_PARAMS] * j[D.DJOB_GRAD_COMM_BYTES], wf,
                               1, 1, 1, 1, 1)
    n_t = sc.n_tables
    if n_t == 0:
        lb = dense + dense_ar
        return {"lower_bound_s": lb, "sum_bound_s": lb, "rank_bound_s": lb,
                "table_bound_s": lb, "even_spread_s": even_spread_bound(sc), "theta_sum": 0.0,
                "theta_rank": 0.0, "theta_table": 0.0}
    T = bound_terms(sc)
    _, k1, lat = _a2a_kappas(sc)
    # options that put weight into the pooled all-to-all (so it pays its latency)
    a2a_opts = [B_TWCW, B_TWRW, B_GRP] if k1 > 0.0 else [B_TWCW]
    other = [o for o in range(N_BOPT) if o not in a2a_opts]
    cap = T["cap"]
    n = n_t

    def flat(a, opts):
        return np.ascontiguousarray(a[:, opts, :]).reshape(n, -1)

    all_opts = list(range(N_BOPT))
    mem = {True: flat(T["hbm"], all_opts), False: flat(T["hbm"], other)}

    def value(th, rank, a2a):
        """``F + th Bk + (1 - th) dense_ar`` at least, over the plans with (``a2a``) or
        without a table in the pooled all-to-all (then its latency is paid forward and
        backward); ``rank`` 2: the busiest holder of the hottest table alone."""
        if rank == 2:
            hold = (T["hold_f"] + th * T["hold_b"] + T["bad"]).reshape(n, -1)
            return float(np.max(np.min(hold, axis=1))) + (1.0 - th) * dense_ar
        opts = all_opts if a2a else other
        if rank:
            busy = (T["busy_f"] + th * T["busy_b"] + T["bad"])[:, opts, :].reshape(n, -1)
            cost = T["net_f"] + th * T["net_b"] + T["bad"]
            extra = float(np.max(np.min(busy, axis=1)))
        else:
            cost = T["look_f"] + T["net_f"] + th * (T["look_b"] + T["net_b"]) + T["bad"]
            extra = 0.0
        s = _dual(flat(cost, opts), mem[a2a], cap) + extra
        if a2a:
            s += lat * (1.0 + th)
        return s + (1.0 - th) * dense_ar

    def best_theta(rank, a2a):
        grid = np.linspace(0.0, 1.0, 11)
        vals = [value(t, rank, a2a) for t in grid]
        k = int(np.argmax(vals))
        best, best_t = vals[k], float(grid[k])
        lo, hi = grid[max(0, k - 1)], grid[min(len(grid) - 1, k + 1)]
        for _ in range(10):  # golden-section search near the best grid point
            a = hi - 0.618 * (hi - lo)
            c = lo + 0.618 * (hi - lo)
            va, vc = value(a, rank, a2a), value(c, rank, a2a)
            if va > best:
                best, best_t = va, float(a)
            if vc > best:
                best, best_t = vc, float(c)
            if va >= vc:
                hi = c
            else:
                lo = a
        return best, best_t

    res = {}
    for rank in (0, 1):
        v1, t1 = best_theta(rank, True)
        v0, t0 = best_theta(rank, False)
        res[rank] = (dense + min(v1, v0), t1 if v1 <= v0 else t0)
    v2, t2 = best_theta(2, True)
    res[2] = (dense + v2, t2)
    # a NaN part (inf - inf or 0 x inf from blocks whose times left the float64 range: past
    # the validator's ranges) bounds nothing: 0, the trivial bound, never NaN in a report
    sum_b, rank_b, table_b = (0.0 if math.isnan(res[k][0]) else res[k][0] for k in range(3))
    return {"lower_bound_s": max(sum_b, rank_b, table_b), "sum_bound_s": sum_b,
            "rank_bound_s": rank_b, "table_bound_s": table_b, "theta_sum": res[0][1],
            "theta_rank": res[1][1], "theta_table": res[2][1],
            "even_spread_s": even_spread_bound(sc)}


def lower_bound(sc: DlrmScenario) -> float:
    """A step time no feasible plan of ``sc`` can beat (every sharding type, rank and tier).

    Notation: ``W`` ranks, global batch ``B``, local batch ``B / W``; table ``t`` has ``d``
    (dim), ``p`` (pooling), ``rows``; ``eb, ib, cbf, cbb, gb`` the embedding, index, pooled
    forward / backward and gradient bytes; ``bm`` the backward multiplier; ``spb`` seconds
    per looked-up byte of the table's memory tier; ``lat`` the latency of the outermost tier.

    1. *Shape of the step.* The reference computes ``step = dense + F + max(Bk, AR)`` with
       ``F = idx_a2a + max_lf + a2a_fwd + rs_fwd``, ``Bk = a2a_bwd + ag_bwd + max_lb + dp_ar``
       (every term >= 0) and ``AR`` the plan-independent dense all-reduce. For every
       ``theta`` in [0, 1], ``max(Bk, AR) >= theta Bk + (1 - theta) AR``, so
       ``step >= dense + (F + theta Bk) + (1 - theta) AR``; any ``theta`` gives a bound and
       the best of a search over ``theta`` is kept (``theta = 1`` recovers
       ``dense + max(F + Bk, AR)``). The SSD prefetch exposure (>= 0) is left out.

    2. *Sum argument* (``sum_bound_s``). Each maximum over ranks is at least the average over
       ranks, and each average is a sum of per-table contributions that depend only on the
       table's sharding option and memory tier (:func:`bound_terms`):

       - lookups: summed over the ranks, a table's forward lookup seconds are at least
         ``l1 = (B p ib + B p d eb + B d cbf) spb`` (column-wise re-reads the indices per
         shard, table-row-wise writes the pooled output on each of its ``n_in >= n_min``
         ranks, row-wise on all ``W``, data-parallel splits the batch exactly); backward
         is ``bm`` x forward, plus data-parallel's update on every rank;
       - all-to-alls (:func:`_a2a_kappas`): rank ``r`` sends ``w_r (n_0(r) - 1)`` on tier 0
         and ``w_r (W - n_{i-1}(r))`` on tier ``i >= 1``, so the busiest rank's seconds per
         unit are at least ``kappa0 sum w0`` and ``kappa1 sum w``. Index weights (the same on
         every tier; row-wise adds ``p / W`` to every rank) sum to at least ``p`` per
         non-data-parallel table; pooled weights sum to ``d`` per table-, column- or
         table-row-wise table on tiers >= 1, and tier 0 sees only table- and column-wise
         ones -- using ``kappa1`` for both when ``kappa1 >= kappa0``, else ``kappa0`` and 0
         for table-row-wise, is valid either way (each is one of the two inequalities);
       - collectives: every algorithm of :mod:`trainscape.model.collectives` costs latency
         (>= 0) plus bytes x slope, so a row-wise table adds at least ``s_rs B d cbf``
         forward and ``s_ag B d cbb`` backward, a data-parallel one ``s_ar rows d gb``
         backward (:func:`_collective_slope`, bytes add over tables); table-row-wise: the
         node reduce-scatter is sized by the largest node sum of table-row-wise dims, at
         least their total over the ``ceil(W / node)`` nodes.

       So ``F + theta Bk >= sum_t c_t(o_t, tier_t)``. *Memory*: a feasible plan keeps every
       rank's HBM under ``usable``; besides the plan-independent buffers and dense part
       (``fixed``) the ranks hold at least ``m_t(o, tier)`` bytes for each table (its state,
       UVM cache or nothing, ``x W`` when data-parallel, plus its index / pooled buffers), so
       ``sum_t m_t <= cap = W (usable - fixed)``; an option whose smallest shard cannot fit
       one rank (HBM or host DDR) is excluded. For every ``lam >= 0`` (weak Lagrangian
       duality) ``min sum_t c_t >= sum_t min_o (c_t + lam m_t) - lam cap``, maximised over
       ``lam`` by bisection (:func:`_dual`). *Latency*: a plan with a table in the pooled
       all-to-all pays ``lat`` in ``a2a_fwd`` and ``a2a_bwd``; the bound is the smaller of the
       relaxation over all options plus ``(1 + theta) lat`` and the one over the options
       without a pooled all-to-all.

    3. *Rank argument* (``rank_bound_s``): ``max_lf + theta max_lb`` is at least the lookups
       of the rank holding the hottest table's busiest shard, at least its least value over
       the options (column-wise with the most shards, table-row-wise over a whole node,
       row-wise, data-parallel); the other terms keep their sum bound (2, without lookups).

    *Row groups and the SSD tier.* A table-row-wise table over any group of ``n`` ranks, or a
    grid of ``k`` column blocks each over ``n`` ranks, is covered by the option ``B_GRP``:
    summed over its holders its lookups are ``k B p ib + B p d eb + n B d cbf >= l1``
    (TorchRec's table-row-wise kernel has no block penalty), its index weights sum to
    ``k p >= p``, its pooled weights to ``d`` on the tiers >= 1 (tier 0 sees them only for
    groups smaller than the node, so the ``kappa`` of table-row-wise applies), its
    collectives cost >= 0 (a group of one rank has none), its buffers sum to at least
    ``B p ib + 2 B d cbf`` and its state to the table's; its busiest holder stores at least
    ``rows / W`` rows of all ``d`` columns (the blocks live on at most ``W`` distinct ranks,
    ``n k <= W`` or a rank holds several blocks); one holder carries at least
    ``1 / W`` of the ids and ``1 / kmax`` of the columns of ``1 / W`` of the batch's lookups
    (``busy``); for ``hold`` the least over every group size ``n`` dividing ``W`` (and the
    node's) and block count ``k`` dividing ``d`` of its unpenalised lookups plus its own
    collective (none for one rank; the node's or its group's ring / hierarchical one inside
    the node, :func:`rw_collective_time` beyond it), taken apart forward and backward. With an SSD the tiers include ``key_value``: HBM holds its cache
    (the staging of prefetched rows only adds), its state must fit one SSD, its lookup is
    costed at its kernel's bandwidth.

    4. *Table argument* (``table_bound_s``): every maximum is at least its value on one rank
       holding table ``t``, and that rank carries at least ``t``'s own share: its lookups,
       its index and pooled weights times the least per-rank send factor of a tier
       (``kappa W``), the latency of each all-to-all it is in, and the collectives of ``t``
       alone (each collective's time is non-decreasing in its bytes). So ``F + theta Bk >=
       max_t min_o`` of that sum.

    ``tests/test_dlrm_planner.py`` checks that no evaluated plan (random plans of every type,
    tier and rank on drawn clusters, and the planners' plans) beats it.
    """
    return lower_bound_parts(sc)["lower_bound_s"]
