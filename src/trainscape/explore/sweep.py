"""Exhaustive sweep: every configuration of a design space, reduced to top-K, the Pareto front
(step time vs memory per GPU) and the best per placement order, in flat memory.

The index range ``[0, space.size)`` is cut into chunks; each chunk runs in a sweep kernel
(C ``ts_sweep_range`` when the native library has it, else the numba twin) split over every
core, each worker reducing into its own fixed buffers. After every chunk the finished range
and the merged reduction can be checkpointed (atomically), so a sweep stopped by Ctrl-C or a
kill resumes where the last checkpoint ends: finished ranges are never redone and none is lost.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

import numpy as np

from .. import layout as L
from .reduce import Reduced, WorkerState, pareto_merge, topk_merge
from .results import (  # noqa: F401  (also importable from here, as before)
    CHECKPOINT_VERSION, OBJECTIVE_ALIASES, OBJECTIVES, Rows, SweepInterrupted, SweepResult,
    default_checkpoint, evaluate_indices, fingerprint, load_checkpoint, objective_column,
    save_checkpoint,
)

def sweep_backend(backend: str | None) -> str:
    """``"c"`` when the native library has the sweep kernel, else ``"numba"``; ``"python"``
    runs the brute-force reference sweep (small spaces, tests)."""
    if backend == "python":
        return "python"
    if backend in (None, "c"):
        from ..native import sweep as kernel_c

        if kernel_c.available():
            return "c"
        if backend == "c":
            from ..spec.errors import ScenarioError

            raise ScenarioError.at("--backend", "the C sweep kernel is not available",
                                   "c", f"numba, python ({kernel_c.why_not()})")
    return "numba"


def default_workers() -> int:
    return max(1, os.cpu_count() or 1)


# ---------------------------------------------------------------------------------------------
# Results
# ---------------------------------------------------------------------------------------------


# ---------------------------------------------------------------------------------------------
# The sweep
# ---------------------------------------------------------------------------------------------


class _Progress:
    """A rich progress bar on stderr: configs done / total, configs/s, time left."""

    def __init__(self, enabled: bool, total: int, done: int):
        self.enabled = enabled
        self.t0 = time.perf_counter()
        self.done0 = done
        if not enabled:
            return
        from rich.console import Console
        from rich.progress import (BarColumn, Progress, TextColumn, TimeElapsedColumn,
                                   TimeRemainingColumn)

        self.bar = Progress(
            TextColumn("sweep"), BarColumn(),
            TextColumn("{task.completed:,.0f}/{task.total:,.0f} configs"),
            TextColumn("{task.fields[rate]}"), TimeElapsedColumn(), TextColumn("left"),
            TimeRemainingColumn(), console=Console(stderr=True), transient=False,
        )
        self.bar.start()
        self.task = self.bar.add_task("sweep", total=total, completed=done, rate="")

    def update(self, done: int) -> None:
        if not self.enabled:
            return
        dt = time.perf_counter() - self.t0
        rate = (done - self.done0) / dt if dt > 0 else 0.0
        self.bar.update(self.task, completed=done, rate=f"{_si(rate)} configs/s")

    def close(self) -> None:
        if self.enabled:
            self.bar.stop()


def _si(x: float) -> str:
    for unit, scale in (("G", 1e9), ("M", 1e6), ("k", 1e3)):
        if x >= scale:
            return f"{x / scale:.2f}{unit}"
    return f"{x:.0f}"


def _python_range(space, blocks, start, stop, obj_col, sign, k) -> Reduced:
    """Brute-force reference reduction of one range (the pure-Python model)."""
    from ..model.reference import evaluate_batch

    cfg = space.enumerate(start, stop)
    out = evaluate_batch(*blocks, cfg)
    idx = np.arange(start, stop, dtype=np.int64)
    return reduce_columns(idx, cfg, out, obj_col, sign, k)


def reduce_columns(idx, cfg, out, obj_col, sign, k) -> Reduced:
    """A :class:`Reduced` of evaluated columns (numpy, no kernel)."""
    status = out[L.OUT_STATUS]
    valid = (status == L.STATUS_OK) | (status == L.STATUS_OUT_OF_MEMORY)
    feas = out[L.OUT_FEASIBLE] == 1.0
    key = sign * out[obj_col]
    tk, ti = topk_merge(key[feas], idx[feas], k)
    fs, fm, fi = pareto_merge(out[L.OUT_STEP_TIME_S][feas], out[L.OUT_MEMORY_GIB][feas], idx[feas])
    okey = np.full(L.N_ORDERS, np.inf)
    oidx = np.full(L.N_ORDERS, -1, np.int64)
    orders = cfg[L.CFG_ORDER]
    for o in np.unique(orders[feas]):
        sel = feas & (orders == o)
        kk, ii = topk_merge(key[sel], idx[sel], 1)
        okey[o], oidx[o] = kk[0], ii[0]
    return Reduced(tk, ti, fs, fm, fi, okey, oidx, int(idx.size), int(feas.sum()),
                   int((valid & ~feas).sum()), int((~valid).sum()),
                   float(out[L.OUT_MEMORY_GIB][valid].min()) if valid.any() else np.inf)


def prepare_sweep(scenario, space, top, objective: str, backend: str | None):
    """What every sweep runner checks and builds first: ``(objective column, its OUT_* index,
    its sign, the design space (non-empty), the packed blocks, the kernel backend)``;
    ScenarioError for a bad ``top`` or objective, or an empty space."""
    from ..space import design_space
    from ..spec.errors import ScenarioError
    from ..spec.pack import pack

    if not isinstance(top, int) or top < 1:
        raise ScenarioError.at("--top", "must be a positive integer", top, ">= 1")
    col, obj_col, sign = objective_column(objective)
    if space is None:
        space = design_space(scenario)
    space.check_nonempty()
    return col, obj_col, sign, space, pack(scenario), sweep_backend(backend)


def run_sweep(scenario, *, space=None, top: int = 10, objective: str = "step_time_s",
              backend: str | None = None, workers: int | None = None,
              checkpoint: str | Path | None = None, resume: bool = False,
              progress: bool = False, chunk: int | None = None,
              stop_after: int | None = None, checkpoint_every_s: float = 1.0) -> SweepResult:
    """Sweep every configuration of ``scenario``'s design space (or ``space``).

    ``top``: K; ``objective``: a result column (``OBJECTIVES``); ``backend``: ``"c"``,
    ``"numba"`` or ``"python"`` (None: C when available); ``workers``: threads (all cores);
    ``checkpoint``: file written after chunks (atomically) with the finished range and the
    merged reduction; ``resume``: continue from it. ``stop_after``: stop (as if interrupted)
    once this many indices are done (tests, benches). Raises ScenarioError on an empty space.
    """
    col, obj_col, sign, space, blocks, name = prepare_sweep(scenario, space, top, objective,
                                                            backend)
    workers = int(workers or default_workers())
    fp = fingerprint(scenario, space, col, top)
    ck = Path(checkpoint) if checkpoint is not None else None

    done = 0
    red = Reduced.empty()
    if resume:
        if ck is None:
            ck = default_checkpoint(fp)
        if ck.exists():
            done, red = load_checkpoint(ck, fp)
    resumed_from = done
    evaluated0 = red.evaluated
    size = space.size
    limit = size if stop_after is None else min(size, int(stop_after))

    if name == "numba":
        from .kernel_numba import run_range
    elif name == "c":
        from ..native.sweep import run_range
    state = WorkerState(workers, top) if name != "python" else None

    step = chunk or (4096 * workers if name == "python" else 1 << 16)
    bar = _Progress(progress, size, done)
    t0 = time.perf_counter()
    last_ck = t0
    interrupted = False
    try:
        while done < limit:
            stop = min(limit, done + step)
            tc = time.perf_counter()
            if name == "python":
                part = _python_range(space, blocks, done, stop, obj_col, sign, top)
            else:
                state.reset()
                while not run_range(space, blocks, done, stop, obj_col, sign, state):
                    state = WorkerState(workers, top, cap=state.cap * 4)  # front overflowed
                part = state.reduced()
            red = red.merge(part, top)
            done = stop
            dt = time.perf_counter() - tc
            if chunk is None and name != "python" and dt < 0.25:
                step = min(step * 2, 1 << 26)
            bar.update(done)
            now = time.perf_counter()
            if ck is not None and (now - last_ck >= checkpoint_every_s or done == size):
                save_checkpoint(ck, fp, done, red)
                last_ck = now
    except KeyboardInterrupt:
        interrupted = True
    finally:
        bar.close()
        if ck is not None and done > resumed_from:
            save_checkpoint(ck, fp, done, red)
    elapsed = time.perf_counter() - t0
    if interrupted:
        raise SweepInterrupted(done, size, ck)

    res = _finish(scenario, space, blocks, red, col, obj_col, sign, name, workers, elapsed,
                  done == size, evaluated0)
    res.resumed_from = evaluated0
    res.extra["resumed_at_index"] = resumed_from
    return res


def _finish(scenario, space, blocks, red: Reduced, col, obj_col, sign, backend, workers,
            elapsed, complete, evaluated0) -> SweepResult:
    ev_backend = "python" if backend == "python" else None
    top = evaluate_indices(space, blocks, red.topk_idx, ev_backend)
    front = evaluate_indices(space, blocks, red.front_idx, ev_backend)
    have = red.order_idx >= 0
    oi = red.order_idx[have]
    ok = red.order_key[have]
    order = np.lexsort((oi, ok))
    by_order = evaluate_indices(space, blocks, oi[order], ev_backend)
    hbm = None
    return SweepResult(
        scenario_name=scenario.name, objective=col, space_size=space.size, top=top,
        front=front, by_order=by_order, evaluated=red.evaluated, feasible=red.ok,
        out_of_memory=red.oom, invalid=red.invalid, min_memory_gib=red.min_mem,
        elapsed_s=elapsed, backend=backend, workers=workers, complete=complete,
        extra={"hbm": hbm},
    )


__all__ = ["OBJECTIVES", "Rows", "SweepInterrupted", "SweepResult", "evaluate_indices",
           "objective_column", "reduce_columns", "run_sweep"]
