"""Per-table estimates the planner and its bounds share: state bytes, estimated cost when
table-wise (TorchRec perf estimator), and the HBM per rank left for table shards."""

from __future__ import annotations

import numpy as np

from .. import layout as L
from ..model.network import tier_link_bandwidth
from . import layout as D
from .reference import (
    dense_memory_bytes,
    shard_lookup_bytes,
    lookup_seconds_per_byte,
    shard_state_bytes,
)
from .spec import DlrmScenario


def _cols(sc):
    t = sc.tables
    return t[D.TAB_ROWS], t[D.TAB_DIM], t[D.TAB_POOLING], t[D.TAB_HIT_RATE]


def table_state(sc: DlrmScenario) -> np.ndarray:
    rows, dim, _, _ = _cols(sc)
    j = sc.job
    # the reference's arithmetic on whole columns (the same operations per element)
    return np.asarray(shard_state_bytes(np.asarray(rows, float), np.asarray(dim, float),
                                        j[D.DJOB_EMB_BYTES], j[D.DJOB_OPT_ROW_BYTES],
                                        j[D.DJOB_OPT_ELEM_BYTES]), float).reshape(-1)


def _cross_bw(sc):
    n_t = int(sc.sys[L.SYS_N_TIERS])
    return tier_link_bandwidth(sc.sys, 1 if n_t > 1 and sc.world > sc.node_size else 0)


def table_cost(sc: DlrmScenario, tier: int = D.MT_HBM) -> np.ndarray:
    """Estimated seconds a table adds to its owner when table-wise: lookups forward and
    backward (TorchRec perf estimator) plus its pooled / index traffic over the network."""
    rows, dim, pool, hit = _cols(sc)
    j, w = sc.job, sc.world
    b = j[D.DJOB_GLOBAL_BATCH]
    out = np.empty(sc.n_tables)
    bw = _cross_bw(sc)
    memo = {}  # once per distinct (pooling, dim, hit rate)
    for i in range(sc.n_tables):
        key = (pool[i], dim[i], hit[i])
        if key not in memo:
            spb = lookup_seconds_per_byte(sc.sys, j, tier, hit[i])
            fwd = shard_lookup_bytes(b * pool[i], dim[i], j[D.DJOB_EMB_BYTES],
                                     j[D.DJOB_INDEX_BYTES], b, j[D.DJOB_COMM_FWD_BYTES]) * spb
            comm = b * (dim[i] * (j[D.DJOB_COMM_FWD_BYTES] + j[D.DJOB_COMM_BWD_BYTES])
                        + pool[i] * j[D.DJOB_INDEX_BYTES]) * (w - 1) / w / bw
            memo[key] = fwd * (1.0 + j[D.DJOB_BWD_MULTIPLIER]) + comm
        out[i] = memo[key]
    return out


def hbm_budget(sc: DlrmScenario) -> float:
    """HBM per rank left for table shards (usable minus the dense part and local buffers)."""
    usable = sc.sys[L.SYS_HBM_BYTES] - sc.sys[L.SYS_HBM_RESERVE_BYTES]
    _, dim, pool, _ = _cols(sc)
    j = sc.job
    local = j[D.DJOB_GLOBAL_BATCH] / sc.world
    uni = 2.0 * local * (dim.sum() * j[D.DJOB_COMM_FWD_BYTES] + pool.sum() * j[D.DJOB_INDEX_BYTES])
    return 0.95 * (usable - dense_memory_bytes(j) - uni)


