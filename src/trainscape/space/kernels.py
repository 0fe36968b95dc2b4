"""Compiled helpers of the design space, and the way space / explore kernels are compiled.

Validity has one truth, :func:`trainscape.model.llm.config_error`; :func:`config_codes` runs
its numba twin (``trainscape.model.numba_kernel.jitted``) over a batch.

:func:`model_njit` compiles a plain function whose globals name reference-model functions
(``config_error``, ``evaluate_config`` ...) against their jitted twins, cached on disk in a
directory keyed by the sources of the model *and* of the calling module and all they import
(:mod:`trainscape.native.numba_cache`; numba alone would only notice a change to the caller's own file
and could run a stale model).
"""

from __future__ import annotations

import sys as _sys
import types

import numpy as np

from ..native.numba_cache import cache_dir, caching_in, source_text

_COMPILED: dict = {}
source_text(_sys.modules[__name__])  # the text compiled is the text imported: read it now


def model_njit(fn, owner_module, **options):
    """``numba.njit(cache=True, nogil=True, **options)`` of ``fn`` with its model callees bound
    to their jitted twins; compiled once per process."""
    key = (owner_module.__name__, fn.__name__, tuple(sorted(options.items())))
    if key in _COMPILED:
        return _COMPILED[key]
    import numba

    from ..model import numba_kernel as nk

    ns = dict(fn.__globals__)
    ns.update(nk.jitted)
    ns["prange"] = numba.prange
    twin = types.FunctionType(fn.__code__, ns, fn.__name__, fn.__defaults__, fn.__closure__)
    twin.__module__ = fn.__module__
    twin.__qualname__ = fn.__qualname__
    with caching_in(cache_dir((nk, owner_module))):
        compiled = numba.njit(cache=True, nogil=True, **options)(twin)
    # helpers the twin calls by name must be compiled twins too
    _COMPILED[key] = compiled
    return compiled


def _codes_kernel(sys, mdl, job, cfg, codes):
    for i in range(cfg.shape[1]):
        codes[i] = config_error(sys, mdl, job, cfg, i)  # noqa: F821 -- jitted twin


def config_codes(sys, mdl, job, cfg) -> np.ndarray:
    """``int32 (n,)``: :func:`~trainscape.model.llm.config_error` of every config column."""
    cfg = np.ascontiguousarray(cfg, dtype=np.int32)
    codes = np.zeros(cfg.shape[1], dtype=np.int32)
    kernel = model_njit(_codes_kernel, _sys.modules[__name__])
    kernel(sys, mdl, job, cfg, codes)
    return codes


__all__ = ["config_codes", "model_njit"]
