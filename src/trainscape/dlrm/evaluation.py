"""Costing DLRM sharding plans on a chosen backend: ``"c"`` (cffi extension
``trainscape.native._dlrm``), ``"numba"`` (the reference compiled), ``"python"`` (the
reference itself); ``None`` picks C when built, else numba."""

from __future__ import annotations

import numpy as np

from . import layout
from .spec import DlrmScenario

BACKENDS = ("c", "numba", "python")


def new_work(world: int) -> np.ndarray:
    """Per-rank scratch for one evaluation (float64 ``(N_RANK, W + 1)``)."""
    return np.zeros((layout.N_RANK, world + 1))


def as_plans(plans, n_tables: int) -> np.ndarray:
    """int32 C-contiguous ``(n, N_PLAN, T)`` from one plan or a batch."""
    arr = np.ascontiguousarray(plans, dtype=np.int32)
    if arr.ndim == 2:
        arr = arr[None]
    if arr.ndim != 3 or arr.shape[1] != layout.N_PLAN or arr.shape[2] != n_tables:
        raise ValueError(f"plans: wrong shape {arr.shape} (allowed: (n, {layout.N_PLAN}, "
                         f"{n_tables}) or ({layout.N_PLAN}, {n_tables}))")
    return arr


def native_available() -> bool:
    try:
        from ..native import dlrm as native

        native.load()
        return True
    except ImportError:
        return False


def evaluate_plans(scenario: DlrmScenario, plans, backend: str | None = None,
                   threads: int = 0, work: np.ndarray | None = None) -> np.ndarray:
    """Cost a batch of plans; returns float64 ``(N_DOUT, n)`` (rows named in
    ``layout.DOUT_FIELDS``). ``work`` (``(N_RANK, W + 1)``), when given, holds the per-rank
    accumulators of the last plan afterwards."""
    plans = as_plans(plans, scenario.n_tables)
    n = plans.shape[0]
    out = np.zeros((layout.N_DOUT, n))
    if backend is None:
        backend = "c" if native_available() else "numba"
    if backend not in BACKENDS:
        raise ValueError(f"backend: unknown {backend!r} (allowed: {', '.join(BACKENDS)})")
    if work is None:
        work = new_work(scenario.world)
    if backend == "python":
        from .reference import evaluate_plans as ref

        ref(scenario.sys, scenario.job, scenario.tables, plans, work, out)
    elif backend == "numba":
        from .numba_kernel import evaluate_plans as nb

        nb(scenario.sys, scenario.job, scenario.tables, plans, out, work)
    else:
        from ..native import dlrm as native

        native.evaluate_plans(scenario.sys, scenario.job, scenario.tables, plans, out,
                              threads=threads, work=work)
    return out


def evaluate(scenario: DlrmScenario, plan, backend: str | None = "python") -> dict:
    """One plan, as a dict of named results plus per-rank rows."""
    work = new_work(scenario.world)
    out = evaluate_plans(scenario, plan, backend=backend, work=work)
    res = {f: float(out[i, 0]) for i, f in enumerate(layout.DOUT_FIELDS)}
    res["status"] = layout.STATUS[int(res["status"])]
    res["feasible"] = bool(res["feasible"])
    res["per_rank"] = {f: work[i, : scenario.world].copy()
                       for i, f in enumerate(layout.RANK_FIELDS) if not f.startswith("pre_")}
    return res
