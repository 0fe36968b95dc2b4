"""cffi glue for the DLRM C kernel (``trainscape.dlrm._native``, built from ``csrc/dlrm.c``).

cffi releases the GIL around the call, so ``threads > 1`` runs chunks of plans concurrently,
each with its own scratch.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import numpy as np

from . import layout as D

_LIB = None
_FFI = None


def load():
    """The compiled module's (ffi, lib); ``ImportError`` with a clear message if missing."""
    global _LIB, _FFI
    if _LIB is None:
        try:
            from ._native import ffi, lib
        except ImportError as exc:
            raise ImportError(
                "the DLRM C kernel (trainscape.dlrm._native) is not built: run "
                "`python src/trainscape/dlrm/_build.py` or `pip install -e .`; the numba "
                "backend (backend='numba') works without it") from exc
        _FFI, _LIB = ffi, lib
    return _FFI, _LIB


def _ptr(ffi, ctype, arr):
    return ffi.cast(ctype, ffi.from_buffer(arr))


def scratch(world: int, n_tables: int) -> np.ndarray:
    """Flat float64 scratch for :func:`_run`: the per-rank rows ``(N_RANK, W + 1)`` first, then
    the kernel's per-table cache (``dl_work_len`` doubles in all)."""
    _, lib = load()
    n = lib.dl_work_len(world, n_tables)
    if n < 0:
        raise ValueError(f"scratch: bad sizes world={world}, n_tables={n_tables}")
    return np.zeros(n)


def _run(sys, job, tables, plans, out, work):
    ffi, lib = load()
    rc = lib.dl_evaluate_plans(
        _ptr(ffi, "double *", sys), _ptr(ffi, "double *", job), _ptr(ffi, "double *", tables),
        tables.shape[1], _ptr(ffi, "int32_t *", plans), plans.shape[0],
        _ptr(ffi, "double *", work), work.size, _ptr(ffi, "double *", out))
    if rc != 0:
        raise ValueError("dl_evaluate_plans: inconsistent arguments (world, tiers or scratch "
                         "size)")


def evaluate_plans(sys, job, tables, plans, out, threads: int = 0, work=None):
    """Cost int32 ``plans`` ``(n, N_PLAN, T)`` into ``out`` ``(N_DOUT, n)`` with the C kernel.

    ``work`` (float64 ``(N_RANK, W + 1)``), when given, receives the last plan's per-rank rows;
    the kernel itself runs on a flat scratch that also holds its per-table cache."""
    sys = np.ascontiguousarray(sys, dtype=np.float64)
    job = np.ascontiguousarray(job, dtype=np.float64)
    tables = np.ascontiguousarray(tables, dtype=np.float64)
    plans = np.ascontiguousarray(plans, dtype=np.int32)
    n = plans.shape[0]
    world = int(job[D.DJOB_WORLD])
    n_t = tables.shape[1]
    if out.shape != (D.N_DOUT, n) or not out.flags.c_contiguous or out.dtype != np.float64:
        raise ValueError(f"out: expected C-contiguous float64 ({D.N_DOUT}, {n})")
    rank_len = D.N_RANK * (world + 1)
    if work is not None and work.size < rank_len:
        _run(sys, job, tables, plans, out, np.ascontiguousarray(work, dtype=np.float64))
        return out  # not reached: the kernel rejects the scratch (ValueError)
    if threads <= 1 or n < 1024:
        buf = scratch(world, n_t)
        _run(sys, job, tables, plans, out, buf)
        if work is not None:
            np.copyto(work, buf[:rank_len].reshape(work.shape))
        return out
    bounds = np.linspace(0, n, threads + 1).astype(int)

    def part(k):
        lo, hi = bounds[k], bounds[k + 1]
        o = np.zeros((D.N_DOUT, hi - lo))
        buf = scratch(world, n_t)
        _run(sys, job, tables, plans[lo:hi], o, buf)
        out[:, lo:hi] = o
        return buf

    with ThreadPoolExecutor(threads) as ex:
        bufs = list(ex.map(part, range(threads)))
    if work is not None:
        np.copyto(work, bufs[-1][:rank_len].reshape(work.shape))
    return out
