"""What each network tier carries: bytes per step and busy time per tier, for a planner.

A report, not a cost term: the step time comes from the kernels (:mod:`trainscape.model.llm`);
this walks the same groups over the same tiers and counts the bytes one GPU puts on each
tier's links in one step, per parallel dimension, with the message sizes the cost model uses:

* a collective is counted as the hierarchical algorithm moves it (the decomposition of
  :func:`~trainscape.model.collectives.hierarchical_time`, ASTRA-sim's multi-dimensional
  collectives, Won et al. ISPASS 2023 §IV): at a tier where the group joins ``f`` sub-groups
  of ``inner`` members each, an all-gather or reduce-scatter of ``nbytes`` moves
  ``(f - 1)/f * nbytes / inner`` per GPU, an all-reduce twice that (nccl-tests
  ``doc/PERFORMANCE.md`` bus-bandwidth factors);
* an all-to-all as :func:`~trainscape.model.collectives.routed_all_to_all_time` routes it;
* a pipeline's or a context-parallel ring's point-to-point sends: a GPU at a boundary that
  crosses a tier sends every one of its transfers across it (the busiest GPU on that tier);
* data-parallel traffic in each tier's ``comm_dtype`` where narrower (the compressed bytes that
  cross it, :func:`~trainscape.model.collectives.compressed_ring_time`).

``busy_s`` is those bytes over the per-GPU bandwidth of the tier's links
(:func:`~trainscape.model.network.tier_link_bandwidth`; for the pipeline's sends
:func:`~trainscape.model.network.boundary_link_bandwidth`): how long one GPU's share of the
tier is busy per step, before any overlap -- compare it with the step time.
"""

from __future__ import annotations

from ..layout import (
    CFG_ZERO,
    JOB_COMBINE_BYTES,
    JOB_COMM_BYTES,
    JOB_DISPATCH_BYTES,
    JOB_GRAD_COMM_BYTES,
    JOB_SYNC_INNER_STEPS,
    JOB_SYNC_OUTER_BYTES,
    JOB_SYNC_STRATEGY,
    MDL_HEAD_DIM,
    MDL_HIDDEN,
    MDL_KV_HEADS,
    MDL_MAX_ROUTE_NODES,
    MDL_TOP_K,
    SYNC_DILOCO,
    SYNC_SYNCHRONOUS,
)
from . import llm
from ..layout import SCHED_INTERLEAVED
from .collectives import (
    node_limited_share,
    site_members,
    site_path_applies,
    site_stride,
    wire_bytes,
)
from .network import (
    boundary_link_bandwidth,
    dim_members_within,
    group_members_within,
    n_sites,
    n_tiers,
    next_tier_span,
    site_link_tier,
    tier_comm_dtype_bytes,
    tier_link_bandwidth,
    tier_span,
)
from .pipeline import schedule_chunks

DIMENSIONS = ("tp", "cp", "ep", "pp", "dp")


def tier_wire_share(sys, tier, elem_bytes):
    """Fraction of a data-parallel collective's bytes (``elem_bytes`` per element) that tier
    ``tier`` carries: its ``comm_dtype``'s width over the traffic's where narrower
    (:func:`~trainscape.model.collectives.wire_bytes`), else 1 (also for ``elem_bytes`` 0)."""
    if elem_bytes <= 0.0:
        return 1.0
    return wire_bytes(tier_comm_dtype_bytes(sys, tier), elem_bytes) / elem_bytes


def collective_tier_bytes(sys, nbytes, reduce, n_a, s_a, n_b, s_b, n_c, s_c, elem_bytes=0.0):
    """Bytes per GPU on each tier (a list, innermost first) of a hierarchical all-reduce
    (``reduce``) or all-gather / reduce-scatter of ``nbytes`` per rank; data-parallel traffic
    of ``elem_bytes`` per element in each tier's ``comm_dtype`` (:func:`tier_wire_share`)."""
    out = [0.0] * n_tiers(sys)
    n = n_a * n_b * n_c
    if n <= 1.0 or nbytes <= 0.0:
        return out
    inner = 1.0
    span = 1.0
    for i in range(n_tiers(sys)):
        span = next_tier_span(sys, i, span)
        members = group_members_within(span, n_a, s_a, n_b, s_b, n_c, s_c)
        f = members / inner
        if f > 1.0:
            moved = (f - 1.0) / f * nbytes / inner * tier_wire_share(sys, i, elem_bytes)
            out[i] = 2.0 * moved if reduce else moved
        inner = members
        if members >= n:
            break
    return out


def cross_site_tier_bytes(sys, nbytes, n_a, s_a, n_b, s_b, n_c, s_c, elem_bytes=0.0):
    """Bytes per GPU at the site tier (the outermost of two or more) of the cross-site ring
    all-reduce of :func:`~trainscape.model.collectives.cross_site_time`:
    ``2 (f - 1)/f * nbytes / site_members`` over the ``f`` sites the group spans, in the site
    tier's ``comm_dtype`` (:func:`tier_wire_share`); 0 inside one site."""
    n = n_a * n_b * n_c
    if n_tiers(sys) < 2 or n <= 1.0 or nbytes <= 0.0:
        return 0.0
    inner = site_members(sys, n_a, s_a, n_b, s_b, n_c, s_c)
    f = n / inner
    if f <= 1.0:
        return 0.0
    return 2.0 * (f - 1.0) / f * nbytes / inner * tier_wire_share(sys, n_tiers(sys) - 1,
                                                                   elem_bytes)


def all_to_all_tier_bytes(sys, nbytes, copies, max_nodes, n_a, s_a, n_b, s_b):
    """Bytes per GPU on each tier of a routed all-to-all of ``nbytes`` per rank (the traffic
    :func:`~trainscape.model.collectives.routed_all_to_all_time` puts on each tier)."""
    out = [0.0] * n_tiers(sys)
    n = n_a * n_b
    if n <= 1.0 or nbytes <= 0.0:
        return out
    inner = 1.0
    span = 1.0
    share = 1.0
    for i in range(n_tiers(sys)):
        span = next_tier_span(sys, i, span)
        members = group_members_within(span, n_a, s_a, n_b, s_b, 1.0, 1.0)
        if i == 0:
            out[i] = (members - 1.0) / n * nbytes
        else:
            if i == 1:
                share = node_limited_share(copies, max_nodes, n, inner)
            out[i] = (n - inner) / n * nbytes * share
        inner = members
        if members >= n:
            break
    return out


def ring_crossings(sys, n, stride):
    """``(tiers crossed by a neighbour hop, inner members per tier)``: for each tier, whether
    some consecutive pair of a chain (pipeline stages, ring members) ``stride`` ranks apart
    crosses it, and the chain's members inside one domain of the tier below (for
    :func:`~trainscape.model.network.boundary_link_bandwidth`)."""
    crossed = [False] * n_tiers(sys)
    inners = [1.0] * n_tiers(sys)
    if n <= 1.0:
        return crossed, inners
    inner = 1.0
    span = 1.0
    for i in range(n_tiers(sys)):
        span = next_tier_span(sys, i, span)
        members = dim_members_within(span, n, stride)
        inners[i] = inner
        crossed[i] = members > inner
        inner = members
        if members >= n:
            break
    return crossed, inners


def link_loads(sys, mdl, job, cfg, i=0):
    """Per tier ``(bytes_per_step, busy_s, {dimension: bytes})`` of configuration column ``i``
    of ``cfg``, or None when it is not a valid configuration."""
    if llm.config_error(sys, mdl, job, cfg, i) != 0:
        return None
    row = llm.row_terms(sys, mdl, job, cfg, i)
    ordt = llm.order_terms(sys, mdl, job, row, cfg[llm.CFG_ORDER, i])
    zero = int(cfg[CFG_ZERO, i])
    nt = n_tiers(sys)
    per = {d: [0.0] * nt for d in DIMENSIONS}
    busy = [0.0] * nt

    tp, cp, pp, dp, ep = row[llm.ROW_TP], row[llm.ROW_CP], row[llm.ROW_PP], row[llm.ROW_DP], \
        row[llm.ROW_EP]
    b, s, m = row[llm.ROW_B], row[llm.ROW_S], row[llm.ROW_M]
    s_tp, s_cp, s_ep, s_dp, s_pp = (ordt[llm.ORD_S_TP], ordt[llm.ORD_S_CP], ordt[llm.ORD_S_EP],
                                    ordt[llm.ORD_S_DP], ordt[llm.ORD_S_PP])
    h = mdl[MDL_HIDDEN]
    comm = job[JOB_COMM_BYTES]
    layers = row[llm.ROW_STAGE_LAYERS]

    def add(dim, tier_bytes, times):
        for t in range(nt):
            x = tier_bytes[t] * times
            per[dim][t] += x
            busy[t] += x / tier_link_bandwidth(sys, t)

    # tensor parallelism: per layer and microbatch, forward and backward each two all-reduces
    # of the bsh activations (or, with SP, two all-gathers and two reduce-scatters): 8 x the
    # all-gather's bytes per layer pass pair, the half that SP's all-gathers carry at their own
    # element size (FP8 under an FP8 recipe: llm.tp_gather_bytes; tp_layer_comm_time)
    gather = llm.tp_gather_bytes(job) if row[llm.ROW_SP] > 0.0 else comm
    add("tp", collective_tier_bytes(sys, b * s * h * gather, False, tp, s_tp, 1.0, 1.0, 1.0,
                                    1.0), 4.0 * layers * m)
    add("tp", collective_tier_bytes(sys, b * s * h * comm, False, tp, s_tp, 1.0, 1.0, 1.0, 1.0),
        4.0 * layers * m)

    # context parallelism: the K/V ring, cp - 1 steps forward, 2 (cp - 1) + 1 backward
    # (cp_ring_exposed_forward / _backward); the GPU whose neighbour is across a tier sends
    # every step across it
    if cp > 1.0:
        kv_heads = mdl[MDL_KV_HEADS]
        kv_local = kv_heads / tp if kv_heads >= tp else 1.0
        kv_chunk = 2.0 * b * s * kv_local * mdl[MDL_HEAD_DIM] * comm
        crossed, _ = ring_crossings(sys, cp, s_cp)
        sends = (3.0 * (cp - 1.0) + 1.0) * layers * m * kv_chunk
        add("cp", [sends if c else 0.0 for c in crossed], 1.0)

    # expert parallelism: a dispatch and a combine forward and backward per MoE layer
    if row[llm.ROW_MOE_LAYERS] > 0.0 and ep > 1.0:
        top_k = mdl[MDL_TOP_K]
        limit = mdl[MDL_MAX_ROUTE_NODES]
        if llm.moe_folded(tp, dp, ep):
            g = llm.folded_ep_groups(tp, s_tp, dp, s_dp, ep)
            tokens = b * s / tp
            n_a, sa, n_b, sb = g[0], g[1], g[2], g[3]
        else:
            tokens = b * s / tp if row[llm.ROW_SP] > 0.0 else b * s
            n_a, sa, n_b, sb = ep, s_ep, 1.0, 1.0
        copies_bytes = tokens * top_k * h
        for per_el in (job[JOB_DISPATCH_BYTES], job[JOB_COMBINE_BYTES]):
            add("ep", all_to_all_tier_bytes(sys, copies_bytes * per_el, top_k, limit, n_a, sa,
                                            n_b, sb), 2.0 * row[llm.ROW_MOE_LAYERS] * m)

    # pipeline: a GPU at a boundary that crosses a tier sends each microbatch's activation
    # (or gradient) across it once per chunk
    if pp > 1.0:
        pp_bytes = b * s * h * comm / tp
        chunks = schedule_chunks(int(row[llm.ROW_SCHEDULE]), row[llm.ROW_VPP])
        crossed, inners = ring_crossings(sys, pp, s_pp)
        for t in range(nt):
            if crossed[t]:
                x = m * chunks * pp_bytes
                per["pp"][t] += x
                busy[t] += x / boundary_link_bandwidth(sys, t, inners[t])

    # data parallelism (data_parallel_comm's groups and sizes)
    dense = row[llm.ROW_DENSE_PARAMS]
    expert = row[llm.ROW_EXPERT_PARAMS]
    dpx = row[llm.ROW_DPX]
    e_a, se_a, e_b, se_b = dpx, s_dp, 1.0, 1.0
    ep_d = ep
    dpx_d = dpx
    if llm.moe_folded(tp, dp, ep):
        g = llm.folded_ep_groups(tp, s_tp, dp, s_dp, ep)
        e_a, se_a, e_b, se_b = g[4], g[5], g[6], g[7]
        ep_d = 1.0
        dpx_d = dp
    grad = job[JOB_GRAD_COMM_BYTES]
    # the weight all-gather's bytes and width (FP8 linear weights: llm.param_gather_bytes)
    groups = ((dense, row[llm.ROW_DENSE_LINEAR_PARAMS], cp, s_cp, ep_d, s_ep, dpx_d, s_dp),
              (expert, expert, cp, s_cp, e_a, se_a, e_b, se_b))
    strategy = job[JOB_SYNC_STRATEGY]
    for params, linear, na, sa, nb, sb, nc, sc in groups:
        ag_bytes, param = llm.param_gather_bytes(job, params, linear)
        if strategy != SYNC_SYNCHRONOUS:
            # job.sync (llm.dp_collective_time, cross_site_sync_time): inside a site the
            # gradients' collectives every step; at the site tier the outer traffic instead,
            # for DiLoCo once every H steps (zero <= 2 here: sync_config_error)
            if zero == 0:
                tb = collective_tier_bytes(sys, params * grad, True, na, sa, nb, sb, nc, sc,
                                           grad)
            else:
                tb = collective_tier_bytes(sys, params * grad, False, na, sa, nb, sb, nc, sc,
                                           grad)
                ag = collective_tier_bytes(sys, ag_bytes, False, na, sa, nb, sb, nc, sc, param)
                for t in range(nt):
                    tb[t] += ag[t]
            if nt >= 2:
                outer = cross_site_tier_bytes(sys, params * job[JOB_SYNC_OUTER_BYTES], na, sa,
                                              nb, sb, nc, sc, job[JOB_SYNC_OUTER_BYTES])
                if strategy == SYNC_DILOCO:
                    outer = outer / job[JOB_SYNC_INNER_STEPS]
                tb[nt - 1] = outer
            add("dp", tb, 1.0)
        elif zero == 0:
            add("dp", collective_tier_bytes(sys, params * grad, True, na, sa, nb, sb, nc, sc,
                                            grad), 1.0)
        else:
            # ZeRO-3 gathers the weights twice (forward, backward) per microbatch and
            # reduce-scatters the gradients per microbatch; ZeRO-1/2 once per step
            times = m if zero == 3 else 1.0
            gathers = 2.0 if zero == 3 else 1.0
            add("dp", collective_tier_bytes(sys, params * grad, False, na, sa, nb, sb, nc, sc,
                                            grad), times)
            add("dp", collective_tier_bytes(sys, ag_bytes, False, na, sa, nb, sb, nc, sc,
                                            param), gathers * times)

    out = []
    for t in range(nt):
        total = 0.0
        for d in DIMENSIONS:
            total += per[d][t]
        out.append((total, busy[t], {d: per[d][t] for d in DIMENSIONS}))
    return out


def pipeline_site_span(sys, mdl, job, cfg, i):
    """``(sites, tiles)`` for configuration ``i`` on a site graph: how many sites one pipeline
    spans (``pp / stages per site``; 1 inside a site), and whether its stages tile the sites
    (:func:`~trainscape.model.collectives.site_path_applies`: each crossing is costed on the
    link it crosses; otherwise the crossings are charged at the site tier's ring parameters,
    the graph's slowest ring link). ``(0.0, False)`` for an invalid configuration or a cluster
    without sites."""
    nt = n_tiers(sys)
    if n_sites(sys) < 2 or nt < 2 or llm.config_error(sys, mdl, job, cfg, i) != 0:
        return 0.0, False
    row = llm.row_terms(sys, mdl, job, cfg, i)
    ordt = llm.order_terms(sys, mdl, job, row, cfg[llm.CFG_ORDER, i])
    pp, s_pp = row[llm.ROW_PP], ordt[llm.ORD_S_PP]
    site_span = tier_span(sys, nt - 2)
    f = pp / dim_members_within(site_span, pp, s_pp)
    return f, f <= 1.0 or site_path_applies(sys, f, site_stride(s_pp, site_span))


def site_link_loads(sys, mdl, job, cfg, i, loads, cycle_pairs):
    """Per site link, what one GPU puts on it in a step: ``{(a, b): (bytes, busy_s,
    {dimension: bytes})}`` with ``a < b`` indices along the sites' path (the system block's
    order), from the site tier's row of :func:`link_loads` (``loads``).

    * Collective traffic at the site tier (every dimension but the pipeline's) runs on the
      ring over the sites, ``cycle_pairs`` (path indices), and every link of a ring carries the
      same bytes (NCCL's ring: each step sends one chunk on every link at once; Patarasuk &
      Yuan 2009 §3): each ring link gets the site tier's bytes of those dimensions. (An
      all-to-all across sites is counted the same way -- a simplification.)
    * Pipeline sends cross the path links between the consecutive sites of each pipeline
      (:func:`~trainscape.model.collectives.site_path_transfers`): each such link gets the
      boundary GPU's sends of the site tier; an interleaved schedule's wraps from a pipeline's
      last site to its first add ``m (v - 1)`` sends on that pair. A pipeline whose stages do
      not tile the sites (:func:`pipeline_site_span`) is costed at the site tier's ring
      parameters; its sends are reported on the site tier only, not on a link.

    ``busy_s``: the bytes over the link's per-GPU rate (ring traffic,
    :func:`~trainscape.model.network.tier_link_bandwidth`; the pipeline's,
    :func:`~trainscape.model.network.boundary_link_bandwidth` with the stages per site)."""
    ns = n_sites(sys)
    nt = n_tiers(sys)
    out = {}
    for a in range(ns):
        for b in range(a + 1, ns):
            out[(a, b)] = [0.0, 0.0, {d: 0.0 for d in DIMENSIONS}]
    if ns < 2 or loads is None:
        return {k: (v[0], v[1], v[2]) for k, v in out.items()}
    _, _, by_dim = loads[nt - 1]
    for a, b in cycle_pairs:
        key = (min(a, b), max(a, b))
        for d in DIMENSIONS:
            if d == "pp" or by_dim[d] <= 0.0:
                continue
            out[key][0] += by_dim[d]
            out[key][2][d] += by_dim[d]
            out[key][1] += by_dim[d] / tier_link_bandwidth(sys, site_link_tier(a, b))
    if by_dim["pp"] > 0.0:
        row = llm.row_terms(sys, mdl, job, cfg, i)
        ordt = llm.order_terms(sys, mdl, job, row, cfg[llm.CFG_ORDER, i])
        pp, s_pp = row[llm.ROW_PP], ordt[llm.ORD_S_PP]
        site_span = tier_span(sys, nt - 2)
        inner = dim_members_within(site_span, pp, s_pp)
        f = pp / inner
        d = site_stride(s_pp, site_span)
        if site_path_applies(sys, f, d):
            k, dd = int(f), int(d)
            wraps = 0.0
            if int(row[llm.ROW_SCHEDULE]) == SCHED_INTERLEAVED and row[llm.ROW_VPP] > 1.0:
                chunks = schedule_chunks(SCHED_INTERLEAVED, row[llm.ROW_VPP])
                wraps = by_dim["pp"] * (row[llm.ROW_VPP] - 1.0) / chunks
            for first in range(ns):
                if (first // dd) % k != 0:
                    continue
                hops = [(first + j * dd, first + (j + 1) * dd, by_dim["pp"]) for j in range(k - 1)]
                if wraps > 0.0:
                    hops.append((first + (k - 1) * dd, first, wraps))
                for a, b, x in hops:
                    key = (min(a, b), max(a, b))
                    out[key][0] += x
                    out[key][2]["pp"] += x
                    out[key][1] += x / boundary_link_bandwidth(sys, site_link_tier(a, b), inner)
    return {k: (v[0], v[1], v[2]) for k, v in out.items()}
