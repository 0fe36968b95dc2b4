"""Canonical forms of equivalent layouts: settings that change nothing where a parallel
dimension is absent, collapsed so a design space holds each distinct layout once (and top-K
lists, Pareto fronts and searches never show the same layout twice).

Each rule follows from the cost model (:mod:`trainscape.model.llm`,
:mod:`trainscape.model.pipeline`), and ``tests/test_canonical.py`` checks on the example
scenarios that the configurations a rule collapses cost exactly the same on every output:

* placement orders that differ only in where degree-1 dimensions sit
  (:mod:`trainscape.space.orders`);
* ``sp`` and ``tp_overlap`` at ``tp = 1`` (:func:`trainscape.space.design.design_space`);
* ``selective`` recomputation with FlashAttention, which never stores the scores it drops
  (Korthikanti et al. 2022 §5), unless the job adds recompute modules
  (:func:`trainscape.space.design.selective_is_none`);
* without a pipeline (``pp = 1``): the schedule and ``vpp`` -- no bubble, one microbatch in
  flight, no stage-to-stage transfer, every layer on the one stage
  (:func:`~trainscape.model.pipeline.bubble_time`,
  :func:`~trainscape.model.pipeline.inflight_activations_rank`,
  :func:`~trainscape.model.pipeline.p2p_critical_transfers`,
  :func:`~trainscape.model.pipeline.pipeline_stage_layers` all return their ``p == 1``
  value) -- except DualPipe, which keeps two parameter copies whatever ``p``
  (:func:`~trainscape.model.pipeline.parameter_copies`): :func:`collapse_core_rows` keeps
  one row per class, 1F1B when the space lists it, else the schedule listed first in
  :data:`trainscape.layout.SCHEDULES` order, with its smallest ``vpp``;
* without a data-parallel group (``cp * dp = 1``): the ZeRO stage and ``dp_overlap`` -- the
  ZeRO shards are over ``cp * dp`` (dense) and ``cp * dp / ep`` (experts) ranks, so one rank
  holds everything, and every data-parallel collective spans one rank and costs 0
  (:func:`~trainscape.model.llm.stage_state_memory`, :func:`~trainscape.model.llm.finish_config`):
  :func:`single_rows` marks the rows that enumerate only the first listed value of each.
"""

from __future__ import annotations

import numpy as np

from .. import layout as L
from . import orders as O

# core table rows, in the order of design.CORE_FIELDS
_TP, _CP, _PP, _DP, _EP, _MBS, _VPP, _SCHEDULE, _SP, _TP_OVERLAP = range(10)


def schedule_class(schedule: np.ndarray, pp: np.ndarray) -> np.ndarray:
    """``int64``: ``-1`` where the schedule matters (``pp > 1``), else the class of schedules
    that cost the same at ``pp = 1`` (0: all but DualPipe; 1: DualPipe)."""
    schedule = np.asarray(schedule)
    pp = np.asarray(pp)
    cls = np.where(schedule == L.SCHED_DUALPIPE, 1, 0)
    return np.where(pp > 1, -1, cls).astype(np.int64)


def schedule_preference(schedule: np.ndarray, vpp: np.ndarray) -> np.ndarray:
    """Rank of a ``(schedule, vpp)`` pair as the canonical one of its class (smaller first):
    1F1B, then the schedules in ``layout.SCHEDULES`` order; the smallest ``vpp``."""
    schedule = np.asarray(schedule, dtype=np.int64)
    vpp = np.asarray(vpp, dtype=np.int64)
    first = np.where(schedule == L.SCHED_1F1B, -1, schedule) + 1
    return first * (int(vpp.max(initial=1)) + 1) + vpp


def collapse_core_rows(core: np.ndarray) -> tuple[np.ndarray, dict[tuple[int, ...], int]]:
    """Keep one row of every class of equivalent core rows (module doc: ``pp = 1`` schedules
    and ``vpp``), in the table's order. Returns the kept rows and, for every dropped row's
    core key (a tuple of its 10 values), the index of the kept row it equals."""
    n = core.shape[1]
    if n == 0:
        return core, {}
    cls = schedule_class(core[_SCHEDULE], core[_PP])
    pref = schedule_preference(core[_SCHEDULE], core[_VPP])
    pref = np.where(cls < 0, 0, pref)  # rows with a pipeline are their own class
    # the class key: every field but schedule and vpp, plus the class; with a pipeline the
    # schedule and vpp themselves
    sched_key = np.where(cls < 0, core[_SCHEDULE], -1 - cls)
    vpp_key = np.where(cls < 0, core[_VPP], 0)
    key = np.stack([core[_TP], core[_CP], core[_PP], core[_DP], core[_EP], core[_MBS],
                    vpp_key, sched_key, core[_SP], core[_TP_OVERLAP]]).astype(np.int64)
    order = np.lexsort((np.arange(n), pref, *key[::-1]))
    ks = key[:, order]
    new_group = np.ones(n, dtype=bool)
    new_group[1:] = (ks[:, 1:] != ks[:, :-1]).any(axis=0)
    group_first = order[np.maximum.accumulate(np.where(new_group, np.arange(n), 0))]
    keep = np.zeros(n, dtype=bool)
    keep[order[new_group]] = True
    kept_index = np.cumsum(keep) - 1
    alias: dict[tuple[int, ...], int] = {}
    for pos in np.flatnonzero(~new_group):
        j = int(order[pos])
        alias[tuple(int(v) for v in core[:, j])] = int(kept_index[group_first[pos]])
    return np.ascontiguousarray(core[:, keep]), alias


def single_rows(core: np.ndarray) -> np.ndarray:
    """``int32 (rows,)``: 1 where a core row has no data-parallel group (``cp * dp = 1``), so
    its ZeRO stage and ``dp_overlap`` change nothing (module doc)."""
    return ((core[_CP].astype(np.int64) * core[_DP]) == 1).astype(np.int32)


def canonical_config(cfg: np.ndarray, zero_first: int, dpo_first: int,
                     schedules: np.ndarray | None = None) -> np.ndarray:
    """Config columns ``int32 (N_CFG, n)`` with the collapsed settings of each column set to
    their canonical values: ``zero`` and ``dp_overlap`` to the given first listed values where
    ``cp * dp = 1``; at ``pp = 1`` the schedule to 1F1B (DualPipe kept) and ``vpp`` to 1 --
    the canonical pair when the space lists 1F1B (``schedules``: the listed codes; without
    1F1B the first listed of the class). For tests and for comparing layouts across spaces."""
    out = np.array(cfg, dtype=np.int32, copy=True)
    single = (out[L.CFG_CP].astype(np.int64) * out[L.CFG_DP]) == 1
    out[L.CFG_ZERO] = np.where(single, zero_first, out[L.CFG_ZERO])
    out[L.CFG_DP_OVERLAP] = np.where(single, dpo_first, out[L.CFG_DP_OVERLAP])
    cls = schedule_class(out[L.CFG_SCHEDULE], out[L.CFG_PP])
    listed = (np.arange(L.N_SCHEDULES) if schedules is None
              else np.unique(np.asarray(schedules)))
    cand = [s for s in listed if s != L.SCHED_DUALPIPE]
    canon = (L.SCHED_1F1B if L.SCHED_1F1B in cand
             else (min(cand) if cand else L.SCHED_1F1B))
    out[L.CFG_SCHEDULE] = np.where(cls == 0, canon, out[L.CFG_SCHEDULE])
    out[L.CFG_VPP] = np.where(cls >= 0, 1, out[L.CFG_VPP])
    for j in range(out.shape[1]):
        tp, cp, pp, dp, ep = (int(out[f, j]) for f in (L.CFG_TP, L.CFG_CP, L.CFG_PP,
                                                         L.CFG_DP, L.CFG_EP))
        mask = O.degree_mask(tp, cp, ep, dp // ep if ep and dp % ep == 0 else dp, pp)
        out[L.CFG_ORDER, j] = O.canonical_order(int(out[L.CFG_ORDER, j]), mask)
    return out


__all__ = ["canonical_config", "collapse_core_rows", "schedule_class", "schedule_preference",
           "single_rows"]
