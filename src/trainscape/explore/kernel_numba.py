"""The sweep kernel, compiled with numba: enumeration by index inside the kernel, the cost model
in its stages (each recomputed only when the enumeration moves a field it reads, as sweep.c
does), and per-worker top-K / Pareto / best-per-order reduction.

The twin of ``csrc/sweep.c`` (same enumeration, same reduction, same tie rules; see
:mod:`trainscape.explore.reduce`). Configurations are never materialized: each worker decodes
its first index once (binary search over the core rows, then the mixed radix of the free
axes) and advances an odometer; one ``(N_CFG, 1)`` config column, one ``(N_OUT, 1)`` result
column and the row's device memory per ZeRO stage (``llm.state_memory_terms``, kept while the
odometer stays on the row under synchronous data parallelism) per worker per call are the only
allocations.
"""

from __future__ import annotations

import sys as _sys

import numba
import numpy as np

from ..layout import (
    CFG_CP,
    CFG_DP,
    CFG_DP_OVERLAP,
    CFG_EP,
    CFG_MBS,
    CFG_ORDER,
    CFG_PP,
    CFG_RECOMPUTE,
    CFG_SCHEDULE,
    CFG_SP,
    CFG_TP,
    CFG_TP_OVERLAP,
    CFG_VPP,
    CFG_ZERO,
    JOB_SYNC_STRATEGY,
    N_CFG,
    N_OUT,
    OUT_FEASIBLE,
    OUT_MEMORY_GIB,
    OUT_STEP_TIME_S,
    STATUS_OK,
    STATUS_OUT_OF_MEMORY,
    SYNC_SYNCHRONOUS,
)
from ..model.llm import N_STATE
from ..native.numba_cache import njit_for
from ..space.kernels import model_njit
from .reduce import ST_EVALUATED, ST_INVALID, ST_MIN_MEM, ST_OK, ST_OOM

_njit = njit_for([_sys.modules[__name__]])  # cached under a key of every source it reads


@_njit(nogil=True)
def topk_insert(keys, idx, key, g):
    """Keep the K smallest ``(key, g)`` in the unsorted slots ``keys``/``idx`` (1-D)."""
    k = keys.shape[0]
    worst = 0
    for j in range(1, k):
        if keys[j] > keys[worst] or (keys[j] == keys[worst] and idx[j] > idx[worst]):
            worst = j
    if key < keys[worst] or (key == keys[worst] and (idx[worst] < 0 or g < idx[worst])):
        keys[worst] = key
        idx[worst] = g
        return True
    return False


@_njit(nogil=True)
def pareto_insert(fs, fm, fi, n, s, m, g):
    """Insert ``(s, m, g)`` into the front held in ``fs/fm/fi[:n]`` (sorted by step, memory
    strictly decreasing). Returns the new length, or ``-1`` when the capacity is exceeded."""
    # first position with fs >= s
    lo = 0
    hi = n
    while lo < hi:
        mid = (lo + hi) // 2
        if fs[mid] < s:
            lo = mid + 1
        else:
            hi = mid
    pos = lo
    if pos > 0 and fm[pos - 1] <= m:
        return n  # beaten by a faster point that needs no more memory
    if pos < n and fs[pos] == s:
        if fm[pos] < m or (fm[pos] == m and fi[pos] < g):
            return n
    # remove the points the new one beats: from pos on, those with memory >= m
    end = pos
    while end < n and fm[end] >= m:
        end += 1
    removed = end - pos
    if removed == 0:
        if n >= fs.shape[0]:
            return -1
        for j in range(n, pos, -1):
            fs[j] = fs[j - 1]
            fm[j] = fm[j - 1]
            fi[j] = fi[j - 1]
        n += 1
    elif removed > 1:
        shift = removed - 1
        for j in range(pos + 1, n - shift):
            fs[j] = fs[j + shift]
            fm[j] = fm[j + shift]
            fi[j] = fi[j + shift]
        n -= shift
    fs[pos] = s
    fm[pos] = m
    fi[pos] = g
    return n


def _sweep_kernel(sys, mdl, job, core, mask, single, cum, order_off, order_cnt, order_flat, rec, zer,
                  dpo, start, stop, obj_col, obj_sign, topk_key, topk_idx, f_step, f_mem, f_idx,
                  f_n, o_key, o_idx, stats, overflow):
    workers = topk_key.shape[0]
    total = stop - start
    nd = dpo.shape[0]
    nz = zer.shape[0]
    nr = rec.shape[0]
    for w in prange(workers):  # noqa: F821
        lo = start + total * w // workers
        hi = start + total * (w + 1) // workers
        if hi <= lo or overflow[w] != 0:
            continue
        cfg = np.empty((N_CFG, 1), dtype=np.int32)
        out = np.empty((N_OUT, 1), dtype=np.float64)
        # locate lo: the row r with cum[r] <= lo < cum[r + 1]
        a = 0
        b = cum.shape[0] - 1
        while b - a > 1:
            mid = (a + b) // 2
            if cum[mid] <= lo:
                a = mid
            else:
                b = mid
        row_i = a
        rem = lo - cum[row_i]
        # a row without a data-parallel group holds one zero and dp_overlap value
        nz_r = 1 if single[row_i] != 0 else nz
        nd_r = 1 if single[row_i] != 0 else nd
        d = rem % nd_r
        rem //= nd_r
        z = rem % nz_r
        rem //= nz_r
        r = rem % nr
        slot = rem // nr
        n_front = f_n[w]
        # the model's stages (see trainscape.model.llm): a stage is recomputed only when the
        # odometer moves a field it reads (row, then order, then recompute, then zero)
        # stages not yet computed for the current position: 3 row, 2 order, 1 recompute, 0 none
        fresh = 3
        core_code = 0
        status = 0
        cfg[:, 0] = 1  # a valid-shaped column for typing the stages; each is refilled below
        row = row_terms(sys, mdl, job, cfg, 0)  # noqa: F821
        ordt = order_terms(sys, mdl, job, row, 0)  # noqa: F821
        rect = recompute_terms(sys, mdl, job, row, ordt, 0)  # noqa: F821
        dp_ar = data_parallel_comm(sys, job, row, ordt, 0)  # noqa: F821 -- zero == 0
        dp_rs_ag = data_parallel_comm(sys, job, row, ordt, 1)  # noqa: F821 -- zero 1 or 2
        dp_fsdp = data_parallel_comm(sys, job, row, ordt, 3)  # noqa: F821 -- zero 3: per unit
        have_ar = False
        have_rs_ag = False
        have_fsdp = False
        # the row's device memory but activations per ZeRO stage (bit z of have_state: kept);
        # a cross-site sync shards by the order's site groups, so there it is per configuration
        synchronous = job[JOB_SYNC_STRATEGY] == SYNC_SYNCHRONOUS
        state_rows = np.empty((4, N_STATE), dtype=np.float64)
        state_scratch = np.empty(N_STATE, dtype=np.float64)
        have_state = 0
        for g in range(lo, hi):
            mrow = mask[row_i]
            order = order_flat[order_off[mrow] + slot]
            if fresh == 3:
                cfg[CFG_TP, 0] = core[0, row_i]
                cfg[CFG_CP, 0] = core[1, row_i]
                cfg[CFG_PP, 0] = core[2, row_i]
                cfg[CFG_DP, 0] = core[3, row_i]
                cfg[CFG_EP, 0] = core[4, row_i]
                cfg[CFG_MBS, 0] = core[5, row_i]
                cfg[CFG_VPP, 0] = core[6, row_i]
                cfg[CFG_SCHEDULE, 0] = core[7, row_i]
                cfg[CFG_SP, 0] = core[8, row_i]
                cfg[CFG_TP_OVERLAP, 0] = core[9, row_i]
                core_code = core_config_error(sys, mdl, job, cfg, 0)  # noqa: F821
                have_state = 0
                if core_code == 0:
                    row = row_terms(sys, mdl, job, cfg, 0)  # noqa: F821
            cfg[CFG_ORDER, 0] = order
            cfg[CFG_RECOMPUTE, 0] = rec[r]
            cfg[CFG_ZERO, 0] = zer[z]
            cfg[CFG_DP_OVERLAP, 0] = dpo[d]
            code = first_config_error(core_code, free_config_error(cfg, 0))  # noqa: F821
            if code != 0:
                status = write_invalid(out, 0, code)  # noqa: F821
            else:
                if fresh >= 2:
                    ordt = order_terms(sys, mdl, job, row, order)  # noqa: F821
                    have_ar = False
                    have_rs_ag = False
                    have_fsdp = False
                if fresh >= 1:
                    rect = recompute_terms(sys, mdl, job, row, ordt, rec[r])  # noqa: F821
                # the data-parallel collectives of this (row, order), per ZeRO kind
                if zer[z] == 0:
                    if not have_ar:
                        dp_ar = data_parallel_comm(sys, job, row, ordt, zer[z])  # noqa: F821
                        have_ar = True
                    dpc = dp_ar
                elif zer[z] == 3:
                    if not have_fsdp:
                        dp_fsdp = data_parallel_comm(sys, job, row, ordt, zer[z])  # noqa: F821
                        have_fsdp = True
                    dpc = dp_fsdp
                else:
                    if not have_rs_ag:
                        dp_rs_ag = data_parallel_comm(sys, job, row, ordt, zer[z])  # noqa: F821
                        have_rs_ag = True
                    dpc = dp_rs_ag
                ranks = zero_shard_ranks(sys, job, row, ordt)  # noqa: F821
                if synchronous:
                    state = state_rows[zer[z]]
                    fill = have_state & (1 << zer[z]) == 0
                    have_state |= 1 << zer[z]
                else:
                    state = state_scratch
                    fill = True
                if fill:
                    terms = state_memory_terms(mdl, job, row, zer[z], ranks[0],  # noqa: F821
                                               ranks[1])
                    for k in range(N_STATE):
                        state[k] = terms[k]
                status = finish_config_state(sys, mdl, job, row, ordt, rect,  # noqa: F821
                                             dpc[0], dpc[1], zer[z], dpo[d] == 1, ranks[0],
                                             ranks[1], state, out, 0)
                fresh = 0  # (after an invalid column the stages it skipped stay pending)
            stats[w, ST_EVALUATED] += 1.0
            if status == STATUS_OK or status == STATUS_OUT_OF_MEMORY:
                mem = out[OUT_MEMORY_GIB, 0]
                if mem < stats[w, ST_MIN_MEM]:
                    stats[w, ST_MIN_MEM] = mem
                if out[OUT_FEASIBLE, 0] == 1.0:
                    stats[w, ST_OK] += 1.0
                    key = obj_sign * out[obj_col, 0]
                    topk_insert(topk_key[w], topk_idx[w], key, g)
                    if key < o_key[w, order] or (key == o_key[w, order] and g < o_idx[w, order]):
                        o_key[w, order] = key
                        o_idx[w, order] = g
                    nn = pareto_insert(f_step[w], f_mem[w], f_idx[w], n_front,
                                       out[OUT_STEP_TIME_S, 0], mem, g)
                    if nn < 0:
                        overflow[w] = 1
                        break
                    n_front = nn
                else:
                    stats[w, ST_OOM] += 1.0
            else:
                stats[w, ST_INVALID] += 1.0
            # advance the odometer
            d += 1
            if d == nd_r:
                d = 0
                z += 1
                if z == nz_r:
                    z = 0
                    r += 1
                    fresh = max(fresh, 1)
                    if r == nr:
                        r = 0
                        slot += 1
                        fresh = max(fresh, 2)
                        if slot == order_cnt[mrow]:
                            slot = 0
                            row_i += 1
                            fresh = 3
                            if row_i < single.shape[0]:
                                nz_r = 1 if single[row_i] != 0 else nz
                                nd_r = 1 if single[row_i] != 0 else nd
        f_n[w] = n_front


def get_kernel():
    """The compiled sweep kernel (cached on disk)."""
    return model_njit(_sweep_kernel, _sys.modules[__name__], parallel=True)


def run_range(space, blocks, start, stop, obj_col, obj_sign, state, threads=None):
    """Sweep indices ``[start, stop)`` of ``space`` into ``state`` (a WorkerState).

    Returns False when a worker's Pareto buffer overflowed (the state is then partial; the
    caller retries the range with a larger capacity)."""
    sys, mdl, job = blocks
    kernel = get_kernel()
    overflow = np.zeros(state.workers, dtype=np.int64)
    prev = numba.get_num_threads()
    if threads:
        numba.set_num_threads(min(int(threads), numba.config.NUMBA_NUM_THREADS))
    try:
        kernel(sys, mdl, job, space.core, space.mask,
               np.ascontiguousarray(space.single, dtype=np.int32), space.cum, space.order_off,
               space.order_cnt, space.order_flat, space.recompute, space.zero, space.dp_overlap,
               np.int64(start), np.int64(stop), np.int64(obj_col), np.float64(obj_sign),
               state.topk_key, state.topk_idx, state.front_step, state.front_mem,
               state.front_idx, state.front_n, state.order_key, state.order_idx, state.stats,
               overflow)
    finally:
        numba.set_num_threads(prev)
    return not overflow.any()


__all__ = ["get_kernel", "run_range", "topk_insert", "pareto_insert"]
