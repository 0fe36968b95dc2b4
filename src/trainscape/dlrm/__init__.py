"""Recommendation models (DLRM): embedding sharding cost model and planner.

Public interface::

    sc = trainscape.dlrm.load("examples/dlrm/criteo_1tb_64gpu.toml")
    out = trainscape.dlrm.evaluate_plans(sc, plans, backend="c")   # (N_DOUT, n) float64
    res = trainscape.dlrm.plan(sc, method="evolve")                 # planner result

``plans`` is int32 ``(n, N_PLAN, T)`` (or one ``(N_PLAN, T)`` plan); columns and fields are
declared in :mod:`trainscape.dlrm.layout`. Backends: ``"c"`` (cffi extension
``trainscape.native._dlrm``), ``"numba"`` (the reference compiled), ``"python"`` (the
reference itself); ``None`` picks C, else numba.
"""

from __future__ import annotations

from . import layout
from .evaluation import BACKENDS, as_plans, evaluate, evaluate_plans, native_available, new_work
from .spec import DlrmScenario, load, plan_entries, plan_from_entries


def plan(scenario: DlrmScenario, method: str = "evolve", **kw):
    """Plan the sharding (see :func:`trainscape.dlrm.planner.plan`)."""
    from .planner import plan as _plan

    return _plan(scenario, method=method, **kw)


__all__ = ["BACKENDS", "DlrmScenario", "as_plans", "evaluate", "evaluate_plans", "layout", "load",
           "native_available", "new_work", "plan", "plan_entries", "plan_from_entries"]
