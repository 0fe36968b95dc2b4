"""The numba backend: the reference model's own scalar functions, compiled.

Rather than a second copy of the model, every function of the reference modules is re-created
with a namespace in which its callees are their jitted twins, then ``numba.njit``-ed; the batch
driver runs :func:`trainscape.model.llm.evaluate_config` over configurations with ``prange``.
Compiled code is cached on disk (``cache=True``) so a second process does not recompile. numba
invalidates a cached function only when *its own* file changes, while the batch driver embeds
code from every reference module and constants of :mod:`trainscape.layout`; so the cache lives
in a directory keyed by a hash of all of their sources, read once at import, and numba's
version (:mod:`trainscape.native.numba_cache`), and any edit to the model compiles afresh.
"""

from __future__ import annotations

import sys as _sys
import types

import numba
import numpy as np

from .. import layout
from ..layout import N_OUT
from ..native.numba_cache import njit_for
from . import collectives, llm, network, pipeline
from .reference import check_blocks

REFERENCE_MODULES = (network, collectives, pipeline, llm)


# ---- the batch driver -----------------------------------------------------------------------
# Configurations of a batch drawn from one design space share few core rows and few (row, order)
# pairs, and the stages those fix (llm.row_terms, llm.order_terms, then recompute_terms and
# data_parallel_comm per recompute / ZeRO kind) are most of a configuration's work. Each worker
# keeps them in a memo, the twin of csrc/batch.c's: rows in an open-addressing hash table (linear
# probing, at most half full) over a dense store filled in order of first sight; each row holds
# the index of its (row, order) pairs; a pair holds its order terms, its recompute terms per
# recompute choice and its data-parallel collectives per ZeRO kind (the all-reduce; ZeRO-1/2's
# bulk reduce-scatter and all-gather; ZeRO-3's per-FSDP-unit pair), each filled on first use. A
# hit reuses what the same stage function computed from the same inputs, so no bit changes. Under
# synchronous data parallelism a row also keeps its device memory but activations per ZeRO stage
# (llm.state_memory_terms), which no order, recompute or overlap changes. When a store is full
# both start over; a range whose rows rarely repeat is costed from scratch.
MEMO_ROW_CAP = 1024  # rows held before a fresh start
MEMO_ROW_SLOTS = 2048  # hash slots (a power of two, at least twice the rows)
MEMO_PAIR_CAP = 16384  # (row, order) pairs held before a fresh start
MEMO_MIN = 16384  # configurations per worker below which a range runs without a memo
MEMO_WINDOW = 8192  # configurations per hit-rate check
MEMO_MIN_HITS = 512  # fewer row hits than this in a window: the memo goes off
PAIR_REC = llm.N_ORD  # recompute_terms of recompute choice rc at PAIR_REC + rc * N_REC
PAIR_AR = PAIR_REC + len(layout.RECOMPUTE) * llm.N_REC  # data_parallel_comm, zero == 0
PAIR_RS = PAIR_AR + 1  # data_parallel_comm, zero 1 or 2: reduce-scatter, then all-gather
PAIR_AG = PAIR_AR + 2
PAIR_RS3 = PAIR_AR + 3  # data_parallel_comm, zero == 3: one FSDP unit's reduce-scatter, all-gather
PAIR_AG3 = PAIR_AR + 4
PAIR_WIDTH = PAIR_AR + 5
PAIR_HAVE_AR = 1 << len(layout.RECOMPUTE)  # flag bits: one per recompute choice, then these
PAIR_HAVE_AG = PAIR_HAVE_AR << 1
PAIR_HAVE_AG3 = PAIR_HAVE_AR << 2
N_STATE = llm.N_STATE  # llm.state_memory_terms: per device weights, gradients, optimizer; logits
CORE_FIELDS = (layout.CFG_TP, layout.CFG_CP, layout.CFG_PP, layout.CFG_DP, layout.CFG_EP,
               layout.CFG_MBS, layout.CFG_VPP, layout.CFG_SCHEDULE, layout.CFG_SP,
               layout.CFG_TP_OVERLAP)
N_CORE = len(CORE_FIELDS)


def _core_hash(cfg, i):
    """Hash of configuration ``i``'s core fields (multiply-xor, then a SplitMix64-style
    xor-shift-multiply finalizer, Steele et al. OOPSLA 2014); wraps in 64 bits when compiled."""
    h = 0
    for k in range(N_CORE):
        h = (h ^ cfg[CORE_FIELDS[k], i]) * 0x100000001B3  # FNV-1a's prime
    h ^= h >> 29
    h *= 0x3C6EF372FE94F82B
    return h ^ (h >> 32)


def _store_column(out, i, res):
    """``out[:, i] = res[:, 0]``, element by element: the slice assignment builds two array
    views (reference-counted) and runs numba's generic strided copy, 11 % of a memo hit's
    time."""
    for k in range(layout.N_OUT):
        out[k, i] = res[k, 0]


def _evaluate_range(sys, mdl, job, cfg, out, lo, hi):
    """Columns ``[lo, hi)`` of the batch through one worker's memo (see above), or one by one
    when they are fewer than MEMO_MIN."""
    # a configuration's results are composed in ``res`` and stored once: the kernel's guard
    # (llm.guard_finite) reads them back, which stalls on just-stored batch columns
    res = np.empty((layout.N_OUT, 1), dtype=np.float64)
    if hi - lo < MEMO_MIN:
        for i in range(lo, hi):
            evaluate_config(sys, mdl, job, cfg[:, i:i + 1], 0, res)
            _store_column(out, i, res)
        return
    row_key = np.empty((MEMO_ROW_CAP, N_CORE), dtype=np.int32)
    row_code = np.empty(MEMO_ROW_CAP, dtype=np.int64)
    row_val = np.empty((MEMO_ROW_CAP, llm.N_ROW), dtype=np.float64)
    pair_of = np.zeros((MEMO_ROW_CAP, layout.N_ORDERS), dtype=np.int32)  # 1 + pair index
    slots = np.zeros(MEMO_ROW_SLOTS, dtype=np.int32)  # 1 + row index
    pair_val = np.empty((MEMO_PAIR_CAP, PAIR_WIDTH), dtype=np.float64)
    pair_flags = np.zeros(MEMO_PAIR_CAP, dtype=np.int64)
    # per row and ZeRO stage: llm.state_memory_terms (bit z of row_state_have: filled); a
    # cross-site sync shards by the order's site groups, so there it is costed per configuration
    row_state = np.empty((MEMO_ROW_CAP, 4, N_STATE), dtype=np.float64)
    row_state_have = np.zeros(MEMO_ROW_CAP, dtype=np.int64)
    state_scratch = np.empty(N_STATE, dtype=np.float64)
    synchronous = job[layout.JOB_SYNC_STRATEGY] == layout.SYNC_SYNCHRONOUS
    n_rows = 0
    n_pairs = 0
    hits = 0
    check = lo + MEMO_WINDOW
    i = lo
    while i < hi:
        if i == check:  # the memo pays for its misses only when rows repeat
            if hits < MEMO_MIN_HITS:
                break
            hits = 0
            check += MEMO_WINDOW
        # ---- the row ---------------------------------------------------------------------
        h = _core_hash(cfg, i)
        slot = h & (MEMO_ROW_SLOTS - 1)
        r = -1
        while slots[slot] != 0:
            cand = slots[slot] - 1
            same = True
            for k in range(N_CORE):
                if row_key[cand, k] != cfg[CORE_FIELDS[k], i]:
                    same = False
                    break
            if same:
                r = cand
                break
            slot = (slot + 1) & (MEMO_ROW_SLOTS - 1)
        if r >= 0:
            hits += 1
        else:
            if n_rows == MEMO_ROW_CAP:
                slots[:] = 0
                n_rows = 0
                n_pairs = 0
                slot = h & (MEMO_ROW_SLOTS - 1)  # the table is empty: the key's own slot is free
            r = n_rows
            n_rows += 1
            slots[slot] = r + 1
            for k in range(N_CORE):
                row_key[r, k] = cfg[CORE_FIELDS[k], i]
            pair_of[r, :] = 0
            row_state_have[r] = 0
            row_code[r] = core_config_error(sys, mdl, job, cfg, i)
            if row_code[r] == 0:
                terms = row_terms(sys, mdl, job, cfg, i)
                for k in range(llm.N_ROW):
                    row_val[r, k] = terms[k]
        code = first_config_error(row_code[r], free_sync_error(job, cfg, i))
        if code != 0:
            write_invalid(out, i, code)
            i += 1
            continue
        row = row_val[r]
        # ---- the (row, order) pair ---------------------------------------------------------
        order = cfg[layout.CFG_ORDER, i]
        p = pair_of[r, order] - 1
        if p < 0:
            p = n_pairs
            n_pairs += 1
            pair_of[r, order] = p + 1
            pair_flags[p] = 0
            ordt = order_terms(sys, mdl, job, row, order)
            for k in range(llm.N_ORD):
                pair_val[p, k] = ordt[k]
        pair = pair_val[p]
        # ---- recompute and ZeRO kind, then the configuration ----------------------------------
        rc = cfg[layout.CFG_RECOMPUTE, i]
        base = PAIR_REC + rc * llm.N_REC
        if pair_flags[p] & (1 << rc) == 0:
            rect = recompute_terms(sys, mdl, job, row, pair, rc)
            for k in range(llm.N_REC):
                pair[base + k] = rect[k]
            pair_flags[p] |= 1 << rc
        zero = cfg[layout.CFG_ZERO, i]
        # the slots and flag of this ZeRO kind's data_parallel_comm (zero 0: one collective)
        if zero == 0:
            have, at_first, at_second = PAIR_HAVE_AR, PAIR_AR, -1
        elif zero == 3:
            have, at_first, at_second = PAIR_HAVE_AG3, PAIR_RS3, PAIR_AG3
        else:
            have, at_first, at_second = PAIR_HAVE_AG, PAIR_RS, PAIR_AG
        if pair_flags[p] & have == 0:
            dpc = data_parallel_comm(sys, job, row, pair, zero)
            pair[at_first] = dpc[0]
            if at_second >= 0:
                pair[at_second] = dpc[1]
            pair_flags[p] |= have
        first = pair[at_first]
        second = pair[at_second] if at_second >= 0 else 0.0
        ranks = zero_shard_ranks(sys, job, row, pair)
        if synchronous:
            state = row_state[r, zero]
            fill = row_state_have[r] & (1 << zero) == 0
            row_state_have[r] |= 1 << zero
        else:
            state = state_scratch
            fill = True
        if fill:
            terms = state_memory_terms(mdl, job, row, zero, ranks[0], ranks[1])
            for k in range(N_STATE):
                state[k] = terms[k]
        finish_config_state(sys, mdl, job, row, pair, pair[base:base + llm.N_REC], first, second,
                            zero, cfg[layout.CFG_DP_OVERLAP, i] == 1, ranks[0], ranks[1], state,
                            res, 0)
        _store_column(out, i, res)
        if n_pairs == MEMO_PAIR_CAP:  # row and pair are not used again
            slots[:] = 0
            n_rows = 0
            n_pairs = 0
        i += 1
    # rows that rarely repeat: the rest from scratch
    while i < hi:
        evaluate_config(sys, mdl, job, cfg[:, i:i + 1], 0, res)
        _store_column(out, i, res)
        i += 1


def _evaluate_batch(sys, mdl, job, cfg, out, workers):
    """Batch driver (compiled): the columns split over ``workers`` (the thread count, given by
    the caller: reading it here would keep the function out of numba's cache), each share
    through :func:`_evaluate_range`; pure and reentrant. One parallel loop only: each costs
    seconds of compilation."""
    n = cfg.shape[1]
    for w in prange(workers):
        _evaluate_range(sys, mdl, job, cfg, out, n * w // workers, n * (w + 1) // workers)


#: reference functions compiled inline at every call site (numba IR inlining, ``inline=
#: "always"``): a call between jitted functions passes each array argument as its unpacked
#: fields and reference-counts it (``_incref`` / ``_decref`` were 12 % of a memo hit's time),
#: and these run once or more per configuration on the memo's hit path. Inlining them made
#: the batch driver 1.4-1.5x faster; inlining every reference function compiled for over ten
#: minutes, so only these.
INLINED = frozenset(("free_sync_error", "free_config_error", "sync_config_error",
                     "offload_config_error", "first_config_error", "zero_shard_ranks",
                     "guard_finite", "write_result", "finish_config_state"))

#: module-level names the batch driver reads (compile-time constants in the jitted namespace)
DRIVER_NAMES = ("np", "layout", "llm", "MEMO_ROW_CAP", "MEMO_ROW_SLOTS", "MEMO_PAIR_CAP", "MEMO_MIN",
                "MEMO_WINDOW", "MEMO_MIN_HITS", "PAIR_REC", "PAIR_AR", "PAIR_RS", "PAIR_AG",
                "PAIR_RS3", "PAIR_AG3", "PAIR_WIDTH", "PAIR_HAVE_AR", "PAIR_HAVE_AG",
                "PAIR_HAVE_AG3", "CORE_FIELDS", "N_CORE", "N_STATE")


#: ``numba.njit(cache=True, ...)`` cached under a key of this module and of every source it
#: imports (the reference modules, :mod:`trainscape.layout`), computed now, at import
_njit = njit_for([_sys.modules[__name__], *REFERENCE_MODULES])
CACHE_DIR = _njit.cache_dir


def _build_namespace():
    ns: dict = {}
    owners: dict = {}
    for mod in REFERENCE_MODULES:
        for name, value in vars(mod).items():
            if name.startswith("__"):
                continue
            if isinstance(value, types.FunctionType) and value.__module__ == mod.__name__:
                if name in owners and owners[name] != mod.__name__:
                    raise RuntimeError(f"{name} is defined in both {owners[name]} and {mod.__name__}")
                owners[name] = mod.__name__
            ns.setdefault(name, value)
    missing = INLINED - set(owners)
    if missing:
        raise RuntimeError(f"INLINED names no reference function: {sorted(missing)}")
    for name, owner in owners.items():
        f = getattr(__import__(owner, fromlist=[name]), name)
        twin = types.FunctionType(f.__code__, ns, name, f.__defaults__, f.__closure__)
        twin.__module__ = f.__module__
        twin.__qualname__ = f.__qualname__
        ns[name] = _njit(twin, nogil=True, error_model="numpy",
                         inline="always" if name in INLINED else "never")
    ns["prange"] = numba.prange
    for name in DRIVER_NAMES:
        ns[name] = globals()[name]
    for f in (_core_hash, _store_column, _evaluate_range, _evaluate_batch):
        twin = types.FunctionType(f.__code__, ns, f.__name__)
        twin.__module__ = __name__
        twin.__qualname__ = f.__name__
        ns[f.__name__] = _njit(twin, parallel=f is _evaluate_batch, nogil=True,
                               error_model="numpy")
    return ns, (*owners, "_core_hash", "_store_column", "_evaluate_range", "_evaluate_batch")


_NS, _COMPILED_NAMES = _build_namespace()
#: jitted twin of every reference function, by name (e.g. ``jitted["all_reduce_time"]``); under
#: ``NUMBA_DISABLE_JIT=1`` the twins are plain Python functions, listed all the same
jitted = {k: _NS[k] for k in _COMPILED_NAMES}


def evaluate_batch(sys, mdl, job, cfg, out=None, threads=None):
    """Cost every configuration column of ``cfg`` with the compiled model (on ``threads``
    threads, by default numba's current count)."""
    check_blocks(sys, mdl, job, cfg)
    n = cfg.shape[1]
    if out is None:
        out = np.empty((N_OUT, n), dtype=np.float64)
    cfg = np.ascontiguousarray(cfg)
    if threads is None:
        _NS["_evaluate_batch"](sys, mdl, job, cfg, out, np.int64(numba.get_num_threads()))
        return out
    threads = max(1, min(int(threads), numba.config.NUMBA_NUM_THREADS))
    previous = numba.get_num_threads()
    numba.set_num_threads(threads)
    try:
        _NS["_evaluate_batch"](sys, mdl, job, cfg, out, np.int64(threads))
    finally:
        numba.set_num_threads(previous)
    return out
