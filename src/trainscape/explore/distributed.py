"""Sweeps on a Dask cluster: the index range of a design space cut into chunks, each chunk run by
the native sweep kernel on a Dask worker and reduced there to a :class:`~.reduce.Reduced` (top-K,
Pareto front, best per placement order, counters), the partial reductions merged on the client
as they come back.

Why the answer does not depend on the cluster: a reduction is a deterministic set whatever the
split of the index range (ties are broken by the configuration's global index, see
:mod:`.reduce`), so merging chunks in whatever order they finish -- on one worker or twenty, with
a worker killed and its chunks recomputed elsewhere, or with the client killed and the sweep
resumed from its checkpoint -- ends with the reduction of the single-machine sweep, bit for bit.
The top-K rows are then costed once on the client, as :func:`.sweep.run_sweep` does.

Checkpoint: an ``.npz`` written atomically (at most every ``checkpoint_every_s`` and at the
end or on an interruption) with the sweep's fingerprint, the finished index ranges (disjoint,
sorted; chunks finish out of order) and the merged reduction of exactly those ranges. A resumed
sweep runs only the ranges not finished. The chunk size is free to change between runs.

Dask is an optional extra (``pip install 'trainscape[dask]'``); nothing here imports it at
module level, and every entry point without it raises a :class:`ScenarioError` on ``--dask``
that says how to install it.
"""

from __future__ import annotations

import hashlib
import os
import time
import uuid
from pathlib import Path

import numpy as np

from .reduce import Reduced, WorkerState
from .results import SweepInterrupted, SweepResult, fingerprint, objective_column
from .sweep import _finish, _Progress, _python_range, prepare_sweep, sweep_backend

#: What ``--dask`` says when Dask is not installed.
INSTALL_HINT = "pip install 'trainscape[dask]' (or: pip install 'dask[distributed]')"
#: Chunk sizes (indices) the default picks from: at least this many ...
MIN_CHUNK = 1 << 14
#: ... and at most this many (about 0.3 s of one core with the C kernel).
MAX_CHUNK = 1 << 22
#: Default chunks per worker thread (load balance, and how much a lost worker costs).
CHUNKS_PER_THREAD = 16
CHECKPOINT_KIND = "trainscape-dask-sweep-1"


class DistributedSweepError(RuntimeError):
    """A chunk could not be finished on the cluster (e.g. it killed every worker that ran it);
    the checkpoint holds every finished chunk."""


def _err(problem: str, got=None, allowed: str | None = None, show_got: bool = True):
    from ..spec.errors import ScenarioError

    return ScenarioError.at("--dask", problem, got, allowed, show_got=show_got)


def dask_available() -> bool:
    try:
        import distributed  # noqa: F401
    except ImportError:
        return False
    return True


def require_dask() -> None:
    """ScenarioError (exit 2 on the command line) when ``dask.distributed`` is missing."""
    if not dask_available():
        raise _err(f"needs the optional Dask extra, which is not installed; install it with "
                   f"{INSTALL_HINT}", show_got=False)


# ---------------------------------------------------------------------------------------------
# Connecting
# ---------------------------------------------------------------------------------------------


class Cluster:
    """A connected ``distributed.Client`` (and the LocalCluster it started, for ``"local"``);
    a context manager that closes what it started."""

    def __init__(self, address: str, *, workers: int | None = None,
                 threads_per_worker: int = 1, processes: bool = True, timeout_s: float = 20.0):
        require_dask()
        import logging

        from distributed import Client, LocalCluster

        self.address = address
        self.cluster = None
        if address == "local":
            n = int(workers or max(1, os.cpu_count() or 1))
            with _workers_ignore_ctrl_c():
                self.cluster = LocalCluster(n_workers=n, threads_per_worker=threads_per_worker,
                                            processes=processes, dashboard_address=":0",
                                            silence_logs=logging.ERROR)
            self.client = Client(self.cluster, set_as_default=False)
        else:
            if not isinstance(address, str) or not address.strip():
                raise _err("must be a scheduler address (tcp://host:8786) or 'local'", address)
            try:
                self.client = Client(address, timeout=timeout_s, set_as_default=False)
            except (OSError, TimeoutError, ValueError) as exc:
                raise _err(f"cannot reach a Dask scheduler there ({type(exc).__name__}: "
                           f"{exc})".rstrip(), address,
                           "a running scheduler's address, e.g. tcp://host:8786, or 'local'"
                           ) from None
            except Exception as exc:  # noqa: BLE001 -- any connection failure, one line
                raise _err(f"cannot connect ({type(exc).__name__}: {exc})", address) from None

    def threads(self) -> int:
        """Worker threads on the cluster now (at least 1: the scheduler may have none yet)."""
        info = self.client.scheduler_info(n_workers=-1) if _takes_n_workers(self.client) \
            else self.client.scheduler_info()
        return max(1, sum(int(w.get("nthreads", 1)) for w in info.get("workers", {}).values()))

    def close(self) -> None:
        self.client.close()
        if self.cluster is not None:
            self.cluster.close()

    def __enter__(self) -> Cluster:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


class _workers_ignore_ctrl_c:
    """Start LocalCluster worker processes with SIGINT ignored (they inherit it): Ctrl-C in a
    terminal reaches the whole process group, and the client -- not its workers -- should
    handle it (save the checkpoint, close the cluster, one line)."""

    def __enter__(self):
        import signal
        import threading

        self.old = None
        if threading.current_thread() is threading.main_thread():
            self.old = signal.signal(signal.SIGINT, signal.SIG_IGN)

    def __exit__(self, *exc):
        import signal

        if self.old is not None:
            signal.signal(signal.SIGINT, self.old)


def _takes_n_workers(client) -> bool:
    import inspect

    return "n_workers" in inspect.signature(client.scheduler_info).parameters


# ---------------------------------------------------------------------------------------------
# The task a worker runs
# ---------------------------------------------------------------------------------------------


def compat() -> tuple:
    """What client and workers must share for their numbers to agree: the package version and
    the packed layout (config and output columns, block sizes)."""
    import trainscape
    from .. import layout as L

    return (trainscape.__version__, tuple(L.CONFIG_FIELDS), tuple(L.OUTPUT_FIELDS),
            L.N_SYS, L.N_MODEL, L.N_JOB)


def _check_compat(client_compat: tuple) -> None:
    mine = compat()
    if tuple(client_compat) != mine:
        raise RuntimeError(f"this Dask worker runs trainscape {mine[0]} with another layout or "
                           f"version than the client ({client_compat[0]}); install the same "
                           "trainscape on the client and every worker")


def space_digest(space) -> str:
    """A digest of everything the sweep kernel reads of a design space."""
    h = hashlib.sha256()
    for a in (space.core, space.mask, space.cum, space.order_off, space.order_cnt,
              space.order_flat, space.recompute, space.zero, space.dp_overlap):
        a = np.ascontiguousarray(a)
        h.update(f"{a.dtype.str}{a.shape}".encode())
        h.update(a.tobytes())
    return h.hexdigest()


def _payload(scenario, axes, digest: str, blocks, client_compat):
    """A task whose result is the sweep's inputs ``(space, blocks)``: the space is rebuilt on
    the worker from the scenario and its axes (a few kB travel, not the space's table, up to
    tens of MB) and checked against the client's digest. Workers fetch the result once, and
    the scheduler can recompute it should every worker holding it die."""
    from ..space import design_space

    _check_compat(client_compat)
    space = design_space(scenario, axes)
    if space_digest(space) != digest:
        raise RuntimeError("the design space rebuilt on a Dask worker differs from the "
                           "client's; install the same trainscape on the client and every "
                           "worker")
    return space, blocks


def sweep_chunk(start: int, stop: int, *, payload, obj_col: int, sign: float, k: int,
                backend: str, threads: int) -> tuple[Reduced, float]:
    """Reduce ``[start, stop)`` with the sweep kernel ``backend`` on ``threads`` threads;
    returns the reduction and the CPU seconds of the calling thread (the whole kernel's when
    ``threads`` is 1: one thread runs it inline)."""
    t0 = time.thread_time()
    part = _reduce_chunk(start, stop, payload, obj_col, sign, k, backend, threads)
    return part, time.thread_time() - t0


def _reduce_chunk(start, stop, payload, obj_col, sign, k, backend, threads) -> Reduced:
    space, blocks = payload
    if backend == "python":
        return _python_range(space, blocks, start, stop, obj_col, sign, k)
    if backend == "c":
        from ..native import sweep as kernel_c

        if not kernel_c.available():
            raise RuntimeError("the C sweep kernel is not available on this Dask worker "
                               f"({kernel_c.why_not()}); run with --backend numba or build "
                               "trainscape's extension on the workers")
        run_range = kernel_c.run_range
    else:
        from .kernel_numba import run_range
    state = WorkerState(threads, k)
    while not run_range(space, blocks, start, stop, obj_col, sign, state):
        state = WorkerState(threads, k, cap=state.cap * 4)  # a front buffer overflowed
    return state.reduced()


# ---------------------------------------------------------------------------------------------
# Index ranges and checkpoints
# ---------------------------------------------------------------------------------------------


def add_range(ranges: list[tuple[int, int]], start: int, stop: int) -> list[tuple[int, int]]:
    """``ranges`` (sorted, disjoint) with ``[start, stop)`` added, adjacent ranges joined."""
    out: list[tuple[int, int]] = []
    for a, b in sorted([*ranges, (start, stop)]):
        if out and a <= out[-1][1]:
            if a < out[-1][1]:
                raise ValueError(f"index range [{a}, {b}) overlaps a finished one")
            out[-1] = (out[-1][0], max(out[-1][1], b))
        else:
            out.append((a, b))
    return out


def missing_ranges(done: list[tuple[int, int]], limit: int) -> list[tuple[int, int]]:
    """The parts of ``[0, limit)`` not in ``done``."""
    out, at = [], 0
    for a, b in done:
        if a > at:
            out.append((at, min(a, limit)))
        at = max(at, b)
        if at >= limit:
            break
    if at < limit:
        out.append((at, limit))
    return [(a, b) for a, b in out if a < b]


def split(ranges: list[tuple[int, int]], chunk: int) -> list[tuple[int, int]]:
    """Cut ranges into chunks of at most ``chunk`` indices."""
    return [(s, min(b, s + chunk)) for a, b in ranges for s in range(a, b, chunk)]


def default_chunk(remaining: int, threads: int) -> int:
    want = -(-remaining // max(1, threads * CHUNKS_PER_THREAD))
    return int(min(MAX_CHUNK, max(MIN_CHUNK, want)))


def default_checkpoint(fp: str) -> Path:
    return Path(".trainscape") / f"sweep-{fp}-dask.npz"


def save_checkpoint(path: Path, fp: str, ranges: list[tuple[int, int]], red: Reduced) -> None:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "wb") as f:
        np.savez(f, kind=np.array(CHECKPOINT_KIND), fingerprint=np.array(fp),
                 ranges=np.array(ranges, np.int64).reshape(-1, 2), **red.to_arrays())
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def load_checkpoint(path: Path, fp: str) -> tuple[list[tuple[int, int]], Reduced]:
    from ..spec.errors import ScenarioError

    try:
        with np.load(path, allow_pickle=False) as z:
            if "kind" not in z or str(z["kind"]) != CHECKPOINT_KIND:
                raise ScenarioError.at("--resume", "not a checkpoint of a Dask sweep", str(path),
                                       "the checkpoint a --dask sweep wrote")
            if str(z["fingerprint"]) != fp:
                raise ScenarioError.at("--resume", "the checkpoint belongs to a different sweep "
                                       "(scenario, space, objective or --top changed)", str(path),
                                       "run without --resume to start afresh")
            ranges = [(int(a), int(b)) for a, b in np.asarray(z["ranges"]).reshape(-1, 2)]
            return ranges, Reduced.from_arrays(z)
    except (OSError, KeyError, ValueError) as exc:
        raise ScenarioError.at("--resume", f"cannot read the checkpoint: {exc}", str(path)
                               ) from None


# ---------------------------------------------------------------------------------------------
# The distributed sweep
# ---------------------------------------------------------------------------------------------


def run_dask_sweep(scenario, *, dask: str | Cluster = "local", space=None, top: int = 10,
                   objective: str = "step_time_s", backend: str | None = None,
                   chunk: int | None = None, threads_per_task: int = 1,
                   checkpoint: str | Path | None = None, resume: bool = False,
                   progress: bool = False, limit: int | None = None,
                   stop_after_chunks: int | None = None, checkpoint_every_s: float = 1.0,
                   on_chunk=None, local_workers: int | None = None) -> SweepResult:
    """Sweep ``scenario``'s design space (or ``space``) on a Dask cluster; the same
    :class:`SweepResult` as :func:`.sweep.run_sweep`.

    ``dask``: a scheduler address, ``"local"`` (a LocalCluster of ``local_workers`` processes,
    default one per core, started and closed here) or a connected :class:`Cluster`. ``space``
    must be ``design_space(scenario, axes)`` for some axes (the workers rebuild it so).
    ``chunk``: indices per task (default: the remaining range over 16 tasks per worker thread,
    2^14..2^22); ``threads_per_task``: kernel threads in one task (default 1: a worker runs
    one task per thread). ``checkpoint`` / ``resume``: as :func:`run_sweep`, with the finished
    ranges. ``limit``: sweep only ``[0, limit)`` (benches; the result is then incomplete).
    ``stop_after_chunks``: stop as if interrupted once this many chunks are merged (tests).
    ``on_chunk(chunks_merged, cluster)``: called after each merged chunk (tests).
    """
    require_dask()
    col, obj_col, sign, space, blocks, name = prepare_sweep(scenario, space, top, objective,
                                                            backend)
    fp = fingerprint(scenario, space, col, top)
    ck = Path(checkpoint) if checkpoint is not None else None

    ranges: list[tuple[int, int]] = []
    red = Reduced.empty()
    if resume:
        ck = ck or default_checkpoint(fp)
        if ck.exists():
            ranges, red = load_checkpoint(ck, fp)
    size = space.size
    stop_at = size if limit is None else min(size, int(limit))
    todo = missing_ranges(ranges, stop_at)
    done_before = sum(b - a for a, b in ranges)
    evaluated0 = red.evaluated

    own = not isinstance(dask, Cluster)
    cl = Cluster(dask, workers=local_workers) if own else dask
    bar = None
    stats: dict = {}
    try:
        threads = cl.threads()
        step = int(chunk or default_chunk(sum(b - a for a, b in todo), threads))
        chunks = split(todo, step)
        bar = _Progress(progress, size, done_before)
        t0 = time.perf_counter()
        payload = (scenario, space.axes, space_digest(space), blocks)
        ranges, red, interrupted = _drive(cl, chunks, payload, ranges, red,
                                          (obj_col, sign, top, name, int(threads_per_task)),
                                          fp, ck, bar, stop_after_chunks, checkpoint_every_s,
                                          on_chunk, stats)
        elapsed = time.perf_counter() - t0
    finally:
        if bar is not None:
            bar.close()
        if own:
            cl.close()
    done = sum(b - a for a, b in ranges)
    if interrupted:
        raise SweepInterrupted(done, size, ck)
    res = _finish(scenario, space, blocks, red, col, obj_col, sign, name, threads, elapsed,
                  ranges == [(0, size)], evaluated0)
    res.resumed_from = evaluated0
    res.extra.update({"dask": cl.address if own else dask.address, "chunks": len(chunks),
                      "chunk": step, "worker_threads": threads, "resumed_at_index": done_before,
                      "task_cpu_s": stats.get("task_cpu_s", 0.0)})
    return res


def _drive(cl: Cluster, chunks, payload, ranges, red, args, fp, ck, bar, stop_after,
           checkpoint_every_s, on_chunk, stats):
    """Submit every chunk, merge results as they finish; returns ``(ranges, red,
    interrupted)``. Saves the checkpoint on the way, on an interruption and at the end.
    ``stats["task_cpu_s"]``: CPU seconds the merged chunks took on the workers."""
    from distributed import as_completed

    client = cl.client
    obj_col, sign, k, name, threads = args
    token = uuid.uuid4().hex[:12]
    pay = client.submit(_payload, *payload, compat(), key=f"trainscape-payload-{token}")
    futs = client.map(sweep_chunk, [a for a, _ in chunks], [b for _, b in chunks],
                      payload=pay, obj_col=obj_col, sign=sign, k=k, backend=name,
                      threads=threads, key=[f"trainscape-chunk-{token}-{a}-{b}"
                                            for a, b in chunks])
    # key -> (start, stop, future) of every chunk not merged yet
    where = {f.key: (a, b, f) for f, (a, b) in zip(futs, chunks)}
    del futs
    merged = 0
    stats["task_cpu_s"] = 0.0
    changed = False
    last_ck = time.perf_counter()
    interrupted = False
    pending = as_completed([f for _, _, f in where.values()], loop=client.loop)
    try:
        for fut in pending:
            try:
                part, cpu_s = fut.result()
            except Exception as exc:  # noqa: BLE001 -- a task failed: stop, keep what is done
                a, b, _ = where[fut.key]
                raise DistributedSweepError(
                    f"chunk [{a:,}, {b:,}) failed on the cluster ({type(exc).__name__}: "
                    f"{exc})" + (f"; finished chunks are in {ck}, resume with --resume"
                                 if ck else "")) from None
            a, b, _ = where.pop(fut.key)
            del fut
            red = red.merge(part, k)
            stats["task_cpu_s"] += cpu_s
            ranges = add_range(ranges, a, b)
            merged += 1
            changed = True
            bar.update(sum(y - x for x, y in ranges))
            if on_chunk is not None:
                on_chunk(merged, cl)
            now = time.perf_counter()
            if ck is not None and now - last_ck >= checkpoint_every_s:
                save_checkpoint(ck, fp, ranges, red)
                last_ck, changed = now, False
            if stop_after is not None and merged >= stop_after:
                interrupted = True
                break
    except KeyboardInterrupt:
        interrupted = True
    finally:
        client.cancel([f for _, _, f in where.values()] + [pay], force=True)
        if ck is not None and changed:
            save_checkpoint(ck, fp, ranges, red)
    return ranges, red, interrupted


# ---------------------------------------------------------------------------------------------
# Search and explore on the cluster
# ---------------------------------------------------------------------------------------------


def _open(dask, local_workers=None) -> tuple[Cluster, bool]:
    if isinstance(dask, Cluster):
        return dask, False
    return Cluster(dask, workers=local_workers), True


def _remote(fn, client_compat, args, kw, payload=None):
    _check_compat(client_compat)
    if payload is not None:
        kw = {**kw, "space": payload[0]}
    return fn(*args, **kw)


def _gather(cl: Cluster, calls: list[tuple], scenario=None, space=None) -> list:
    """Run ``(fn, args, kwargs)`` calls as tasks on the cluster, results in order. With
    ``space``, each call also gets ``space=`` the space rebuilt on the workers (as a sweep's
    chunks do, see :func:`_payload`)."""
    from ..spec.pack import pack

    client = cl.client
    token = uuid.uuid4().hex[:12]
    pay = None
    if space is not None:
        pay = client.submit(_payload, scenario, space.axes, space_digest(space), pack(scenario),
                            compat(), key=f"trainscape-payload-{token}")
    futs = [client.submit(_remote, fn, compat(), args, kw, payload=pay,
                          key=f"trainscape-{fn.__name__}-{token}-{j}")
            for j, (fn, args, kw) in enumerate(calls)]
    try:
        return client.gather(futs)
    except Exception as exc:  # noqa: BLE001 -- a task failed on the cluster
        from ..spec.errors import ScenarioError

        if isinstance(exc, ScenarioError):
            raise
        raise DistributedSweepError(f"a task failed on the cluster ({type(exc).__name__}: "
                                    f"{exc})") from None
    finally:
        client.cancel(futs + ([pay] if pay is not None else []), force=True)


def run_dask_search(scenario, method: str = "evolve", *, dask: str | Cluster = "local",
                    local_workers: int | None = None, **kw) -> SweepResult:
    """:func:`.search.run_search` run as one task on a cluster worker: a search is sequential
    (each generation or level depends on the last), so its answer for a seed is the local one;
    the cluster takes the work off the client, it does not split one search."""
    from ..space import design_space
    from .search import run_search

    require_dask()
    space = kw.pop("space", None) or design_space(scenario)
    space.check_nonempty()
    cl, own = _open(dask, local_workers)
    try:
        t0 = time.perf_counter()
        (res,) = _gather(cl, [(run_search, (scenario, method), kw)], scenario, space)
        res.extra["dask"] = cl.address
        res.extra["wall_s"] = time.perf_counter() - t0
        return res
    finally:
        if own:
            cl.close()


def run_dask_explore(scenario, *, dask: str | Cluster = "local", time_budget_s: float = 20.0,
                     top: int = 10, objective: str = "step_time_s", seed: int = 0,
                     backend: str | None = None, budget: int | None = None,
                     progress: bool = False, local_workers: int | None = None) -> SweepResult:
    """:func:`.main.run_explore` on a cluster: sweep on the cluster when the space fits the
    time budget at the cluster's worker threads (:data:`.main.RATE_PER_CORE` each), else run the
    evolutionary and the beam search as two concurrent tasks and merge them (the local
    explore's answer: each search is reproducible for its seed)."""
    from ..space import design_space
    from .main import RATE_PER_CORE, merge_results
    from .search import default_budget, run_beam, run_evolve

    require_dask()
    space = design_space(scenario)
    space.check_nonempty()
    name = sweep_backend(backend)
    cl, own = _open(dask, local_workers)
    try:
        threads = cl.threads()
        if space.size / (RATE_PER_CORE[name] * threads) <= time_budget_s:
            res = run_dask_sweep(scenario, dask=cl, space=space, top=top, objective=objective,
                                 backend=name, progress=progress)
            res.extra["mode"] = "sweep"
            return res
        t0 = time.perf_counter()
        b = budget or default_budget(space.size)
        kw = dict(budget=b, seed=seed, top=top, objective=objective)
        ev, bm = _gather(cl, [(run_evolve, (scenario,), kw), (run_beam, (scenario,), kw)],
                         scenario, space)
        res = merge_results(ev, bm, top)
        res.elapsed_s = time.perf_counter() - t0
        res.extra.update({"mode": "search", "dask": cl.address})
        return res
    finally:
        if own:
            cl.close()


# ---------------------------------------------------------------------------------------------
# Command-line entry points (trainscape.cli.explore prints their errors as one line)
# ---------------------------------------------------------------------------------------------


def run_cli_sweep(dask: str, scenario, *, space, top, objective, backend, threads, checkpoint,
                  resume, progress) -> SweepResult:
    """``trainscape sweep --dask``: checkpoint by default in
    ``.trainscape/sweep-<fingerprint>-dask.npz``."""
    col = objective_column(objective)[0]
    ck = checkpoint or default_checkpoint(fingerprint(scenario, space, col, top))
    return run_dask_sweep(scenario, dask=dask, space=space, top=top, objective=objective,
                          backend=backend, threads_per_task=threads or 1, checkpoint=ck,
                          resume=resume, progress=progress)


def run_cli_search(dask: str, scenario, method: str, **kw) -> SweepResult:
    return run_dask_search(scenario, method, dask=dask, **kw)


def run_cli_explore(scenario, *, dask: str, **kw) -> SweepResult:
    return run_dask_explore(scenario, dask=dask, **kw)


__all__ = ["Cluster", "DistributedSweepError", "INSTALL_HINT", "dask_available",
           "require_dask", "run_dask_explore", "run_dask_search", "run_dask_sweep",
           "sweep_chunk"]
