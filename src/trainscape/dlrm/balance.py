"""Smoothed balancing of a sharding plan (numba): every maximum of the step replaced by a
log-sum-exp whose temperature rises over the phases; moves, swaps and sharding-type changes
scored from the entries they change (see the section comment below). Used by
:func:`trainscape.dlrm.planner.plan`; its state is held to the reference by the tests."""

from __future__ import annotations

import math
import sys as _sys

import numba
import numpy as np

from .. import layout as L
from ..model.collectives import all_reduce_time
from ..model.network import tier_link_bandwidth
from ..native.numba_cache import njit_for
from . import layout as D
from .reference import (
    dense_bwd_time,
    dense_fwd_time,
    dense_memory_bytes,
    batched_copy_seconds,
    lookup_bytes,
    lookup_seconds_per_byte,
    shard_lookup_bytes,
    uniform_storage_ddr,
    uniform_storage_hbm,
)
from .bounds import _collective_slope, _node_domains
from .estimates import _cols, hbm_budget, table_state
from .numba_kernel import JIT
from .spec import DlrmScenario

# cached under a key of every source it reads; error_model="numpy": IEEE x / 0 (the reference's)
_njit = njit_for([_sys.modules[__name__]], error_model="numpy")


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
_rw_time = JIT["rw_collective_time"]


@_njit
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


@_njit
def _uniform_costs(sys, g, bp):
    """The row-wise reduce-scatter / all-gather and the data-parallel all-reduce of ``g``."""
    w = bp[BP_W]
    b = bp[BP_BATCH]
    rwd = g[G_RWD] if g[G_RWD] > 0.5 else 0.0  # sums of whole dims / elements: drift-free
    dpe = g[G_DPE] if g[G_DPE] > 0.5 else 0.0
    g[G_RSRW] = _rw_time(sys, b * rwd * bp[BP_CF], w)
    g[G_AGRW] = _rw_time(sys, b * rwd * bp[BP_CB], w)
    g[G_DPAR] = _ar_time(sys, dpe * bp[BP_GCB], w, 1.0, 1.0, 1.0, 1.0, 1.0)


@_njit
def _snap(x, v):
    """``x`` after adding ``v``, 0 when only rounding is left (a sum back to empty)."""
    return 0.0 if abs(x) <= 1e-9 * abs(v) else x


@_njit
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


@_njit
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

@_njit
def _rank_entry(st, fac, ibw, g, s, r, ntop):
    if s == 0:
        return RS_LF, st[BS_LF, r]
    if s <= ntop:
        i = s - 1
        return RS_POOL, (st[BS_O0, r] if i == 0 else st[BS_O1, r]) * fac[i, r] * ibw[i]
    i = s - 1 - ntop
    return RS_IDX, (st[BS_IX, r] + g[G_ADD]) * fac[i, r] * ibw[i]


@_njit
def _dom_entry(dsp, dsi, dsz, ibw, g, q, i, d):
    if q == 0:
        return RS_POOL, (g[G_TOTP] - dsp[i, d]) * ibw[i]
    return RS_IDX, (g[G_TOTI] - dsi[i, d] - g[G_ADD] * dsz[i, d]) * ibw[i]


@_njit
def _node_entry(st, twn, dsp, dsi, dsz, dlo, ibw, g, q, n):
    if q == 2:
        return RS_TR, twn[n]
    lo = dlo[0, n]
    hi = lo + int(dsz[0, n])
    if q == 0:
        return RS_POOL, (dsp[0, n] - _node_min(st, BS_O0, lo, hi)) * ibw[0]
    return RS_IDX, (dsi[0, n] + g[G_ADD] * (hi - lo - 1.0) - _node_min(st, BS_IX, lo, hi)) * ibw[0]


@_njit
def _node_q_on(q, top, with_tr):
    """Whether node entry ``q`` exists (tier-0 receives need a tier; the table-row-wise
    dims are left out of candidates that move no table-row-wise item)."""
    return with_tr if q == 2 else top >= 0


@_njit
def _rank_res(s, ntop):
    return RS_LF if s == 0 else (RS_POOL if s <= ntop else RS_IDX)


@_njit
def _ex(beta, ref, k, v):
    return math.exp(beta[k] * (v - ref[k]))


@_njit
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


@_njit
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


@_njit
def _rank_penalty(st, bp, g, r):
    """Memory over the capacities of rank ``r``, relative."""
    return (max(0.0, st[BS_HBM, r] + g[G_UHBM] - bp[BP_USABLE]) / bp[BP_USABLE]
            + max(0.0, st[BS_DDR, r] + g[G_UDDR] - bp[BP_DDR]) / max(bp[BP_DDR], 1.0))


@_njit
def _smax(s, beta, ref, k):
    """The log-sum-exp maximum of resource ``k`` (inf for an empty or broken sum)."""
    if not s[k] > 0.0:
        return math.inf
    return ref[k] + math.log(s[k]) / beta[k]


@_njit
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


@_njit
def exact_step(sys, st, twn, dsp, dsi, did, dsz, dlo, fac, ibw, bp, g):
    """The reference's step of the state (``evaluate_plan``'s last lines from the maxima) and
    whether it fits memory; a step that is not finite is ``(inf, False)``."""
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
    if not math.isfinite(step):  # reference.guard_finite: overflow, infeasible, never NaN
        return math.inf, False
    return step, ok


@_njit
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


@_njit
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


@_njit
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


@_njit
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


@_njit
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


@_njit
def _undo(st, twn, dsp, dsi, did, bp, g, itl, fkind, fk, fstride, t, f0, b0, f1, b1, t2, f2,
          wk, iw):
    _move(st, twn, dsp, dsi, did, g, itl, fkind, fk, fstride, t, f0, b0, f1, b1, t2, f2, -1.0,
          int(bp[BP_NODE]), int(bp[BP_W]), iw[0])
    g[:] = wk[4, : g.shape[0]]


@_njit
def _track(sys, st, twn, dsp, dsi, did, dsz, dlo, fac, ibw, bp, g, cform, cbase, best_form,
           best_base, best):
    """Keep the state if its exact step is the best seen (feasible states first)."""
    s, ok = exact_step(sys, st, twn, dsp, dsi, did, dsz, dlo, fac, ibw, bp, g)
    if (ok and (best[1] < 0.5 or s < best[0])) or (not ok and best[1] < 0.5 and s < best[0]):
        best[0] = s
        best[1] = 1.0 if ok else 0.0
        best_form[:] = cform
        best_base[:] = cbase


@_njit
def _random_base(kind, k, stride, w, node, n_nodes):
    if kind == IK_TWRW:
        return np.random.randint(n_nodes) * node
    if kind == IK_CW and stride == 1 and 1 < k < w:
        # table-column-wise: the k shards on consecutive ranks of one node
        lo = np.random.randint(n_nodes) * node
        span = min(node, w - lo)
        if span >= k:
            return lo + np.random.randint(span - k + 1)
        return np.random.randint(w)
    if kind == IK_CW and stride > 0 and stride * k <= w:
        return np.random.randint(stride)  # every distinct set of shard ranks
    return np.random.randint(w)


@_njit
def _pick_base(t, f, fkind, fk, fstride, w, node, n_nodes, bcnt, bstart, blist):
    """A random base of item ``t`` in form ``f``: from its allowed list when it has one."""
    if bcnt[t, f] >= 0:
        return blist[bstart[t, f] + np.random.randint(bcnt[t, f])]
    return _random_base(fkind[t, f], fk[t, f], fstride[t, f], w, node, n_nodes)


@_njit
def balance_phase(sys, st, twn, dsp, dsi, did, dsz, dlo, fac, ibw, bp, g, itl, fkind, fk,
                  fstride, nform, cform, cbase, best_form, best_base, best, n_cand, seed, beta,
                  hot_frac, swap_frac, form_frac, n_scan, bcnt, bstart, blist):
    """Descend the smoothed step (:func:`_objective`) for ``n_cand`` candidates: move an item
    (table-wise: another rank; column-wise: another first shard; table-row-wise: another
    node), swap two table-wise items, or change an item's form (``form_frac``; the best of
    ``n_scan`` random places for a placed form); each is applied, scored from the entries it
    changes (every entry when a row-wise form takes part) and kept if the surrogate drops,
    else undone. A fraction ``hot_frac`` of the items comes off the busiest rank of a
    resource. The best exact step seen (``best[0]``, feasible states first) and its forms and
    bases are kept in ``best_*``. A form whose ``bcnt`` is not -1 takes its bases from
    ``blist[bstart : bstart + bcnt]`` only (a table's pinned ranks) and is never swapped.
    Returns (surrogate, accepted)."""
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
                b1 = _pick_base(t, f1, fkind, fk, fstride, w, node, n_nodes, bcnt, bstart,
                                blist)
        elif (k0 == IK_TW and x < form_frac + swap_frac and bcnt[t, f0] < 0):
            t2 = np.random.randint(n_t)
            f2 = cform[t2]
            if t2 == t or fkind[t2, f2] != IK_TW or cbase[t2] == b0 or bcnt[t2, f2] >= 0:
                continue
            b1 = cbase[t2]
        elif k0 == IK_TW or k0 == IK_CW or k0 == IK_TWRW:
            b1 = _pick_base(t, f0, fkind, fk, fstride, w, node, n_nodes, bcnt, bstart, blist)
            if b1 == b0:
                continue
        else:
            continue
        best_v = math.inf
        best_b = b1
        for s in range(n_try):
            if s > 0:
                b1 = _pick_base(t, f1, fkind, fk, fstride, w, node, n_nodes, bcnt, bstart,
                                blist)
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
    u, inv = np.unique(hit, return_inverse=True)  # once per distinct hit rate
    spb = np.array([lookup_seconds_per_byte(sc.sys, j, tier, h) for h in u])[inv.reshape(-1)]
    bm = j[D.DJOB_BWD_MULTIPLIER]
    out = np.zeros((sc.n_tables, N_IL))
    if kind == IK_TW or kind == IK_CW:
        ds = dim / k
        # the reference's scalar shard_lookup_bytes once per distinct (pooling, width)
        pairs, inv = np.unique(np.stack([pool, ds], axis=1), axis=0, return_inverse=True)
        fwd = np.array([shard_lookup_bytes(b * p, ds_i, eb, ib, b, cf)
                        for p, ds_i in pairs])[inv.reshape(-1)] * spb
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
    if kind == IK_RW:
        out[:, IL_LB] += batched_copy_seconds(b, dim, j[D.DJOB_COMM_BWD_BYTES], spb)
    return out


_KIND_TO_IK = {D.SH_TW: IK_TW, D.SH_CW: IK_CW, D.SH_TWRW: IK_TWRW, D.SH_RW: IK_RW,
               D.SH_DP: IK_DP}
_IK_TO_KIND = {v: k for k, v in _KIND_TO_IK.items()}


def table_forms(sc: DlrmScenario, plan: np.ndarray, t: int, state: float, dp_max_bytes: float,
                max_cw: int = 5, cons=None) -> list[tuple[int, int, int, int]]:
    """Forms (kind, shards, stride, tier) the balancer may give table ``t``: its form in
    ``plan`` first, then table-wise, column-wise with 2, 4, ... shards (each at least 4
    wide, strides spreading them over the world), table-column-wise (2, 4, ... column shards
    on consecutive ranks of one node, stride 1: TorchRec's ``TwCwPooledEmbeddingSharding`` is
    its column-wise sharding placed within a host group, ``sharding/twcw_sharding.py``),
    table-row-wise (more than one rank per node), row-wise, and data-parallel when its state
    is at most ``dp_max_bytes``; all in the plan's memory tier. With ``cons``
    (:class:`trainscape.dlrm.constraints.Constraints`) only the forms it allows (some rank
    allowed) after the first; column-wise splits stop at its ``min_partition``; when the
    plan's tier is not allowed, the forms come in the table's first allowed tier."""
    w = sc.world
    node = _node_domains(sc)[0]
    dim = int(sc.tables[D.TAB_DIM, t])
    tier = int(plan[D.PL_TIER, t])
    kind = int(plan[D.PL_KIND, t])
    k0 = int(plan[D.PL_SHARDS, t]) if kind == D.SH_CW else 1
    s0 = int(plan[D.PL_STRIDE, t]) if kind == D.SH_CW else 0
    forms = [(kind, k0, s0, tier)]
    if cons is not None and not (int(cons.tiers[t]) >> tier) & 1:
        tier = next(m for m in range(D.N_MT) if (int(cons.tiers[t]) >> m) & 1)

    def add(f):
        if f in forms:
            return
        if cons is not None:
            kind_, k_, s_, tier_ = f
            if not cons.form_ok(t, kind_, k_, s_, tier_):
                return
            b = cons.allowed_bases(t, kind_, k_, s_)
            if b is not None and len(b) == 0:
                return
        forms.append(f)

    add((D.SH_TW, 1, 0, tier))
    k, n_cw = 2, 0
    while k <= w and dim % k == 0 and dim // k >= 4 and n_cw < max_cw:
        add((D.SH_CW, k, max(1, w // k), tier))
        k *= 2
        n_cw += 1
    k, n_cw = 2, 0
    while 1 < node < w and k <= node and dim % k == 0 and dim // k >= 4 and n_cw < 2:
        add((D.SH_CW, k, 1, tier))  # table-column-wise
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
        cons = getattr(sc, "constraints", None)
        if forms:
            all_forms = [table_forms(sc, plan, t, state[t], dp_max_bytes, cons=cons)
                         for t in range(n_t)]
        else:  # the plan's own form only (table_forms' first)
            kinds, ks, ss, ts = (plan[f].astype(int).tolist() for f in (
                D.PL_KIND, D.PL_SHARDS, D.PL_STRIDE, D.PL_TIER))
            all_forms = [[(kd, k if kd == D.SH_CW else 1, s if kd == D.SH_CW else 0, tr)]
                         for kd, k, s, tr in zip(kinds, ks, ss, ts)]
        nf = max(len(f) for f in all_forms)
        self.forms = all_forms
        fkind = np.zeros((n_t, nf), np.int64)
        fk = np.ones((n_t, nf), np.int64)
        fstride = np.zeros((n_t, nf), np.int64)
        nform = np.array([len(f) for f in all_forms], np.int64)
        itl = np.zeros((n_t, nf, 2, N_IL))
        # allowed bases per (table, form): count -1 any, else blist[bstart : bstart + count]
        bcnt = np.full((n_t, nf), -1, np.int64)
        bstart = np.zeros((n_t, nf), np.int64)
        blists = []
        n_b = 0
        if cons is not None:
            for t in (int(x) for x in cons.constrained_tables()):
                for f, (kind, k, stride, _) in enumerate(all_forms[t]):
                    b = cons.allowed_bases(t, kind, k, stride)
                    if b is not None:
                        if len(b) == 0:  # only the plan's own form can be so: keep its base
                            b = np.array([int(plan[D.PL_RANK, t])], np.int64)
                        bcnt[t, f], bstart[t, f] = len(b), n_b
                        blists.append(b)
                        n_b += len(b)
        blist = np.concatenate(blists).astype(np.int64) if blists else np.zeros(1, np.int64)
        self.bases = (bcnt, bstart, blist)
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
        bcnt, bstart, blist = self.bases
        val, acc = balance_phase(self.sc.sys, st, twn, dsp, dsi, did, dsz, dlo, fac, ibw, self.bp,
                               g, itl, fkind, fk, fstride, nform, self.cform, self.cbase,
                               self.best_form, self.best_base, self.best, int(n_cand),
                               int(seed), tau / self.scale, float(hot_frac), float(swap_frac),
                               float(form_frac), int(n_scan), bcnt, bstart, blist)
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
