"""The scheduler query: the best feasible layout of a scenario for an allocation of GPUs.

:func:`best_for_allocation` builds the candidate set for the GPU count -- every combination of
the scenario's ``[space]`` axes (or the default axes) whose tp x cp x pp x dp is the GPU count
and that passes the model's checks: :func:`trainscape.space.design_space` -- and returns the
one with the best objective that fits in memory (ties: the first in enumeration order, as
``trainscape sweep``). With the C extension the whole query runs in one kernel call
(``ts_llm_best``, ``csrc/best.c``, one thread); ``backend="numba"`` or ``"python"`` builds the
space in Python and sweeps it with that backend (same answer, slower).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from .. import layout as L


def _err(path: str, problem: str, got: Any = None, allowed: str | None = None):
    from ..spec.errors import ScenarioError

    return ScenarioError.at(path, problem, got, allowed, show_got=got is not None)


@dataclass(frozen=True)
class BestLayout:
    """The answer of :func:`best_for_allocation`."""

    gpus: int
    objective: str  # the result column ranked (``step_time_s``, ``tokens_per_s`` ...)
    config: dict  # user-facing config values (order as a short string)
    column: tuple  # the packed config column (``layout.CONFIG_FIELDS`` order, int codes)
    result: Any  # trainscape.Result of the winner
    candidates: int  # valid, distinct configurations in the candidate set


def _check_gpus(gpus) -> int:
    if isinstance(gpus, bool) or not isinstance(gpus, (int, np.integer)) or gpus < 1:
        raise _err("gpus", "expected a positive integer", gpus, "an integer >= 1")
    if gpus > 2**31 - 1:
        raise _err("gpus", "too many GPUs", int(gpus), "at most 2**31 - 1")
    return int(gpus)


def _check_sites(sites, gpus: int) -> None:
    """Per-site GPU counts: validated, and accepted only when the model can cost them (one
    site). The network model places a job on one uniform hierarchy (``cluster.tiers``): an
    uneven or multi-site split is not something it prices, so it is refused, not ignored."""
    if sites is None:
        return
    if isinstance(sites, (str, bytes, Mapping)) or not isinstance(sites, Sequence) or not sites:
        raise _err("sites", "expected a non-empty list of per-site GPU counts", sites,
                   "a list of positive integers")
    for i, n in enumerate(sites):
        if isinstance(n, bool) or not isinstance(n, (int, np.integer)) or n < 1:
            raise _err(f"sites[{i}]", "expected a positive GPU count", n, "an integer >= 1")
    if sum(int(n) for n in sites) != gpus:
        raise _err("sites", f"the per-site counts add up to {sum(int(n) for n in sites)}, "
                   f"not gpus = {gpus}", list(sites), f"counts summing to {gpus}")
    if len(sites) > 1:
        raise _err("sites", "per-site GPU counts are not modelled: the cost model places a job "
                   "on one uniform network hierarchy (cluster.tiers; model the sites as its "
                   "outermost tier and pass the total as gpus)", list(sites), "one site")


def _objective(objective: str) -> tuple[str, int, float]:
    from ..explore.results import objective_column

    try:
        return objective_column(objective)
    except Exception as exc:  # ScenarioError at "--objective": rename the path for the API
        raise _err("objective", "unknown objective", objective,
                   str(exc).split("allowed: ")[-1] if "allowed: " in str(exc) else None) from None


def _native():
    try:
        from ..native.llm import ffi, lib
    except ImportError:  # pragma: no cover
        return None, None
    if lib is None or not hasattr(lib, "ts_llm_best"):
        return None, None
    return ffi, lib


def native_best(sys: np.ndarray, mdl: np.ndarray, job: np.ndarray, space: np.ndarray,
                gpus: int, obj_col: int):
    """``ts_llm_best`` through the extension: ``(code, cfg int32 (N_CFG,), out (N_OUT,),
    stats int64 (5,))``; raises ImportError without the C extension."""
    ffi, lib = _native()
    if lib is None:
        raise ImportError("the C extension with ts_llm_best is not built")
    for name, block, n in (("system", sys, L.N_SYS), ("model", mdl, L.N_MODEL),
                           ("job", job, L.N_JOB)):
        if block.dtype != np.float64 or block.shape != (n,) or not block.flags.c_contiguous:
            raise ValueError(f"{name} block: expected contiguous float64 ({n},)")
    space = np.ascontiguousarray(space, dtype=np.int32)
    cfg = np.zeros(L.N_CFG, dtype=np.int32)
    out = np.zeros(L.N_OUT, dtype=np.float64)
    stats = np.zeros(int(lib.TS_BEST_N_STATS), dtype=np.int64)
    code = lib.ts_llm_best(ffi.from_buffer("double[]", sys), ffi.from_buffer("double[]", mdl),
                           ffi.from_buffer("double[]", job), ffi.from_buffer("int32_t[]", space),
                           int(space.size), int(gpus), int(obj_col),
                           ffi.from_buffer("int32_t[]", cfg, require_writable=True),
                           ffi.from_buffer("double[]", out, require_writable=True),
                           ffi.from_buffer("int64_t[]", stats, require_writable=True))
    return int(code), cfg, out, stats


def best_for_allocation(scenario, gpus: int, *, sites: Sequence[int] | None = None,
                        gpu_type: str | None = None, objective: str = "step_time",
                        constraints: Mapping[str, Any] | None = None,
                        backend: str | None = None) -> BestLayout:
    """The best feasible layout of ``scenario`` on ``gpus`` GPUs.

    ``scenario``: a Scenario, a path or a dict (as :func:`trainscape.load`). ``sites``:
    optional per-site GPU counts (validated; more than one site is refused: not modelled).
    ``gpu_type``: optional GPU preset name replacing ``cluster.gpu``. ``objective``:
    ``step_time`` (default), ``tokens_per_s``, ``mfu``, ``model_tflops_per_gpu`` or
    ``memory_gib`` (and the sweep's aliases). ``constraints``: axis -> allowed values,
    restricting the scenario's space (see
    :func:`trainscape.embed.space_vector.constrained_axes`). ``backend``: ``None``/``"c"``
    (one ``ts_llm_best`` call), ``"numba"`` or ``"python"`` (design_space + sweep).

    Raises :class:`~trainscape.ScenarioError` naming the argument for bad input, and at
    ``gpus`` when no candidate is feasible.
    """
    from ..api import load
    from ..spec.pack import pack
    from ..space import config_dict
    from .space_vector import constrained_axes, space_vector

    gpus = _check_gpus(gpus)
    _check_sites(sites, gpus)
    col, obj_col, _sign = _objective(objective)
    if backend not in (None, "c", "numba", "python"):
        raise _err("backend", "unknown backend", backend, "c, numba, python")
    if not hasattr(scenario, "raw_dump"):
        scenario = load(scenario if isinstance(scenario, Mapping) else Path(scenario))
    # the candidate axes come from the scenario as given (its [space], or default axes for its
    # own GPU count), so every allocation searches the same axes -- as the C library does
    capacity = int(scenario.cluster.capacity)
    if gpus > capacity:
        raise _err("gpus", f"more GPUs than the cluster's tiers hold ({capacity})", gpus,
                   f"at most {capacity}")
    axes = constrained_axes(scenario, constraints)
    overrides = [f"cluster.gpus={gpus}"]
    if gpu_type is not None:
        if not isinstance(gpu_type, str) or not gpu_type:
            raise _err("gpu_type", "expected a GPU preset name", gpu_type, "a string")
        overrides.append(f"cluster.gpu={gpu_type!r}".replace("'", '"'))
    data = scenario.raw_dump()
    data.pop("config", None)  # the allocation's layout is the answer, not an input
    sc = load(data, overrides)
    sys, mdl, job = pack(sc)

    ffi, lib = _native()
    if backend in (None, "c") and lib is not None:
        code, cfg, out, stats = native_best(sys, mdl, job, space_vector(axes), gpus, obj_col)
        if code < 0:
            from ..native.llm import raise_for_code

            if code <= -1000:
                raise_for_code(code, sys, mdl, job)
            raise RuntimeError(f"ts_llm_best failed with code {code}")
        candidates = int(stats[lib.TS_BEST_ST_CANDIDATES])
        if code == int(lib.TS_BEST_NONE):
            raise _no_feasible(gpus, candidates)
    else:
        if backend == "c":
            raise ImportError("backend 'c': the C extension with ts_llm_best is not built")
        from ..explore.sweep import run_sweep
        from ..space import design_space

        ds = design_space(sc, axes)
        if ds.size == 0:
            raise _no_feasible(gpus, 0)
        res = run_sweep(sc, space=ds, top=1, objective=col, backend=backend, workers=1)
        candidates = ds.size
        if len(res.top) == 0:
            raise _no_feasible(gpus, candidates)
        cfg, out = res.top.cfg[:, 0], res.top.out[:, 0]
    from ..api import Result

    config = config_dict(cfg)
    return BestLayout(gpus=gpus, objective=col, config=config,
                      column=tuple(int(v) for v in cfg),
                      result=Result.from_column(out, config, sc.name),
                      candidates=candidates)


def _no_feasible(gpus: int, candidates: int):
    if candidates == 0:
        why = "no candidate layout: no combination of the space's tp, cp, pp (and dp) values " \
              f"multiplies to {gpus} and passes the model's checks"
    else:
        why = (f"none of the {candidates:,} candidate layouts fits in GPU memory (or all are "
               "invalid); allow more memory savings (recompute full, zero 3, larger tp/pp)")
    return _err("gpus", f"no feasible layout for {gpus} GPUs: {why}", gpus,
                "a GPU count the scenario's space can lay the job out on")
