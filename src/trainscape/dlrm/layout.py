"""The DLRM packed layout: table columns, plan columns, job block, per-rank rows, result columns.

Declared once here, the way :mod:`trainscape.layout` does for the LLM side; the C header
``csrc/dlrm.h`` repeats the enums and ``tests/test_dlrm_layout.py`` proves the two agree.

The DLRM kernels take:

- ``sys``: the LLM system block of :mod:`trainscape.layout` (``SYS_*`` scalars, network tiers),
  so collectives over tiers are costed by the very same functions;
- ``job``: a flat float64 block of ``DJOB_FIELDS``;
- ``tables``: float64 ``(N_TAB, T)``, one column per table;
- ``plans``: int32 ``(n_plans, N_PLAN, T)``, one ``(N_PLAN, T)`` plan per batch entry;
- ``work``: float64 ``(N_RANK, W + 1)`` per-rank scratch (also the per-rank load after a call);
- ``out``: float64 ``(N_DOUT, n_plans)`` result columns.
"""

from __future__ import annotations

from ..layout import STATUS  # noqa: F401  (status codes are shared with the LLM side)

#: Sharding types (values stored in the ``kind`` plan column).
SHARDING = ("table_wise", "row_wise", "column_wise", "table_row_wise", "data_parallel",
            "grid_shard")
#: Where a table (shard) lives and the embedding kernel that serves it (TorchRec
#: ``EmbeddingComputeKernel``): ``hbm`` (FUSED), ``uvm_cache`` (FUSED_UVM_CACHING: rows in host
#: DDR, a cache of a fraction of them in HBM, lookups hit it with the table's hit rate),
#: ``ddr`` (FUSED_UVM), ``dense`` (DENSE: in HBM, unfused kernel), ``key_value`` (KEY_VALUE:
#: rows and optimizer state in an SSD / key-value store, a cache in HBM; with a declared SSD
#: and ``prefetch_depth`` >= 1 the misses are prefetched from the SSD, see
#: :func:`trainscape.dlrm.reference.ssd_fetch_seconds`).
MEMORY_TIERS = ("hbm", "uvm_cache", "ddr", "dense", "key_value")
OPTIMIZERS = ("rowwise_adagrad", "adam", "sgd")
INTERACTIONS = ("dot", "dcn")
#: Bytes per element of each dtype name.
DTYPE_BYTES = {"fp32": 4, "fp16": 2, "bf16": 2, "fp8": 1, "int8": 1}

TABLE_FIELDS = (
    "rows",
    "dim",
    "pooling",  # lookups per sample (multi-hot size)
    "hit_rate",  # UVM cache hit rate used when the table sits in the uvm_cache tier
)

PLAN_FIELDS = (
    "kind",  # index into SHARDING
    "shards",  # column shards k (column_wise); 1 otherwise
    "rank",  # table_wise: the rank; column_wise: rank of shard 0; table_row_wise: a rank of the node
    "stride",  # column_wise: shard j lives on (rank + j*stride) mod W
    "tier",  # index into MEMORY_TIERS
    "group",  # table_row_wise / grid_shard: ranks per row group (0: the node); divides W
)

DJOB_FIELDS = (
    "world",  # ranks W
    "global_batch",  # samples per step B
    "emb_bytes",  # bytes per embedding element as stored
    "index_bytes",  # bytes per sparse index (8: int64, TorchRec BIGINT_DTYPE)
    "comm_fwd_bytes",  # bytes per pooled-embedding element on the wire, forward
    "comm_bwd_bytes",  # bytes per gradient element on the wire, backward
    "grad_comm_bytes",  # bytes per element of dense / data-parallel gradient all-reduce
    "opt_row_bytes",  # optimizer state bytes per table row (row-wise Adagrad: 4)
    "opt_elem_bytes",  # optimizer state bytes per table element (Adam: 2 x fp32 moments)
    "lookup_efficiency",  # fraction of HBM bandwidth reached by embedding gathers
    "h2d_bandwidth",  # host-to-device bytes/s per GPU (DDR / UVM tier lookups)
    "ddr_bytes",  # host DDR capacity per GPU
    "uvm_cache_fraction",  # fraction of a uvm_cache table's rows cached in HBM
    "bwd_multiplier",  # backward lookup + fused update cost relative to forward
    "dp_update_factor",  # data-parallel table update cost factor (elementwise kernels)
    "dense_params",  # dense (MLP, DCN) parameters
    "dense_flops_per_sample",  # forward FLOPs of the dense part per sample
    "dense_act_bytes_per_sample",  # activation bytes kept per sample for the backward
    "dense_efficiency",  # fraction of peak FLOP/s reached by the dense part
    "dense_state_bytes",  # bytes per dense parameter: weight + gradient + optimizer state
    "ssd_bytes",  # SSD capacity per GPU for the key_value tier (0: no SSD declared)
    "ssd_bandwidth",  # SSD read/write bytes/s per GPU (key_value misses and evictions)
    "prefetch_depth",  # batches the key_value misses are prefetched ahead (0: no pipeline)
)

#: Per-rank rows of the work array (length W + 1; the prefix rows use all W + 1 entries).
RANK_FIELDS = (
    "lookup_fwd_s",  # forward lookup time of the rank (table-, column-, table-row-wise part)
    "lookup_bwd_s",  # backward lookup + fused optimizer time of the rank
    "own_dim0",  # pooled dims this rank sends to peers in its node (table-/column-wise)
    "own_dim",  # pooled dims this rank sends across nodes (+ table-row-wise dim / L)
    "own_idx",  # lookups per sample this rank receives indices for
    "hbm_bytes",
    "ddr_bytes",
    "twrw_dim",  # table-row-wise pooled dims of the rank's node (intra-node reduce-scatter)
    "grp_rs_s",  # reduce-scatters of row groups other than the node (one per table), seconds
    "grp_ag_s",  # their backward all-gathers, seconds
    "ssd_bytes",  # key_value rows + optimizer state on the rank's SSD
    "ssd_fetch_s",  # SSD time per step of the rank's key_value misses (read + write-back)
    "pre_dim0",  # prefix sums of own_dim0 (entry r = sum over ranks < r)
    "pre_dim",
    "pre_idx",
    "a2a_s",  # the rank's own all-to-all time (idx + fwd + bwd), for reports
    "x_pool",  # busiest tier of the rank in the pooled all-to-all, seconds per unit byte
    "x_idx",  # the same for the index all-to-all
)

DOUT_FIELDS = (
    "status",  # index into trainscape.layout.STATUS
    "feasible",
    "step_time_s",
    "samples_per_s",
    "idx_a2a_s",  # input-index all-to-all
    "lookup_fwd_s",  # busiest rank's forward lookups
    "a2a_fwd_s",  # pooled-embedding all-to-all
    "rs_fwd_s",  # row-wise + table-row-wise reduce-scatter
    "dense_fwd_s",
    "dense_bwd_s",
    "a2a_bwd_s",  # gradient all-to-all
    "ag_bwd_s",  # row-wise + table-row-wise all-gather of gradients
    "lookup_bwd_s",  # busiest rank's backward lookups + fused optimizer
    "dp_allreduce_s",  # data-parallel table gradients
    "dense_allreduce_exposed_s",  # dense all-reduce not hidden behind the embedding backward
    "dense_allreduce_s",  # dense all-reduce, total (not part of the sum)
    "hbm_max_gib",
    "ddr_max_gib",
    "critical_rank",  # rank with the largest lookup + all-to-all time
    "ssd_prefetch_exposed_s",  # SSD fetch not hidden behind the dense compute (prefetch)
    "ssd_fetch_s",  # busiest rank's SSD fetch time per step (not part of the sum)
    "ssd_max_gib",
)
#: Breakdown columns; their sum is ``step_time_s``.
DBREAKDOWN_FIELDS = (
    "idx_a2a_s",
    "lookup_fwd_s",
    "a2a_fwd_s",
    "rs_fwd_s",
    "dense_fwd_s",
    "dense_bwd_s",
    "a2a_bwd_s",
    "ag_bwd_s",
    "lookup_bwd_s",
    "dp_allreduce_s",
    "dense_allreduce_exposed_s",
    "ssd_prefetch_exposed_s",
)

N_TAB = len(TABLE_FIELDS)
N_PLAN = len(PLAN_FIELDS)
N_DJOB = len(DJOB_FIELDS)
N_RANK = len(RANK_FIELDS)
N_DOUT = len(DOUT_FIELDS)
N_MT = len(MEMORY_TIERS)

# Written out so readers, linters and numba see plain ints.
SH_TW, SH_RW, SH_CW, SH_TWRW, SH_DP, SH_GRID = range(len(SHARDING))
MT_HBM, MT_UVM, MT_DDR, MT_DENSE, MT_KV = range(len(MEMORY_TIERS))
OPT_ROWWISE_ADAGRAD, OPT_ADAM, OPT_SGD = range(len(OPTIMIZERS))
TAB_ROWS, TAB_DIM, TAB_POOLING, TAB_HIT_RATE = range(N_TAB)
PL_KIND, PL_SHARDS, PL_RANK, PL_STRIDE, PL_TIER, PL_GROUP = range(N_PLAN)
DJOB_WORLD, DJOB_GLOBAL_BATCH, DJOB_EMB_BYTES, DJOB_INDEX_BYTES, DJOB_COMM_FWD_BYTES, \
    DJOB_COMM_BWD_BYTES, DJOB_GRAD_COMM_BYTES, DJOB_OPT_ROW_BYTES, DJOB_OPT_ELEM_BYTES, \
    DJOB_LOOKUP_EFFICIENCY, DJOB_H2D_BANDWIDTH, DJOB_DDR_BYTES, DJOB_UVM_CACHE_FRACTION, \
    DJOB_BWD_MULTIPLIER, DJOB_DP_UPDATE_FACTOR, DJOB_DENSE_PARAMS, \
    DJOB_DENSE_FLOPS_PER_SAMPLE, DJOB_DENSE_ACT_BYTES_PER_SAMPLE, DJOB_DENSE_EFFICIENCY, \
    DJOB_DENSE_STATE_BYTES, DJOB_SSD_BYTES, DJOB_SSD_BANDWIDTH, DJOB_PREFETCH_DEPTH = range(N_DJOB)
RK_LOOKUP_FWD_S, RK_LOOKUP_BWD_S, RK_OWN_DIM0, RK_OWN_DIM, RK_OWN_IDX, RK_HBM_BYTES, \
    RK_DDR_BYTES, RK_TWRW_DIM, RK_GRP_RS_S, RK_GRP_AG_S, RK_SSD_BYTES, RK_SSD_FETCH_S, RK_PRE_DIM0, RK_PRE_DIM, RK_PRE_IDX, RK_A2A_S, RK_X_POOL, \
    RK_X_IDX = range(N_RANK)
DO_STATUS, DO_FEASIBLE, DO_STEP_TIME_S, DO_SAMPLES_PER_S, DO_IDX_A2A_S, DO_LOOKUP_FWD_S, \
    DO_A2A_FWD_S, DO_RS_FWD_S, DO_DENSE_FWD_S, DO_DENSE_BWD_S, DO_A2A_BWD_S, DO_AG_BWD_S, \
    DO_LOOKUP_BWD_S, DO_DP_ALLREDUCE_S, DO_DENSE_ALLREDUCE_EXPOSED_S, DO_DENSE_ALLREDUCE_S, \
    DO_HBM_MAX_GIB, DO_DDR_MAX_GIB, DO_CRITICAL_RANK, DO_SSD_PREFETCH_EXPOSED_S, DO_SSD_FETCH_S, \
    DO_SSD_MAX_GIB = range(N_DOUT)

#: (python name, field tuple, C prefix) of every enumerated list, for the header agreement test.
GROUPS = (
    ("SHARDING", SHARDING, "DL_SH_"),
    ("MEMORY_TIERS", MEMORY_TIERS, "DL_MT_"),
    ("TABLE_FIELDS", TABLE_FIELDS, "DL_TAB_"),
    ("PLAN_FIELDS", PLAN_FIELDS, "DL_PL_"),
    ("DJOB_FIELDS", DJOB_FIELDS, "DL_DJOB_"),
    ("RANK_FIELDS", RANK_FIELDS, "DL_RK_"),
    ("DOUT_FIELDS", DOUT_FIELDS, "DL_DO_"),
)


def c_name(prefix: str, field: str) -> str:
    """The C enum member for a field: ``("DL_SH_", "table_wise") -> "DL_SH_TABLE_WISE"``."""
    return prefix + field.upper().replace("-", "_")
