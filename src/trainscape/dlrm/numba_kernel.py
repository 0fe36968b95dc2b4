"""The DLRM reference compiled by numba: the very functions of :mod:`trainscape.dlrm.reference`
(and the network / collective functions it calls), re-bound so every call between them goes to
a jitted twin, then batched over plans with ``prange``. Compiled code is cached in a directory
keyed by every source it reads (:mod:`trainscape.native.numba_cache`), not next to this file."""

from __future__ import annotations

import sys as _sys
import types

import numba
import numpy as np

from ..model import collectives, network
from ..native.numba_cache import njit_for
from . import layout as D
from . import reference

_MODULES = (network, collectives, reference)
# error_model="numpy": a division by zero gives inf / NaN as in the reference (which runs on
# NumPy scalars) -- then status overflow (reference.guard_finite) -- instead of raising
_njit = njit_for([_sys.modules[__name__], *_MODULES], error_model="numpy")


def _jit_all():
    shared: dict = {}
    for mod in _MODULES:
        for k, v in vars(mod).items():
            if not isinstance(v, types.FunctionType):
                shared.setdefault(k, v)
    jitted = {}
    for mod in _MODULES:
        for k, v in vars(mod).items():
            if isinstance(v, types.FunctionType) and v.__module__ == mod.__name__:
                copy = types.FunctionType(v.__code__, shared, v.__name__, v.__defaults__,
                                          v.__closure__)
                copy.__qualname__ = v.__qualname__
                copy.__module__ = v.__module__
                # the reference's helpers run per table of every plan with arrays in their
                # arguments, which each jitted call unpacks and reference-counts: compiled
                # inline at their call sites they cost a plan 30-35 % less (compile +3 s)
                inline = mod is reference and k not in ("evaluate_plan", "evaluate_plans")
                jitted[k] = _njit(copy, inline="always" if inline else "never")
    shared.update(jitted)
    return jitted


JIT = _jit_all()
evaluate_plan_jit = JIT["evaluate_plan"]
evaluate_plans_serial = JIT["evaluate_plans"]
N_RANK = D.N_RANK
DJOB_WORLD = D.DJOB_WORLD
CHUNK = 64


@_njit(parallel=True)
def _evaluate_batch(sys, job, tables, plans, out):
    n = plans.shape[0]
    world = int(job[DJOB_WORLD])
    n_chunks = (n + CHUNK - 1) // CHUNK
    for c in numba.prange(n_chunks):
        work = np.zeros((N_RANK, world + 1))
        hi = min(n, (c + 1) * CHUNK)
        for p in range(c * CHUNK, hi):
            evaluate_plan_jit(sys, job, tables, plans[p], work, out, p)
    return 0


def evaluate_plans(sys, job, tables, plans, out, work=None):
    """Cost ``plans`` (int32 ``(n, N_PLAN, T)``) into ``out`` (``(N_DOUT, n)``). With ``work``
    (or a single plan) the serial kernel runs and ``work`` keeps the last plan's ranks."""
    if work is not None or plans.shape[0] <= CHUNK:
        if work is None:
            work = np.zeros((N_RANK, int(job[DJOB_WORLD]) + 1))
        evaluate_plans_serial(sys, job, tables, plans, work, out)
    else:
        _evaluate_batch(sys, job, tables, plans, out)
    return out
