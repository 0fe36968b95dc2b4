"""Kernel backends: which loaded, which is fastest, and one call that runs any of them.

Three implementations of one cost model:

- ``"c"``: the C port (``csrc/``, cffi extension ``trainscape.native._llm``), batch split over cores;
- ``"numba"``: the reference's own functions compiled by numba, batched with ``prange``;
- ``"python"``: the pure-Python reference (:mod:`trainscape.model.reference`), the spec.

>>> from trainscape.backends import available_backends, default_backend, evaluate_blocks
>>> available_backends()["c"]          # (True, "loaded") or (False, "why not")
>>> out = evaluate_blocks(sys, mdl, job, cfg)           # fastest loaded backend
"""

from __future__ import annotations

import numpy as np

#: Backend names, fastest first.
BACKENDS = ("c", "numba", "python")

_status: dict[str, tuple[bool, str]] = {}


def _probe(name: str) -> tuple[bool, str]:
    if name in _status:
        return _status[name]
    try:
        if name == "c":
            from .native import llm as native

            if native.lib is None:
                result = (False, native.IMPORT_ERROR or "trainscape.native._llm is not built")
            else:
                result = (True, f"loaded ({native.max_threads()} threads by default)")
        elif name == "numba":
            from .model import numba_kernel  # noqa: F401  (compiles or loads the cache)

            result = (True, "loaded")
        else:
            from .model import reference  # noqa: F401

            result = (True, "loaded (reference, one thread)")
    except Exception as exc:  # noqa: BLE001 - any failure to load means "not available"
        result = (False, f"{type(exc).__name__}: {exc}")
    _status[name] = result
    return result


def available_backends() -> dict[str, tuple[bool, str]]:
    """``{name: (ok, reason)}`` for every backend, fastest first; ``reason`` says why one did
    not load (e.g. no C compiler at install time)."""
    return {name: _probe(name) for name in BACKENDS}


def default_backend() -> str:
    """The fastest backend that loads: c, else numba, else python."""
    for name in BACKENDS:
        if _probe(name)[0]:
            return name
    return "python"


def check_backend(backend: str | None) -> str:
    """``backend`` resolved (``None`` = default); ValueError for an unknown name,
    RuntimeError for a known one that did not load."""
    if backend is None:
        return default_backend()
    if backend not in BACKENDS:
        raise ValueError(f"backend: got {backend!r}, expected one of {', '.join(BACKENDS)} "
                         "(or None for the fastest loaded)")
    ok, reason = _probe(backend)
    if not ok:
        raise RuntimeError(f"backend {backend!r} is not available: {reason}")
    return backend


def evaluate_blocks(sys: np.ndarray, mdl: np.ndarray, job: np.ndarray, cfg: np.ndarray,
                    backend: str | None = None, threads: int | None = None,
                    out: np.ndarray | None = None) -> np.ndarray:
    """Cost packed configuration columns ``cfg`` (``int32 (N_CFG, n)``) against the packed
    blocks; returns ``float64 (N_OUT, n)``. ``threads``: worker threads for c / numba (``None``
    = all cores); the python reference always runs on one."""
    name = check_backend(backend)
    if threads is not None and (isinstance(threads, bool) or not isinstance(threads, (int, np.integer))
                                or threads < 1):
        raise ValueError(f"threads: got {threads!r}, expected an integer >= 1 or None (all cores)")
    if name == "c":
        from .native import llm as native

        return native.evaluate_batch(sys, mdl, job, cfg, out=out, threads=threads)
    if name == "numba":
        from .model import numba_kernel

        return numba_kernel.evaluate_batch(sys, mdl, job, cfg, out=out, threads=threads)
    from .model import reference

    return reference.evaluate_batch(sys, mdl, job, cfg, out=out)
