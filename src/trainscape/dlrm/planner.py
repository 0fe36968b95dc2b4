"""Sharding planner: greedy baselines, beam search, smoothed balancing and refinement.

- Sharding types (:func:`choose_types`): a table stays table-wise when it fits comfortably on
  one rank and its work is below an average rank's share; heavier or larger tables are split
  column-wise (k a power of two dividing the dim, as TorchRec's column-wise sharding), then
  table-row-wise (within a node), then row-wise; tables that fit no HBM go to the UVM cache tier
  and then to DDR. Tiny tables (fewer rows than ranks) are data-parallel.
- Greedy baselines (TorchRec ``GreedyPerfPartitioner``; DreamShard / NeuroShard's greedy
  baselines): tables largest-first onto the least-loaded rank, ranked and loaded by size, by
  lookups, or by estimated cost.
- Beam search: tables in decreasing cost order, the ``width`` best partial plans kept; every
  partial plan is scored with the kernel on the tables placed so far.
- Smoothed balancing (:class:`Balancer`, :func:`balance`): every maximum of the step replaced
  by a log-sum-exp whose temperature rises over the phases; moves, swaps and sharding-type
  changes (table-, column-, table-row-, row-wise, data-parallel) of every table, each scored
  from the entries it changes; hot tables are split first (:func:`split_hot`).
- Refinement (:func:`refine`): exact O(1)-scored moves, swaps and memory-tier changes of the
  table-wise tables (:mod:`trainscape.dlrm.incremental`) alternating with structural changes
  scored by full evaluations; then an exact local search on the critical ranks
  (:func:`polish`).

The lower bound (:func:`lower_bound`) is proved in its docstring: per-table least
contributions to the averages over ranks under an HBM capacity relaxation (Lagrangian), the
hottest table's busiest rank, and the busiest holder of one table alone, each with the
backward weighed against the dense all-reduce it overlaps. :func:`even_spread_bound` (the
issue's "total work spread evenly") is a lower bound only under the conditions in its
docstring.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field

import numba
import numpy as np

from .. import layout as L
from ..model.collectives import (
    all_gather_time,
    all_reduce_time,
    all_to_all_time,
    reduce_scatter_time,
)
from ..model.network import tier_link_bandwidth
from . import evaluate_plans, layout as D
from .reference import (
    dense_bwd_time,
    dense_fwd_time,
    dense_memory_bytes,
    exposed_after_overlap,
    lookup_bytes,
    lookup_seconds_per_byte,
    shard_state_bytes,
    uniform_storage_ddr,
    uniform_storage_hbm,
)
from .numba_kernel import JIT
from .spec import DlrmScenario

GREEDY_KEYS = ("size", "lookups", "cost")
METHODS = ("greedy", "beam", "evolve")


@dataclass
class PlanResult:
    method: str
    plan: np.ndarray
    step_time_s: float
    result: dict
    lower_bound_s: float
    baselines: dict = field(default_factory=dict)
    elapsed_s: float = 0.0
    evaluations: int = 0
    moves_scored: int = 0
    moves_accepted: int = 0


# ---------------------------------------------------------------------------------------------
# Per-table estimates
# ---------------------------------------------------------------------------------------------


def _cols(sc):
    t = sc.tables
    return t[D.TAB_ROWS], t[D.TAB_DIM], t[D.TAB_POOLING], t[D.TAB_HIT_RATE]


def table_state(sc: DlrmScenario) -> np.ndarray:
    rows, dim, _, _ = _cols(sc)
    j = sc.job
    return np.array([shard_state_bytes(r, d, j[D.DJOB_EMB_BYTES], j[D.DJOB_OPT_ROW_BYTES],
                                       j[D.DJOB_OPT_ELEM_BYTES]) for r, d in zip(rows, dim)])


def _cross_bw(sc):
    n_t = int(sc.sys[L.SYS_N_TIERS])
    return tier_link_bandwidth(sc.sys, 1 if n_t > 1 and sc.world > sc.node_size else 0)


def table_cost(sc: DlrmScenario, tier: int = D.MT_HBM) -> np.ndarray:
    """Estimated seconds a table adds to its owner when table-wise: lookups forward and
    backward (TorchRec perf estimator) plus its pooled / index traffic over the network."""
    rows, dim, pool, hit = _cols(sc)
    j, w = sc.job, sc.world
    b = j[D.DJOB_GLOBAL_BATCH]
    out = np.empty(sc.n_tables)
    bw = _cross_bw(sc)
    for i in range(sc.n_tables):
        spb = lookup_seconds_per_byte(sc.sys, j, tier, hit[i])
        fwd = lookup_bytes(b * pool[i], dim[i], j[D.DJOB_EMB_BYTES], j[D.DJOB_INDEX_BYTES], b,
                           j[D.DJOB_COMM_FWD_BYTES]) * spb
        comm = b * (dim[i] * (j[D.DJOB_COMM_FWD_BYTES] + j[D.DJOB_COMM_BWD_BYTES])
                    + pool[i] * j[D.DJOB_INDEX_BYTES]) * (w - 1) / w / bw
        out[i] = fwd * (1.0 + j[D.DJOB_BWD_MULTIPLIER]) + comm
    return out


def hbm_budget(sc: DlrmScenario) -> float:
    """HBM per rank left for table shards (usable minus the dense part and local buffers)."""
    usable = sc.sys[L.SYS_HBM_BYTES] - sc.sys[L.SYS_HBM_RESERVE_BYTES]
    _, dim, pool, _ = _cols(sc)
    j = sc.job
    local = j[D.DJOB_GLOBAL_BATCH] / sc.world
    uni = 2.0 * local * (dim.sum() * j[D.DJOB_COMM_FWD_BYTES] + pool.sum() * j[D.DJOB_INDEX_BYTES])
    return 0.95 * (usable - dense_memory_bytes(j) - uni)


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


# options of the bound: table-/column-wise, table-row-wise, row-wise, data-parallel
B_TWCW, B_TWRW, B_RW, B_DP = range(4)
N_BOPT = 4


def bound_terms(sc: DlrmScenario) -> dict:
    """Per table ``t``, bound option ``o`` (``B_*``) and memory tier: what the option adds at
    least to the averages over ranks of the step's terms, split into forward (``*_f``) and
    backward (``*_b``), lookups (``look_*``) and the rest (``net_*``: all-to-alls and
    collectives); ``hbm``: HBM bytes it takes at least summed over the ranks; ``busy_*``: the
    least lookup seconds of the busiest rank holding (a shard of) it; infeasible options cost
    ``inf``. Arrays are ``(T, N_BOPT, 3)``; see :func:`lower_bound` for the proof of each."""
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
    rs_w = _collective_slope(sys, w, False)
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
    }
    buffers = {  # HBM buffers summed over the ranks holding the table, at least
        B_TWCW: b * pool * ib + 2.0 * b * dim * cf,
        B_TWRW: b * pool * ib + 2.0 * n_min * b * dim * cf,
        B_RW: b * pool * ib + 2.0 * wf * b * dim * cf,
        B_DP: 0.0 * rows,
    }
    shape = (n_t, N_BOPT, 3)
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
    one = [(reduce_scatter_time(sys, b * d * cf, wf, 1, 1, 1, 1, 1),
            all_gather_time(sys, b * d * cb, wf, 1, 1, 1, 1, 1),
            reduce_scatter_time(sys, b * d * cf, float(node), 1, 1, 1, 1, 1),
            all_gather_time(sys, b * d * cb, float(node), 1, 1, 1, 1, 1),
            all_reduce_time(sys, r * d * j[D.DJOB_GRAD_COMM_BYTES], wf, 1, 1, 1, 1, 1))
           for r, d in zip(rows, dim)]
    rs1, ag1, rsn1, agn1, ar1 = (np.array(x) for x in zip(*one)) if n_t else [np.zeros(0)] * 5
    hold_net_f = {B_TWCW: lat_i + local * ib * phi_i * pool + lat
                  + local * cf * phi_tw * dim / kmax,
                  B_TWRW: lat_i + local * ib * phi_i * pool / n_big + lat_tr
                  + local * cf * phi_tr * dim / n_big + rsn1,
                  B_RW: lat_i + local * ib * phi_i * pool / wf + rs1,
                  B_DP: 0.0 * rows}
    hold_net_b = {B_TWCW: lat + local * cb * phi_tw * dim / kmax,
                  B_TWRW: lat_tr + local * cb * phi_tr * dim / n_big + agn1,
                  B_RW: ag1,
                  B_DP: ar1}
    st_full = state(rows, dim)
    cache = j[D.DJOB_UVM_CACHE_FRACTION] * rows * dim * eb
    for tier in range(3):
        spb = np.array([lookup_seconds_per_byte(sys, j, tier, h) for h in hit])
        whole = (b * pool * ib + b * pool * dim * eb + b * dim * cf) * spb
        tr_sum = (b * pool * ib + b * pool * dim * eb + n_min * b * dim * cf) * spb
        rw_rank = (b * pool / wf * ib + b * pool / wf * dim * eb + b * dim * cf) * spb
        cw_rank = (b * pool * ib + (b * pool * eb + b * cf) * dim / kmax) * spb
        tr_rank = (b * pool / n_big * ib + b * pool / n_big * dim * eb + b * dim * cf) * spb
        upd = j[D.DJOB_DP_UPDATE_FACTOR] * rows * dim * eb * spb
        look = {B_TWCW: whole / wf, B_TWRW: tr_sum / wf, B_RW: rw_rank, B_DP: whole / wf}
        busy = {B_TWCW: np.minimum(whole, cw_rank), B_TWRW: tr_rank, B_RW: rw_rank,
                B_DP: whole / wf}
        net_f = {B_TWCW: local * ib * ki * pool + local * cf * kp_tw * dim,
                 B_TWRW: local * ib * ki * pool + local * cf * kp_tr * dim
                 + rs_n * b * dim * cf / n_dom,
                 B_RW: local * ib * ki * pool + rs_w * b * dim * cf,
                 B_DP: 0.0 * rows}
        net_b = {B_TWCW: local * cb * kp_tw * dim,
                 B_TWRW: local * cb * kp_tr * dim + rs_n * b * dim * cb / n_dom,
                 B_RW: rs_w * b * dim * cb,
                 B_DP: ar_w * rows * dim * j[D.DJOB_GRAD_COMM_BYTES]}
        if tier == D.MT_HBM:
            mem_all = st_full
        elif tier == D.MT_UVM:
            mem_all = cache
        else:
            mem_all = 0.0 * rows
        for o in range(N_BOPT):
            sr, sd, sbuf = shard[o]
            s_state = state(sr, sd)
            if tier == D.MT_HBM:
                s_hbm, s_ddr = s_state, 0.0
            elif tier == D.MT_UVM:
                s_hbm = j[D.DJOB_UVM_CACHE_FRACTION] * sr * sd * eb
                s_ddr = s_state
            else:
                s_hbm, s_ddr = 0.0, s_state
            out["bad"][:, o, tier] = np.where(
                (s_hbm + sbuf <= room) & (s_ddr <= ddr_cap), 0.0, np.inf)
            out["look_f"][:, o, tier] = look[o]
            out["look_b"][:, o, tier] = bm * look[o] + (upd if o == B_DP else 0.0)
            out["net_f"][:, o, tier] = net_f[o]
            out["net_b"][:, o, tier] = net_b[o]
            out["busy_f"][:, o, tier] = busy[o]
            out["busy_b"][:, o, tier] = bm * busy[o] + (upd if o == B_DP else 0.0)
            out["hold_f"][:, o, tier] = busy[o] + hold_net_f[o]
            out["hold_b"][:, o, tier] = out["busy_b"][:, o, tier] + hold_net_b[o]
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


def bound_plan(sc: DlrmScenario, theta: float | None = None) -> np.ndarray:
    """The relaxed plan of the sum bound (:func:`lower_bound_parts`) made a plan: each
    table's sharding option and tier at the bound's ``theta`` and ``lam`` (table- /
    column-wise as table-wise), placed greedily by estimated cost. A start for the
    balancer that knows which tables the backward overlap makes cheap to keep
    data-parallel. ``theta``: the sum bound's (computed when not given)."""
    th = lower_bound_parts(sc)["theta_sum"] if theta is None else theta
    T = bound_terms(sc)
    n = sc.n_tables
    cost = (T["look_f"] + T["net_f"] + th * (T["look_b"] + T["net_b"]) + T["bad"]).reshape(n, -1)
    mem = T["hbm"].reshape(n, -1)
    _, lam = _dual(cost, mem, T["cap"], with_lam=True)
    choice = np.argmin(cost + lam * mem, axis=1)
    opt, tier = choice // 3, choice % 3
    plan = np.zeros((D.N_PLAN, n), np.int32)
    plan[D.PL_SHARDS] = 1
    plan[D.PL_KIND] = np.select([opt == B_TWRW, opt == B_RW, opt == B_DP],
                                [D.SH_TWRW, D.SH_RW, D.SH_DP], D.SH_TW)
    plan[D.PL_TIER] = tier
    cost_t = table_cost(sc)
    order = np.argsort(-cost_t, kind="stable")
    return _place(sc, plan, order, "cost", hbm_budget(sc), cost_t, table_state(sc))


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
    a2a_opts = [B_TWCW, B_TWRW] if k1 > 0.0 else [B_TWCW]
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
    sum_b, rank_b, table_b = res[0][0], res[1][0], res[2][0]
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
       ``dense + max(F + Bk, AR)``).

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


# ---------------------------------------------------------------------------------------------
# Sharding types
# ---------------------------------------------------------------------------------------------


def option_costs(sc: DlrmScenario, i: int, tier: int = D.MT_HBM) -> list[tuple]:
    """Candidate shardings of table ``i`` as (kind, k, per-rank seconds on the ranks holding
    it, ranks holding it, seconds added to every rank): lookups (TorchRec perf estimator),
    the index and pooled traffic the holders receive / send, and row-wise collectives."""
    sys, j, w, node = sc.sys, sc.job, sc.world, sc.node_size
    rows, dim, pool, hit = (float(x) for x in sc.tables[:, i])
    b = j[D.DJOB_GLOBAL_BATCH]
    eb, ib, cf, cb = (j[D.DJOB_EMB_BYTES], j[D.DJOB_INDEX_BYTES], j[D.DJOB_COMM_FWD_BYTES],
                      j[D.DJOB_COMM_BWD_BYTES])
    spb = lookup_seconds_per_byte(sys, j, tier, hit)
    m = 1.0 + j[D.DJOB_BWD_MULTIPLIER]
    bw = _cross_bw(sc)
    bw0 = tier_link_bandwidth(sys, 0)
    out_ = float(w - 1) / w

    def look(lookups, d, outputs):
        return lookup_bytes(lookups, d, eb, ib, outputs, cf) * spb * m

    opts = [(D.SH_TW, 1, look(b * pool, dim, b) + b * (pool * ib + dim * (cf + cb)) * out_ / bw,
             1, 0.0)]
    k = 2
    while int(dim) % k == 0 and k <= w and dim // k >= 4:
        opts.append((D.SH_CW, k, look(b * pool, dim / k, b)
                     + b * (pool * ib + dim / k * (cf + cb)) * out_ / bw, k, 0.0))
        k *= 2
    if w > node:
        cross = float(w - node) / w
        opts.append((D.SH_TWRW, 1, look(b * pool / node, dim, b)
                     + b * (pool / node * ib + dim / node * (cf + cb)) * cross / bw
                     + b * dim * (cf + cb) / bw0, node, 0.0))
    opts.append((D.SH_RW, 1, 0.0, w, look(b * pool / w, dim, b) + b * pool / w * ib / bw
                 + b * dim * (cf + cb) * out_ / (bw if w > node else bw0)))
    return opts


def choose_types(sc: DlrmScenario) -> np.ndarray:
    """A plan with kinds, shards, strides and tiers chosen per table; ranks all 0.

    Per table, among the candidate shardings (:func:`option_costs`) that fit the HBM budget,
    the one adding the least total work whose per-rank load stays below an even share of the
    table-wise total; if none does, the one with the least per-rank load.
    """
    w, node = sc.world, sc.node_size
    rows = sc.tables[D.TAB_ROWS]
    dim = sc.tables[D.TAB_DIM]
    state = table_state(sc)
    budget = hbm_budget(sc)
    ddr = sc.job[D.DJOB_DDR_BYTES]
    cache = sc.job[D.DJOB_UVM_CACHE_FRACTION] * sc.job[D.DJOB_EMB_BYTES]
    opts = [option_costs(sc, i) for i in range(sc.n_tables)]
    share = sum(o[0][2] for o in opts) / w
    total_state = state.sum()
    fill = max(0.25, min(0.6, 2.0 * total_state / (w * budget))) if budget > 0 else 0.25
    plan = np.zeros((D.N_PLAN, sc.n_tables), np.int32)
    plan[D.PL_SHARDS] = 1
    for i in range(sc.n_tables):
        if rows[i] < w and state[i] < 0.001 * budget:
            plan[D.PL_KIND, i] = D.SH_DP
            continue
        fits = [o for o in opts[i] if state[i] / o[3] <= fill * budget]
        if fits:
            ok = [o for o in fits if o[2] <= share]
            if ok:
                kind, k, _, _, _ = min(ok, key=lambda o: o[2] * o[3] + o[4] * w)
            else:
                kind, k, _, _, _ = min(fits, key=lambda o: o[2] + o[4])
            plan[D.PL_KIND, i] = kind
            if kind == D.SH_CW:
                plan[D.PL_SHARDS, i] = k
                plan[D.PL_STRIDE, i] = max(1, w // k)
            continue
        # does not fit HBM: UVM cache, else DDR (row-wise so it spreads)
        plan[D.PL_KIND, i] = D.SH_RW
        if rows[i] / w * dim[i] * cache <= fill * budget and state[i] / w <= 0.9 * ddr:
            plan[D.PL_TIER, i] = D.MT_UVM
        else:
            plan[D.PL_TIER, i] = D.MT_DDR
    return plan


def _shard_ranks(kind, k, stride, base, w, node):
    if kind == D.SH_TW:
        return [base]
    if kind == D.SH_CW:
        return [(base + j * stride) % w for j in range(k)]
    if kind == D.SH_TWRW:
        lo = (base // node) * node
        return list(range(lo, min(w, lo + node)))
    return list(range(w))


def _shard_weights(sc, plan, i, cost, state):
    """(cost, memory, lookups) per rank holding a shard of table ``i``."""
    kind = plan[D.PL_KIND, i]
    k = int(plan[D.PL_SHARDS, i])
    w, node = sc.world, sc.node_size
    pool = sc.tables[D.TAB_POOLING, i]
    tier_mem = state[i] if plan[D.PL_TIER, i] == D.MT_HBM else (
        sc.job[D.DJOB_UVM_CACHE_FRACTION] * state[i] if plan[D.PL_TIER, i] == D.MT_UVM else 0.0)
    if kind == D.SH_TW:
        return cost[i], tier_mem, pool
    if kind == D.SH_CW:
        return cost[i] / k, tier_mem / k, pool
    if kind == D.SH_TWRW:
        return cost[i] / node, tier_mem / node, pool / node
    if kind == D.SH_RW:
        return cost[i] / w * 1.5, tier_mem / w, pool / w
    return cost[i] * 0.1, tier_mem, pool / w


def _place(sc, plan, order, metric, budget, cost, state):
    """Place tables in ``order`` onto the least-loaded rank(s) by ``metric`` rows."""
    w, node = sc.world, sc.node_size
    load = np.zeros(w)
    mem = np.zeros(w)
    for i in order:
        kind = plan[D.PL_KIND, i]
        c, m, lk = _shard_weights(sc, plan, i, cost, state)
        val = {"cost": c, "size": m, "lookups": lk}[metric]
        k = int(plan[D.PL_SHARDS, i])
        stride = int(plan[D.PL_STRIDE, i])
        if kind == D.SH_TW:
            ok = mem + m <= budget
            cand = np.where(ok, load, np.inf)
            r = int(np.argmin(cand)) if np.isfinite(cand).any() else int(np.argmin(mem))
            plan[D.PL_RANK, i] = r
            bases = [r]
        elif kind == D.SH_CW:
            best, best_b = np.inf, 0
            for b in range(max(1, min(stride, w))):
                rs = _shard_ranks(kind, k, stride, b, w, node)
                if np.any(mem[rs] + m > budget):
                    continue
                v = load[rs].max()
                if v < best:
                    best, best_b = v, b
            plan[D.PL_RANK, i] = best_b
            bases = _shard_ranks(kind, k, stride, best_b, w, node)
        elif kind == D.SH_TWRW:
            n_nodes = (w + node - 1) // node
            node_load = [load[n * node:(n + 1) * node].max() for n in range(n_nodes)]
            n = int(np.argmin(node_load))
            plan[D.PL_RANK, i] = n * node
            bases = _shard_ranks(kind, k, stride, n * node, w, node)
        else:
            plan[D.PL_RANK, i] = 0
            bases = range(w)
        for r in bases:
            load[r] += val
            mem[r] += m
    return plan


def greedy(sc: DlrmScenario, key: str = "cost", types: np.ndarray | None = None) -> np.ndarray:
    """Greedy baseline: tables sorted by ``key`` (size, lookups, cost) descending, each onto
    the least-loaded rank(s) by the same measure, within the HBM budget."""
    if key not in GREEDY_KEYS:
        raise ValueError(f"greedy key: unknown {key!r} (allowed: {', '.join(GREEDY_KEYS)})")
    plan = (choose_types(sc) if types is None else types).copy()
    cost = table_cost(sc)
    state = table_state(sc)
    measure = {"cost": cost, "size": state,
               "lookups": sc.tables[D.TAB_POOLING] * 1.0}[key]
    order = np.argsort(-measure, kind="stable")
    return _place(sc, plan, order, key, hbm_budget(sc), cost, state)


def greedy_baselines(sc: DlrmScenario, backend=None) -> dict[str, tuple[np.ndarray, float]]:
    types = choose_types(sc)
    plans = {k: greedy(sc, k, types) for k in GREEDY_KEYS}
    out = evaluate_plans(sc, np.stack(list(plans.values())), backend=backend)
    res = {}
    for n, (k, p) in enumerate(plans.items()):
        step = out[D.DO_STEP_TIME_S, n] if out[D.DO_FEASIBLE, n] > 0 else math.inf
        res[k] = (p, float(step))
    return res


# ---------------------------------------------------------------------------------------------
# Beam search
# ---------------------------------------------------------------------------------------------


def beam(sc: DlrmScenario, width: int = 8, candidates: int = 8, backend=None,
         types: np.ndarray | None = None) -> tuple[np.ndarray, int]:
    """Beam search over placements; returns (plan, kernel evaluations)."""
    from copy import copy

    types = choose_types(sc) if types is None else types
    cost = table_cost(sc)
    state = table_state(sc)
    budget = hbm_budget(sc)
    w, node = sc.world, sc.node_size
    order = np.argsort(-cost, kind="stable")
    sub_tables = np.ascontiguousarray(sc.tables[:, order])
    sub_types = types[:, order]
    sub = copy(sc)
    beams = [(np.zeros(w), np.zeros(w), np.zeros((D.N_PLAN, 0), np.int32))]
    evals = 0
    for k in range(len(order)):
        i = order[k]
        kind = sub_types[D.PL_KIND, k]
        c, m, _ = _shard_weights(sc, types, i, cost, state)
        kk = int(sub_types[D.PL_SHARDS, k])
        stride = int(sub_types[D.PL_STRIDE, k])
        cands = []
        for load, mem, p in beams:
            if kind == D.SH_TW:
                ok = np.where(mem + m <= budget, load, np.inf)
                bases = [int(r) for r in np.argsort(ok, kind="stable")[:candidates]
                         if np.isfinite(ok[r])] or [int(np.argmin(mem))]
            elif kind == D.SH_CW:
                span = max(1, min(stride, w))
                sc_b = [(load[_shard_ranks(kind, kk, stride, b, w, node)].max(), b)
                        for b in range(span)]
                bases = [b for _, b in sorted(sc_b)[:candidates]]
            elif kind == D.SH_TWRW:
                n_nodes = (w + node - 1) // node
                nl = sorted((load[n * node:(n + 1) * node].max(), n) for n in range(n_nodes))
                bases = [n * node for _, n in nl[:candidates]]
            else:
                bases = [0]
            for b in bases:
                col = sub_types[:, k].copy()
                col[D.PL_RANK] = b
                cands.append((load, mem, p, col, b))
        plans = np.empty((len(cands), D.N_PLAN, k + 1), np.int32)
        for n, (_, _, p, col, _) in enumerate(cands):
            plans[n, :, :k] = p
            plans[n, :, k] = col
        sub.tables = np.ascontiguousarray(sub_tables[:, : k + 1])
        out = evaluate_plans(sub, plans, backend=backend)
        evals += len(cands)
        step = np.where(out[D.DO_FEASIBLE] > 0, out[D.DO_STEP_TIME_S], np.inf)
        new = []
        for n, (load, mem, p, col, b) in enumerate(cands):
            nl, nm = load.copy(), mem.copy()
            for r in _shard_ranks(kind, kk, stride, b, w, node):
                nl[r] += c
                nm[r] += m
            new.append((step[n], float(np.square(nl).sum()), n, nl, nm))
        new.sort(key=lambda x: (x[0], x[1]))
        beams = [(nl, nm, plans[n]) for _, _, n, nl, nm in new[:width]]
    best = beams[0][2]
    plan = np.empty_like(best)
    plan[:, order] = best
    return plan, evals


# ---------------------------------------------------------------------------------------------
# Smoothed balancing (numba): sharding type and placement moves scored on log-sum-exp maxima
# ---------------------------------------------------------------------------------------------
#
# The step is a sum of maxima over ranks (lookups, the busiest rank of each all-to-all, ...):
# moving one table off a rank changes it only when that rank is the unique maximum, so a hill
# climb on the step itself stalls on plateaus. The balancer descends a smooth upper bound of
# the step instead: every maximum is replaced by ``m + log(sum_e exp(beta (v_e - m))) / beta``
# (log-sum-exp: at most ``log(n) / beta`` above the maximum, and lowered by every move that
# lowers a large entry), with ``beta`` growing over the phases so the surrogate tends to the
# step (Boyd & Vandenberghe, *Convex Optimization* §3.1.5: log-sum-exp as a smooth maximum).
# The entries are the reference's (:func:`trainscape.dlrm.reference.evaluate_plan`,
# ``rank_a2a_units``): per rank its lookups and what it sends on each tier, per domain what its
# ranks receive. Every table is an item with a few forms (table-wise, column-wise with k
# shards, table-row-wise, row-wise, data-parallel); a candidate moves an item (new rank,
# first shard or node), swaps two table-wise items or changes an item's form. Each entry's
# ``exp`` is cached, so a candidate computes only the entries it changes; the exact step of
# the state is recomputed from the per-rank rows every 64 candidates and the best state kept.

# per-rank state rows (backward lookups are bwd_multiplier x forward on every placed shard,
# so their maximum follows from the forward one; the row serves the exact step)
BS_LF, BS_LB, BS_O0, BS_O1, BS_IX, BS_HBM, BS_DDR = range(7)
N_BS = 7
# per-form load fields: per rank holding a shard (placed forms) or per rank (uniform forms)
IL_LF, IL_LB, IL_O0, IL_O1, IL_IX, IL_HBM, IL_DDR, IL_TR, IL_DPE, IL_RWD, IL_ADD = range(11)
N_IL = 11
# form kinds
IK_TW, IK_CW, IK_TWRW, IK_RW, IK_DP = range(5)
# resources (log-sum-exp sums): forward lookups, pooled and index all-to-alls, table-row-wise
# dims per node
RS_LF, RS_POOL, RS_IDX, RS_TR = range(4)
N_RS = 4
ALL_RS = (1 << N_RS) - 1
# scalar parameters
BP_W, BP_NODE, BP_TOP, BP_U_IDX, BP_U_FWD, BP_U_BWD, BP_RS_TR, BP_AG_TR, BP_LAT, BP_AR, \
    BP_USABLE, BP_DDR, BP_PEN, BP_N_NODES, BP_DENSE, BP_BATCH, BP_CF, BP_CB, BP_GCB, \
    BP_BM = range(20)
N_BP = 20
# mutable globals: uniform per-rank loads, data-parallel elements, row-wise dims, the row-wise
# index weight every rank owns, owned-weight totals, and the collectives they cost
G_ULF, G_ULB, G_UHBM, G_UDDR, G_DPE, G_RWD, G_ADD, G_TOTP, G_TOTI, G_RSRW, G_AGRW, \
    G_DPAR = range(12)
N_G = 12

_ar_time = JIT["all_reduce_time"]
_ag_time = JIT["all_gather_time"]
_rs_time = JIT["reduce_scatter_time"]


@numba.njit(cache=True)
def _footprint(kind, k, stride, base, w, node, out):
    """Ranks holding the shards of a placed form at ``base`` into ``out``; returns (count,
    variant), variant 1 for a table-row-wise form on a partial last node."""
    if kind == IK_TW:
        out[0] = base
        return 1, 0
    if kind == IK_CW:
        for m in range(k):
            out[m] = (base + m * stride) % w
        return k, 0
    if kind == IK_TWRW:
        lo = (base // node) * node
        hi = min(w, lo + node)
        for r in range(lo, hi):
            out[r - lo] = r
        return hi - lo, 1 if hi - lo < node else 0
    return 0, 0


@numba.njit(cache=True)
def _uniform_costs(sys, g, bp):
    """The row-wise reduce-scatter / all-gather and the data-parallel all-reduce of ``g``."""
    w = bp[BP_W]
    b = bp[BP_BATCH]
    rwd = g[G_RWD] if g[G_RWD] > 0.5 else 0.0  # sums of whole dims / elements: drift-free
    dpe = g[G_DPE] if g[G_DPE] > 0.5 else 0.0
    g[G_RSRW] = _rs_time(sys, b * rwd * bp[BP_CF], w, 1.0, 1.0, 1.0, 1.0, 1.0)
    g[G_AGRW] = _ag_time(sys, b * rwd * bp[BP_CB], w, 1.0, 1.0, 1.0, 1.0, 1.0)
    g[G_DPAR] = _ar_time(sys, dpe * bp[BP_GCB], w, 1.0, 1.0, 1.0, 1.0, 1.0)


@numba.njit(cache=True)
def _snap(x, v):
    """``x`` after adding ``v``, 0 when only rounding is left (a sum back to empty)."""
    return 0.0 if abs(x) <= 1e-9 * abs(v) else x


@numba.njit(cache=True)
def _apply(st, twn, dsp, dsi, did, g, itl, fkind, fk, fstride, t, f, base, sgn, node, w, fp):
    """Add (``sgn`` 1) or remove (-1) item ``t`` in form ``f`` at ``base``; returns the
    footprint count (0 for a uniform form)."""
    kind = fkind[t, f]
    if kind == IK_RW or kind == IK_DP:
        for gf, lf in ((G_ULF, IL_LF), (G_ULB, IL_LB), (G_UHBM, IL_HBM), (G_UDDR, IL_DDR),
                       (G_DPE, IL_DPE), (G_RWD, IL_RWD), (G_ADD, IL_ADD)):
            v = sgn * itl[t, f, 0, lf]
            g[gf] = _snap(g[gf] + v, v)
        v = sgn * itl[t, f, 0, IL_ADD] * w
        g[G_TOTI] = _snap(g[G_TOTI] + v, v)
        return 0
    cnt, var = _footprint(kind, fk[t, f], fstride[t, f], base, w, node, fp)
    for m in range(cnt):
        r = fp[m]
        for row, lf in ((BS_LF, IL_LF), (BS_LB, IL_LB), (BS_O0, IL_O0), (BS_O1, IL_O1),
                        (BS_IX, IL_IX), (BS_HBM, IL_HBM), (BS_DDR, IL_DDR)):
            v = sgn * itl[t, f, var, lf]
            st[row, r] = _snap(st[row, r] + v, v)
        v = sgn * itl[t, f, var, IL_O1]
        g[G_TOTP] = _snap(g[G_TOTP] + v, v)
        v = sgn * itl[t, f, var, IL_IX]
        g[G_TOTI] = _snap(g[G_TOTI] + v, v)
        for i in range(did.shape[0]):
            d = did[i, r]
            v = sgn * itl[t, f, var, IL_O0 if i == 0 else IL_O1]
            dsp[i, d] = _snap(dsp[i, d] + v, v)
            v = sgn * itl[t, f, var, IL_IX]
            dsi[i, d] = _snap(dsi[i, d] + v, v)
    if cnt > 0:
        n = did[0, fp[0]]
        v = sgn * itl[t, f, var, IL_TR]
        twn[n] = _snap(twn[n] + v, v)
    return cnt


@numba.njit(cache=True)
def _node_min(st, row, lo, hi):
    v = st[row, lo]
    for r in range(lo + 1, hi):
        v = min(v, st[row, r])
    return v


# Entry values. Rank entries (rows of the rank cache ``ecr``): 0 forward lookups, 1 + i the
# pooled send on tier i, 1 + T + i the index send (T = top + 1 tiers); domain entries (``ecd``
# [q, i, d], q 0 pooled, 1 index): what a tier-(i-1) domain receives over tier i >= 1; node
# entries (``ecn``): 0 / 1 the most a rank of the node receives over tier 0 (pooled / index),
# 2 the node's table-row-wise dims.

@numba.njit(cache=True)
def _rank_entry(st, fac, ibw, g, s, r, ntop):
    if s == 0:
        return RS_LF, st[BS_LF, r]
    if s <= ntop:
        i = s - 1
        return RS_POOL, (st[BS_O0, r] if i == 0 else st[BS_O1, r]) * fac[i, r] * ibw[i]
    i = s - 1 - ntop
    return RS_IDX, (st[BS_IX, r] + g[G_ADD]) * fac[i, r] * ibw[i]


@numba.njit(cache=True)
def _dom_entry(dsp, dsi, dsz, ibw, g, q, i, d):
    if q == 0:
        return RS_POOL, (g[G_TOTP] - dsp[i, d]) * ibw[i]
    return RS_IDX, (g[G_TOTI] - dsi[i, d] - g[G_ADD] * dsz[i, d]) * ibw[i]


@numba.njit(cache=True)
def _node_entry(st, twn, dsp, dsi, dsz, dlo, ibw, g, q, n):
    if q == 2:
        return RS_TR, twn[n]
    lo = dlo[0, n]
    hi = lo + int(dsz[0, n])
    if q == 0:
        return RS_POOL, (dsp[0, n] - _node_min(st, BS_O0, lo, hi)) * ibw[0]
    return RS_IDX, (dsi[0, n] + g[G_ADD] * (hi - lo - 1.0) - _node_min(st, BS_IX, lo, hi)) * ibw[0]


@numba.njit(cache=True)
def _node_q_on(q, top, with_tr):
    """Whether node entry ``q`` exists (tier-0 receives need a tier; the table-row-wise
    dims are left out of candidates that move no table-row-wise item)."""
    return with_tr if q == 2 else top >= 0


@numba.njit(cache=True)
def _rank_res(s, ntop):
    return RS_LF if s == 0 else (RS_POOL if s <= ntop else RS_IDX)


@numba.njit(cache=True)
def _ex(beta, ref, k, v):
    return math.exp(beta[k] * (v - ref[k]))


@numba.njit(cache=True)
def _fill(st, twn, dsp, dsi, did, dsz, dlo, fac, ibw, bp, g, beta, ref, acc, ecr, ecd, ecn):
    """Every entry's ``exp`` relative to ``ref`` into the caches ``ecr``, ``ecd``, ``ecn`` and
    their sums (plus a constant zero entry per resource, so no sum is empty) into ``acc``."""
    w = int(bp[BP_W])
    top = int(bp[BP_TOP])
    ntop = top + 1
    n_rs = 1 + 2 * ntop if top >= 0 else 1
    for k in range(N_RS):
        acc[k] = math.exp(-beta[k] * ref[k])
    for r in range(w):
        for s in range(n_rs):
            k, v = _rank_entry(st, fac, ibw, g, s, r, ntop)
            e = _ex(beta, ref, k, v)
            ecr[s, r] = e
            acc[k] += e
    for i in range(1, ntop):
        for d in range(did[i, w - 1] + 1):
            for q in range(2):
                k, v = _dom_entry(dsp, dsi, dsz, ibw, g, q, i, d)
                e = _ex(beta, ref, k, v)
                ecd[q, i, d] = e
                acc[k] += e
    for n in range(int(bp[BP_N_NODES])):
        for q in range(3):
            if not _node_q_on(q, top, True):
                ecn[q, n] = 0.0
                continue
            k, v = _node_entry(st, twn, dsp, dsi, dsz, dlo, ibw, g, q, n)
            e = _ex(beta, ref, k, v)
            ecn[q, n] = e
            acc[k] += e


@numba.njit(cache=True)
def _all_sums(st, twn, dsp, dsi, did, dsz, dlo, fac, ibw, bp, g, beta, ref, acc, ecr, ecd,
              ecn):
    """``ref`` reset to the maxima of the entries (plus headroom), then :func:`_fill`; returns
    the memory penalty of every rank."""
    w = int(bp[BP_W])
    top = int(bp[BP_TOP])
    ntop = top + 1
    n_rs = 1 + 2 * ntop if top >= 0 else 1
    for k in range(N_RS):
        ref[k] = 0.0
    for r in range(w):
        for s in range(n_rs):
            k, v = _rank_entry(st, fac, ibw, g, s, r, ntop)
            ref[k] = max(ref[k], v)
    for i in range(1, ntop):
        for d in range(did[i, w - 1] + 1):
            for q in range(2):
                k, v = _dom_entry(dsp, dsi, dsz, ibw, g, q, i, d)
                ref[k] = max(ref[k], v)
    for n in range(int(bp[BP_N_NODES])):
        for q in range(3):
            if _node_q_on(q, top, True):
                k, v = _node_entry(st, twn, dsp, dsi, dsz, dlo, ibw, g, q, n)
                ref[k] = max(ref[k], v)
    for k in range(N_RS):
        # headroom: an entry may grow by 900 / beta before its exp overflows
        ref[k] += 300.0 / beta[k]
    _fill(st, twn, dsp, dsi, did, dsz, dlo, fac, ibw, bp, g, beta, ref, acc, ecr, ecd, ecn)
    p = 0.0
    for r in range(w):
        p += _rank_penalty(st, bp, g, r)
    return p


@numba.njit(cache=True)
def _rank_penalty(st, bp, g, r):
    """Memory over the capacities of rank ``r``, relative."""
    return (max(0.0, st[BS_HBM, r] + g[G_UHBM] - bp[BP_USABLE]) / bp[BP_USABLE]
            + max(0.0, st[BS_DDR, r] + g[G_UDDR] - bp[BP_DDR]) / max(bp[BP_DDR], 1.0))


@numba.njit(cache=True)
def _smax(s, beta, ref, k):
    """The log-sum-exp maximum of resource ``k`` (inf for an empty or broken sum)."""
    if not s[k] > 0.0:
        return math.inf
    return ref[k] + math.log(s[k]) / beta[k]


@numba.njit(cache=True)
def _objective(s, beta, ref, pen, bp, g):
    """The smoothed step (the dense part left out) from the log-sum-exp sums ``s``."""
    m_lf = _smax(s, beta, ref, RS_LF)
    m_p = _smax(s, beta, ref, RS_POOL)
    m_i = _smax(s, beta, ref, RS_IDX)
    m_tr = _smax(s, beta, ref, RS_TR)
    bwd = (bp[BP_U_BWD] * m_p + bp[BP_BM] * m_lf + g[G_ULB] + bp[BP_AG_TR] * m_tr + g[G_AGRW]
           + g[G_DPAR] + bp[BP_LAT])
    return (bp[BP_U_IDX] * m_i + m_lf + g[G_ULF] + bp[BP_U_FWD] * m_p + bp[BP_RS_TR] * m_tr
            + g[G_RSRW] + max(bwd, bp[BP_AR]) + bp[BP_PEN] * pen)


@numba.njit(cache=True)
def exact_step(sys, st, twn, dsp, dsi, did, dsz, dlo, fac, ibw, bp, g):
    """The reference's step of the state (``evaluate_plan``'s last lines from the maxima) and
    whether it fits memory."""
    w = int(bp[BP_W])
    top = int(bp[BP_TOP])
    add = g[G_ADD]
    m_lf = 0.0
    m_lb = 0.0
    m_p = 0.0
    m_i = 0.0
    m_h = 0.0
    m_d = 0.0
    for r in range(w):
        m_lf = max(m_lf, st[BS_LF, r] + g[G_ULF])
        m_lb = max(m_lb, st[BS_LB, r] + g[G_ULB])
        m_h = max(m_h, st[BS_HBM, r] + g[G_UHBM])
        m_d = max(m_d, st[BS_DDR, r] + g[G_UDDR])
        for i in range(top + 1):
            d = did[i, r]
            if i == 0:
                sp = (st[BS_O0, r] * fac[0, r], dsp[0, d] - st[BS_O0, r])
                si = ((st[BS_IX, r] + add) * fac[0, r],
                      dsi[0, d] + add * dsz[0, d] - st[BS_IX, r] - add)
            else:
                sp = (st[BS_O1, r] * fac[i, r], g[G_TOTP] - dsp[i, d])
                si = ((st[BS_IX, r] + add) * fac[i, r], g[G_TOTI] - dsi[i, d] - add * dsz[i, d])
            m_p = max(m_p, max(sp[0], sp[1]) * ibw[i])
            m_i = max(m_i, max(si[0], si[1]) * ibw[i])
    m_tr = 0.0
    for n in range(int(bp[BP_N_NODES])):
        m_tr = max(m_tr, twn[n])
    if m_tr < 0.5:  # sums of whole dims
        m_tr = 0.0
    lat = bp[BP_LAT]
    idx = lat + bp[BP_U_IDX] * m_i if m_i > 0.0 else 0.0
    a2a_f = lat + bp[BP_U_FWD] * m_p if m_p > 0.0 else 0.0
    a2a_b = lat + bp[BP_U_BWD] * m_p if m_p > 0.0 else 0.0
    node = bp[BP_NODE]
    b = bp[BP_BATCH]
    rs = g[G_RSRW]
    ag = g[G_AGRW]
    if m_tr > 0.0:
        rs += _rs_time(sys, b * m_tr * bp[BP_CF], node, 1.0, 1.0, 1.0, 1.0, 1.0)
        ag += _ag_time(sys, b * m_tr * bp[BP_CB], node, 1.0, 1.0, 1.0, 1.0, 1.0)
    emb_bwd = a2a_b + ag + m_lb + g[G_DPAR]
    step = idx + m_lf + a2a_f + rs + bp[BP_DENSE] + max(emb_bwd, bp[BP_AR])
    ok = m_h <= bp[BP_USABLE] and m_d <= bp[BP_DDR]
    return step, ok


@numba.njit(cache=True)
def _collect(fp, cnt, did, top, w, tick, st_r, st_d, st_n, ranks, n_r, doms, n_d, nodes, n_n,
             all_doms):
    """Add the ranks ``fp[:cnt]``, their nodes and (unless ``all_doms``) their domains on
    tiers >= 1 to the lists, each once."""
    for m in range(cnt):
        r = fp[m]
        if st_r[r] != tick:
            st_r[r] = tick
            ranks[n_r] = r
            n_r += 1
        n = did[0, r]
        if st_n[n] != tick:
            st_n[n] = tick
            nodes[n_n] = n
            n_n += 1
        if not all_doms:
            for i in range(1, top + 1):
                key = i * w + did[i, r]
                if st_d[key] != tick:
                    st_d[key] = tick
                    doms[n_d, 0] = i
                    doms[n_d, 1] = did[i, r]
                    n_d += 1
    return n_r, n_d, n_n


@numba.njit(cache=True)
def _relist(lists, lcnt, fp, cnt, t, sgn):
    for m in range(cnt):
        r = fp[m]
        if sgn > 0:
            if lcnt[r] < lists.shape[1]:
                lists[r, lcnt[r]] = t
                lcnt[r] += 1
        else:
            for s in range(lcnt[r]):
                if lists[r, s] == t:
                    lists[r, s] = lists[r, lcnt[r] - 1]
                    lcnt[r] -= 1
                    break


@numba.njit(cache=True)
def _move(st, twn, dsp, dsi, did, g, itl, fkind, fk, fstride, t, f0, b0, f1, b1, t2, f2,
          sgn, node, w, fp):
    """Apply (``sgn`` 1) or undo (-1) a candidate: item ``t`` from form ``f0`` at ``b0`` to
    ``f1`` at ``b1`` and, with ``t2 >= 0``, item ``t2`` (form ``f2``) from ``b1`` to ``b0``."""
    _apply(st, twn, dsp, dsi, did, g, itl, fkind, fk, fstride, t, f0, b0, -sgn, node, w, fp)
    _apply(st, twn, dsp, dsi, did, g, itl, fkind, fk, fstride, t, f1, b1, sgn, node, w, fp)
    if t2 >= 0:
        _apply(st, twn, dsp, dsi, did, g, itl, fkind, fk, fstride, t2, f2, b1, -sgn, node, w,
               fp)
        _apply(st, twn, dsp, dsi, did, g, itl, fkind, fk, fstride, t2, f2, b0, sgn, node, w,
               fp)


@numba.njit(cache=True)
def _resum(k, new_k, beta, ref, ecr, ecd, ecn, did, bp, st_r, st_d, st_n, tick, all_doms,
           with_tr):
    """Sum of resource ``k`` from the cached entries the candidate left alone (``tick``
    stamps) plus ``new_k``, its changed entries: no subtraction, so no cancellation."""
    w = int(bp[BP_W])
    top = int(bp[BP_TOP])
    ntop = top + 1
    n_rs = 1 + 2 * ntop if top >= 0 else 1
    tot = math.exp(-beta[k] * ref[k]) + new_k
    for r in range(w):
        if st_r[r] != tick:
            for s in range(n_rs):
                if _rank_res(s, ntop) == k:
                    tot += ecr[s, r]
    if k == RS_POOL or k == RS_IDX:
        for i in range(1, ntop):
            for d in range(did[i, w - 1] + 1):
                if not (all_doms or st_d[i * w + d] == tick):
                    tot += ecd[0 if k == RS_POOL else 1, i, d]
    for n in range(int(bp[BP_N_NODES])):
        for s in range(3):
            if (RS_POOL if s == 0 else (RS_IDX if s == 1 else RS_TR)) != k:
                continue
            if not _node_q_on(s, top, True):
                continue
            if st_n[n] == tick and _node_q_on(s, top, with_tr):
                continue
            tot += ecn[s, n]
    return tot


@numba.njit(cache=True)
def _score(sys, st, twn, dsp, dsi, did, dsz, dlo, fac, ibw, bp, g, itl, fkind, fk, fstride,
           t, f0, b0, f1, b1, t2, f2, beta, ref, acc, err, pen, ecr, ecd, ecn, wk, iw, dw, tmp,
           tick):
    """Apply a candidate (see :func:`_move`) and return (surrogate, mode, penalty): mode 0 --
    the new sums are ``wk[0]`` with rounding-error bounds ``wk[3]``, the new entries ``tmp``
    (for the lists in ``iw`` / ``dw``), the penalty ``pen`` plus the third value; mode 1 --
    every cache and sum was recomputed (a row-wise form took part, or an entry overflowed):
    sums ``wk[1]``, reference ``wk[2]``, penalty the third value. ``g`` is saved in ``wk[4]``
    first; the candidate stays applied.

    A sum updated as ``acc - old + new`` carries the rounding of every update before it; its
    bound ``err`` grows by ``eps (acc + old + new)`` each time, and once it passes ``1e-12``
    of the sum (a sum that fell far: cancellation) the sum is taken again from the cached
    entries the candidate left alone plus the new ones."""
    w = int(bp[BP_W])
    node = int(bp[BP_NODE])
    top = int(bp[BP_TOP])
    ntop = top + 1
    n_rs = 1 + 2 * ntop if top >= 0 else 1
    fp = iw[0]
    wk[4, : g.shape[0]] = g
    k0 = fkind[t, f0]
    k1 = fkind[t, f1]
    if k0 == IK_RW or k1 == IK_RW:
        _move(st, twn, dsp, dsi, did, g, itl, fkind, fk, fstride, t, f0, b0, f1, b1, t2, f2,
              1.0, node, w, fp)
        _uniform_costs(sys, g, bp)
        p = _all_sums(st, twn, dsp, dsi, did, dsz, dlo, fac, ibw, bp, g, beta, wk[2], wk[1],
                      ecr, ecd, ecn)
        return _objective(wk[1], beta, wk[2], p, bp, g), 1, p
    uniform = k0 == IK_DP or k1 == IK_DP
    st_r = iw[4]
    st_n = iw[5]
    st_d = iw[7]
    ranks = iw[1]
    nodes = iw[3]
    doms = dw
    all_doms = f1 != f0
    n_r = 0
    n_d = 0
    n_n = 0
    for q in range(2):
        if q == 0:
            cnt = _footprint(k0, fk[t, f0], fstride[t, f0], b0, w, node, fp)[0]
        else:
            cnt = _footprint(k1, fk[t, f1], fstride[t, f1], b1, w, node, fp)[0]
        n_r, n_d, n_n = _collect(fp, cnt, did, top, w, tick, st_r, st_d, st_n, ranks, n_r,
                                 doms, n_d, nodes, n_n, all_doms)
    if all_doms:
        n_d = 0
        for i in range(1, ntop):
            for d in range(did[i, w - 1] + 1):
                doms[n_d, 0] = i
                doms[n_d, 1] = d
                n_d += 1
    iw[2, 0] = n_r
    iw[2, 1] = n_d
    iw[2, 2] = n_n
    with_tr = k0 == IK_TWRW or k1 == IK_TWRW
    old = wk[5]
    new = wk[0]
    for k in range(N_RS):
        old[k] = 0.0
        new[k] = 0.0
    # old entries from the caches
    for q in range(n_r):
        r = ranks[q]
        for s in range(n_rs):
            old[_rank_res(s, ntop)] += ecr[s, r]
    for q in range(n_d):
        old[RS_POOL] += ecd[0, doms[q, 0], doms[q, 1]]
        old[RS_IDX] += ecd[1, doms[q, 0], doms[q, 1]]
    for q in range(n_n):
        for s in range(3):
            if _node_q_on(s, top, with_tr):
                old[RS_POOL if s == 0 else (RS_IDX if s == 1 else RS_TR)] += ecn[s, nodes[q]]
    p_old = 0.0
    if not uniform:
        for q in range(n_r):
            p_old += _rank_penalty(st, bp, g, ranks[q])
    _move(st, twn, dsp, dsi, did, g, itl, fkind, fk, fstride, t, f0, b0, f1, b1, t2, f2, 1.0,
          node, w, fp)
    if uniform:
        _uniform_costs(sys, g, bp)
    # new entries; an overflow (an entry far above the reference) recomputes everything
    overflow = False
    for q in range(n_r):
        r = ranks[q]
        for s in range(n_rs):
            k, v = _rank_entry(st, fac, ibw, g, s, r, ntop)
            x = beta[k] * (v - ref[k])
            e = math.exp(x)
            overflow = overflow or x > 600.0
            tmp[0, s, q] = e
            new[k] += e
    for q in range(n_d):
        for s in range(2):
            k, v = _dom_entry(dsp, dsi, dsz, ibw, g, s, doms[q, 0], doms[q, 1])
            x = beta[k] * (v - ref[k])
            e = math.exp(x)
            overflow = overflow or x > 600.0
            tmp[1, s, q] = e
            new[k] += e
    for q in range(n_n):
        for s in range(3):
            if not _node_q_on(s, top, with_tr):
                continue
            k, v = _node_entry(st, twn, dsp, dsi, dsz, dlo, ibw, g, s, nodes[q])
            x = beta[k] * (v - ref[k])
            e = math.exp(x)
            overflow = overflow or x > 600.0
            tmp[2, s, q] = e
            new[k] += e
    if overflow:
        p = _all_sums(st, twn, dsp, dsi, did, dsz, dlo, fac, ibw, bp, g, beta, wk[2], wk[1],
                      ecr, ecd, ecn)
        return _objective(wk[1], beta, wk[2], p, bp, g), 1, p
    if uniform:
        dp = -pen
        for r in range(w):
            dp += _rank_penalty(st, bp, g, r)
    else:
        dp = -p_old
        for q in range(n_r):
            dp += _rank_penalty(st, bp, g, ranks[q])
    for k in range(N_RS):
        tot = acc[k] - old[k] + new[k]
        e = err[k] + 2.3e-16 * (acc[k] + old[k] + new[k])
        if not e <= 1e-12 * tot:
            # cancellation: this sum again from the unchanged entries' caches plus the new
            # ones (when even that underflows, everything from scratch with a new reference)
            tot = _resum(k, new[k], beta, ref, ecr, ecd, ecn, did, bp, st_r, st_d, st_n, tick,
                         all_doms, with_tr)
            e = 2.3e-16 * (ecr.shape[0] * ecr.shape[1] + ecd.size + ecn.size + 2) * tot
            if not tot > 1e-250:
                p = _all_sums(st, twn, dsp, dsi, did, dsz, dlo, fac, ibw, bp, g, beta, wk[2],
                              wk[1], ecr, ecd, ecn)
                return _objective(wk[1], beta, wk[2], p, bp, g), 1, p
        new[k] = tot
        wk[3, k] = e
    return _objective(new, beta, ref, pen + dp, bp, g), 0, dp


@numba.njit(cache=True)
def _undo(st, twn, dsp, dsi, did, bp, g, itl, fkind, fk, fstride, t, f0, b0, f1, b1, t2, f2,
          wk, iw):
    _move(st, twn, dsp, dsi, did, g, itl, fkind, fk, fstride, t, f0, b0, f1, b1, t2, f2, -1.0,
          int(bp[BP_NODE]), int(bp[BP_W]), iw[0])
    g[:] = wk[4, : g.shape[0]]


@numba.njit(cache=True)
def _track(sys, st, twn, dsp, dsi, did, dsz, dlo, fac, ibw, bp, g, cform, cbase, best_form,
           best_base, best):
    """Keep the state if its exact step is the best seen (feasible states first)."""
    s, ok = exact_step(sys, st, twn, dsp, dsi, did, dsz, dlo, fac, ibw, bp, g)
    if (ok and (best[1] < 0.5 or s < best[0])) or (not ok and best[1] < 0.5 and s < best[0]):
        best[0] = s
        best[1] = 1.0 if ok else 0.0
        best_form[:] = cform
        best_base[:] = cbase


@numba.njit(cache=True)
def _random_base(kind, k, stride, w, node, n_nodes):
    if kind == IK_TWRW:
        return np.random.randint(n_nodes) * node
    if kind == IK_CW and stride > 0 and stride * k <= w:
        return np.random.randint(stride)  # every distinct set of shard ranks
    return np.random.randint(w)


@numba.njit(cache=True)
def balance_phase(sys, st, twn, dsp, dsi, did, dsz, dlo, fac, ibw, bp, g, itl, fkind, fk,
                  fstride, nform, cform, cbase, best_form, best_base, best, n_cand, seed, beta,
                  hot_frac, swap_frac, form_frac, n_scan):
    """Descend the smoothed step (:func:`_objective`) for ``n_cand`` candidates: move an item
    (table-wise: another rank; column-wise: another first shard; table-row-wise: another
    node), swap two table-wise items, or change an item's form (``form_frac``; the best of
    ``n_scan`` random places for a placed form); each is applied, scored from the entries it
    changes (every entry when a row-wise form takes part) and kept if the surrogate drops,
    else undone. A fraction ``hot_frac`` of the items comes off the busiest rank of a
    resource. The best exact step seen (``best[0]``, feasible states first) and its forms and
    bases are kept in ``best_*``. Returns (surrogate, accepted)."""
    np.random.seed(seed)
    w = int(bp[BP_W])
    node = int(bp[BP_NODE])
    n_nodes = int(bp[BP_N_NODES])
    top = int(bp[BP_TOP])
    ntop = top + 1
    n_rs = 1 + 2 * ntop if top >= 0 else 1
    n_t = cbase.shape[0]
    n_dall = 0
    for i in range(1, ntop):
        n_dall += did[i, w - 1] + 1
    maxk = max(node, w)
    # integer work rows: 0 footprint, 1 ranks, 2 the list lengths, 3 nodes, 4 rank stamps,
    # 5 node stamps, 7 domain stamps; ``dw`` the (tier, domain) pairs
    iw = np.zeros((8, 2 * (ntop + 2) * maxk + 8), np.int64)
    dw = np.zeros((2 * (ntop + 1) * maxk + n_dall + 8, 2), np.int64)
    tmp = np.zeros((3, max(n_rs, 3), dw.shape[0]))
    wk = np.zeros((7, max(N_RS, N_G)))
    ecr = np.zeros((max(n_rs, 1), w))
    ecd = np.zeros((2, max(ntop, 1), w))
    ecn = np.zeros((3, n_nodes))
    ref = np.zeros(N_RS)
    acc = np.zeros(N_RS)
    err = np.zeros(N_RS)  # rounding-error bounds of the sums (see _score)
    n_ent = ecr.size + ecd.size + ecn.size + 2
    pen = _all_sums(st, twn, dsp, dsi, did, dsz, dlo, fac, ibw, bp, g, beta, ref, acc, ecr, ecd,
                    ecn)
    err[:] = 2.3e-16 * n_ent * acc
    cur = _objective(acc, beta, ref, pen, bp, g)
    fp = iw[0]
    # items with a shard on each rank (with multiplicity), for picks off the busiest ranks
    lists = np.full((w, 4 * n_t + 8), -1, np.int64)
    lcnt = np.zeros(w, np.int64)
    for t in range(n_t):
        c = _footprint(fkind[t, cform[t]], fk[t, cform[t]], fstride[t, cform[t]], cbase[t], w,
                       node, fp)[0]
        _relist(lists, lcnt, fp, c, t, 1)
    hot = np.zeros(3, np.int64)
    bv = np.zeros(3)
    accepted = 0
    tick = 0
    for it in range(n_cand):
        if it % 64 == 0:
            _track(sys, st, twn, dsp, dsi, did, dsz, dlo, fac, ibw, bp, g, cform, cbase,
                   best_form, best_base, best)
            # the busiest rank of each resource (lookups, pooled and index sends)
            bv[:] = -1.0
            for r in range(w):
                for s in range(n_rs):
                    k, v = _rank_entry(st, fac, ibw, g, s, r, ntop)
                    if v > bv[k - RS_LF]:
                        bv[k - RS_LF] = v
                        hot[k - RS_LF] = r
        t = np.random.randint(n_t)
        if np.random.random() < hot_frac:
            h = hot[np.random.randint(3)]
            if lcnt[h] > 0:
                t = lists[h, np.random.randint(lcnt[h])]
        f0 = cform[t]
        b0 = cbase[t]
        k0 = fkind[t, f0]
        f1 = f0
        t2 = -1
        f2 = 0
        n_try = 1
        x = np.random.random()
        if nform[t] > 1 and x < form_frac:
            f1 = np.random.randint(nform[t] - 1)
            if f1 >= f0:
                f1 += 1
            if fkind[t, f1] == IK_RW or fkind[t, f1] == IK_DP:
                b1 = 0
            else:
                n_try = n_scan
                b1 = _random_base(fkind[t, f1], fk[t, f1], fstride[t, f1], w, node, n_nodes)
        elif k0 == IK_TW and x < form_frac + swap_frac:
            t2 = np.random.randint(n_t)
            f2 = cform[t2]
            if t2 == t or fkind[t2, f2] != IK_TW or cbase[t2] == b0:
                continue
            b1 = cbase[t2]
        elif k0 == IK_TW or k0 == IK_CW or k0 == IK_TWRW:
            b1 = _random_base(k0, fk[t, f0], fstride[t, f0], w, node, n_nodes)
            if b1 == b0:
                continue
        else:
            continue
        best_v = math.inf
        best_b = b1
        for s in range(n_try):
            if s > 0:
                b1 = _random_base(fkind[t, f1], fk[t, f1], fstride[t, f1], w, node, n_nodes)
            tick += 1
            val, mode, p = _score(sys, st, twn, dsp, dsi, did, dsz, dlo, fac, ibw, bp, g, itl,
                                  fkind, fk, fstride, t, f0, b0, f1, b1, t2, f2, beta, ref,
                                  acc, err, pen, ecr, ecd, ecn, wk, iw, dw, tmp,
                                  tick)
            if val < best_v:
                best_v = val
                best_b = b1
            if n_try > 1 or not val < cur - 1e-13 * abs(cur):
                _undo(st, twn, dsp, dsi, did, bp, g, itl, fkind, fk, fstride, t, f0, b0, f1,
                      b1, t2, f2, wk, iw)
                if mode == 1:  # the caches were rebuilt for the moved state
                    _fill(st, twn, dsp, dsi, did, dsz, dlo, fac, ibw, bp, g, beta, ref,
                          wk[6], ecr, ecd, ecn)
        if not best_v < cur - 1e-13 * abs(cur):
            continue
        b1 = best_b
        if n_try > 1:
            tick += 1
            val, mode, p = _score(sys, st, twn, dsp, dsi, did, dsz, dlo, fac, ibw, bp, g, itl,
                                  fkind, fk, fstride, t, f0, b0, f1, b1, t2, f2, beta, ref,
                                  acc, err, pen, ecr, ecd, ecn, wk, iw, dw, tmp,
                                  tick)
        # commit
        cur = val
        if mode == 0:
            acc[:] = wk[0, :N_RS]
            err[:] = wk[3, :N_RS]
            pen += p
            with_tr = k0 == IK_TWRW or fkind[t, f1] == IK_TWRW
            n_r, n_d, n_n = iw[2, 0], iw[2, 1], iw[2, 2]
            for q in range(n_r):
                for s in range(n_rs):
                    ecr[s, iw[1, q]] = tmp[0, s, q]
            for q in range(n_d):
                for s in range(2):
                    ecd[s, dw[q, 0], dw[q, 1]] = tmp[1, s, q]
            for q in range(n_n):
                for s in range(3):
                    if _node_q_on(s, top, with_tr):
                        ecn[s, iw[3, q]] = tmp[2, s, q]
        else:
            acc[:] = wk[1, :N_RS]
            ref[:] = wk[2, :N_RS]
            err[:] = 2.3e-16 * n_ent * acc
            pen = p
        c = _footprint(k0, fk[t, f0], fstride[t, f0], b0, w, node, fp)[0]
        _relist(lists, lcnt, fp, c, t, -1)
        c = _footprint(fkind[t, f1], fk[t, f1], fstride[t, f1], b1, w, node, fp)[0]
        _relist(lists, lcnt, fp, c, t, 1)
        cform[t] = f1
        cbase[t] = b1
        if t2 >= 0:
            cbase[t2] = b0
            fp[0] = b1
            _relist(lists, lcnt, fp, 1, t2, -1)
            fp[0] = b0
            _relist(lists, lcnt, fp, 1, t2, 1)
        accepted += 1
    _track(sys, st, twn, dsp, dsi, did, dsz, dlo, fac, ibw, bp, g, cform, cbase, best_form,
           best_base, best)
    return cur, accepted


def form_loads(sc: DlrmScenario, kind: int, k: int, tier: int, n_in: int) -> np.ndarray:
    """Per-rank loads (``(T, N_IL)``, fields ``IL_*``) of every table in one form, as
    :func:`trainscape.dlrm.reference.evaluate_plan` accumulates them: per rank holding a shard
    for the placed forms (``k`` column shards; ``n_in`` ranks of the node for table-row-wise),
    on every rank for row-wise and data-parallel (its ``IL_ADD`` / ``IL_RWD`` / ``IL_DPE``
    feed the uniform index weight, the reduce-scatter and the all-reduce)."""
    j, wf = sc.job, float(sc.world)
    rows, dim, pool, hit = (np.asarray(x, float) for x in _cols(sc))
    b = j[D.DJOB_GLOBAL_BATCH]
    eb, ib, cf = j[D.DJOB_EMB_BYTES], j[D.DJOB_INDEX_BYTES], j[D.DJOB_COMM_FWD_BYTES]
    spb = np.array([lookup_seconds_per_byte(sc.sys, j, tier, h) for h in hit])
    bm = j[D.DJOB_BWD_MULTIPLIER]
    out = np.zeros((sc.n_tables, N_IL))
    if kind == IK_TW or kind == IK_CW:
        ds = dim / k
        fwd = lookup_bytes(b * pool, ds, eb, ib, b, cf) * spb
        out[:, IL_O0] = out[:, IL_O1] = ds
        out[:, IL_IX] = pool
        out[:, IL_HBM] = uniform_storage_hbm(tier, rows, ds, j) + b * pool * ib + 2.0 * b * ds * cf
        out[:, IL_DDR] = uniform_storage_ddr(tier, rows, ds, j)
    elif kind == IK_TWRW:
        fwd = lookup_bytes(b * pool / n_in, dim, eb, ib, b, cf) * spb
        sr = np.ceil(rows / n_in)
        out[:, IL_O1] = dim / n_in
        out[:, IL_IX] = pool / n_in
        out[:, IL_TR] = dim
        out[:, IL_HBM] = (uniform_storage_hbm(tier, sr, dim, j) + b * pool / n_in * ib
                          + 2.0 * b * dim * cf)
        out[:, IL_DDR] = uniform_storage_ddr(tier, sr, dim, j)
    elif kind == IK_RW:
        fwd = lookup_bytes(b * pool / wf, dim, eb, ib, b, cf) * spb
        sr = np.ceil(rows / wf)
        out[:, IL_RWD] = dim
        out[:, IL_ADD] = pool / wf
        out[:, IL_HBM] = (uniform_storage_hbm(tier, sr, dim, j) + b * pool / wf * ib
                          + 2.0 * b * dim * cf)
        out[:, IL_DDR] = uniform_storage_ddr(tier, sr, dim, j)
    else:
        local = b / wf
        fwd = lookup_bytes(local * pool, dim, eb, ib, local, cf) * spb
        out[:, IL_DPE] = rows * dim
        out[:, IL_HBM] = uniform_storage_hbm(tier, rows, dim, j)
        out[:, IL_DDR] = uniform_storage_ddr(tier, rows, dim, j)
    out[:, IL_LF] = fwd
    out[:, IL_LB] = bm * fwd
    if kind == IK_DP:
        out[:, IL_LB] += j[D.DJOB_DP_UPDATE_FACTOR] * rows * dim * eb * spb
    return out


_KIND_TO_IK = {D.SH_TW: IK_TW, D.SH_CW: IK_CW, D.SH_TWRW: IK_TWRW, D.SH_RW: IK_RW,
               D.SH_DP: IK_DP}
_IK_TO_KIND = {v: k for k, v in _KIND_TO_IK.items()}


def table_forms(sc: DlrmScenario, plan: np.ndarray, t: int, state: float, dp_max_bytes: float,
                max_cw: int = 5) -> list[tuple[int, int, int, int]]:
    """Forms (kind, shards, stride, tier) the balancer may give table ``t``: its form in
    ``plan`` first, then table-wise, column-wise with 2, 4, ... shards (each at least 4
    wide, strides spreading them over the world), table-row-wise (more than one rank per
    node), row-wise, and data-parallel when its state is at most ``dp_max_bytes``; all in
    the plan's memory tier."""
    w = sc.world
    node = _node_domains(sc)[0]
    dim = int(sc.tables[D.TAB_DIM, t])
    tier = int(plan[D.PL_TIER, t])
    kind = int(plan[D.PL_KIND, t])
    k0 = int(plan[D.PL_SHARDS, t]) if kind == D.SH_CW else 1
    s0 = int(plan[D.PL_STRIDE, t]) if kind == D.SH_CW else 0
    forms = [(kind, k0, s0, tier)]

    def add(f):
        if f not in forms:
            forms.append(f)

    add((D.SH_TW, 1, 0, tier))
    k, n_cw = 2, 0
    while k <= w and dim % k == 0 and dim // k >= 4 and n_cw < max_cw:
        add((D.SH_CW, k, max(1, w // k), tier))
        k *= 2
        n_cw += 1
    if node > 1:
        add((D.SH_TWRW, 1, 0, tier))
    add((D.SH_RW, 1, 0, tier))
    if state <= dp_max_bytes:
        add((D.SH_DP, 1, 0, tier))
    return forms


class Balancer:
    """:func:`balance_phase` on a plan: every table an item whose forms
    (:func:`table_forms`; only the plan's when not ``forms``) start at the plan's, kept in
    per-rank rows that add up as :func:`trainscape.dlrm.reference.evaluate_plan`'s work rows
    do (``tests/test_dlrm_planner.py`` checks the exact step of the state against the
    kernel). ``run`` descends at one temperature, ``exact`` is the current state's step,
    ``plan`` the best state seen (by the exact step) as a plan. Data-parallel forms are
    offered to tables whose state is at most ``dp_max_bytes`` (default 5% of the HBM budget:
    every rank holds them)."""

    def __init__(self, sc: DlrmScenario, plan: np.ndarray, dp_max_bytes: float | None = None,
                 forms: bool = True):
        from ..model.network import group_top_tier, tier_latency, tier_span

        sys, j, w = sc.sys, sc.job, sc.world
        wf = float(w)
        self.sc, self.base_plan = sc, plan.copy()
        node, n_nodes, n_last = _node_domains(sc)
        top = group_top_tier(sys, wf, 1.0, 1.0, 1.0, 1.0, 1.0)
        n_t = sc.n_tables
        if dp_max_bytes is None:
            dp_max_bytes = 0.05 * max(hbm_budget(sc), 0.0)
        state = table_state(sc)
        all_forms = [table_forms(sc, plan, t, state[t], dp_max_bytes)[: None if forms else 1]
                     for t in range(n_t)]
        nf = max(len(f) for f in all_forms)
        self.forms = all_forms
        fkind = np.zeros((n_t, nf), np.int64)
        fk = np.ones((n_t, nf), np.int64)
        fstride = np.zeros((n_t, nf), np.int64)
        nform = np.array([len(f) for f in all_forms], np.int64)
        itl = np.zeros((n_t, nf, 2, N_IL))
        cache = {}

        def loads(ik, k, tier, n_in):
            key = (ik, k, tier, n_in)
            if key not in cache:
                cache[key] = form_loads(sc, ik, k, tier, n_in)
            return cache[key]

        for t, fl in enumerate(all_forms):
            for f, (kind, k, stride, tier) in enumerate(fl):
                ik = _KIND_TO_IK[kind]
                fkind[t, f], fk[t, f], fstride[t, f] = ik, k, stride
                itl[t, f, 0] = loads(ik, k, tier, node)[t]
                itl[t, f, 1] = loads(ik, k, tier, n_last)[t] if ik == IK_TWRW else itl[t, f, 0]
        ntop = max(top, 0) + 1
        did = np.zeros((ntop, w), np.int64)
        dsz = np.zeros((ntop, w))
        dlo = np.zeros((ntop, w), np.int64)
        fac = np.zeros((ntop, w))
        ibw = np.zeros(ntop)
        for i in range(ntop):
            span = int(min(tier_span(sys, 0) if i == 0 else tier_span(sys, i - 1), w))
            ibw[i] = 1.0 / tier_link_bandwidth(sys, i) if top >= 0 else 0.0
            for r in range(w):
                d = r // span
                lo = d * span
                cnt = min(w, lo + span) - lo
                did[i, r], dsz[i, d], dlo[i, d] = d, cnt, lo
                fac[i, r] = cnt - 1.0 if i == 0 else wf - cnt
        rows, dim, pool, _ = _cols(sc)
        local = j[D.DJOB_GLOBAL_BATCH] / wf
        cf, cb, ib = j[D.DJOB_COMM_FWD_BYTES], j[D.DJOB_COMM_BWD_BYTES], j[D.DJOB_INDEX_BYTES]
        b = j[D.DJOB_GLOBAL_BATCH]
        bp = np.zeros(N_BP)
        bp[BP_W], bp[BP_NODE], bp[BP_TOP], bp[BP_N_NODES] = w, node, top, n_nodes
        bp[BP_U_IDX], bp[BP_U_FWD], bp[BP_U_BWD] = local * ib, local * cf, local * cb
        slope_n = _collective_slope(sys, node, False)
        bp[BP_RS_TR], bp[BP_AG_TR] = slope_n * b * cf, slope_n * b * cb
        bp[BP_LAT] = tier_latency(sys, top) if top >= 0 else 0.0
        bp[BP_AR] = all_reduce_time(sys, j[D.DJOB_DENSE_PARAMS] * j[D.DJOB_GRAD_COMM_BYTES],
                                    wf, 1, 1, 1, 1, 1)
        bp[BP_USABLE] = sys[L.SYS_HBM_BYTES] - sys[L.SYS_HBM_RESERVE_BYTES]
        bp[BP_DDR] = j[D.DJOB_DDR_BYTES]
        bp[BP_DENSE] = dense_fwd_time(sys, j) + dense_bwd_time(sys, j)
        bp[BP_BATCH], bp[BP_CF], bp[BP_CB] = b, cf, cb
        bp[BP_GCB] = j[D.DJOB_GRAD_COMM_BYTES]
        bp[BP_BM] = j[D.DJOB_BWD_MULTIPLIER]
        self.uhbm0 = 2.0 * local * (dim.sum() * cf + pool.sum() * ib) + dense_memory_bytes(j)
        self.geo = (did, dsz, dlo, fac, ibw)
        self.bp = bp
        self.tabs = (itl, fkind, fk, fstride, nform)
        self.cform = np.zeros(n_t, np.int64)
        self.cbase = np.array([int(plan[D.PL_RANK, t]) for t in range(n_t)], np.int64)
        for t in range(n_t):
            if fkind[t, 0] == IK_TWRW:
                self.cbase[t] = (self.cbase[t] // node) * node
            elif fkind[t, 0] in (IK_RW, IK_DP):
                self.cbase[t] = 0
        self.best = np.array([math.inf, 0.0])
        self.best_form = self.cform.copy()
        self.best_base = self.cbase.copy()
        self._build()
        st = self.state[0]
        g = self.state[5]
        scale = np.zeros(N_RS)
        scale[RS_LF] = st[BS_LF].mean() + g[G_ULF]
        for i in range(ntop if top >= 0 else 0):
            o = st[BS_O0] if i == 0 else st[BS_O1]
            scale[RS_POOL] = max(scale[RS_POOL], float((o * fac[i]).mean() * ibw[i]))
            scale[RS_IDX] = max(scale[RS_IDX], float(((st[BS_IX] + g[G_ADD]) * fac[i]).mean()
                                                     * ibw[i]))
        scale[RS_TR] = max(float(dim.max()), 1.0)
        self.scale = np.where(scale > 0.0, scale, 1.0)
        est = (bp[BP_U_IDX] * scale[RS_IDX] + scale[RS_LF] + bp[BP_U_FWD] * scale[RS_POOL]
               + max(bp[BP_U_BWD] * scale[RS_POOL] + bp[BP_BM] * scale[RS_LF], bp[BP_AR]))
        bp[BP_PEN] = 10.0 * max(est, 1e-9)

    def _build(self):
        """The per-rank state of the current forms and bases, from scratch."""
        sc, bp = self.sc, self.bp
        w = sc.world
        did, dsz, dlo, fac, ibw = self.geo
        itl, fkind, fk, fstride, nform = self.tabs
        ntop = did.shape[0]
        st = np.zeros((N_BS, w))
        twn = np.zeros(int(bp[BP_N_NODES]))
        dsp = np.zeros((ntop, w))
        dsi = np.zeros((ntop, w))
        g = np.zeros(N_G)
        g[G_UHBM] = self.uhbm0
        fp = np.empty(max(int(bp[BP_NODE]), int(fk.max())), np.int64)
        for t in range(sc.n_tables):
            _apply(st, twn, dsp, dsi, did, g, itl, fkind, fk, fstride, t, self.cform[t],
                   self.cbase[t], 1.0, int(bp[BP_NODE]), w, fp)
        _uniform_costs(sc.sys, g, bp)
        self.state = (st, twn, dsp, dsi, did, g)

    def exact(self) -> tuple[float, bool]:
        st, twn, dsp, dsi, did, g = self.state
        _, dsz, dlo, fac, ibw = self.geo
        s, ok = exact_step(self.sc.sys, st, twn, dsp, dsi, did, dsz, dlo, fac, ibw, self.bp, g)
        return float(s), bool(ok)

    def run(self, tau: float, n_cand: int, seed: int, hot_frac: float = 0.5,
            swap_frac: float = 0.3, form_frac: float = 0.1,
            n_scan: int = 16) -> tuple[float, int]:
        """One phase at temperature ``tau`` (``beta = tau / scale`` per resource); returns
        (surrogate, accepted changes)."""
        self._build()
        st, twn, dsp, dsi, did, g = self.state
        _, dsz, dlo, fac, ibw = self.geo
        itl, fkind, fk, fstride, nform = self.tabs
        val, acc = balance_phase(self.sc.sys, st, twn, dsp, dsi, did, dsz, dlo, fac, ibw, self.bp,
                               g, itl, fkind, fk, fstride, nform, self.cform, self.cbase,
                               self.best_form, self.best_base, self.best, int(n_cand),
                               int(seed), tau / self.scale, float(hot_frac), float(swap_frac),
                               float(form_frac), int(n_scan))
        return float(val), int(acc)

    def plan_of(self, form: np.ndarray, base: np.ndarray) -> np.ndarray:
        p = self.base_plan.copy()
        for t in range(self.sc.n_tables):
            kind, k, stride, tier = self.forms[t][int(form[t])]
            p[D.PL_KIND, t], p[D.PL_SHARDS, t], p[D.PL_STRIDE, t] = kind, k, stride
            p[D.PL_TIER, t] = tier
            p[D.PL_RANK, t] = int(base[t]) % self.sc.world
        return p

    def plan(self) -> np.ndarray:
        """The best plan seen (the current one before any phase ran)."""
        if not math.isfinite(self.best[0]):
            return self.plan_of(self.cform, self.cbase)
        return self.plan_of(self.best_form, self.best_base)


# ---------------------------------------------------------------------------------------------
# Evolutionary refinement and the driver
# ---------------------------------------------------------------------------------------------


def structural_candidates(sc: DlrmScenario, plan: np.ndarray, n: int, rng) -> np.ndarray:
    """``n`` plans, each ``plan`` with one table's sharding changed: table-wise <-> column-wise
    (split into 2 shards, split a column-wise table further, merge its shards in two, back
    to table-wise), to table-row-wise, row-wise or data-parallel (when it fits one rank), and
    a row-wise / table-row-wise table's memory tier; ranks and strides drawn at random."""
    w, node = sc.world, sc.node_size
    dim = sc.tables[D.TAB_DIM].astype(np.int64)
    state = table_state(sc)
    budget = hbm_budget(sc)
    out = np.repeat(plan[None], n, axis=0)
    for m in range(n):
        t = int(rng.integers(sc.n_tables))
        p = out[m]
        kind = int(p[D.PL_KIND, t])
        k = int(p[D.PL_SHARDS, t])
        opts = []
        if kind in (D.SH_TW, D.SH_CW):
            k2 = 2 * k if kind == D.SH_CW else 2
            if k2 <= w and dim[t] % k2 == 0 and dim[t] // k2 >= 4:
                opts.append((D.SH_CW, k2))
            if kind == D.SH_CW:
                opts.append((D.SH_CW, k // 2) if k // 2 > 1 else (D.SH_TW, 1))
        else:
            opts.append((D.SH_TW, 1))
            opts.append((D.SH_CW, 2) if dim[t] % 2 == 0 and w >= 2 else (D.SH_TW, 1))
        if w > node and kind != D.SH_TWRW:
            opts.append((D.SH_TWRW, 1))
        if kind != D.SH_RW:
            opts.append((D.SH_RW, 1))
        if kind != D.SH_DP and state[t] < 0.05 * budget:
            opts.append((D.SH_DP, 1))
        new_kind, new_k = opts[int(rng.integers(len(opts)))]
        p[D.PL_KIND, t] = new_kind
        p[D.PL_SHARDS, t] = new_k
        p[D.PL_RANK, t] = int(rng.integers(w))
        p[D.PL_STRIDE, t] = 0
        if new_kind == D.SH_CW:
            p[D.PL_STRIDE, t] = max(1, w // new_k) if rng.random() < 0.5 else 1
        if new_kind in (D.SH_RW, D.SH_TWRW) and rng.random() < 0.3:
            p[D.PL_TIER, t] = int(rng.integers(3))
    return out


def _critical_tables(sc: DlrmScenario, plan: np.ndarray, work: np.ndarray, n_ranks: int) -> list:
    """Tables with a shard on the ``n_ranks`` busiest ranks of each maximum of the step
    (forward and backward lookups, pooled and index all-to-all) -- the ranks that set it."""
    w, node = sc.world, sc.node_size
    hot = set()
    for row in (D.RK_LOOKUP_FWD_S, D.RK_LOOKUP_BWD_S, D.RK_X_POOL, D.RK_X_IDX):
        hot.update(int(r) for r in np.argsort(-work[row, :w], kind="stable")[:n_ranks])
    out = []
    for t in range(sc.n_tables):
        kind = int(plan[D.PL_KIND, t])
        if kind in (D.SH_RW, D.SH_DP):
            continue
        ranks = _shard_ranks(kind, int(plan[D.PL_SHARDS, t]), int(plan[D.PL_STRIDE, t]),
                             int(plan[D.PL_RANK, t]), w, node)
        if hot.intersection(ranks):
            out.append(t)
    return out


def polish(sc: DlrmScenario, plan: np.ndarray, max_evals: int = 50_000, seed: int = 0,
           backend=None, batch: int = 1024) -> tuple[np.ndarray, float, int]:
    """Exact local search on the critical ranks: every change of one table's sharding form
    (:func:`table_forms`) and place -- all ranks, first shards or nodes, at most 32 drawn at
    random per form -- for the tables on the busiest ranks of each maximum (every table when
    they are few), scored by full evaluations; the best is applied while it lowers the step
    and ``max_evals`` lasts. Returns (plan, step, evaluations)."""
    from . import evaluate_plans as _eval

    rng = np.random.default_rng(seed)
    w = sc.world
    node, n_nodes, _ = _node_domains(sc)
    state = table_state(sc)
    dp_max = 0.05 * max(hbm_budget(sc), 0.0)
    plan = np.ascontiguousarray(plan, dtype=np.int32).copy()
    work = np.zeros((D.N_RANK, w + 1))
    out = _eval(sc, plan, backend=backend, work=work)
    cur = out[D.DO_STEP_TIME_S, 0] if out[D.DO_FEASIBLE, 0] > 0 else math.inf
    evals = 1
    while evals < max_evals:
        tables = (list(range(sc.n_tables)) if sc.n_tables * w <= 4096
                  else _critical_tables(sc, plan, work, 2))
        cands = []
        for t in tables:
            for kind, k, stride, tier in table_forms(sc, plan, t, state[t], dp_max):
                if kind in (D.SH_RW, D.SH_DP):
                    bases = [0]
                elif kind == D.SH_TWRW:
                    bases = [n * node for n in range(n_nodes)]
                elif kind == D.SH_CW and 0 < stride and stride * k <= w:
                    bases = list(range(stride))
                else:
                    bases = list(range(w))
                if len(bases) > 32:
                    bases = list(rng.choice(bases, 32, replace=False))
                for b in bases:
                    c = (t, kind, k, stride, tier, int(b))
                    if (kind, k, stride, tier, b) != tuple(int(x) for x in (
                            plan[D.PL_KIND, t], plan[D.PL_SHARDS, t], plan[D.PL_STRIDE, t],
                            plan[D.PL_TIER, t], plan[D.PL_RANK, t])):
                        cands.append(c)
        if not cands:
            break
        cands = cands[: max(0, max_evals - evals)]
        best_s, best_c = cur, None
        for lo in range(0, len(cands), batch):
            chunk = cands[lo:lo + batch]
            plans = np.repeat(plan[None], len(chunk), axis=0)
            for n, (t, kind, k, stride, tier, b) in enumerate(chunk):
                plans[n, D.PL_KIND, t], plans[n, D.PL_SHARDS, t] = kind, k
                plans[n, D.PL_STRIDE, t], plans[n, D.PL_TIER, t] = stride, tier
                plans[n, D.PL_RANK, t] = b
            o = _eval(sc, plans, backend=backend)
            evals += len(chunk)
            steps = np.where(o[D.DO_FEASIBLE] > 0, o[D.DO_STEP_TIME_S], np.inf)
            j = int(np.argmin(steps))
            if steps[j] < best_s * (1.0 - 1e-12):
                best_s, best_c = float(steps[j]), chunk[j]
        if best_c is None:
            break
        t, kind, k, stride, tier, b = best_c
        plan[D.PL_KIND, t], plan[D.PL_SHARDS, t], plan[D.PL_STRIDE, t] = kind, k, stride
        plan[D.PL_TIER, t], plan[D.PL_RANK, t] = tier, b
        out = _eval(sc, plan, backend=backend, work=work)
        evals += 1
        cur = best_s
    return plan, cur, evals


def refine(sc: DlrmScenario, plan: np.ndarray, iters: int = 200_000, seed: int = 0,
           tier_moves: bool = True, rounds: int = 20, structural: int = 256,
           batch: int = 128, backend=None) -> tuple[np.ndarray, float, int, int]:
    """Evolutionary refinement; returns (plan, step, O(1) scores, accepted changes).

    ``rounds`` times: ``iters / rounds`` candidate moves / swaps / tier changes of the
    table-wise tables scored in O(1) (:func:`trainscape.dlrm.incremental.evolve`, batches of
    ``batch``, the best applied), then ``structural`` sharding-type changes (split / merge
    column shards, to and from table-wise, table-row-wise, row-wise, data-parallel) scored by
    full evaluations with the kernel, the best applied when it lowers the step.
    """
    from . import evaluate_plans as _eval
    from .incremental import evolve

    rng = np.random.default_rng(seed)
    tables = np.ascontiguousarray(sc.tables)
    plan = np.ascontiguousarray(plan.copy(), dtype=np.int32)
    out = _eval(sc, plan, backend=backend)
    cur = out[D.DO_STEP_TIME_S, 0] if out[D.DO_FEASIBLE, 0] > 0 else math.inf
    scored = accepted = 0
    rounds = max(1, int(rounds))
    for r in range(rounds):
        movable = np.flatnonzero(plan[D.PL_KIND] == D.SH_TW).astype(np.int64)
        n = int(iters) // rounds + (1 if r < int(iters) % rounds else 0)
        if len(movable) and n > 0:
            trial = plan.copy()
            step, sc_n, acc = evolve(sc.sys, sc.job, tables, trial, movable, n,
                                     int(seed) * 1000 + r, int(batch), bool(tier_moves), 0.25,
                                     0.5)
            scored += int(sc_n)
            if step <= cur:
                plan, cur = trial, float(step)
                accepted += int(acc)
        if structural > 0:
            cands = structural_candidates(sc, plan, int(structural), rng)
            o = _eval(sc, cands, backend=backend)
            steps = np.where(o[D.DO_FEASIBLE] > 0, o[D.DO_STEP_TIME_S], np.inf)
            k = int(np.argmin(steps))
            if steps[k] < cur * (1.0 - 1e-12):
                plan, cur = np.ascontiguousarray(cands[k]), float(steps[k])
                accepted += 1
    return plan, float(cur), scored, accepted


TAUS = (10.0, 30.0, 100.0, 300.0, 1000.0)


def split_hot(sc: DlrmScenario, plan: np.ndarray, alpha: float = 1.0) -> np.ndarray:
    """``plan`` with every table-wise table whose lookups exceed ``alpha`` times the mean
    rank's (lookups of all tables over the ranks) split column-wise: the fewest shards
    (powers of two dividing the dim, shards at least 4 wide) that bring a shard's lookups
    under that share, else the most. No placement of a table heavier than the mean rank can
    balance the busiest rank's lookups; split, it can (ZionEX §4.1, column-wise sharding of
    the tables that dominate a rank)."""
    w = sc.world
    out = plan.copy()
    st, _, _, _, _, g = Balancer(sc, plan, forms=False).state
    share = alpha * (st[BS_LF].mean() + g[G_ULF])
    dim = sc.tables[D.TAB_DIM].astype(np.int64)
    for tier in np.unique(plan[D.PL_TIER]):
        tw = form_loads(sc, IK_TW, 1, int(tier), 1)[:, IL_LF]
        for t in np.flatnonzero((plan[D.PL_KIND] == D.SH_TW) & (plan[D.PL_TIER] == tier)
                                & (tw > share)):
            best, k = 0, 2
            while k <= w and dim[t] % k == 0 and dim[t] // k >= 4:
                best = k
                if form_loads(sc, IK_CW, k, int(tier), 1)[t, IL_LF] <= share:
                    break
                k *= 2
            if best >= 2:
                out[D.PL_KIND, t], out[D.PL_SHARDS, t] = D.SH_CW, best
                out[D.PL_STRIDE, t] = max(1, w // best)
    return out


def balance(sc: DlrmScenario, plan: np.ndarray, candidates: int, seed: int = 0,
            taus: tuple = TAUS, form_frac: float = 0.05,
            n_scan: int = 8) -> tuple[np.ndarray, float, int]:
    """Smoothed balancing (:class:`Balancer`) from ``plan``: ``candidates`` in all, split over
    the temperatures ``taus`` (rising); returns (best plan by the exact step, its step,
    accepted changes)."""
    bal = Balancer(sc, plan)
    acc = 0
    for k, tau in enumerate(taus):
        n = int(candidates) // len(taus) + (1 if k < int(candidates) % len(taus) else 0)
        acc += bal.run(tau, n, int(seed) * 7919 + k, form_frac=form_frac, n_scan=n_scan)[1]
    best = bal.plan()
    return best, float(bal.best[0]) if bal.best[1] > 0 else math.inf, acc


def plan(sc: DlrmScenario, method: str = "evolve", beam_width: int = 8, seed: int = 0,
         iterations: int = 200_000, backend=None) -> PlanResult:
    """Plan the sharding of ``sc``: ``greedy`` (best of the baselines), ``beam``, or
    ``evolve``: the best of three starts -- the best greedy plan and the bound's relaxed plan
    (:func:`bound_plan`), each with its hot tables split (:func:`split_hot`), and every
    table data-parallel -- balanced by ``iterations`` smoothed candidates (:func:`balance`:
    placements, swaps and sharding types), then ``iterations / 4`` exact O(1)-scored moves
    and structural changes (:func:`refine`) and an exact local search on the critical ranks
    (:func:`polish`); the best plan met on the way is returned."""
    if method not in METHODS:
        raise ValueError(f"method: unknown {method!r} (allowed: {', '.join(METHODS)})")
    from . import evaluate

    t0 = time.perf_counter()
    parts = lower_bound_parts(sc)
    base = greedy_baselines(sc, backend=backend)
    evals = len(base)
    best_key = min(base, key=lambda k: base[k][1])
    best_plan, best_step = base[best_key][0], base[best_key][1]
    scored = accepted = 0

    def consider(p):
        nonlocal best_plan, best_step
        r = evaluate(sc, p, backend=backend)
        if r["feasible"] and r["step_time_s"] < best_step:
            best_plan, best_step = p, r["step_time_s"]

    if method == "beam":
        bp, n = beam(sc, width=beam_width, backend=backend)
        evals += n
        consider(bp)
    if method == "evolve":
        # starts: the best greedy plan, the bound's relaxed plan, every table data-parallel;
        # the balancer runs from the best of them with its hot tables split
        all_dp = np.zeros((D.N_PLAN, sc.n_tables), np.int32)
        all_dp[D.PL_KIND], all_dp[D.PL_SHARDS] = D.SH_DP, 1
        starts = [split_hot(sc, best_plan),
                  split_hot(sc, bound_plan(sc, parts["theta_sum"])), all_dp]
        o = evaluate_plans(sc, np.stack(starts), backend=backend)
        evals += len(starts)
        steps = np.where(o[D.DO_FEASIBLE] > 0, o[D.DO_STEP_TIME_S], np.inf)
        start = starts[int(np.argmin(steps))] if np.isfinite(steps).any() else starts[0]
        consider(start)
        n_bal = int(iterations)
        bp, _, acc = balance(sc, start, n_bal, seed)
        scored += n_bal
        accepted += acc
        consider(bp)
        ep, _, sc_n, acc = refine(sc, best_plan, max(1, n_bal // 4), seed, backend=backend)
        scored += sc_n
        accepted += acc
        consider(ep)
        pp, _, n = polish(sc, best_plan, 20_000, seed, backend=backend)
        evals += n
        consider(pp)
    res = evaluate(sc, best_plan, backend=backend)
    return PlanResult(method=method, plan=best_plan, step_time_s=res["step_time_s"], result=res,
                      lower_bound_s=parts["lower_bound_s"],
                      baselines={k: v[1] for k, v in base.items()},
                      elapsed_s=time.perf_counter() - t0, evaluations=evals,
                      moves_scored=scored, moves_accepted=accepted)
