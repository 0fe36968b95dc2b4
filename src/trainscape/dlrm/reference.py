"""DLRM step-time and memory model: the reference (the spec the C and numba kernels port).

A plan gives every embedding table a sharding type, its rank(s) and a memory tier. The step is

    idx_a2a + lookup_fwd + a2a_fwd + rs_fwd + dense_fwd + dense_bwd
            + [a2a_bwd + ag_bwd + lookup_bwd + dp_allreduce] + dense_allreduce_exposed
            + ssd_prefetch_exposed

(the bracket is the embedding backward; the dense all-reduce overlaps it). Sources:

- Naumov et al. 2019, "Deep Learning Recommendation Model for Personalization and
  Recommendation Systems" (arXiv 1906.00091) §3-4: embedding lookups with pooling, bottom/top
  MLP, model-parallel embeddings + data-parallel MLPs joined by a butterfly all-to-all.
- Mudigere et al., ISCA'22, "Software-Hardware Co-design for Fast and Scalable Training of Deep
  Learning Recommendation Models" (ZionEX) §4-5: table-wise / row-wise / column-wise /
  table-row-wise / data-parallel sharding, the forward pooled-embedding all-to-all and backward
  gradient all-to-all, row-wise reduce-scatter, hierarchical (intra-node then inter-node)
  table-row-wise form, embeddings in HBM / UVM (host DDR with an HBM cache), quantized
  (FP16/BF16) communication.
- TorchRec planner, ``torchrec/distributed/planner/shard_estimators.py`` (perf estimators:
  compute = (input read + embedding lookup + output write) / kernel bandwidth, backward =
  ``BWD_COMPUTE_MULTIPLIER`` (2) x forward, data-parallel update
  ``DP_ELEMENTWISE_KERNELS_PERF_FACTOR`` (9.22) x table size / bandwidth; storage estimator:
  table + optimizer state + I/O buffers) and ``planner/constants.py`` (``UVM_CACHING_RATIO``
  0.2, ``BIGINT_DTYPE`` 8).
- Kernel-true terms, also from TorchRec's planner (pytorch/torchrec a48cef7): the compute
  kernel's bandwidth (``constants.py`` ``kernel_bw_lookup``: FUSED = HBM, FUSED_UVM = host
  link / 10, FUSED_UVM_CACHING = mixed / 10), the block-usage penalty of table- and
  column-wise shards narrower than 128 columns and the 32-column minimum read
  (``shard_estimators.py`` ``EmbeddingPerfEstimator._get_tw_sharding_perf``), and the
  row-wise collectives as the RW sharder issues them -- one reduce-scatter / all-gather over
  the world carrying the full pooled output over the slowest link, plus the backward batched
  copy (``_get_rw_sharding_perf``, ``types.py`` ``BasicCommsBandwidths.get_bw``).

Network terms reuse :mod:`trainscape.model.network` / :mod:`trainscape.model.collectives`
(the LLM side's tiers). The all-to-alls are costed per rank: rank ``r`` lies in tier-``i``
domain ``floor(r / span_i)``; for each tier the bytes it sends and receives across that tier are
divided by the tier's link bandwidth; the busiest rank (send or receive) sets the time, plus
one latency of the outermost tier crossed -- for a perfectly balanced exchange this is exactly
``collectives.all_to_all_time``.

Plain scalar code (numba-compatible): the numba backend compiles these very functions.
"""

from __future__ import annotations

import math

from ..layout import (
    STATUS_BAD_INDEX,
    STATUS_INVALID_CONFIG,
    STATUS_OK,
    STATUS_OUT_OF_MEMORY,
    STATUS_OVERFLOW,
    SYS_HBM_BANDWIDTH,
    SYS_HBM_BYTES,
    SYS_HBM_RESERVE_BYTES,
    SYS_PEAK_FLOPS,
)
from ..model.collectives import all_gather_time, all_reduce_time, reduce_scatter_time
from ..model.network import group_top_tier, tier_latency, tier_link_bandwidth, tier_span
from .layout import (
    DJOB_BWD_MULTIPLIER,
    DJOB_COMM_BWD_BYTES,
    DJOB_COMM_FWD_BYTES,
    DJOB_DDR_BYTES,
    DJOB_DENSE_ACT_BYTES_PER_SAMPLE,
    DJOB_DENSE_EFFICIENCY,
    DJOB_DENSE_FLOPS_PER_SAMPLE,
    DJOB_DENSE_PARAMS,
    DJOB_DENSE_STATE_BYTES,
    DJOB_DP_UPDATE_FACTOR,
    DJOB_EMB_BYTES,
    DJOB_GLOBAL_BATCH,
    DJOB_GRAD_COMM_BYTES,
    DJOB_H2D_BANDWIDTH,
    DJOB_INDEX_BYTES,
    DJOB_LOOKUP_EFFICIENCY,
    DJOB_OPT_ELEM_BYTES,
    DJOB_OPT_ROW_BYTES,
    DJOB_PREFETCH_DEPTH,
    DJOB_SSD_BANDWIDTH,
    DJOB_SSD_BYTES,
    DJOB_UVM_CACHE_FRACTION,
    DJOB_WORLD,
    DO_A2A_BWD_S,
    DO_A2A_FWD_S,
    DO_AG_BWD_S,
    DO_CRITICAL_RANK,
    DO_DDR_MAX_GIB,
    DO_DENSE_ALLREDUCE_EXPOSED_S,
    DO_DENSE_ALLREDUCE_S,
    DO_DENSE_BWD_S,
    DO_DENSE_FWD_S,
    DO_DP_ALLREDUCE_S,
    DO_FEASIBLE,
    DO_HBM_MAX_GIB,
    DO_IDX_A2A_S,
    DO_LOOKUP_BWD_S,
    DO_LOOKUP_FWD_S,
    DO_RS_FWD_S,
    DO_SAMPLES_PER_S,
    DO_SSD_FETCH_S,
    DO_SSD_MAX_GIB,
    DO_SSD_PREFETCH_EXPOSED_S,
    DO_STATUS,
    DO_STEP_TIME_S,
    MT_DENSE,
    MT_HBM,
    MT_KV,
    MT_UVM,
    N_DOUT,
    N_PLAN,
    N_RANK,
    N_TAB,
    PL_GROUP,
    PL_KIND,
    PL_RANK,
    PL_SHARDS,
    PL_STRIDE,
    PL_TIER,
    RK_A2A_S,
    RK_X_IDX,
    RK_X_POOL,
    RK_DDR_BYTES,
    RK_GRP_AG_S,
    RK_GRP_RS_S,
    RK_HBM_BYTES,
    RK_LOOKUP_BWD_S,
    RK_LOOKUP_FWD_S,
    RK_OWN_DIM,
    RK_OWN_DIM0,
    RK_OWN_IDX,
    RK_PRE_DIM,
    RK_PRE_DIM0,
    RK_PRE_IDX,
    RK_SSD_BYTES,
    RK_SSD_FETCH_S,
    RK_TWRW_DIM,
    SH_CW,
    SH_GRID,
    SH_RW,
    SH_TW,
    SH_TWRW,
    TAB_DIM,
    TAB_HIT_RATE,
    TAB_POOLING,
    TAB_ROWS,
)

GIB = 1073741824.0
#: 2^53: every float64 of this magnitude or more is an integer (or inf / NaN)
MAX_EXACT_INT = 9007199254740992.0

# ---------------------------------------------------------------------------------------------
# Lookups and storage
# ---------------------------------------------------------------------------------------------


# TorchRec planner constants (``torchrec/distributed/planner/constants.py``, fetched at
# a48cef7, Oct 2025). FBGEMM's table-batched embedding kernel works on rows of 128 columns
# (32 threads x 4-vectors): a shard narrower than that leaves part of each block idle.
FULL_BLOCK_EMB_DIM = 128.0  # constants.py FULL_BLOCK_EMB_DIM
HALF_BLOCK_PENALTY = 1.15  # constants.py HALF_BLOCK_PENALTY (64 <= width < 128)
QUARTER_BLOCK_PENALTY = 1.75  # constants.py QUARTER_BLOCK_PENALTY (width < 64)
MIN_KERNEL_DIM = 32.0  # shard_estimators.py _get_tw_sharding_perf: max(emb_dim, 32) read
# kernel_bw_lookup (constants.py): the UVM kernels (FUSED_UVM, FUSED_UVM_CACHING) reach a
# tenth of the bandwidth they mix ("/ 10"): fine-grained gathers over the host link.
UVM_KERNEL_EFFICIENCY = 0.1
# kernel_bw_lookup: the unfused DENSE kernel reaches half the HBM bandwidth ("0.5 *
# hbm_mem_bw"); KEY_VALUE (SSD / DRAM virtual tables) runs at the host link ("hbm_to_ddr_mem_bw")
DENSE_KERNEL_EFFICIENCY = 0.5
# shard_estimators.py _get_rw_sharding_perf: backward of a row-wise (and table-row-wise)
# shard adds a batched copy of the gradient output, BATCHED_COPY_PERF_FACTOR x its bytes at
# the kernel's bandwidth (constants.py BATCHED_COPY_PERF_FACTOR, "empirical studies").
BATCHED_COPY_PERF_FACTOR = 2.455


def lookup_seconds_per_byte(sys, job, tier, hit_rate):
    """Seconds per byte of the embedding kernel for memory tier ``tier``: the reciprocal of
    TorchRec's ``kernel_bw_lookup`` (``planner/constants.py``) for the compute kernel the tier
    maps to.

    HBM (``FUSED``): HBM bandwidth x ``lookup_efficiency``. DDR (``FUSED_UVM``): the host link
    at ``UVM_KERNEL_EFFICIENCY`` (TorchRec: ``hbm_to_ddr_mem_bw / 10``). UVM cache
    (``FUSED_UVM_CACHING``): TorchRec's ``(caching_ratio * hbm + (1 - caching_ratio) *
    hbm_to_ddr) / 10``, with the table's cache hit rate as the ratio (TorchRec passes the cache
    load factor, which is the hit rate under uniform access). Dense (``DENSE``): half the
    fused kernel's bandwidth. Key-value (``KEY_VALUE``): the host link, not divided -- unless
    its misses are prefetched from a declared SSD (:func:`ssd_prefetch_pipelined`): then every
    lookup finds its row in the HBM cache and runs at the fused kernel's bandwidth, as
    TorchRec's ``kernel_bw_lookup`` does for a prefetch-pipelined caching kernel
    (``prefetch_pipeline`` -> the ``FUSED`` bandwidth), the SSD traffic being costed apart
    (:func:`ssd_fetch_seconds`).
    """
    hbm = sys[SYS_HBM_BANDWIDTH] * job[DJOB_LOOKUP_EFFICIENCY]
    h2d = job[DJOB_H2D_BANDWIDTH]
    if tier == MT_HBM:
        return 1.0 / hbm
    if tier == MT_KV and ssd_prefetch_pipelined(job):
        return 1.0 / hbm
    if tier == MT_UVM:
        return 1.0 / ((hit_rate * hbm + (1.0 - hit_rate) * h2d) * UVM_KERNEL_EFFICIENCY)
    if tier == MT_DENSE:
        return 1.0 / (hbm * DENSE_KERNEL_EFFICIENCY)
    if tier == MT_KV:
        return 1.0 / h2d
    return 1.0 / (h2d * UVM_KERNEL_EFFICIENCY)


# ---------------------------------------------------------------------------------------------
# SSD tier with a prefetch pipeline (key_value kernel)
# ---------------------------------------------------------------------------------------------
#
# ZionEX (Mudigere et al., ISCA'22, §3-4) keeps embeddings in an HBM + DDR + SSD hierarchy;
# TorchRec's KEY_VALUE kernel is FBGEMM's SSD table-batched embedding
# (``fbgemm_gpu/tbe/ssd/training.py`` ``SSDTableBatchedEmbeddingBags``): an HBM cache of rows,
# whose ``prefetch`` reads the rows a batch misses from the SSD key-value store and writes the
# rows it evicts (updated by the fused optimizer, with their optimizer state) back to it.
# TorchRec's ``PrefetchTrainPipelineSparseDist``
# (``torchrec/distributed/train_pipeline/train_pipelines.py``) runs that prefetch on its own
# stream for batch i + 1 while batch i runs forward and backward; ``prefetch_depth`` d >= 1
# batches ahead. In steady state the SSD carries one batch's misses per step whatever d is
# (a deeper pipeline absorbs jitter, which this model does not represent), so the exposed
# time per step is max(0, fetch - dense compute) and d costs HBM: d batches of prefetched
# rows are held in the cache beside the batch being trained.


def ssd_prefetch_pipelined(job):
    """True when key_value misses are prefetched: an SSD is declared (``ssd_bytes`` > 0) and
    ``prefetch_depth`` >= 1."""
    return job[DJOB_SSD_BYTES] > 0.0 and job[DJOB_PREFETCH_DEPTH] >= 1.0


def ssd_fetch_seconds(job, lookups, hit_rate, width):
    """SSD seconds per step of a key_value shard ``width`` columns wide serving ``lookups``
    lookups: its misses ``lookups (1 - hit_rate)`` each read one row with its optimizer state
    from the SSD and write an evicted row back (FBGEMM SSD TBE ``prefetch``: ``ssd_db`` get
    of the misses, set of the evictions), ``2 x misses x row bytes / ssd_bandwidth``. 0 when
    no SSD is declared (the key-value store is then host DRAM behind the host link, which
    the KEY_VALUE lookup bandwidth already covers)."""
    if job[DJOB_SSD_BYTES] <= 0.0 or job[DJOB_SSD_BANDWIDTH] <= 0.0:
        return 0.0
    row = shard_state_bytes(1.0, width, job[DJOB_EMB_BYTES], job[DJOB_OPT_ROW_BYTES],
                            job[DJOB_OPT_ELEM_BYTES])
    return 2.0 * lookups * (1.0 - hit_rate) * row / job[DJOB_SSD_BANDWIDTH]


def prefetch_staging_bytes(job, lookups, hit_rate, width):
    """HBM holding the rows prefetched for the next ``prefetch_depth`` batches of a key_value
    shard: ``depth x misses x width x emb_bytes`` (0 without a pipeline)."""
    if not ssd_prefetch_pipelined(job):
        return 0.0
    return job[DJOB_PREFETCH_DEPTH] * lookups * (1.0 - hit_rate) * width * job[DJOB_EMB_BYTES]


def ssd_exposed_seconds(job, fetch, hide):
    """SSD time per step the step waits for: with the prefetch pipeline the fetch of a later
    batch runs beside this step's dense compute ``hide``, exposing ``max(0, fetch - hide)``;
    without it (``prefetch_depth`` 0) the misses are read before the lookups, all exposed."""
    if ssd_prefetch_pipelined(job):
        return dmax(0.0, fetch - hide)
    return fetch


def add_ssd_shard(work, r, job, tier, lookups, hit_rate, width):
    """A key_value shard's SSD fetch seconds and prefetch staging bytes on rank ``r``."""
    if tier == MT_KV:
        work[RK_SSD_FETCH_S, r] += ssd_fetch_seconds(job, lookups, hit_rate, width)
        work[RK_HBM_BYTES, r] += prefetch_staging_bytes(job, lookups, hit_rate, width)


# ---------------------------------------------------------------------------------------------
# Row groups: table-row-wise with any group size, grid sharding
# ---------------------------------------------------------------------------------------------
#
# Table-row-wise (TorchRec ``sharding/twrw_sharding.py``) splits a table's rows over the ranks
# of one node and joins them with an intra-node reduce-scatter, then an all-to-all across
# nodes (ZionEX §4.1, hierarchical). ``group`` g generalises the node to any g consecutive
# ranks dividing the world -- ZionEX's hierarchical sharding motivates groups inside a node
# (g < node: the reduce-scatter stays on the fastest links) and spanning nodes (g > node);
# TorchRec itself fixes g to the local world size (``_calculate_rw_shard_sizes_and_offsets(rows,
# local_world_size, ...)`` in ``sharding_plan.py``). Grid sharding (TorchRec
# ``ShardingType.GRID_SHARD``, ``sharding/grid_sharding.py`` ``GridPooledEmbeddingSharding``:
# "the CW shard is treated on a per node basis") cuts the columns into k blocks and shards
# each block's rows table-row-wise over one group (block j on group
# ``(rank // g + j * stride) mod groups``, TorchRec ``sharding_plan.grid_shard(host_indexes)``); TorchRec's estimator costs every block as
# a table-row-wise shard of the block width (``shard_estimators.py``
# ``perf_func_emb_wall_time``: ``GRID_SHARD`` -> ``_get_twrw_sharding_perf``).


def row_group_bounds(node, world, group, r):
    """(first rank, one past the last, at_node) of the row group holding rank ``r``: the node
    (tier-0 domain, the last one possibly partial) when ``group`` is 0 or the node size,
    else the ``group`` consecutive ranks ``floor(r / group) * group ...``."""
    if group <= 0 or group == node:
        return domain_lo(node, world, r), domain_hi(node, world, r), True
    lo = math.floor(r / group) * group * 1.0
    return lo, lo + group * 1.0, False


def group_collective_time(sys, nbytes, n, node, gather):
    """Reduce-scatter (``gather`` False) / all-gather of one table's ``nbytes`` pooled output
    over a row group of ``n`` ranks other than the node: inside the node the ring /
    hierarchical collective the node group uses (``reduce_scatter_time``); a group leaving
    the node as TorchRec's planner costs a collective over a process group spanning hosts
    (:func:`rw_collective_time`: the full output over the slowest link, one latency)."""
    if n <= 1.0:
        return 0.0
    if n > node:
        return rw_collective_time(sys, nbytes, n)
    if gather:
        return all_gather_time(sys, nbytes, n, 1.0, 1.0, 1.0, 1.0, 1.0)
    return reduce_scatter_time(sys, nbytes, n, 1.0, 1.0, 1.0, 1.0, 1.0)


def add_row_group_shard(job, work, lo, hi, at_node, narrow, node, tier, rows, width, pool,
                        hit, spb, rs_s, ag_s):
    """Add a table-row-wise shard (or one grid column block) ``width`` columns wide whose rows
    are split over ranks ``lo .. hi - 1``: each rank looks up ``pool / n`` of the global
    batch's lookups and writes the batch's partial pooled output (TorchRec
    ``_get_twrw_sharding_perf``: ``batch_inputs / local_world_size``, outputs the whole batch),
    receives those indices, sends ``width / n`` of the pooled output (after the group's
    reduce-scatter) across nodes and, for a group smaller than the node, to the node's other
    ranks too. The node group's reduce-scatter is one collective over all its tables (the
    ``twrw_dim`` row, as before); another group's is one collective per table of ``rs_s``
    (forward) / ``ag_s`` (backward) seconds.

    Lookups: a whole table over the node is TorchRec's table-row-wise shard, costed as its
    estimator does (no width penalty). A grid block (``narrow``) or a shard of another group
    pays the kernel's width penalty and 32-column minimum read of
    :func:`shard_lookup_bytes` (TorchRec charges them to table- / column-wise shards only;
    FBGEMM's kernel is the same, and without them a grid of one-rank groups would be a
    column-wise sharding that escapes the narrow-shard cost)."""
    batch = job[DJOB_GLOBAL_BATCH]
    eb = job[DJOB_EMB_BYTES]
    ib = job[DJOB_INDEX_BYTES]
    cbf = job[DJOB_COMM_FWD_BYTES]
    n_in = hi - lo
    if at_node and not narrow:
        fwd = lookup_bytes(batch * pool / n_in, width, eb, ib, batch, cbf) * spb
    else:
        fwd = shard_lookup_bytes(batch * pool / n_in, width, eb, ib, batch, cbf) * spb
    shard_rows = ceil_float(rows / n_in)
    for o in range(int(lo), int(hi)):
        work[RK_LOOKUP_FWD_S, o] += fwd
        work[RK_LOOKUP_BWD_S, o] += job[DJOB_BWD_MULTIPLIER] * fwd
        work[RK_OWN_DIM, o] += width / n_in
        work[RK_OWN_IDX, o] += pool / n_in
        if at_node:
            work[RK_TWRW_DIM, o] += width
        else:
            if n_in < node:
                work[RK_OWN_DIM0, o] += width / n_in
            work[RK_GRP_RS_S, o] += rs_s
            work[RK_GRP_AG_S, o] += ag_s
        add_shard_storage(work, o, tier, shard_rows, width, job)
        work[RK_HBM_BYTES, o] += batch * pool / n_in * ib + 2.0 * batch * width * cbf
        add_ssd_shard(work, o, job, tier, batch * pool / n_in, hit, width)


def dmax(a, b):
    """The larger of ``a`` and ``b`` exactly as the C port's ``dmax`` (``a > b ? a : b``):
    ``b`` when either is NaN. Python's ``max`` keeps ``a`` then, hiding a NaN ``b`` that the C
    kernel carries on -- the ports must agree on which NaN reaches :func:`guard_finite`."""
    if a > b:
        return a
    return b


def ceil_float(x):
    """``ceil`` as a float, like C's ``ceil``: ``math.ceil`` returns an integer, which numba
    holds in 64 bits (wrong past 2^63) and Python cannot form from inf. At or beyond 2^53 (and
    for inf / NaN) ``x`` is already its own ceiling."""
    if not abs(x) < MAX_EXACT_INT:
        return x
    return float(math.ceil(x))


def block_usage_penalty(width):
    """Kernel-efficiency factor of a table-/column-wise shard ``width`` columns wide (TorchRec
    ``shard_estimators.py`` ``EmbeddingPerfEstimator._get_tw_sharding_perf``,
    ``block_usage_penalty``): 1 at >= 128 columns, 1.15 for 64-127, 1.75 below 64."""
    if width >= FULL_BLOCK_EMB_DIM:
        return 1.0
    if width >= 0.5 * FULL_BLOCK_EMB_DIM:
        return HALF_BLOCK_PENALTY
    return QUARTER_BLOCK_PENALTY


def shard_lookup_bytes(lookups, width, emb_bytes, index_bytes, outputs, out_bytes):
    """Kernel-true bytes of a table- or column-wise shard's forward lookup: indices read, rows
    read at no less than ``MIN_KERNEL_DIM`` columns, pooled outputs written, all times the
    block-usage penalty of the shard width (TorchRec ``_get_tw_sharding_perf``:
    ``(input_read_size + embedding_lookup_size + fwd_output_write_size) *
    block_usage_penalty``, ``embedding_lookup_size`` with ``max(emb_dim, 32)``)."""
    return (
        lookups * index_bytes
        + lookups * dmax(width, MIN_KERNEL_DIM) * emb_bytes
        + outputs * width * out_bytes
    ) * block_usage_penalty(width)


def batched_copy_seconds(batch, dim, comm_bwd_bytes, spb):
    """Backward batched copy of a row-wise shard's gradient output (TorchRec
    ``_get_rw_sharding_perf``: ``bwd_output_write_size * BATCHED_COPY_PERF_FACTOR /
    device_bw``, the output being the global batch's ``dim`` columns in the backward
    reduce-scatter dtype)."""
    return BATCHED_COPY_PERF_FACTOR * batch * dim * comm_bwd_bytes * spb


def rw_collective_time(sys, nbytes, world):
    """Row-wise forward reduce-scatter / backward all-gather of the pooled outputs as
    TorchRec's RW sharder issues them: one collective over the whole world's process group,
    costed by TorchRec (``_get_rw_sharding_perf`` with ``BasicCommsBandwidths.get_bw``,
    ``planner/types.py``) as the *full* pooled output ``nbytes`` (global batch x dim x dtype)
    over the slowest link the group spans (inter-host once it leaves the node) -- not a
    hierarchical reduce-scatter. Plus one latency of that tier."""
    top = group_top_tier(sys, world, 1.0, 1.0, 1.0, 1.0, 1.0)
    if top < 0 or nbytes <= 0.0:
        return 0.0
    return tier_latency(sys, top) + nbytes / tier_link_bandwidth(sys, top)


def lookup_bytes(lookups, dim, emb_bytes, index_bytes, outputs, out_bytes):
    """Bytes one forward lookup kernel moves: input indices read + embedding rows read + pooled
    outputs written (TorchRec ``shard_estimators.py``: input_read_size + embedding_lookup_size +
    fwd_output_write_size)."""
    return lookups * index_bytes + lookups * dim * emb_bytes + outputs * dim * out_bytes


def shard_state_bytes(rows, dim, emb_bytes, opt_row_bytes, opt_elem_bytes):
    """Bytes a shard of ``rows`` x ``dim`` holds: the rows plus optimizer state, per row
    (row-wise Adagrad: one fp32 per row, ZionEX §5 / FBGEMM) and per element (Adam: two fp32
    moments) (TorchRec storage estimator ``calculate_shard_storages``)."""
    return rows * dim * emb_bytes + rows * opt_row_bytes + rows * dim * opt_elem_bytes


def add_shard_storage(work, r, tier, rows, dim, job):
    """Add a shard's storage to rank ``r``: HBM and dense tiers all in HBM; DDR tier all in
    host DDR; UVM cache: rows and optimizer state in DDR, ``uvm_cache_fraction`` of the rows
    cached in HBM (TorchRec ``UVM_CACHING_RATIO`` 0.2 default); key-value: rows and state in
    the SSD / key-value store (checked against ``ssd_bytes`` when an SSD is declared), the same
    fraction cached in HBM (TorchRec ``KV_CACHING_RATIO`` 0.2)."""
    state = shard_state_bytes(
        rows, dim, job[DJOB_EMB_BYTES], job[DJOB_OPT_ROW_BYTES], job[DJOB_OPT_ELEM_BYTES]
    )
    if tier == MT_HBM or tier == MT_DENSE:
        work[RK_HBM_BYTES, r] += state
    elif tier == MT_UVM:
        work[RK_DDR_BYTES, r] += state
        work[RK_HBM_BYTES, r] += job[DJOB_UVM_CACHE_FRACTION] * rows * dim * job[DJOB_EMB_BYTES]
    elif tier == MT_KV:
        work[RK_HBM_BYTES, r] += job[DJOB_UVM_CACHE_FRACTION] * rows * dim * job[DJOB_EMB_BYTES]
        work[RK_SSD_BYTES, r] += state
    else:
        work[RK_DDR_BYTES, r] += state


def uniform_storage_hbm(tier, rows, dim, job):
    """HBM bytes of a shard held on every rank (row-wise / data-parallel); see
    :func:`add_shard_storage`."""
    state = shard_state_bytes(
        rows, dim, job[DJOB_EMB_BYTES], job[DJOB_OPT_ROW_BYTES], job[DJOB_OPT_ELEM_BYTES]
    )
    if tier == MT_HBM or tier == MT_DENSE:
        return state
    if tier == MT_UVM or tier == MT_KV:
        return job[DJOB_UVM_CACHE_FRACTION] * rows * dim * job[DJOB_EMB_BYTES]
    return 0.0


def uniform_storage_ssd(tier, rows, dim, job):
    """SSD bytes of a key_value shard held on every rank; see :func:`add_shard_storage`."""
    if tier != MT_KV:
        return 0.0
    return shard_state_bytes(
        rows, dim, job[DJOB_EMB_BYTES], job[DJOB_OPT_ROW_BYTES], job[DJOB_OPT_ELEM_BYTES]
    )


def uniform_storage_ddr(tier, rows, dim, job):
    """Host DDR bytes of a shard held on every rank; see :func:`add_shard_storage`."""
    if tier == MT_HBM or tier == MT_DENSE or tier == MT_KV:
        return 0.0
    return shard_state_bytes(
        rows, dim, job[DJOB_EMB_BYTES], job[DJOB_OPT_ROW_BYTES], job[DJOB_OPT_ELEM_BYTES]
    )


# ---------------------------------------------------------------------------------------------
# All-to-all per rank over the tiers
# ---------------------------------------------------------------------------------------------


def domain_lo(span, world, r):
    """First rank of the domain of ``span`` consecutive ranks holding rank ``r``."""
    if span >= world:
        return 0.0
    return math.floor(r / span) * span


def domain_hi(span, world, r):
    """One past the last rank of the domain of ``span`` ranks holding ``r`` (capped at W)."""
    if span >= world:
        return world * 1.0
    return min(world * 1.0, math.floor(r / span) * span + span)


def rank_a2a_units(sys, world, work, r, row0, pre0, row, pre, add, top):
    """Busiest tier of rank ``r`` in an all-to-all where rank ``o`` owns weight ``w[o]`` and every
    other rank exchanges one unit of bytes per unit of weight with it (the pooled embeddings of
    its local batch: ZionEX §4.1 "butterfly" all-to-all; Naumov et al. §4).

    ``row0``/``pre0``: work rows of the weight used for traffic inside the node and its prefix
    sums; ``row``/``pre``: the weight used for traffic across tiers >= 1; ``add`` a weight every
    rank owns on top. Tier 0: sent ``w0[r] (n_node - 1)``, received ``sum_node w0 - w0[r]``.
    Tier ``i >= 1``: sent ``w[r] (W - n_{i-1})``, received ``sum_all w - sum_{domain_{i-1}} w``
    -- the bytes that leave / enter the rank's tier-(i-1) domain, as in
    ``collectives.all_to_all_time``. Returns ``max_i max(sent_i, received_i) / link_bw_i`` in
    seconds per unit byte.
    """
    worst = 0.0
    wf = world * 1.0
    for i in range(top + 1):
        if i == 0:
            span = tier_span(sys, 0)
            lo = domain_lo(span, world, r)
            hi = domain_hi(span, world, r)
            mine = work[row0, r] + add
            dom = work[pre0, int(hi)] - work[pre0, int(lo)] + add * (hi - lo)
            sent = mine * (hi - lo - 1.0)
            recv = dom - mine
        else:
            span = tier_span(sys, i - 1)
            lo = domain_lo(span, world, r)
            hi = domain_hi(span, world, r)
            mine = work[row, r] + add
            dom = work[pre, int(hi)] - work[pre, int(lo)] + add * (hi - lo)
            total = work[pre, world] + add * wf
            sent = mine * (wf - (hi - lo))
            recv = total - dom
        t = dmax(sent, recv) / tier_link_bandwidth(sys, i)
        if t > worst:
            worst = t
    return worst


# ---------------------------------------------------------------------------------------------
# Dense part
# ---------------------------------------------------------------------------------------------


def dense_fwd_time(sys, job):
    """Forward time of the dense MLPs + interaction on the local batch ``B / W`` (data parallel,
    Naumov et al. §4): FLOPs / (peak x efficiency)."""
    local = job[DJOB_GLOBAL_BATCH] / job[DJOB_WORLD]
    return local * job[DJOB_DENSE_FLOPS_PER_SAMPLE] / (
        sys[SYS_PEAK_FLOPS] * job[DJOB_DENSE_EFFICIENCY]
    )


def dense_bwd_time(sys, job):
    """Backward of the dense part: twice the forward FLOPs (weight + input gradients)."""
    return 2.0 * dense_fwd_time(sys, job)


def dense_memory_bytes(job):
    """Dense weights, gradients and optimizer state, replicated, plus activations of the local
    batch."""
    local = job[DJOB_GLOBAL_BATCH] / job[DJOB_WORLD]
    return (
        job[DJOB_DENSE_PARAMS] * job[DJOB_DENSE_STATE_BYTES]
        + local * job[DJOB_DENSE_ACT_BYTES_PER_SAMPLE]
    )


def exposed_after_overlap(comm, overlap_with):
    """Part of ``comm`` not hidden behind ``overlap_with`` (ZionEX §5: the dense all-reduce runs
    concurrently with the embedding backward)."""
    return dmax(0.0, comm - overlap_with)


# ---------------------------------------------------------------------------------------------
# One plan
# ---------------------------------------------------------------------------------------------


def write_invalid(out, col, status):
    """Result column of a plan that could not be costed."""
    for f in range(N_DOUT):
        out[f, col] = 0.0
    out[DO_STATUS, col] = status
    out[DO_FEASIBLE, col] = 0.0
    out[DO_STEP_TIME_S, col] = math.inf


def check_plan(job, tables, plan):
    """Status of a plan before costing: ``bad_index`` for a rank, kind or tier out of range,
    ``invalid_config`` for column shards that do not divide the dim or a bad table."""
    world = int(job[DJOB_WORLD])
    n_t = tables.shape[1]
    if plan.shape[1] < n_t or plan.shape[0] < N_PLAN or tables.shape[0] < N_TAB or world < 1:
        return STATUS_BAD_INDEX
    for t in range(n_t):
        kind = plan[PL_KIND, t]
        tier = plan[PL_TIER, t]
        rank = plan[PL_RANK, t]
        group = plan[PL_GROUP, t]
        if kind < 0 or kind > SH_GRID or tier < 0 or tier > MT_KV:
            return STATUS_BAD_INDEX
        if rank < 0 or rank >= world or plan[PL_STRIDE, t] < 0 or group < 0:
            return STATUS_BAD_INDEX
        dim = tables[TAB_DIM, t]
        # written as negated >= so that NaN fails too
        if not (tables[TAB_ROWS, t] >= 1.0 and dim >= 1.0 and tables[TAB_POOLING, t] >= 0.0):
            return STATUS_INVALID_CONFIG
        if kind == SH_CW or kind == SH_GRID:
            k = plan[PL_SHARDS, t]
            if k < 1 or k > world:
                return STATUS_INVALID_CONFIG
            # beyond 2^53 a float dim is no exact integer to split (and int() of it would
            # overflow the ports' 64-bit integers)
            if not dim <= MAX_EXACT_INT or int(dim) % k != 0:
                return STATUS_INVALID_CONFIG
        if (kind == SH_TWRW or kind == SH_GRID) and group > 0:
            if group > world or world % group != 0:
                return STATUS_INVALID_CONFIG
    return STATUS_OK


def evaluate_plan(sys, job, tables, plan, work, out, col):
    """Cost one plan (``plan``: int32 ``(N_PLAN, T)``) into result column ``col`` of ``out``.

    ``work`` (float64 ``(N_RANK, W + 1)``) holds the per-rank accumulators afterwards (lookup
    times, owned dims, memory, all-to-all time per rank). Returns the status code.
    """
    world = int(job[DJOB_WORLD])
    if work.shape[0] < N_RANK or work.shape[1] < world + 1 or world < 1:
        write_invalid(out, col, STATUS_BAD_INDEX)
        return STATUS_BAD_INDEX
    status = check_plan(job, tables, plan)
    if status != STATUS_OK:
        write_invalid(out, col, status)
        return status
    for f in range(N_RANK):
        for r in range(world + 1):
            work[f, r] = 0.0

    wf = world * 1.0
    batch = job[DJOB_GLOBAL_BATCH]
    local = batch / wf
    eb = job[DJOB_EMB_BYTES]
    ib = job[DJOB_INDEX_BYTES]
    cbf = job[DJOB_COMM_FWD_BYTES]
    cbb = job[DJOB_COMM_BWD_BYTES]
    bwd_mult = job[DJOB_BWD_MULTIPLIER]
    node = tier_span(sys, 0)
    if node > wf:
        node = wf

    uni_fwd = 0.0  # lookup time every rank spends (row-wise, data-parallel)
    uni_bwd = 0.0
    uni_hbm = 0.0
    uni_ddr = 0.0
    uni_idx = 0.0  # row-wise: every rank owns pooling / W of the indices
    uni_ssd = 0.0  # SSD bytes and fetch seconds every rank has (row-wise, data-parallel)
    uni_fetch = 0.0
    rw_dim = 0.0
    dp_elems = 0.0
    sum_dim = 0.0
    sum_pool = 0.0
    n_t = tables.shape[1]
    for t in range(n_t):
        rows = tables[TAB_ROWS, t]
        dim = tables[TAB_DIM, t]
        pool = tables[TAB_POOLING, t]
        hit = tables[TAB_HIT_RATE, t]
        kind = plan[PL_KIND, t]
        tier = plan[PL_TIER, t]
        rank = plan[PL_RANK, t]
        spb = lookup_seconds_per_byte(sys, job, tier, hit)
        sum_dim += dim
        sum_pool += pool
        if kind == SH_TW or kind == SH_CW:
            k = 1
            stride = 0
            if kind == SH_CW:
                k = plan[PL_SHARDS, t]
                stride = plan[PL_STRIDE, t]
            ds = dim / k
            fwd = shard_lookup_bytes(batch * pool, ds, eb, ib, batch, cbf) * spb
            for j in range(k):
                o = (rank + j * stride) % world
                work[RK_LOOKUP_FWD_S, o] += fwd
                work[RK_LOOKUP_BWD_S, o] += bwd_mult * fwd
                work[RK_OWN_DIM0, o] += ds
                work[RK_OWN_DIM, o] += ds
                work[RK_OWN_IDX, o] += pool
                add_shard_storage(work, o, tier, rows, ds, job)
                # buffers: indices received for the global batch, pooled outputs sent and
                # their gradients received
                work[RK_HBM_BYTES, o] += batch * pool * ib + 2.0 * batch * ds * cbf
                add_ssd_shard(work, o, job, tier, batch * pool, hit, ds)
        elif kind == SH_RW:
            fwd = lookup_bytes(batch * pool / wf, dim, eb, ib, batch, cbf) * spb
            uni_fwd += fwd
            uni_bwd += bwd_mult * fwd + batched_copy_seconds(batch, dim, cbb, spb)
            uni_idx += pool / wf
            rw_dim += dim
            shard_rows = ceil_float(rows / wf)
            uni_hbm += uniform_storage_hbm(tier, shard_rows, dim, job)
            uni_hbm += batch * pool / wf * ib + 2.0 * batch * dim * cbf
            uni_ddr += uniform_storage_ddr(tier, shard_rows, dim, job)
            uni_ssd += uniform_storage_ssd(tier, shard_rows, dim, job)
            if tier == MT_KV:
                uni_fetch += ssd_fetch_seconds(job, batch * pool / wf, hit, dim)
                uni_hbm += prefetch_staging_bytes(job, batch * pool / wf, hit, dim)
        elif kind == SH_TWRW or kind == SH_GRID:
            # table-row-wise: one block of all columns; grid: k column blocks, block j on row
            # group (rank // g + j * stride) mod (number of groups) -- stride counts groups
            k = 1
            stride = 0
            if kind == SH_GRID:
                k = plan[PL_SHARDS, t]
                stride = plan[PL_STRIDE, t]
            ws = dim / k
            group = plan[PL_GROUP, t]
            gi = int(node) if group <= 0 else int(group)
            n_groups = (world + gi - 1) // gi
            g0 = rank // gi
            rs_s = 0.0
            ag_s = 0.0
            for j in range(k):
                r0 = ((g0 + j * stride) % n_groups) * gi
                lo, hi, at_node = row_group_bounds(node, world, group, r0)
                if not at_node and j == 0:
                    rs_s = group_collective_time(sys, batch * ws * cbf, hi - lo, node, False)
                    ag_s = group_collective_time(sys, batch * ws * cbb, hi - lo, node, True)
                add_row_group_shard(job, work, lo, hi, at_node, kind == SH_GRID, node, tier,
                                    rows, ws, pool, hit, spb, rs_s, ag_s)
        else:  # data parallel: every rank holds the table and serves its local batch
            fwd = lookup_bytes(local * pool, dim, eb, ib, local, cbf) * spb
            uni_fwd += fwd
            uni_bwd += bwd_mult * fwd + job[DJOB_DP_UPDATE_FACTOR] * rows * dim * eb * spb
            dp_elems += rows * dim
            uni_hbm += uniform_storage_hbm(tier, rows, dim, job)
            uni_ddr += uniform_storage_ddr(tier, rows, dim, job)
            uni_ssd += uniform_storage_ssd(tier, rows, dim, job)
            if tier == MT_KV:
                uni_fetch += ssd_fetch_seconds(job, local * pool, hit, dim)
                uni_hbm += prefetch_staging_bytes(job, local * pool, hit, dim)

    # every rank: ids and pooled embeddings (and gradients) of its local batch; dense part
    uni_hbm += 2.0 * local * (sum_dim * cbf + sum_pool * ib) + dense_memory_bytes(job)

    # prefix sums of the owned weights (entry r = sum over ranks < r)
    for r in range(world):
        work[RK_PRE_DIM0, r + 1] = work[RK_PRE_DIM0, r] + work[RK_OWN_DIM0, r]
        work[RK_PRE_DIM, r + 1] = work[RK_PRE_DIM, r] + work[RK_OWN_DIM, r]
        work[RK_PRE_IDX, r + 1] = work[RK_PRE_IDX, r] + work[RK_OWN_IDX, r]

    top = group_top_tier(sys, wf, 1.0, 1.0, 1.0, 1.0, 1.0)
    unit_idx = local * ib
    unit_fwd = local * cbf
    unit_bwd = local * cbb
    max_lf = 0.0
    max_lb = 0.0
    max_pool = 0.0
    max_idx = 0.0
    max_hbm = 0.0
    max_ddr = 0.0
    max_twrw = 0.0
    max_grs = 0.0
    max_gag = 0.0
    max_ssd = 0.0
    max_fetch = 0.0
    crit = 0
    crit_load = -1.0
    for r in range(world):
        x_pool = rank_a2a_units(
            sys, world, work, r, RK_OWN_DIM0, RK_PRE_DIM0, RK_OWN_DIM, RK_PRE_DIM, 0.0, top
        )
        x_idx = rank_a2a_units(
            sys, world, work, r, RK_OWN_IDX, RK_PRE_IDX, RK_OWN_IDX, RK_PRE_IDX, uni_idx, top
        )
        lf = work[RK_LOOKUP_FWD_S, r] + uni_fwd
        lb = work[RK_LOOKUP_BWD_S, r] + uni_bwd
        a2a = unit_idx * x_idx + (unit_fwd + unit_bwd) * x_pool
        work[RK_LOOKUP_FWD_S, r] = lf
        work[RK_LOOKUP_BWD_S, r] = lb
        work[RK_HBM_BYTES, r] += uni_hbm
        work[RK_DDR_BYTES, r] += uni_ddr
        work[RK_A2A_S, r] = a2a
        work[RK_X_POOL, r] = x_pool
        work[RK_X_IDX, r] = x_idx
        max_lf = dmax(max_lf, lf)
        max_lb = dmax(max_lb, lb)
        max_pool = dmax(max_pool, x_pool)
        max_idx = dmax(max_idx, x_idx)
        max_hbm = dmax(max_hbm, work[RK_HBM_BYTES, r])
        max_ddr = dmax(max_ddr, work[RK_DDR_BYTES, r])
        max_twrw = dmax(max_twrw, work[RK_TWRW_DIM, r])
        max_grs = dmax(max_grs, work[RK_GRP_RS_S, r])
        max_gag = dmax(max_gag, work[RK_GRP_AG_S, r])
        work[RK_SSD_BYTES, r] += uni_ssd
        work[RK_SSD_FETCH_S, r] += uni_fetch
        max_ssd = dmax(max_ssd, work[RK_SSD_BYTES, r])
        max_fetch = dmax(max_fetch, work[RK_SSD_FETCH_S, r])
        if lf + lb + a2a > crit_load:
            crit_load = lf + lb + a2a
            crit = r

    lat = 0.0
    if top >= 0:
        lat = tier_latency(sys, top)
    idx_a2a = 0.0
    if max_idx > 0.0:
        idx_a2a = lat + unit_idx * max_idx
    a2a_fwd = 0.0
    a2a_bwd = 0.0
    if max_pool > 0.0:
        a2a_fwd = lat + unit_fwd * max_pool
        a2a_bwd = lat + unit_bwd * max_pool

    # row-wise: reduce-scatter of partial pooled sums over all ranks, all-gather of gradients,
    # one flat collective as TorchRec issues it (rw_collective_time); table-row-wise: the
    # same inside the node (ZionEX §4.1, TorchRec TWRW estimator)
    rs_fwd = 0.0
    ag_bwd = 0.0
    if rw_dim > 0.0:
        rs_fwd += rw_collective_time(sys, batch * rw_dim * cbf, wf)
        ag_bwd += rw_collective_time(sys, batch * rw_dim * cbb, wf)
    if max_twrw > 0.0:
        rs_fwd += reduce_scatter_time(sys, batch * max_twrw * cbf, node, 1.0, 1.0, 1.0, 1.0, 1.0)
        ag_bwd += all_gather_time(sys, batch * max_twrw * cbb, node, 1.0, 1.0, 1.0, 1.0, 1.0)
    # row groups other than the node: the busiest rank's own collectives, one per table
    rs_fwd += max_grs
    ag_bwd += max_gag
    gcb = job[DJOB_GRAD_COMM_BYTES]
    dp_ar = 0.0
    if dp_elems > 0.0:
        dp_ar = all_reduce_time(sys, dp_elems * gcb, wf, 1.0, 1.0, 1.0, 1.0, 1.0)
    dense_ar = 0.0
    if job[DJOB_DENSE_PARAMS] > 0.0:
        dense_ar = all_reduce_time(sys, job[DJOB_DENSE_PARAMS] * gcb, wf, 1.0, 1.0, 1.0, 1.0, 1.0)
    d_fwd = dense_fwd_time(sys, job)
    d_bwd = dense_bwd_time(sys, job)
    emb_bwd = a2a_bwd + ag_bwd + max_lb + dp_ar
    exposed = exposed_after_overlap(dense_ar, emb_bwd)
    ssd_exposed = ssd_exposed_seconds(job, max_fetch, d_fwd + d_bwd)
    step = idx_a2a + max_lf + a2a_fwd + rs_fwd + d_fwd + d_bwd + emb_bwd + exposed + ssd_exposed

    usable = sys[SYS_HBM_BYTES] - sys[SYS_HBM_RESERVE_BYTES]
    status = STATUS_OK
    if max_hbm > usable or max_ddr > job[DJOB_DDR_BYTES]:
        status = STATUS_OUT_OF_MEMORY
    if job[DJOB_SSD_BYTES] > 0.0 and max_ssd > job[DJOB_SSD_BYTES]:
        status = STATUS_OUT_OF_MEMORY
    out[DO_STATUS, col] = status
    out[DO_FEASIBLE, col] = 1.0 if status == STATUS_OK else 0.0
    out[DO_STEP_TIME_S, col] = step
    out[DO_SAMPLES_PER_S, col] = batch / step if step > 0.0 else 0.0
    out[DO_IDX_A2A_S, col] = idx_a2a
    out[DO_LOOKUP_FWD_S, col] = max_lf
    out[DO_A2A_FWD_S, col] = a2a_fwd
    out[DO_RS_FWD_S, col] = rs_fwd
    out[DO_DENSE_FWD_S, col] = d_fwd
    out[DO_DENSE_BWD_S, col] = d_bwd
    out[DO_A2A_BWD_S, col] = a2a_bwd
    out[DO_AG_BWD_S, col] = ag_bwd
    out[DO_LOOKUP_BWD_S, col] = max_lb
    out[DO_DP_ALLREDUCE_S, col] = dp_ar
    out[DO_DENSE_ALLREDUCE_EXPOSED_S, col] = exposed
    out[DO_DENSE_ALLREDUCE_S, col] = dense_ar
    out[DO_HBM_MAX_GIB, col] = max_hbm / GIB
    out[DO_DDR_MAX_GIB, col] = max_ddr / GIB
    out[DO_CRITICAL_RANK, col] = crit
    out[DO_SSD_PREFETCH_EXPOSED_S, col] = ssd_exposed
    out[DO_SSD_FETCH_S, col] = max_fetch
    out[DO_SSD_MAX_GIB, col] = max_ssd / GIB
    return guard_finite(out, col, status)


def guard_finite(out, col, status):
    """The kernel's own defence (issue 14, as :func:`trainscape.model.llm.guard_finite` on the
    LLM side): a costed plan with a non-finite output -- a time or a memory that left the
    float64 range, or a NaN from one -- becomes status ``overflow``: infeasible, every output
    0, step time infinite, instead of Infinity or NaN reported as ``ok`` / ``out_of_memory``
    (a planner comparing such steps would compare NaN). The validator's ranges
    (``spec/ranges.py``) keep accepted scenarios away from this; the guard holds whatever
    reaches the kernel (raw blocks, pack files). Returns the status."""
    bad = False
    for f in range(N_DOUT):
        if not math.isfinite(out[f, col]):
            bad = True
    if not bad:
        return status
    for f in range(N_DOUT):
        out[f, col] = 0.0
    out[DO_STATUS, col] = STATUS_OVERFLOW
    out[DO_STEP_TIME_S, col] = math.inf
    return STATUS_OVERFLOW


def evaluate_plans(sys, job, tables, plans, work, out):
    """Cost a batch of plans (int32 ``(n, N_PLAN, T)``) into ``out`` (``(N_DOUT, n)``)."""
    for p in range(plans.shape[0]):
        evaluate_plan(sys, job, tables, plans[p], work, out, p)
    return 0
