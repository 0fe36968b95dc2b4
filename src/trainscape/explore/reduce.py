"""Top-K and Pareto reductions: the per-worker state of a sweep and how states merge.

Both reductions are *deterministic sets*, whatever the split of the index range over workers
and chunks, because ties are broken by the configuration's global index:

* top-K keeps the K smallest ``(key, index)`` pairs (``key`` = the objective, negated when it
  is maximized);
* the Pareto front (minimize step time and memory per GPU) keeps every point not *beaten*
  by another: ``a`` beats ``b`` when ``a.step <= b.step`` and ``a.mem <= b.mem`` and
  (``a.step < b.step`` or ``a.mem < b.mem`` or ``a.index < b.index``). A front is stored
  sorted by step time, strictly increasing, with memory strictly decreasing.

So merging is associative and commutative, and a resumed sweep ends with exactly the result of
an uninterrupted one.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .. import layout as L

INF = np.inf


def topk_merge(keys: np.ndarray, idx: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """The ``k`` smallest ``(key, index)`` pairs, sorted; non-finite keys are dropped."""
    keys = np.asarray(keys, dtype=np.float64).ravel()
    idx = np.asarray(idx, dtype=np.int64).ravel()
    ok = np.isfinite(keys) & (idx >= 0)
    keys, idx = keys[ok], idx[ok]
    order = np.lexsort((idx, keys))[:k]
    return keys[order], idx[order]


def pareto_merge(step: np.ndarray, mem: np.ndarray, idx: np.ndarray
                 ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The Pareto front (see module doc) of the given points, sorted by step time."""
    step = np.asarray(step, dtype=np.float64).ravel()
    mem = np.asarray(mem, dtype=np.float64).ravel()
    idx = np.asarray(idx, dtype=np.int64).ravel()
    ok = np.isfinite(step) & np.isfinite(mem) & (idx >= 0)
    step, mem, idx = step[ok], mem[ok], idx[ok]
    order = np.lexsort((idx, mem, step))
    keep = []
    best_mem = INF
    for j in order:
        if mem[j] < best_mem:
            keep.append(j)
            best_mem = mem[j]
    keep = np.array(keep, dtype=np.int64)
    return step[keep], mem[keep], idx[keep]


def pareto_brute(step, mem, idx) -> set[int]:
    """Indices on the front by the O(n^2) definition (for tests)."""
    out = set()
    for a in range(len(idx)):
        beaten = False
        for b in range(len(idx)):
            if a == b:
                continue
            if (step[b] <= step[a] and mem[b] <= mem[a]
                    and (step[b] < step[a] or mem[b] < mem[a] or idx[b] < idx[a])):
                beaten = True
                break
        if not beaten:
            out.add(int(idx[a]))
    return out


#: Per-worker counters (columns of ``SweepState.stats``).
ST_EVALUATED, ST_OK, ST_OOM, ST_INVALID, ST_MIN_MEM = range(5)
N_STATS = 5


@dataclass
class Reduced:
    """A merged sweep reduction (what a checkpoint holds, what the sweep returns)."""

    topk_key: np.ndarray
    topk_idx: np.ndarray
    front_step: np.ndarray
    front_mem: np.ndarray
    front_idx: np.ndarray
    order_key: np.ndarray  # (N_ORDERS,) best key per placement order (inf when none)
    order_idx: np.ndarray  # (N_ORDERS,) its index (-1)
    evaluated: int = 0
    ok: int = 0
    oom: int = 0
    invalid: int = 0
    min_mem: float = INF  # smallest memory of a valid configuration (GiB)

    @classmethod
    def empty(cls) -> Reduced:
        return cls(np.zeros(0), np.zeros(0, np.int64), np.zeros(0), np.zeros(0),
                   np.zeros(0, np.int64), np.full(L.N_ORDERS, INF),
                   np.full(L.N_ORDERS, -1, np.int64))

    def merge(self, other: Reduced, k: int) -> Reduced:
        tk, ti = topk_merge(np.concatenate([self.topk_key, other.topk_key]),
                            np.concatenate([self.topk_idx, other.topk_idx]), k)
        fs, fm, fi = pareto_merge(np.concatenate([self.front_step, other.front_step]),
                                  np.concatenate([self.front_mem, other.front_mem]),
                                  np.concatenate([self.front_idx, other.front_idx]))
        ok_ = np.stack([self.order_key, other.order_key])
        oi = np.stack([self.order_idx, other.order_idx])
        # best per order: smaller key, then smaller index
        better = (other.order_key < self.order_key) | (
            (other.order_key == self.order_key) & (other.order_idx >= 0)
            & ((self.order_idx < 0) | (other.order_idx < self.order_idx)))
        okey = np.where(better, ok_[1], ok_[0])
        oidx = np.where(better, oi[1], oi[0])
        return Reduced(tk, ti, fs, fm, fi, okey, oidx,
                       self.evaluated + other.evaluated, self.ok + other.ok,
                       self.oom + other.oom, self.invalid + other.invalid,
                       min(self.min_mem, other.min_mem))

    def to_arrays(self) -> dict[str, np.ndarray]:
        return {
            "topk_key": self.topk_key, "topk_idx": self.topk_idx,
            "front_step": self.front_step, "front_mem": self.front_mem,
            "front_idx": self.front_idx, "order_key": self.order_key,
            "order_idx": self.order_idx,
            "counts": np.array([self.evaluated, self.ok, self.oom, self.invalid], np.int64),
            "min_mem": np.array([self.min_mem]),
        }

    @classmethod
    def from_arrays(cls, a) -> Reduced:
        c = a["counts"]
        return cls(np.asarray(a["topk_key"]), np.asarray(a["topk_idx"]),
                   np.asarray(a["front_step"]), np.asarray(a["front_mem"]),
                   np.asarray(a["front_idx"]), np.asarray(a["order_key"]),
                   np.asarray(a["order_idx"]), int(c[0]), int(c[1]), int(c[2]), int(c[3]),
                   float(a["min_mem"][0]))


class WorkerState:
    """Fixed-size per-worker buffers the sweep kernels update in place (no allocation per
    configuration): top-K slots, a Pareto front of capacity ``cap``, best per order, counters.
    """

    def __init__(self, workers: int, k: int, cap: int = 4096):
        self.workers, self.k, self.cap = workers, k, cap
        self.topk_key = np.full((workers, k), INF)
        self.topk_idx = np.full((workers, k), -1, dtype=np.int64)
        self.front_step = np.zeros((workers, cap))
        self.front_mem = np.zeros((workers, cap))
        self.front_idx = np.zeros((workers, cap), dtype=np.int64)
        self.front_n = np.zeros(workers, dtype=np.int64)
        self.order_key = np.full((workers, L.N_ORDERS), INF)
        self.order_idx = np.full((workers, L.N_ORDERS), -1, dtype=np.int64)
        self.stats = np.zeros((workers, N_STATS))
        self.stats[:, ST_MIN_MEM] = INF

    def reduced(self) -> Reduced:
        """Merge every worker's buffers into one :class:`Reduced`."""
        tk, ti = topk_merge(self.topk_key, self.topk_idx, self.k)
        steps = [self.front_step[w, : self.front_n[w]] for w in range(self.workers)]
        mems = [self.front_mem[w, : self.front_n[w]] for w in range(self.workers)]
        ids = [self.front_idx[w, : self.front_n[w]] for w in range(self.workers)]
        fs, fm, fi = pareto_merge(np.concatenate(steps), np.concatenate(mems),
                                  np.concatenate(ids))
        out = Reduced(tk, ti, fs, fm, fi, self.order_key[0].copy(), self.order_idx[0].copy(),
                      int(self.stats[0, ST_EVALUATED]), int(self.stats[0, ST_OK]),
                      int(self.stats[0, ST_OOM]), int(self.stats[0, ST_INVALID]),
                      float(self.stats[0, ST_MIN_MEM]))
        for w in range(1, self.workers):
            one = Reduced(np.zeros(0), np.zeros(0, np.int64), np.zeros(0), np.zeros(0),
                          np.zeros(0, np.int64), self.order_key[w], self.order_idx[w],
                          int(self.stats[w, ST_EVALUATED]), int(self.stats[w, ST_OK]),
                          int(self.stats[w, ST_OOM]), int(self.stats[w, ST_INVALID]),
                          float(self.stats[w, ST_MIN_MEM]))
            out = out.merge(one, self.k)
        return out

    def reset(self) -> None:
        self.__init__(self.workers, self.k, self.cap)
