"""cffi glue for the DLRM C kernel (``trainscape.native._dlrm``, built from ``csrc/dlrm.c``).

cffi releases the GIL around the call, so ``threads > 1`` runs chunks of plans concurrently,
each with its own scratch.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import numpy as np

from ..dlrm import layout as D

_LIB = None
_FFI = None


def load():
    """The compiled module's (ffi, lib); ``ImportError`` with a clear message if missing."""
    global _LIB, _FFI
    if _LIB is None:
        try:
            from ._dlrm import ffi, lib
        except ImportError as exc:
            raise ImportError(
                "the DLRM C kernel (trainscape.native._dlrm) is not built: run "
                "`python src/trainscape/native/build_dlrm.py` or `pip install -e .`; the numba "
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


_STATE_DTYPES = ("c", np.float64), ("rk", np.float64), ("fac", np.float64), \
    ("did", np.int64), ("n_dom", np.int64), ("dsum", np.float64), ("tv", np.float64), \
    ("ti", np.int64), ("nb_v", np.float64), ("nb_i", np.int64), ("tt", np.float64), \
    ("rec", np.float64), ("rmask", np.int64)


def score_moves(state, tdim, tpool, prank, ptier, cand, out=None, kernel="auto"):
    """O(1) scores of candidates ``cand`` (int64 ``(n, 4)``: table, rank, partner table or -1,
    memory tier) from the incremental ``state`` (the first 13 arrays
    :func:`trainscape.dlrm.incremental.init_state` returns) with the C kernel
    ``dl_score_moves``; equal to :func:`trainscape.dlrm.incremental.score_batch`. Returns
    ``out`` (float64 ``(n,)``: the moved plan's step, ``inf`` when out of memory).
    ``kernel``: ``"auto"`` (the AVX fast path where the CPU has it) or ``"base"``
    (``dl_score_moves_base``: SSE2 and scalar code only, as on a CPU without AVX) -- the same
    scores.

    ``ValueError`` naming the first candidate with an index out of range."""
    if kernel not in ("auto", "base"):
        raise ValueError(f"kernel: unknown {kernel!r} (allowed: auto, base)")
    ffi, lib = load()
    arrs = []
    for (name, dt), a in zip(_STATE_DTYPES, state[:13]):
        if not isinstance(a, np.ndarray) or a.dtype != dt or not a.flags.c_contiguous:
            raise ValueError(f"state.{name}: expected a C-contiguous {np.dtype(dt).name} array")
        arrs.append(a)
    c, rk, fac, did, _, dsum, tv, ti, nb_v, nb_i, tt, rec, rmask = arrs
    world = rk.shape[1]
    n_t = tt.shape[0]
    from ..dlrm import incremental_layout as inc

    shapes = {"c": (c, (inc.N_C,)), "rk": (rk, (inc.N_R, world)),
              "fac": (fac, (inc.MAXT, world)), "did": (did, (inc.MAXT, world)),
              "dsum": (dsum, (2, inc.MAXT, world)), "tv": (tv, (inc.N_S, 3)),
              "ti": (ti, (inc.N_S, 3)), "nb_v": (nb_v, (2, world, 3)),
              "nb_i": (nb_i, (2, world, 3)), "tt": (tt, (n_t, D.N_MT, inc.N_TT)),
              "rec": (rec, (world, rec.shape[1])), "rmask": (rmask, (world, 2))}
    for name, (a, shp) in shapes.items():
        if a.shape != shp:
            raise ValueError(f"state.{name}: shape {a.shape}, expected {shp}")
    vecs = {}
    for name, a, dt in (("tdim", tdim, np.float64), ("tpool", tpool, np.float64),
                        ("prank", prank, np.int64), ("ptier", ptier, np.int64)):
        if not isinstance(a, np.ndarray) or a.dtype != dt or not a.flags.c_contiguous \
                or a.shape != (n_t,):
            raise ValueError(f"{name}: expected a C-contiguous {np.dtype(dt).name} array of "
                             f"shape ({n_t},)")
        vecs[name] = a
    cand = np.ascontiguousarray(cand, dtype=np.int64)
    if cand.ndim != 2 or cand.shape[1] != 4:
        raise ValueError(f"cand: shape {cand.shape}, expected (n, 4) (table, rank, partner, "
                         "tier)")
    n = cand.shape[0]
    if out is None:
        out = np.empty(n)
    elif out.shape != (n,) or out.dtype != np.float64 or not out.flags.c_contiguous:
        raise ValueError(f"out: expected a C-contiguous float64 array of shape ({n},)")
    p = lambda ct, a: ffi.cast(ct, ffi.from_buffer(a))  # noqa: E731
    fn = lib.dl_score_moves if kernel == "auto" else lib.dl_score_moves_base
    rc = fn(
        p("double *", c), p("double *", rk), p("double *", fac), p("int64_t *", did),
        p("double *", dsum), p("double *", tv), p("int64_t *", ti), p("double *", nb_v),
        p("int64_t *", nb_i), p("double *", tt), p("double *", rec), p("int64_t *", rmask),
        rec.shape[1], p("double *", vecs["tdim"]),
        p("double *", vecs["tpool"]), p("int64_t *", vecs["prank"]),
        p("int64_t *", vecs["ptier"]), world, n_t, p("int64_t *", cand), n,
        p("double *", out))
    if rc < 0:
        raise ValueError("dl_score_moves: inconsistent state (world, top tier, record width "
                         "or a domain index out of range)")
    if rc > 0:
        k = int(np.flatnonzero(np.isnan(out))[0])
        t, b, u, tier = (int(x) for x in cand[k])
        raise ValueError(
            f"cand[{k}] = (table {t}, rank {b}, partner {u}, tier {tier}): an index is out of "
            f"range (tables 0..{n_t - 1}, partner -1..{n_t - 1}, ranks 0..{world - 1}, "
            f"tiers 0..{D.N_MT - 1}, and the plan's rank / tier of the tables in range)")
    return out


_CFN = None


def score_moves_cfunc():
    """``dl_score_moves`` as a ctypes function (pointers as ``c_void_p``), for numba code:
    numba calls a ctypes function passed as an argument without giving up its cache."""
    global _CFN
    if _CFN is None:
        ffi, lib = load()
        addr = int(ffi.cast("uintptr_t", ffi.addressof(lib, "dl_score_moves")))
        _CFN = score_moves_proto()(addr)
    return _CFN


def score_moves_proto():
    """The ctypes prototype of ``dl_score_moves`` (needs no built extension)."""
    import ctypes

    P, I = ctypes.c_void_p, ctypes.c_int64
    return ctypes.CFUNCTYPE(I, P, P, P, P, P, P, P, P, P, P, P, P, I, P, P, P, P, I, I, P, I, P)
