"""Sharding planner: greedy baselines, beam search and evolutionary refinement.

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
- Evolutionary refinement (:func:`refine`): moves, swaps and memory-tier changes of the
  table-wise tables, each scored in O(1) by :mod:`trainscape.dlrm.incremental`, alternating
  with sharding-type changes (split / merge column shards, table-row-wise, row-wise,
  data-parallel) scored by full evaluations.

The lower bound (:func:`lower_bound`) is proved in its docstring: sums of per-table least
contributions under an HBM capacity relaxation (Lagrangian), and the least busiest-rank
lookup of the largest table.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field

import numpy as np

from .. import layout as L
from ..model.collectives import all_reduce_time, all_to_all_time
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
)
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
    """The previous engineer's estimate: every table table-wise in HBM with its lookups and
    owned dims / indices spread evenly. Kept for reports. It is not proved to be a lower
    bound: it charges every table the all-to-all share and HBM lookups, which row-wise /
    data-parallel tables (collectives instead of the all-to-all) need not pay, and it ignores
    HBM capacity; :func:`lower_bound` is the proved one."""
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


def _a2a_units_bound(sc: DlrmScenario) -> float:
    """``u`` with ``max_r x_r >= u x sum_r w_r / W`` for either all-to-all of the reference
    (``rank_a2a_units``): on tier ``i >= 1`` rank ``r`` sends ``w_r (W - n_{i-1}(r))`` with
    ``n_{i-1}(r) <= span_{i-1}``, so the average over ranks is at least ``(W - span_{i-1}) /
    W x sum w / bw_i`` and the maximum is at least the average. On a single node (only tier 0)
    rank ``r`` sends ``w0_r (W - 1)`` (``own_dim0``, which table-row-wise shards do not feed:
    then 0 is used for them, see :func:`lower_bound`)."""
    from ..model.network import group_top_tier, tier_span

    sys, w = sc.sys, float(sc.world)
    top = group_top_tier(sys, w, 1.0, 1.0, 1.0, 1.0, 1.0)
    best = 0.0
    for i in range(1, top + 1):
        span = min(tier_span(sys, i - 1), w)
        best = max(best, (w - span) / w / tier_link_bandwidth(sys, i))
    return best


def lower_bound_parts(sc: DlrmScenario) -> dict:
    """The lower bound and its two arguments (see :func:`lower_bound`)."""
    sys, j, w = sc.sys, sc.job, sc.world
    wf = float(w)
    rows, dim, pool, hit = (np.asarray(x, float) for x in _cols(sc))
    b = j[D.DJOB_GLOBAL_BATCH]
    eb, ib, cf, cb = (j[D.DJOB_EMB_BYTES], j[D.DJOB_INDEX_BYTES], j[D.DJOB_COMM_FWD_BYTES],
                      j[D.DJOB_COMM_BWD_BYTES])
    bm = j[D.DJOB_BWD_MULTIPLIER]
    local = b / wf
    multi = w > sc.node_size
    kap = _a2a_units_bound(sc) if multi else 0.0
    k_pool = (local * cf + local * cb) * kap  # seconds per owned pooled dim (fwd + bwd)
    k_idx = local * ib * kap  # seconds per owned lookup per sample
    rs = _collective_slope(sys, w, False)
    ar = _collective_slope(sys, w, True)
    usable = sys[L.SYS_HBM_BYTES] - sys[L.SYS_HBM_RESERVE_BYTES]
    ddr_cap = j[D.DJOB_DDR_BYTES]
    state = table_state(sc)
    cache = j[D.DJOB_UVM_CACHE_FRACTION] * rows * dim * eb
    uni_fixed = 2.0 * local * (dim.sum() * cf + pool.sum() * ib) + dense_memory_bytes(j)
    cap = wf * (usable - uni_fixed)  # HBM all ranks together hold for table shards
    n_t = sc.n_tables
    # cost[t, option, tier] (seconds added to the sum of averages) and hbm[t, option, tier]
    # (a lower bound of the HBM bytes the option takes over all ranks); options: 0 table-,
    # column- or table-row-wise, 1 row-wise, 2 data-parallel
    cost = np.full((n_t, 3, 3), np.inf)
    hbm = np.zeros((n_t, 3, 3))
    per_rank = np.full(n_t, np.inf)  # smallest busiest-rank lookup seconds of each table
    for tier in range(3):
        spb = np.array([lookup_seconds_per_byte(sys, j, tier, h) for h in hit])
        l1 = (b * pool * ib + b * pool * dim * eb + b * dim * cf) * spb  # whole-table lookups
        mem = state if tier == D.MT_HBM else (cache if tier == D.MT_UVM else np.zeros(n_t))
        mem_dp = mem * wf
        fits_dp = np.where(tier == D.MT_HBM, state <= usable,
                           (state <= ddr_cap) & ((cache <= usable) | (tier == D.MT_DDR)))
        cost[:, 0, tier] = (1.0 + bm) * l1 / wf + k_pool * dim + k_idx * pool
        hbm[:, 0, tier] = mem
        rw_look = (b * pool * ib + b * pool * dim * eb + wf * b * dim * cf) * spb
        cost[:, 1, tier] = ((1.0 + bm) * rw_look / wf + k_idx * pool
                            + rs * b * dim * (cf + cb))
        hbm[:, 1, tier] = mem
        dp = ((1.0 + bm) * l1 / wf + j[D.DJOB_DP_UPDATE_FACTOR] * rows * dim * eb * spb
              + ar * rows * dim * j[D.DJOB_GRAD_COMM_BYTES])
        cost[:, 2, tier] = np.where(fits_dp, dp, np.inf)
        hbm[:, 2, tier] = mem_dp
        # busiest rank holding the table: table-wise whole; column-wise k shards each read
        # all indices; table-row-wise / row-wise shards each write the whole pooled output;
        # data-parallel: the local batch plus the update on every rank
        kmax = np.array([max(k for k in range(1, min(w, int(d)) + 1) if int(d) % k == 0)
                         for d in dim], float)
        cw = (b * pool * ib + (b * pool * eb + b * cf) * dim / kmax) * spb
        n_in = float(min(sc.node_size, w))
        tr = (b * pool / n_in * ib + b * pool / n_in * dim * eb + b * dim * cf) * spb
        rw = (b * pool / wf * ib + b * pool / wf * dim * eb + b * dim * cf) * spb
        pr = np.minimum(np.minimum(l1, cw), np.minimum(tr, rw)) * (1.0 + bm)
        pr = np.minimum(pr, np.where(fits_dp, dp, np.inf))  # dp_ar is part of E, too
        per_rank = np.minimum(per_rank, pr)
    flat_c = cost.reshape(n_t, 9)
    flat_m = hbm.reshape(n_t, 9)

    def dual(lam):
        return float(np.min(flat_c + lam * flat_m, axis=1).sum() - lam * cap)

    # weak duality: dual(lam) <= min sum cost s.t. sum hbm <= cap, for every lam >= 0;
    # maximise over a log grid, then refine around the best point
    best = dual(0.0)
    if cap > 0 and np.isfinite(best):
        grid = np.logspace(-22, -6, 97)
        vals = [dual(x) for x in grid]
        k = int(np.argmax(vals))
        lo, hi = grid[max(0, k - 1)], grid[min(len(grid) - 1, k + 1)]
        for x in np.linspace(lo, hi, 41):
            vals.append(dual(x))
        best = max(best, max(vals))
    dense = dense_fwd_time(sys, j) + dense_bwd_time(sys, j)
    dense_ar = all_reduce_time(sys, j[D.DJOB_DENSE_PARAMS] * j[D.DJOB_GRAD_COMM_BYTES], wf,
                               1, 1, 1, 1, 1)
    sum_bound = dense + max(best, dense_ar)
    rank_bound = dense + max(float(per_rank.max()) if n_t else 0.0, dense_ar)
    return {"lower_bound_s": max(sum_bound, rank_bound), "sum_bound_s": sum_bound,
            "rank_bound_s": rank_bound, "even_spread_s": even_spread_bound(sc)}


def lower_bound(sc: DlrmScenario) -> float:
    """A step time no plan of ``sc`` can beat (valid for every sharding type, rank and tier).

    The reference's step is ``dense_fwd + dense_bwd + idx_a2a + max_lf + a2a_fwd + rs_fwd +
    max(emb_bwd, dense_ar)`` with ``emb_bwd = a2a_bwd + ag_bwd + max_lb + dp_ar`` (every term
    >= 0), so with ``E`` the sum of the embedding terms, ``step >= dense + max(E, dense_ar)``.

    Proof that ``E >= S`` (the *sum* argument). Each maximum over ranks is at least the
    average over ranks, and every average is a sum of per-table contributions:

    - lookups: a table's forward lookup seconds summed over the ranks are, for every sharding
      type, at least ``(B p ib + B p d eb + B d cbf) spb`` (column-wise repeats the index
      read per shard, row-wise / table-row-wise the output write per shard, data-parallel
      splits the batch exactly); row-wise's sum is ``(B p ib + B p d eb + W B d cbf) spb``
      exactly; backward is ``bwd_multiplier`` x forward, plus data-parallel's update on every
      rank; ``spb`` is that of the table's tier;
    - all-to-alls: per tier ``i >= 1`` the average over ranks of what a rank sends is
      ``>= (W - span_{i-1}) / W x sum_r w_r`` and the sum of owned weights is ``d`` per
      table-, column- or table-row-wise table for the pooled exchange and ``p`` (``k p`` for
      column-wise) per non-data-parallel table for the index exchange
      (:func:`_a2a_units_bound`; on one node 0 is used);
    - collectives: every algorithm's time is latency (>= 0) plus bytes x slope, so a row-wise
      table adds at least ``slope_rs x B d (cbf + cbb)`` and a data-parallel table
      ``slope_ar x rows d grad_bytes`` (:func:`_collective_slope`); these terms add over
      tables because the bytes add.

    Hence ``E >= sum_t cost_t(o_t, tier_t)`` for the plan's choices. Memory: the HBM all
    ranks hold for shards is at most ``W (usable - fixed)`` (fixed: the plan-independent
    buffers and the dense part on every rank), and each choice takes at least ``hbm_t`` bytes
    of it (HBM tier: the table's state; UVM: its cache; DDR: 0; data-parallel x W). For any
    ``lam >= 0``, ``sum_t cost_t <= sum_t cost_t + lam (W (usable - fixed) - sum_t hbm_t)``,
    whose minimum over the choices is ``sum_t min_o (cost + lam hbm) - lam cap`` (weak
    Lagrangian duality), so ``S = max_lam`` of it is a lower bound of ``E`` for every feasible
    plan. Data-parallel is allowed only where a whole table fits one rank.

    The *rank* argument: the rank holding (a shard of) the largest table does its lookups
    forward and backward in ``max_lf + max_lb``; per table, the least that busiest rank can
    get is the minimum over sharding types of its shard's lookup seconds (column-wise with the
    largest shard count dividing the dim, table-row-wise over one node, row-wise, or
    data-parallel's local batch plus update). So ``E >= max_t min_o``, too.

    ``tests/test_dlrm_planner.py`` checks that no evaluated plan (random plans of every type,
    tier and rank, and the planners' plans) beats it.
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


def plan(sc: DlrmScenario, method: str = "evolve", beam_width: int = 8, seed: int = 0,
         iterations: int = 200_000, backend=None) -> PlanResult:
    """Plan the sharding of ``sc``: ``greedy`` (best of the baselines), ``beam``, or
    ``evolve`` (beam, then O(1)-scored moves from the best of beam and greedy)."""
    if method not in METHODS:
        raise ValueError(f"method: unknown {method!r} (allowed: {', '.join(METHODS)})")
    from . import evaluate

    t0 = time.perf_counter()
    base = greedy_baselines(sc, backend=backend)
    evals = len(base)
    best_key = min(base, key=lambda k: base[k][1])
    best_plan, best_step = base[best_key][0], base[best_key][1]
    scored = accepted = 0
    if method in ("beam", "evolve"):
        bp, n = beam(sc, width=beam_width, backend=backend)
        evals += n
        bs = evaluate(sc, bp, backend=backend)
        if bs["feasible"] and bs["step_time_s"] < best_step:
            best_plan, best_step = bp, bs["step_time_s"]
    if method == "evolve":
        ep, _, scored, accepted = refine(sc, best_plan, iterations, seed, backend=backend)
        es = evaluate(sc, ep, backend=backend)
        if es["feasible"] and es["step_time_s"] <= best_step:
            best_plan, best_step = ep, es["step_time_s"]
    res = evaluate(sc, best_plan, backend=backend)
    return PlanResult(method=method, plan=best_plan, step_time_s=res["step_time_s"], result=res,
                      lower_bound_s=lower_bound(sc),
                      baselines={k: v[1] for k, v in base.items()},
                      elapsed_s=time.perf_counter() - t0, evaluations=evals,
                      moves_scored=scored, moves_accepted=accepted)
