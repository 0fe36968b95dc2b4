"""The numba backend: the reference model's own scalar functions, compiled.

Rather than a second copy of the model, every function of the reference modules is re-created
with a namespace in which its callees are their jitted twins, then ``numba.njit``-ed; the batch
driver runs :func:`trainscape.model.llm.evaluate_config` over configurations with ``prange``.
Compiled code is cached on disk (``cache=True``) so a second process does not recompile. numba
invalidates a cached function only when *its own* file changes, while the batch driver embeds
code from every reference module; so the cache lives in a directory keyed by a hash of all of
their sources (and numba's version), and any edit to the model compiles afresh.
"""

from __future__ import annotations

import hashlib
import inspect
import os
import types
from pathlib import Path

import numba
import numpy as np

from .. import layout
from ..layout import N_OUT
from . import collectives, llm, network, pipeline
from .reference import check_blocks

REFERENCE_MODULES = (network, collectives, pipeline, llm)


def _evaluate_batch(sys, mdl, job, cfg, out):
    """Batch driver (compiled): one configuration per ``prange`` iteration; pure and reentrant."""
    n = cfg.shape[1]
    for i in prange(n):  # noqa: F821 -- bound to numba.prange in the compiled namespace
        evaluate_config(sys, mdl, job, cfg, i, out)  # noqa: F821


def cache_dir(modules) -> str:
    """Per-source-version numba cache directory (``TRAINSCAPE_CACHE_DIR`` overrides the root)."""
    digest = hashlib.sha256(numba.__version__.encode())
    for mod in (layout, *modules):
        digest.update(inspect.getsource(mod).encode())
    # this module too: its compile options (error model, parallelism) shape the machine code
    digest.update(Path(__file__).read_bytes())
    root = os.environ.get("TRAINSCAPE_CACHE_DIR") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache"), "trainscape"
    )
    return os.path.join(root, "numba", digest.hexdigest()[:16])


def _build_namespace():
    previous = numba.config.CACHE_DIR
    numba.config.CACHE_DIR = cache_dir(REFERENCE_MODULES)
    try:
        return _build_namespace_in_cache()
    finally:
        numba.config.CACHE_DIR = previous


def _build_namespace_in_cache():
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
    for name, owner in owners.items():
        f = getattr(__import__(owner, fromlist=[name]), name)
        twin = types.FunctionType(f.__code__, ns, name, f.__defaults__, f.__closure__)
        twin.__module__ = f.__module__
        twin.__qualname__ = f.__qualname__
        ns[name] = numba.njit(cache=True, nogil=True, error_model="numpy")(twin)
    ns["prange"] = numba.prange
    batch = types.FunctionType(_evaluate_batch.__code__, ns, "_evaluate_batch")
    batch.__module__ = __name__
    batch.__qualname__ = "_evaluate_batch"
    ns["_evaluate_batch"] = numba.njit(cache=True, parallel=True, nogil=True, error_model="numpy")(batch)
    return ns


_NS = _build_namespace()
#: jitted twin of every reference function, by name (e.g. ``jitted["all_reduce_time"]``)
jitted = {k: v for k, v in _NS.items() if isinstance(v, numba.core.registry.CPUDispatcher)}


def evaluate_batch(sys, mdl, job, cfg, out=None, threads=None):
    """Cost every configuration column of ``cfg`` with the compiled model."""
    check_blocks(sys, mdl, job, cfg)
    n = cfg.shape[1]
    if out is None:
        out = np.empty((N_OUT, n), dtype=np.float64)
    if threads is not None:
        previous = numba.get_num_threads()
        numba.set_num_threads(int(threads))
        try:
            _NS["_evaluate_batch"](sys, mdl, job, np.ascontiguousarray(cfg), out)
        finally:
            numba.set_num_threads(previous)
    else:
        _NS["_evaluate_batch"](sys, mdl, job, np.ascontiguousarray(cfg), out)
    return out
