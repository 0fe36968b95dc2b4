"""The C sweep kernel (``ts_sweep_range``, ``csrc/sweep.c``) through the cffi extension.

Available when ``trainscape.native._llm`` was built with ``csrc/sweep.c`` (and ``csrc/sweep.h`` in
its cdef). NumPy buffers are passed without copies (``ffi.from_buffer``); cffi releases the GIL
for the call, and the kernel splits the range over its own threads.
"""

from __future__ import annotations

import numpy as np

_CTYPE = {np.dtype(np.float64).str: "double[]", np.dtype(np.int64).str: "int64_t[]",
          np.dtype(np.int32).str: "int32_t[]"}
_LIB: tuple | None = None
_WHY = ""


def _load():
    global _LIB, _WHY
    if _LIB is not None:
        return _LIB
    try:
        from . import llm as native

        if native.lib is None:
            _WHY = native.IMPORT_ERROR or "trainscape.native._llm is not built"
            _LIB = (None, None)
        elif not hasattr(native.lib, "ts_sweep_range"):
            _WHY = "trainscape.native._llm was built without csrc/sweep.c"
            _LIB = (None, None)
        else:
            _LIB = (native.ffi, native.lib)
    except Exception as exc:  # noqa: BLE001 -- any failure means "not available"
        _WHY = f"{type(exc).__name__}: {exc}"
        _LIB = (None, None)
    return _LIB


def use_library(ffi, lib) -> None:
    """Use another cffi build that has ``ts_sweep_range`` (benches of a local build)."""
    global _LIB
    _LIB = (ffi, lib)


def available() -> bool:
    return _load()[1] is not None


def why_not() -> str:
    _load()
    return _WHY


def _buf(ffi, a: np.ndarray, dtype) -> object:
    if a.dtype != dtype or not a.flags.c_contiguous:
        raise ValueError(f"sweep kernel buffer: expected contiguous {dtype}, got {a.dtype}")
    return ffi.from_buffer(_CTYPE[np.dtype(dtype).str], a)


def run_range(space, blocks, start, stop, obj_col, obj_sign, state, threads=None):
    """Sweep ``[start, stop)`` into ``state`` (a WorkerState); False when a worker's Pareto
    buffer overflowed (retry with a larger capacity)."""
    ffi, lib = _load()
    sys, mdl, job = blocks
    i32, i64, f64 = np.int32, np.int64, np.float64
    core = np.ascontiguousarray(space.core, dtype=i32)
    rc = lib.ts_sweep_range(
        _buf(ffi, sys, f64), _buf(ffi, mdl, f64), _buf(ffi, job, f64),
        _buf(ffi, core, i32), _buf(ffi, space.mask, i32),
        _buf(ffi, np.ascontiguousarray(space.single, dtype=i32), i32), _buf(ffi, space.cum, i64),
        int(core.shape[1]),
        _buf(ffi, space.order_off, i32), _buf(ffi, space.order_cnt, i32),
        _buf(ffi, space.order_flat, i32), int(space.order_flat.size),
        _buf(ffi, space.recompute, i32), int(space.recompute.size),
        _buf(ffi, space.zero, i32), int(space.zero.size),
        _buf(ffi, space.dp_overlap, i32), int(space.dp_overlap.size),
        int(start), int(stop), int(obj_col), float(obj_sign),
        int(state.workers), int(state.k), int(state.cap),
        _buf(ffi, state.topk_key, f64), _buf(ffi, state.topk_idx, i64),
        _buf(ffi, state.front_step, f64), _buf(ffi, state.front_mem, f64),
        _buf(ffi, state.front_idx, i64), _buf(ffi, state.front_n, i64),
        _buf(ffi, state.order_key, f64), _buf(ffi, state.order_idx, i64),
        _buf(ffi, state.stats, f64),
    )
    if rc < 0:
        raise RuntimeError(f"ts_sweep_range failed with code {rc}")
    return rc == 0


__all__ = ["available", "run_range", "use_library", "why_not"]
