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
- Smoothed balancing (:func:`balance`, over :class:`trainscape.dlrm.balance.Balancer`): every
  maximum of the step replaced by a log-sum-exp whose temperature rises over the phases;
  moves, swaps and sharding-type changes (table-, column-, table-row-, row-wise,
  data-parallel) of every table, each scored from the entries it changes; hot tables are split
  first (:func:`split_hot`).
- Refinement (:func:`refine`): exact O(1)-scored moves, swaps and memory-tier changes of the
  table-wise tables (:mod:`trainscape.dlrm.incremental`) alternating with structural changes
  scored by full evaluations; then an exact local search on the critical ranks
  (:func:`polish`).

The lower bound (:func:`trainscape.dlrm.bounds.lower_bound`) is proved in its docstring:
per-table least contributions to the averages over ranks under an HBM capacity relaxation (Lagrangian), the
hottest table's busiest rank, and the busiest holder of one table alone, each with the
backward weighed against the dense all-reduce it overlaps. ``bounds.even_spread_bound`` (the
issue's "total work spread evenly") is a lower bound only under the conditions in its
docstring.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field

import numpy as np

from ..model.network import tier_link_bandwidth
from . import layout as D
from .evaluation import evaluate_plans
from .balance import BS_LF, G_ULF, IK_CW, IK_TW, IL_LF, Balancer, form_loads, table_forms
from .bounds import (
    B_DP,
    B_GRP,
    B_RW,
    B_TWRW,
    _dual,
    _node_domains,
    bound_terms,
    lower_bound_parts,
)
from .estimates import _cross_bw, hbm_budget, table_cost, table_state
from .reference import (
    batched_copy_seconds,
    lookup_bytes,
    lookup_seconds_per_byte,
    shard_lookup_bytes,
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
    #: True when ``time_limit_s`` ended the planning before all its phases ran
    time_limited: bool = False



def _past(deadline: float | None) -> bool:
    return deadline is not None and time.perf_counter() > deadline


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

    def look_tw(d):  # a table- or column-wise shard d columns wide (kernel-true bytes)
        return shard_lookup_bytes(b * pool, d, eb, ib, b, cf) * spb * m

    opts = [(D.SH_TW, 1, look_tw(dim) + b * (pool * ib + dim * (cf + cb)) * out_ / bw,
             1, 0.0)]
    k = 2
    while int(dim) % k == 0 and k <= w and dim // k >= 4:
        opts.append((D.SH_CW, k, look_tw(dim / k)
                     + b * (pool * ib + dim / k * (cf + cb)) * out_ / bw, k, 0.0))
        k *= 2
    if w > node:
        cross = float(w - node) / w
        opts.append((D.SH_TWRW, 1, look(b * pool / node, dim, b)
                     + b * (pool / node * ib + dim / node * (cf + cb)) * cross / bw
                     + b * dim * (cf + cb) / bw0, node, 0.0))
    opts.append((D.SH_RW, 1, 0.0, w, look(b * pool / w, dim, b) + b * pool / w * ib / bw
                 + batched_copy_seconds(b, dim, cb, spb)
                 + b * dim * (cf + cb) / (bw if w > node else bw0)))
    return opts


def choose_types(sc: DlrmScenario) -> np.ndarray:
    """A plan with kinds, shards, strides and tiers chosen per table; ranks all 0.

    Per table, among the candidate shardings (:func:`option_costs`) that fit the HBM budget,
    the one adding the least total work whose per-rank load stays below an even share of the
    table-wise total; if none does, the one with the least per-rank load.
    """
    w = sc.world
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


def _cons(sc):
    """The scenario's per-table constraints (:mod:`trainscape.dlrm.constraints`), or None."""
    return getattr(sc, "constraints", None)


def _repair(sc, plan):
    """``plan`` repaired into the constraints (:meth:`Constraints.repair`), preferring forms
    whose shard state takes at most half a rank's HBM budget (host tiers: 90 % of its DDR)."""
    cons = _cons(sc)
    state = table_state(sc)
    budget = hbm_budget(sc)
    ddr = sc.job[D.DJOB_DDR_BYTES]
    frac = sc.job[D.DJOB_UVM_CACHE_FRACTION]
    w, node = sc.world, sc.node_size

    def fits(t, kind, k, tier):
        parts = {D.SH_CW: k, D.SH_TWRW: node, D.SH_RW: w}.get(kind, 1)
        s = state[t] / parts
        if tier in (D.MT_HBM, D.MT_DENSE):
            return s <= 0.5 * budget
        if tier == D.MT_KV:
            return frac * s <= 0.5 * budget
        return s <= 0.9 * ddr and (tier == D.MT_DDR or frac * s <= 0.5 * budget)

    return cons.repair(plan, fits)


def _allowed(sc, i, kind, k, stride):
    """Allowed base ranks of table ``i`` in this form (None: any)."""
    cons = _cons(sc)
    return None if cons is None else cons.allowed_bases(i, int(kind), int(k), int(stride))


def _place(sc, plan, order, metric, budget, cost, state, load=None, mem=None):
    """Place tables in ``order`` onto the least-loaded rank(s) by ``metric`` rows (within the
    ranks a table's constraints allow); ``load`` / ``mem`` (per rank, updated in place): what
    the ranks hold already."""
    w, node = sc.world, sc.node_size
    load = np.zeros(w) if load is None else load
    mem = np.zeros(w) if mem is None else mem
    for i in order:
        kind = plan[D.PL_KIND, i]
        c, m, lk = _shard_weights(sc, plan, i, cost, state)
        val = {"cost": c, "size": m, "lookups": lk}[metric]
        k = int(plan[D.PL_SHARDS, i])
        stride = int(plan[D.PL_STRIDE, i])
        allowed = _allowed(sc, i, kind, k, stride)
        if kind == D.SH_TW:
            ok = mem + m <= budget
            cand = np.where(ok, load, np.inf)
            if allowed is not None:
                cand = np.where(np.isin(np.arange(w), allowed), cand, np.nan)
                fin = np.isfinite(cand)
                r = int(np.nanargmin(np.where(fin, cand, np.nan))) if fin.any() else \
                    int(allowed[np.argmin(mem[allowed])])
            else:
                r = int(np.argmin(cand)) if np.isfinite(cand).any() else int(np.argmin(mem))
            plan[D.PL_RANK, i] = r
            bases = [r]
        elif kind == D.SH_CW:
            # every first shard at once: ranks (b + j * stride) mod W of each base b
            bs = np.arange(max(1, min(stride, w))) if allowed is None else np.asarray(allowed)
            rs = (bs[:, None] + np.arange(k)[None, :] * stride) % w
            v = np.where((mem[rs] + m > budget).any(axis=1), np.inf, load[rs].max(axis=1))
            best_b = int(bs[int(np.argmin(v))]) if np.isfinite(v).any() else int(bs[0])
            plan[D.PL_RANK, i] = best_b
            bases = _shard_ranks(kind, k, stride, best_b, w, node)
        elif kind == D.SH_TWRW:
            n_nodes = (w + node - 1) // node
            node_load = np.maximum.reduceat(load, np.arange(0, w, node))  # per node, at once
            if allowed is not None:
                node_load = np.where(np.isin(np.arange(n_nodes) * node, allowed), node_load,
                                     np.inf)
            n = int(np.argmin(node_load))
            plan[D.PL_RANK, i] = n * node
            bases = _shard_ranks(kind, k, stride, n * node, w, node)
        else:
            plan[D.PL_RANK, i] = 0
            bases = range(w)
        if kind in (D.SH_RW, D.SH_DP):
            load += val
            mem += m
        else:
            np.add.at(load, np.asarray(bases), val)  # once per shard, as a loop would
            np.add.at(mem, np.asarray(bases), m)
    return plan


def greedy(sc: DlrmScenario, key: str = "cost", types: np.ndarray | None = None) -> np.ndarray:
    """Greedy baseline: tables sorted by ``key`` (size, lookups, cost) descending, each onto
    the least-loaded rank(s) by the same measure, within the HBM budget."""
    if key not in GREEDY_KEYS:
        raise ValueError(f"greedy key: unknown {key!r} (allowed: {', '.join(GREEDY_KEYS)})")
    plan = (choose_types(sc) if types is None else types).copy()
    if _cons(sc) is not None:
        plan = _repair(sc, plan)
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


def bound_plan(sc: DlrmScenario, theta: float | None = None) -> np.ndarray:
    """The relaxed plan of the sum bound (:func:`lower_bound_parts`) made a plan: each
    table's sharding option and tier at the bound's ``theta`` and ``lam`` (table- /
    column-wise as table-wise), placed greedily by estimated cost. A start for the
    balancer that knows which tables the backward overlap makes cheap to keep
    data-parallel. ``theta``: the sum bound's (computed when not given)."""
    th = lower_bound_parts(sc)["theta_sum"] if theta is None else theta
    T = bound_terms(sc)
    n = sc.n_tables
    # the start keeps to the forms and tiers the balancer models: no row-group option
    # (B_GRP, a relaxation), no key_value tier
    T = {k: (v[:, :B_GRP, :3] if isinstance(v, np.ndarray) and v.ndim == 3 else v)
         for k, v in T.items()}
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
    if _cons(sc) is not None:
        plan = _repair(sc, plan)
    cost_t = table_cost(sc)
    order = np.argsort(-cost_t, kind="stable")
    return _place(sc, plan, order, "cost", hbm_budget(sc), cost_t, table_state(sc))



# ---------------------------------------------------------------------------------------------
# Beam search
# ---------------------------------------------------------------------------------------------


#: kernel evaluations the beam search spends on its head (the costliest tables): with the
#: default width and candidates (8 x 8) the first 937 tables, so up to there the full beam
BEAM_EVALS = 60_000


def beam(sc: DlrmScenario, width: int = 8, candidates: int = 8, backend=None,
         types: np.ndarray | None = None, deadline: float | None = None,
         max_evals: int = BEAM_EVALS, progress=None) -> tuple[np.ndarray, int]:
    """Beam search over placements; returns (plan, kernel evaluations).

    Tables in decreasing cost order; the first ``max_evals / (width x candidates)`` (the
    head, where placement matters) by the beam, each candidate scored by the kernel on the
    tables placed so far; the rest (the tail, or everything left once ``deadline`` passes)
    greedily onto the least-loaded ranks of the best beam (:func:`_place`, by cost). Every
    evaluation costs O(tables placed + ranks), so a beam over all 10^4 tables of a large
    model would take O(T^2) and minutes; the head keeps it in seconds."""
    from copy import copy

    types = choose_types(sc) if types is None else types
    if _cons(sc) is not None:
        types = _repair(sc, types)
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
    n_head = min(len(order), max(1, int(max_evals) // max(1, width * candidates)))
    k = 0
    for k in range(n_head):
        if k and _past(deadline):
            break
        if progress is not None and k % 16 == 0:
            progress("beam", evals)
        i = order[k]
        kind = sub_types[D.PL_KIND, k]
        c, m, _ = _shard_weights(sc, types, i, cost, state)
        kk = int(sub_types[D.PL_SHARDS, k])
        stride = int(sub_types[D.PL_STRIDE, k])
        allowed = _allowed(sc, i, kind, kk, stride)
        cands = []
        for load, mem, p in beams:
            if kind == D.SH_TW:
                ok = np.where(mem + m <= budget, load, np.inf)
                if allowed is not None:
                    sub_ok = ok[allowed]
                    bases = [int(allowed[j]) for j in np.argsort(sub_ok, kind="stable")
                             [:candidates] if np.isfinite(sub_ok[j])] or \
                        [int(allowed[np.argmin(mem[allowed])])]
                else:
                    bases = [int(r) for r in np.argsort(ok, kind="stable")[:candidates]
                             if np.isfinite(ok[r])] or [int(np.argmin(mem))]
            elif kind == D.SH_CW:
                span = max(1, min(stride, w))
                sc_b = [(load[_shard_ranks(kind, kk, stride, b, w, node)].max(), b)
                        for b in (range(span) if allowed is None else allowed)]
                bases = [int(b) for _, b in sorted(sc_b)[:candidates]]
            elif kind == D.SH_TWRW:
                n_nodes = (w + node - 1) // node
                nl = sorted((load[n * node:(n + 1) * node].max(), n) for n in range(n_nodes)
                            if allowed is None or n * node in allowed)
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
    load, mem, best = beams[0]
    done = best.shape[1]
    plan = types.copy()
    plan[:, order[:done]] = best
    if done < len(order):  # the tail: greedily by cost onto the best beam's loads
        _place(sc, plan, order[done:], "cost", budget, cost, state, load.copy(), mem.copy())
    return plan, evals


# ---------------------------------------------------------------------------------------------
# Evolutionary refinement and the driver
# ---------------------------------------------------------------------------------------------


def row_group_sizes(sc: DlrmScenario) -> list[int]:
    """Row groups the search offers besides the node: a half and a quarter of the node, two
    and four nodes -- those of at least 2 ranks that divide the world."""
    w, node = sc.world, sc.node_size
    return [g for g in (node // 4, node // 2, 2 * node, 4 * node)
            if 2 <= g <= w and g != node and w % g == 0]


def has_ssd(sc: DlrmScenario) -> bool:
    """True when the scenario declares an SSD tier (``[ssd]``): the search may then move
    tables to ``key_value``."""
    return bool(sc.job[D.DJOB_SSD_BYTES] > 0.0)


def menu_forms(sc: DlrmScenario, plan: np.ndarray, t: int) -> list[tuple[int, int, int, int, int]]:
    """Forms (kind, shards, stride, tier, group) beyond :func:`table_forms`' for table ``t``:
    table-row-wise over each of :func:`row_group_sizes`, grid with 2 and 4 column blocks on
    consecutive nodes (when there are that many nodes), and -- with an SSD tier -- the
    table's form, table-wise and row-wise in ``key_value``."""
    w, node = sc.world, sc.node_size
    dim = int(sc.tables[D.TAB_DIM, t])
    tier = int(plan[D.PL_TIER, t])
    n_nodes = -(-w // node)
    out = [(D.SH_TWRW, 1, 0, tier, g) for g in row_group_sizes(sc)]
    for k in (2, 4):
        if k <= n_nodes and dim % k == 0 and dim // k >= 4:
            out.append((D.SH_GRID, k, 1, tier, 0))
    if has_ssd(sc):
        kind = int(plan[D.PL_KIND, t])
        cur = (kind, int(plan[D.PL_SHARDS, t]), int(plan[D.PL_STRIDE, t]), D.MT_KV,
               int(plan[D.PL_GROUP, t]))
        for f in (cur, (D.SH_TW, 1, 0, D.MT_KV, 0), (D.SH_RW, 1, 0, D.MT_KV, 0)):
            if f not in out:
                out.append(f)
    return out


def structural_candidates(sc: DlrmScenario, plan: np.ndarray, n: int, rng) -> np.ndarray:
    """``n`` plans, each ``plan`` with one table's sharding changed: table-wise <-> column-wise
    (split into 2 shards, split a column-wise table further, merge its shards in two, back
    to table-wise), to table-row-wise (over the node or another row group,
    :func:`row_group_sizes`), grid (2 column blocks on consecutive nodes), row-wise or
    data-parallel (when it fits one rank), and a row-wise / table-row-wise / grid table's
    memory tier (``key_value`` too when the scenario has an SSD, which any table may also
    move to in its form); ranks and strides drawn at random."""
    w, node = sc.world, sc.node_size
    groups = row_group_sizes(sc)
    n_nodes = -(-w // node)
    tiers = [D.MT_HBM, D.MT_UVM, D.MT_DDR] + ([D.MT_KV] if has_ssd(sc) else [])
    cons = _cons(sc)
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
        if groups:
            opts.append((D.SH_TWRW, 1))  # with a row group drawn below
        if n_nodes >= 2 and dim[t] % 2 == 0 and dim[t] // 2 >= 4 and kind != D.SH_GRID:
            opts.append((D.SH_GRID, 2))
        if kind != D.SH_RW:
            opts.append((D.SH_RW, 1))
        if kind != D.SH_DP and state[t] < 0.05 * budget:
            opts.append((D.SH_DP, 1))
        new_kind, new_k = opts[int(rng.integers(len(opts)))]
        p[D.PL_KIND, t] = new_kind
        p[D.PL_SHARDS, t] = new_k
        p[D.PL_RANK, t] = int(rng.integers(w))
        p[D.PL_STRIDE, t] = 0
        p[D.PL_GROUP, t] = 0
        if new_kind == D.SH_CW:
            p[D.PL_STRIDE, t] = max(1, w // new_k) if rng.random() < 0.5 else 1
        if new_kind == D.SH_TWRW and groups and rng.random() < 0.5:
            p[D.PL_GROUP, t] = int(rng.choice(groups))
        if new_kind == D.SH_GRID:
            p[D.PL_STRIDE, t] = 1
        if new_kind in (D.SH_RW, D.SH_TWRW, D.SH_GRID) and rng.random() < 0.3:
            p[D.PL_TIER, t] = int(rng.choice(tiers))
        elif len(tiers) > 3 and rng.random() < 0.1:
            p[D.PL_TIER, t] = D.MT_KV
        if cons is not None and not cons.table_ok(p, t):
            allowed = cons.allowed_bases(t, new_kind, new_k, int(p[D.PL_STRIDE, t]))
            if (cons.form_ok(t, new_kind, new_k, int(p[D.PL_STRIDE, t]), int(p[D.PL_TIER, t]))
                    and allowed is not None and len(allowed)):
                p[D.PL_RANK, t] = int(allowed[rng.integers(len(allowed))])
            else:
                p[:, t] = plan[:, t]  # not allowed: this candidate is the plan itself
    return out


def _group_ranks(sc: DlrmScenario, plan: np.ndarray, t: int) -> list[int]:
    """Ranks holding a table-row-wise or grid table (every block's row group)."""
    from .spec import group_ranks

    w = sc.world
    grp = int(plan[D.PL_GROUP, t])
    g = grp or sc.node_size
    k = int(plan[D.PL_SHARDS, t]) if plan[D.PL_KIND, t] == D.SH_GRID else 1
    out: list[int] = []
    for j in range(k):
        gj = (int(plan[D.PL_RANK, t]) // g + j * int(plan[D.PL_STRIDE, t])) % -(-w // g)
        out.extend(group_ranks(sc, gj * g, grp))
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
        if kind in (D.SH_TWRW, D.SH_GRID):
            ranks = _group_ranks(sc, plan, t)
        else:
            ranks = _shard_ranks(kind, int(plan[D.PL_SHARDS, t]), int(plan[D.PL_STRIDE, t]),
                                 int(plan[D.PL_RANK, t]), w, node)
        if hot.intersection(ranks):
            out.append(t)
    return out


def polish(sc: DlrmScenario, plan: np.ndarray, max_evals: int = 50_000, seed: int = 0,
           backend=None, batch: int = 1024,
           deadline: float | None = None, progress=None) -> tuple[np.ndarray, float, int]:
    """Exact local search on the critical ranks: every change of one table's sharding form
    (:func:`table_forms`) and place -- all ranks, first shards or nodes, at most 32 drawn at
    random per form -- for the tables on the busiest ranks of each maximum (every table when
    they are few), scored by full evaluations; the best is applied while it lowers the step
    and ``max_evals`` lasts. Returns (plan, step, evaluations)."""
    from .evaluation import evaluate_plans as _eval

    rng = np.random.default_rng(seed)
    w = sc.world
    node, n_nodes, _ = _node_domains(sc)
    state = table_state(sc)
    dp_max = 0.05 * max(hbm_budget(sc), 0.0)
    plan = np.ascontiguousarray(plan, dtype=np.int32).copy()
    # a batch holds whole plans: keep it to ~16 MB at 10^4 tables
    batch = max(8, min(int(batch), (4 << 20) // max(1, D.N_PLAN * sc.n_tables)))
    work = np.zeros((D.N_RANK, w + 1))
    out = _eval(sc, plan, backend=backend, work=work)
    cur = out[D.DO_STEP_TIME_S, 0] if out[D.DO_FEASIBLE, 0] > 0 else math.inf
    evals = 1
    while evals < max_evals and not _past(deadline):
        tables = (list(range(sc.n_tables)) if sc.n_tables * w <= 4096
                  else _critical_tables(sc, plan, work, 2))
        cands = []
        cons = _cons(sc)
        for t in tables:
            forms = [f + (0,) for f in table_forms(sc, plan, t, state[t], dp_max, cons=cons)
                     if f[0] != D.SH_GRID]
            menu = menu_forms(sc, plan, t)
            if cons is not None:
                menu = [f for f in menu if cons.form_ok(t, f[0], f[1], f[2], f[3])]
            for kind, k, stride, tier, group in forms + menu:
                allowed = None if cons is None else cons.allowed_bases(t, kind, k, stride, group)
                if allowed is not None:
                    bases = list(allowed)
                elif kind in (D.SH_RW, D.SH_DP):
                    bases = [0]
                elif kind in (D.SH_TWRW, D.SH_GRID):
                    g = group or node
                    bases = [n * g for n in range(-(-w // g))]
                elif kind == D.SH_CW and stride == 1 and 1 < k < w:  # table-column-wise
                    bases = [n * node + j for n in range(n_nodes)
                             for j in range(max(0, min(node, w - n * node) - k) + 1)]
                elif kind == D.SH_CW and 0 < stride and stride * k <= w:
                    bases = list(range(stride))
                else:
                    bases = list(range(w))
                if len(bases) > 32:
                    bases = list(rng.choice(bases, 32, replace=False))
                for b in bases:
                    c = (t, kind, k, stride, tier, int(b), group)
                    if (kind, k, stride, tier, b, group) != tuple(int(x) for x in (
                            plan[D.PL_KIND, t], plan[D.PL_SHARDS, t], plan[D.PL_STRIDE, t],
                            plan[D.PL_TIER, t], plan[D.PL_RANK, t], plan[D.PL_GROUP, t])):
                        cands.append(c)
        if not cands:
            break
        cands = cands[: max(0, max_evals - evals)]
        best_s, best_c = cur, None
        for lo in range(0, len(cands), batch):
            if lo and _past(deadline):
                break
            if progress is not None:
                progress("polish", evals)
            chunk = cands[lo:lo + batch]
            plans = np.repeat(plan[None], len(chunk), axis=0)
            for n, (t, kind, k, stride, tier, b, group) in enumerate(chunk):
                plans[n, D.PL_KIND, t], plans[n, D.PL_SHARDS, t] = kind, k
                plans[n, D.PL_STRIDE, t], plans[n, D.PL_TIER, t] = stride, tier
                plans[n, D.PL_RANK, t], plans[n, D.PL_GROUP, t] = b, group
            o = _eval(sc, plans, backend=backend)
            evals += len(chunk)
            steps = np.where(o[D.DO_FEASIBLE] > 0, o[D.DO_STEP_TIME_S], np.inf)
            j = int(np.argmin(steps))
            if steps[j] < best_s * (1.0 - 1e-12):
                best_s, best_c = float(steps[j]), chunk[j]
        if best_c is None:
            break
        t, kind, k, stride, tier, b, group = best_c
        plan[D.PL_KIND, t], plan[D.PL_SHARDS, t], plan[D.PL_STRIDE, t] = kind, k, stride
        plan[D.PL_TIER, t], plan[D.PL_RANK, t], plan[D.PL_GROUP, t] = tier, b, group
        out = _eval(sc, plan, backend=backend, work=work)
        evals += 1
        cur = best_s
    return plan, cur, evals


def refine(sc: DlrmScenario, plan: np.ndarray, iters: int = 200_000, seed: int = 0,
           tier_moves: bool = True, rounds: int = 20, structural: int = 256,
           batch: int = 128, backend=None,
           deadline: float | None = None, progress=None) -> tuple[np.ndarray, float, int, int]:
    """Evolutionary refinement; returns (plan, step, O(1) scores, accepted changes).

    ``rounds`` times: ``iters / rounds`` candidate moves / swaps / tier changes of the
    table-wise tables scored in O(1) (:func:`trainscape.dlrm.incremental.evolve`, batches of
    ``batch``, the best applied), then ``structural`` sharding-type changes (split / merge
    column shards, to and from table-wise, table-row-wise, row-wise, data-parallel) scored by
    full evaluations with the kernel, the best applied when it lowers the step.
    """
    from .evaluation import evaluate_plans as _eval
    from .incremental import evolve

    rng = np.random.default_rng(seed)
    tables = np.ascontiguousarray(sc.tables)
    plan = np.ascontiguousarray(plan.copy(), dtype=np.int32)
    out = _eval(sc, plan, backend=backend)
    cur = out[D.DO_STEP_TIME_S, 0] if out[D.DO_FEASIBLE, 0] > 0 else math.inf
    scored = accepted = 0
    rounds = max(1, int(rounds))
    for r in range(rounds):
        if r and _past(deadline):
            break
        if progress is not None:
            progress("refine", scored)
        movable, t_moves = _movable(sc, plan, tier_moves)
        n = int(iters) // rounds + (1 if r < int(iters) % rounds else 0)
        if len(movable) and n > 0:
            trial = plan.copy()
            step, sc_n, acc = evolve(sc.sys, sc.job, tables, trial, movable, n,
                                     int(seed) * 1000 + r, int(batch), t_moves, 0.25,
                                     0.5)
            scored += int(sc_n)
            if step <= cur and (_cons(sc) is None or _cons(sc).satisfied(trial)):
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


def _movable(sc: DlrmScenario, plan: np.ndarray, tier_moves: bool) -> tuple[np.ndarray, bool]:
    """The tables refinement's O(1) moves may move (table-wise; not pinned to ranks) and
    whether they may change memory tier (among hbm, uvm_cache, ddr: only when no movable
    table's compute kernels forbid one of them). key_value tables stay put: their SSD fetch is
    a constant of the O(1) scores."""
    tw = (plan[D.PL_KIND] == D.SH_TW) & (plan[D.PL_TIER] != D.MT_KV)
    cons = _cons(sc)
    if cons is None:
        return np.flatnonzero(tw).astype(np.int64), bool(tier_moves)
    free = tw.copy()
    if cons.pins:
        free[list(cons.pins)] = False
    three = (1 << D.MT_HBM) | (1 << D.MT_UVM) | (1 << D.MT_DDR)
    if tier_moves and ((cons.tiers[free] & three) != three).any():
        tier_moves = False
    return np.flatnonzero(free).astype(np.int64), bool(tier_moves)


def _keep_allowed(sc: DlrmScenario, new: np.ndarray, old: np.ndarray) -> np.ndarray:
    """``new`` with every table its constraints do not allow there taken back from ``old``
    (then repaired: a start built without the constraints in mind)."""
    cons = _cons(sc)
    if cons is None:
        return new
    out = new.copy()
    for t, _ in cons.violations(out):
        out[:, t] = old[:, t]
    return _repair(sc, out)


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


#: share of the time left that the balancing temperatures still to run may take when the
#: time limit would cut them short (the rest is left to refinement and the local search)
BALANCE_TIME_SHARE = 0.6


def balance(sc: DlrmScenario, plan: np.ndarray, candidates: int, seed: int = 0,
            taus: tuple = TAUS, form_frac: float = 0.05,
            n_scan: int = 8, deadline: float | None = None,
            progress=None) -> tuple[np.ndarray, float, int, int]:
    """Smoothed balancing (:class:`Balancer`) from ``plan``: ``candidates`` in all, split over
    the temperatures ``taus`` (rising); returns (best plan by the exact step, its step,
    accepted changes, candidates run).

    With a ``deadline``, after the first temperature each one gets at most its share of
    ``BALANCE_TIME_SHARE`` of the time left at the rate measured so far (at least 1,000
    candidates), so that a time limit shortens every temperature instead of dropping the
    last ones; when the planned candidates fit, they all run (the same search)."""
    bal = Balancer(sc, plan)
    acc = 0
    n_run = 0
    spent = 0.0
    for k, tau in enumerate(taus):
        if k and _past(deadline):
            break
        n = int(candidates) // len(taus) + (1 if k < int(candidates) % len(taus) else 0)
        if deadline is not None and k and spent > 0.0 and n_run > 0:
            left = max(0.0, deadline - time.perf_counter())
            fit = int(n_run / spent * left * BALANCE_TIME_SHARE / (len(taus) - k))
            n = min(n, max(fit, 1000))
        t0 = time.perf_counter()
        acc += bal.run(tau, n, int(seed) * 7919 + k, form_frac=form_frac, n_scan=n_scan)[1]
        spent += time.perf_counter() - t0
        n_run += n
        if progress is not None:
            progress("balance", n_run)
    best = bal.plan()
    return best, float(bal.best[0]) if bal.best[1] > 0 else math.inf, acc, n_run


def plan(sc: DlrmScenario, method: str = "evolve", beam_width: int = 8, seed: int = 0,
         iterations: int = 200_000, backend=None,
         time_limit_s: float | None = None, progress=None) -> PlanResult:
    """Plan the sharding of ``sc``: ``greedy`` (best of the baselines), ``beam``, or
    ``evolve``: the best of three starts -- the best greedy plan and the bound's relaxed plan
    (:func:`bound_plan`), each with its hot tables split (:func:`split_hot`), and every
    table data-parallel -- balanced by ``iterations`` smoothed candidates (:func:`balance`:
    placements, swaps and sharding types), then ``iterations / 4`` exact O(1)-scored moves
    and structural changes (:func:`refine`) and an exact local search on the critical ranks
    (:func:`polish`); the best plan met on the way is returned.

    ``time_limit_s`` (the scenario's ``[planner] time_limit_s``): checked between phases,
    balancing temperatures, refinement rounds and local-search steps; once past it the
    remaining work is skipped (``PlanResult.time_limited``) and the best plan so far is
    returned. The greedy baselines always run; beam's greedy tail too.

    ``progress(phase, candidates)``, when given, is called between steps with the phase
    (``baselines``, ``beam``, ``balance``, ``refine``, ``polish``, ``done``) and the
    candidates evaluated so far (kernel evaluations plus scored moves)."""
    if method not in METHODS:
        raise ValueError(f"method: unknown {method!r} (allowed: {', '.join(METHODS)})")
    from .evaluation import evaluate

    t0 = time.perf_counter()
    deadline = None if time_limit_s is None else t0 + float(time_limit_s)
    parts = lower_bound_parts(sc)
    base = greedy_baselines(sc, backend=backend)
    evals = len(base)
    best_key = min(base, key=lambda k: base[k][1])
    best_plan, best_step = base[best_key][0], base[best_key][1]
    scored = accepted = 0

    cons = _cons(sc)

    def consider(p):
        nonlocal best_plan, best_step
        if cons is not None and not cons.satisfied(p):
            return
        r = evaluate(sc, p, backend=backend)
        if r["feasible"] and r["step_time_s"] < best_step:
            best_plan, best_step = p, r["step_time_s"]

    def report(phase, n=0):
        if progress is not None:
            progress(phase, evals + scored + n)

    # what the phases report their own counts through (None: no progress asked for)
    sub_progress = None if progress is None else report

    report("baselines")
    if method == "beam":
        bp, n = beam(sc, width=beam_width, backend=backend, deadline=deadline,
                     progress=sub_progress)
        evals += n
        consider(bp)
    if method == "evolve":
        # starts: the best greedy plan, the bound's relaxed plan, every table data-parallel;
        # the balancer runs from the best of them with its hot tables split
        all_dp = np.zeros((D.N_PLAN, sc.n_tables), np.int32)
        all_dp[D.PL_KIND], all_dp[D.PL_SHARDS] = D.SH_DP, 1
        bp0 = bound_plan(sc, parts["theta_sum"])
        starts = [_keep_allowed(sc, split_hot(sc, best_plan), best_plan),
                  _keep_allowed(sc, split_hot(sc, bp0), bp0),
                  _repair(sc, all_dp) if cons is not None else all_dp]
        o = evaluate_plans(sc, np.stack(starts), backend=backend)
        evals += len(starts)
        steps = np.where(o[D.DO_FEASIBLE] > 0, o[D.DO_STEP_TIME_S], np.inf)
        start = starts[int(np.argmin(steps))] if np.isfinite(steps).any() else starts[0]
        consider(start)
        n_bal = int(iterations)
        if not _past(deadline):
            report("balance")
            bp, _, acc, n_run = balance(sc, start, n_bal, seed, deadline=deadline,
                                        progress=sub_progress)
            scored += n_run
            accepted += acc
            consider(bp)
        if not _past(deadline):
            report("refine")
            ep, _, sc_n, acc = refine(sc, best_plan, max(1, n_bal // 4), seed,
                                      backend=backend, deadline=deadline,
                                      progress=sub_progress)
            scored += sc_n
            accepted += acc
            consider(ep)
        if not _past(deadline):
            report("polish")
            pp, _, n = polish(sc, best_plan, 20_000, seed, backend=backend, deadline=deadline,
                              progress=sub_progress)
            evals += n
            consider(pp)
    report("done")
    res = evaluate(sc, best_plan, backend=backend)
    return PlanResult(method=method, plan=best_plan, step_time_s=res["step_time_s"], result=res,
                      lower_bound_s=parts["lower_bound_s"],
                      baselines={k: v[1] for k, v in base.items()},
                      elapsed_s=time.perf_counter() - t0, evaluations=evals,
                      moves_scored=scored, moves_accepted=accepted,
                      time_limited=_past(deadline))
