"""Known answers for every DLRM output column and per-rank row, by hand, on every backend.

One small plan exercises all five sharding types at once on 4 GPUs in 2 nodes of 2 (node
link 100 GB/s, 1 us; network 10 GB/s, 10 us; efficiency 1), a global batch of B = 64 samples
(16 per rank). Every expected value below is written out from the formulas the reference's
docstrings cite -- Naumov et al. 2019 (DLRM), Mudigere et al. ISCA'22 (ZionEX) and TorchRec's
planner estimators (``shard_estimators.py``, ``constants.py``) -- with the numbers in the
docstrings; nothing is read back from the package's helpers or golden files. The column
coverage table is in ``docs/testing.md``.

Job block: fp32 rows (4 B), int64 indices (8 B), pooled embeddings forward in fp16 (2 B),
gradients backward in fp32 (4 B), gradient all-reduces in fp32 (4 B), row-wise Adagrad (4 B of
state per row), lookup kernels at 0.5 x 1e12 B/s of HBM = 5e11 B/s, host link 10 GB/s
(the DDR kernel, TorchRec FUSED_UVM, runs at a tenth: 1e9 B/s), backward lookups 2x forward
(TorchRec ``BWD_COMPUTE_MULTIPLIER``), data-parallel update 9.22 x table bytes
(``DP_ELEMENTWISE_KERNELS_PERF_FACTOR``), a dense part of 1000 parameters (12 B each with
its gradient and optimizer state), 1e6 forward FLOPs and 800 activation bytes per sample at
0.5 x 1e14 FLOP/s.

Tables (rows, dim, pooling) and plan:

====  ======  ====  =======  ==========================================  ======
name  rows    dim   pooling  sharding                                    tier
====  ======  ====  =======  ==========================================  ======
tw    1000    128   2        table-wise on rank 0                        hbm
rw    4000    64    4        row-wise over the 4 ranks                   hbm
dp    100     32    1        data-parallel (every rank)                  hbm
twrw  2000    128   3        table-row-wise over node 1 (ranks 2, 3)     ddr
cw    500     256   1        column-wise, 2 shards of 128: ranks 1, 3    hbm
====  ======  ====  =======  ==========================================  ======
"""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest

from trainscape import layout as L
from trainscape.dlrm import layout as D
from trainscape.dlrm.evaluation import evaluate_plans, native_available, new_work

from backend_fixture import LOADED

GIB = 2.0**30
W, B, LOCAL = 4, 64, 16
HBM_KERNEL = 1e12 * 0.5  # lookup kernel bandwidth in HBM
DDR_KERNEL = 10e9 * 0.1  # TorchRec FUSED_UVM: host link / 10
BW0, LAT0 = 100e9, 1e-6
BW1, LAT1 = 10e9, 1e-5


def system():
    sys = np.zeros(L.N_SYS)
    sys[L.SYS_GPUS] = W
    sys[L.SYS_N_TIERS] = 2
    sys[L.SYS_PEAK_FLOPS] = 1e14
    sys[L.SYS_HBM_BYTES] = 16e9
    sys[L.SYS_HBM_BANDWIDTH] = 1e12
    sys[L.SYS_HBM_RESERVE_BYTES] = 1e9
    for i, t in enumerate(((2, BW0, LAT0, 1.0, 1.0), (2, BW1, LAT1, 1.0, 1.0))):
        base = L.SYS_TIER_BASE + i * L.N_TIER
        sys[base:base + 5] = t
    return sys


def job(dense_params=1000.0, ddr_bytes=100e9):
    j = np.zeros(D.N_DJOB)
    j[D.DJOB_WORLD] = W
    j[D.DJOB_GLOBAL_BATCH] = B
    j[D.DJOB_EMB_BYTES] = 4
    j[D.DJOB_INDEX_BYTES] = 8
    j[D.DJOB_COMM_FWD_BYTES] = 2
    j[D.DJOB_COMM_BWD_BYTES] = 4
    j[D.DJOB_GRAD_COMM_BYTES] = 4
    j[D.DJOB_OPT_ROW_BYTES] = 4
    j[D.DJOB_OPT_ELEM_BYTES] = 0
    j[D.DJOB_LOOKUP_EFFICIENCY] = 0.5
    j[D.DJOB_H2D_BANDWIDTH] = 10e9
    j[D.DJOB_DDR_BYTES] = ddr_bytes
    j[D.DJOB_UVM_CACHE_FRACTION] = 0.2
    j[D.DJOB_BWD_MULTIPLIER] = 2.0
    j[D.DJOB_DP_UPDATE_FACTOR] = 9.22
    j[D.DJOB_DENSE_PARAMS] = dense_params
    j[D.DJOB_DENSE_FLOPS_PER_SAMPLE] = 1e6
    j[D.DJOB_DENSE_ACT_BYTES_PER_SAMPLE] = 800
    j[D.DJOB_DENSE_EFFICIENCY] = 0.5
    j[D.DJOB_DENSE_STATE_BYTES] = 12
    return j


TABLES = np.array([[1000, 4000, 100, 2000, 500],  # rows
                   [128, 64, 32, 128, 256],  # dim
                   [2, 4, 1, 3, 1],  # pooling
                   [0, 0, 0, 0, 0]], dtype=np.float64)  # hit rate (unused: no uvm_cache)
PLAN = np.zeros((D.N_PLAN, 5), dtype=np.int32)
PLAN[D.PL_KIND] = (D.SH_TW, D.SH_RW, D.SH_DP, D.SH_TWRW, D.SH_CW)
PLAN[D.PL_SHARDS] = (1, 1, 1, 1, 2)
PLAN[D.PL_RANK] = (0, 0, 0, 2, 1)
PLAN[D.PL_STRIDE] = (0, 0, 0, 0, 2)
PLAN[D.PL_TIER] = (D.MT_HBM, D.MT_HBM, D.MT_HBM, D.MT_DDR, D.MT_HBM)


def evaluate(backend, **job_kw):
    sc = SimpleNamespace(sys=system(), job=job(**job_kw), tables=TABLES, n_tables=5, world=W)
    work = new_work(W)
    out = evaluate_plans(sc, PLAN, backend=backend, work=work)
    res = {f: out[i, 0] for i, f in enumerate(D.DOUT_FIELDS)}
    rank = {f: work[i].copy() for i, f in enumerate(D.RANK_FIELDS)}
    return res, rank


@pytest.fixture(params=[b for b in LOADED if b != "c" or native_available()])
def backend(request):
    """Every loaded DLRM backend (the C one only where ``trainscape.native._dlrm`` is built)."""
    return request.param


# ---- lookups (TorchRec shard_estimators.py: index read + rows read + pooled output write) ----
# tw   (rank 0): B x 2 ids x 8 + B x 2 x 128 x 4 + B x 128 x 2 = 1,024 + 65,536 + 16,384
#      = 82,944 B (128 columns: no block-usage penalty)
# cw   (ranks 1, 3, width 128 each): 64 x 8 + 64 x 128 x 4 + 64 x 128 x 2 = 49,664 B
# twrw (ranks 2, 3; DDR kernel): B x 3 / 2 = 96 ids per rank: 96 x 8 + 96 x 128 x 4
#      + 64 x 128 x 2 = 66,304 B at 1e9 B/s
# rw   (every rank): B x 4 / 4 = 64 ids: 64 x 8 + 64 x 64 x 4 + 64 x 64 x 2 = 25,088 B
# dp   (every rank, local batch 16): 16 x 8 + 16 x 32 x 4 + 16 x 32 x 2 = 3,200 B
# backward: 2x forward; rw adds the batched copy 2.455 x B x 64 x 4 B = 40,222.72 B; dp adds
# the update 9.22 x 100 x 32 x 4 B = 118,016 B
TW, CW, TWRW, RW, DP = 82_944, 49_664, 66_304, 25_088, 3_200
UNI_FWD = (RW + DP) / HBM_KERNEL
UNI_BWD = (2 * RW + 2.455 * B * 64 * 4 + 2 * DP + 9.22 * 100 * 32 * 4) / HBM_KERNEL
LOOKUP_FWD = np.array([TW / HBM_KERNEL, CW / HBM_KERNEL, TWRW / DDR_KERNEL,
                       CW / HBM_KERNEL + TWRW / DDR_KERNEL]) + UNI_FWD
LOOKUP_BWD = 2 * (LOOKUP_FWD - UNI_FWD) + UNI_BWD

# ---- all-to-all weights per rank (ZionEX §4.1 butterfly; reference rank_a2a_units) ---------
# pooled dims a rank serves to its node peer (own_dim0: tw, cw) and across nodes (own_dim:
# + twrw's 128 / 2 per rank), lookups per sample whose ids it receives (own_idx)
OWN_DIM0 = np.array([128, 128, 0, 128])
OWN_DIM = np.array([128, 128, 64, 192])
OWN_IDX = np.array([2, 1, 1.5, 2.5])
# seconds per unit byte of the busiest tier: tier 0 max(sent = mine x 1, received = peer's);
# tier 1 max(sent = mine x 2 ranks of the other node, received = the other node's sum)
#   pooled: r0 max(128/1e11, 256/1e10), r1 the same, r2 max(128/1e11, max(128, 256)/1e10),
#           r3 max(128/1e11, max(384, 256)/1e10)
#   ids (+ 1 row-wise lookup per sample on every rank: weights 3, 2, 2.5, 3.5):
#           r0 max(3/1e11, max(6, 6)/1e10), r1 max(4, 6)/1e10, r2 max(5, 5)/1e10,
#           r3 max(7, 5)/1e10
X_POOL = np.array([256 / BW1, 256 / BW1, 256 / BW1, 384 / BW1])
X_IDX = np.array([6 / BW1, 6 / BW1, 5 / BW1, 7 / BW1])
# unit bytes per sample-weight: local batch x (8 B ids, 2 B forward, 4 B backward)
A2A_RANK = LOCAL * 8 * X_IDX + (LOCAL * 2 + LOCAL * 4) * X_POOL

# ---- memory per rank (TorchRec storage estimator: rows x dim x 4 B + rows x 4 B Adagrad) ---
# tw on rank 0: 1000 x 128 x 4 + 1000 x 4 = 516,000, I/O buffers B x 2 x 8 + 2 x B x 128 x 2
#   = 33,792; cw shard (500 x 128): 258,000 + 64 x 8 + 2 x 64 x 128 x 2 = 33,280 on ranks
#   1, 3; twrw shard (1000 rows of 128) in DDR: 516,000 on ranks 2, 3, HBM buffers
#   96 x 8 + 2 x 64 x 128 x 2 = 33,536.
# every rank: rw shard 1000 x 64 x 4 + 1000 x 4 = 260,000 + buffers 64 x 8 + 2 x 64 x 64 x 2
#   = 16,896; dp table 100 x 32 x 4 + 100 x 4 = 13,200; the local batch's ids and pooled
#   embeddings (+ gradients) 2 x 16 x (608 dims x 2 + 11 ids x 8) = 41,728; dense part
#   1000 x 12 + 16 x 800 = 24,800.  Sum 356,624.
UNI_HBM = 260_000 + 16_896 + 13_200 + 41_728 + 24_800
HBM_RANK = np.array([516_000 + 33_792, 258_000 + 33_280, 33_536,
                     258_000 + 33_280 + 33_536]) + UNI_HBM
DDR_RANK = np.array([0, 0, 516_000, 516_000])


def _ring(n, nbytes, lat, bw, reduce):
    """Ring (Patarasuk & Yuan 2009; nccl-tests busBw factors): all-reduce 2(n-1) steps of
    nbytes/n, all-gather / reduce-scatter n-1 steps."""
    k = 2 if reduce else 1
    return k * (n - 1) * lat + k * (n - 1) / n * nbytes / bw


def _expected_columns(dense_params=1000.0):
    idx = LAT1 + LOCAL * 8 * X_IDX.max()
    a2a_fwd = LAT1 + LOCAL * 2 * X_POOL.max()
    a2a_bwd = LAT1 + LOCAL * 4 * X_POOL.max()
    # row-wise: one flat collective over the world carrying the whole pooled output
    # B x 64 x dtype over the network link (TorchRec _get_rw_sharding_perf), + its latency;
    # table-row-wise: a ring reduce-scatter / all-gather of B x 128 x dtype in the node
    rs = (LAT1 + B * 64 * 2 / BW1) + _ring(2, B * 128 * 2, LAT0, BW0, False)
    ag = (LAT1 + B * 64 * 4 / BW1) + _ring(2, B * 128 * 4, LAT0, BW0, False)

    def all_reduce(nbytes):
        # hierarchical (ring of 2 in the node, then of 2 across nodes on half the buffer)
        # against the flat ring and double binary tree over 4 at the network tier
        hier = _ring(2, nbytes, LAT0, BW0, True) + _ring(2, nbytes / 2, LAT1, BW1, True)
        tree = 2 * 2 * LAT1 + 2 * nbytes / BW1
        return min(hier, tree, _ring(4, nbytes, LAT1, BW1, True))

    dp_ar = all_reduce(100 * 32 * 4)
    dense_ar = all_reduce(dense_params * 4)
    d_fwd = LOCAL * 1e6 / (1e14 * 0.5)
    emb_bwd = a2a_bwd + ag + LOOKUP_BWD.max() + dp_ar
    exposed = max(0.0, dense_ar - emb_bwd)
    step = idx + LOOKUP_FWD.max() + a2a_fwd + rs + d_fwd + 2 * d_fwd + emb_bwd + exposed
    return dict(idx_a2a_s=idx, lookup_fwd_s=LOOKUP_FWD.max(), a2a_fwd_s=a2a_fwd, rs_fwd_s=rs,
                dense_fwd_s=d_fwd, dense_bwd_s=2 * d_fwd, a2a_bwd_s=a2a_bwd, ag_bwd_s=ag,
                lookup_bwd_s=LOOKUP_BWD.max(), dp_allreduce_s=dp_ar,
                dense_allreduce_exposed_s=exposed, dense_allreduce_s=dense_ar,
                step_time_s=step, samples_per_s=B / step)


def test_hand_numbers_are_what_the_docstrings_say():
    assert 64 * 2 * 8 + 64 * 2 * 128 * 4 + 64 * 128 * 2 == TW
    assert 64 * 8 + 64 * 128 * 4 + 64 * 128 * 2 == CW
    assert 96 * 8 + 96 * 128 * 4 + 64 * 128 * 2 == TWRW
    assert 64 * 8 + 64 * 64 * 4 + 64 * 64 * 2 == RW
    assert 16 * 8 + 16 * 32 * 4 + 16 * 32 * 2 == DP
    assert UNI_HBM == 356_624
    assert 2 * 16 * (608 * 2 + 11 * 8) == 41_728
    assert OWN_DIM.sum() == 512 and OWN_IDX.sum() + 4 == 11


def test_every_output_column(backend):
    """Each DLRM result column against the hand value: status ok (906,416 B of HBM and
    516,000 B of DDR at most: they fit), the busiest rank's lookups (rank 3: a cw shard and a
    DDR twrw shard), the all-to-alls at the busiest rank's busiest tier plus one network
    latency, the row-wise and table-row-wise collectives, the dense part (16 samples x 1e6
    FLOPs at 5e13 FLOP/s = 3.2e-7 s forward, twice that backward), the data-parallel table's
    fp32 all-reduce (12,800 B: the hierarchical form, 2.2768e-5 s, beats the tree and the flat
    ring), the dense all-reduce (4,000 B, 2.224e-5 s) hidden behind the embedding backward;
    critical rank 3."""
    res, _ = evaluate(backend)
    want = _expected_columns()
    assert want["dp_allreduce_s"] == pytest.approx(2.2768e-5, rel=1e-12)
    assert want["dense_allreduce_s"] == pytest.approx(2.224e-5, rel=1e-12)
    assert want["dense_allreduce_exposed_s"] == 0.0
    assert res["status"] == L.STATUS_OK and res["feasible"] == 1.0
    for name, value in want.items():
        assert res[name] == pytest.approx(value, rel=1e-9, abs=0.0), name
    assert res["hbm_max_gib"] == pytest.approx(906_416 / GIB, rel=1e-12)
    assert res["ddr_max_gib"] == pytest.approx(516_000 / GIB, rel=1e-12)
    assert res["critical_rank"] == 3.0
    # no SSD tier in this plan: nothing fetched, staged or exposed (tests/test_dlrm_menu.py)
    ssd = ("ssd_prefetch_exposed_s", "ssd_fetch_s", "ssd_max_gib")
    assert all(res[name] == 0.0 for name in ssd)
    checked = set(want) | {"status", "feasible", "hbm_max_gib", "ddr_max_gib",
                           "critical_rank"} | set(ssd)
    assert checked == set(D.DOUT_FIELDS)  # a new column needs its hand value here


def test_every_per_rank_row(backend):
    """The per-rank rows (``RANK_FIELDS``) against the tables in the module's comments; the
    prefix rows hold the running sums of the owned weights (entry W = the total). The plan has
    no row group other than the node and no SSD tier, so the group collectives and the SSD
    rows are 0 on every rank (their non-zero cases: tests/test_dlrm_menu.py)."""
    _, rank = evaluate(backend)
    zero = np.zeros(W)
    want = dict(lookup_fwd_s=LOOKUP_FWD, lookup_bwd_s=LOOKUP_BWD, own_dim0=OWN_DIM0,
                own_dim=OWN_DIM, own_idx=OWN_IDX, hbm_bytes=HBM_RANK, ddr_bytes=DDR_RANK,
                twrw_dim=np.array([0, 0, 128, 128]), a2a_s=A2A_RANK, x_pool=X_POOL,
                x_idx=X_IDX, grp_rs_s=zero, grp_ag_s=zero, ssd_bytes=zero, ssd_fetch_s=zero)
    assert set(want) | {"pre_dim0", "pre_dim", "pre_idx"} == set(D.RANK_FIELDS)
    for name, value in want.items():
        np.testing.assert_allclose(rank[name][:W], value, rtol=1e-9, atol=0, err_msg=name)
    for pre, own in (("pre_dim0", OWN_DIM0), ("pre_dim", OWN_DIM), ("pre_idx", OWN_IDX)):
        np.testing.assert_allclose(rank[pre], np.concatenate([[0], np.cumsum(own)]),
                                   rtol=1e-12, atol=0, err_msg=pre)


def test_a_large_dense_all_reduce_is_exposed(backend):
    """10 million dense parameters: the fp32 all-reduce of 4e7 B (hierarchical: 2 us +
    4e7 / 1e11 in the node, 20 us + 2e7 / 1e10 across: 2.422e-3 s) outlasts the embedding
    backward it overlaps (ZionEX §5); the rest, dense_allreduce - (a2a_bwd + ag_bwd +
    lookup_bwd + dp_allreduce), is exposed. The dense part's memory grows to 1.2e8 B + 12,800
    B of activations, on every rank."""
    res, rank = evaluate(backend, dense_params=1e7)
    want = _expected_columns(dense_params=1e7)
    assert want["dense_allreduce_s"] == pytest.approx(2.422e-3, rel=1e-12)
    assert want["dense_allreduce_exposed_s"] > 0.0
    for name, value in want.items():
        assert res[name] == pytest.approx(value, rel=1e-9, abs=0.0), name
    np.testing.assert_allclose(rank["hbm_bytes"][:W], HBM_RANK + 12 * (1e7 - 1000), rtol=1e-12)


def test_host_memory_over_capacity_is_out_of_memory(backend):
    """With 500,000 B of host DDR per GPU the twrw shard's 516,000 B (ranks 2 and 3) do not
    fit: out of memory, infeasible, still costed (same step time)."""
    res, _ = evaluate(backend, ddr_bytes=500_000)
    assert res["status"] == L.STATUS_OUT_OF_MEMORY and res["feasible"] == 0.0
    assert res["step_time_s"] == pytest.approx(_expected_columns()["step_time_s"], rel=1e-9)


@pytest.mark.parametrize("tier, kernel_bw, hbm, ddr", [
    # TorchRec kernel_bw_lookup per compute kernel, storage per tier (UVM_CACHING_RATIO and
    # KV_CACHING_RATIO 0.2 of the rows cached in HBM)
    ("hbm", 5e11, 260_000, 0),  # FUSED: HBM x lookup efficiency
    ("uvm_cache", (0.8 * 5e11 + 0.2 * 10e9) * 0.1, 0.2 * 1000 * 64 * 4, 260_000),  # / 10
    ("ddr", 10e9 * 0.1, 0, 260_000),  # FUSED_UVM: host link / 10
    ("dense", 5e11 * 0.5, 260_000, 0),  # DENSE: half the fused kernel
    ("key_value", 10e9, 0.2 * 1000 * 64 * 4, 0),  # KEY_VALUE: host link, rows in the store
])
def test_one_table_in_each_memory_tier(backend, tier, kernel_bw, hbm, ddr):
    """One table (1000 rows x 64, pooling 2, cache hit rate 0.8) table-wise on rank 1. Its
    64-column rows fill half of FBGEMM's 128-column block: TorchRec's block-usage penalty
    1.15 on the kernel bytes, (64 x 2 x 8 + 64 x 2 x 64 x 4 + 64 x 64 x 2) x 1.15 =
    48,281.6 B, at the tier's kernel bandwidth; backward 2x. State 1000 x 64 x 4 + 1000 x 4
    = 260,000 B placed by the tier; rank 1 adds its I/O buffers 64 x 2 x 8 + 2 x 64 x 64 x 2 =
    17,408 B to the 2 x 16 x (64 x 2 + 2 x 8) = 4,608 B of local ids and pooled embeddings and
    the dense part's 24,800 B that every rank holds."""
    tables = np.array([[1000], [64], [2], [0.8]], dtype=np.float64)
    plan = np.zeros((D.N_PLAN, 1), dtype=np.int32)
    plan[D.PL_KIND, 0], plan[D.PL_SHARDS, 0], plan[D.PL_RANK, 0] = D.SH_TW, 1, 1
    plan[D.PL_TIER, 0] = D.MEMORY_TIERS.index(tier)
    sc = SimpleNamespace(sys=system(), job=job(), tables=tables, n_tables=1, world=W)
    out = evaluate_plans(sc, plan, backend=backend)
    res = {f: out[i, 0] for i, f in enumerate(D.DOUT_FIELDS)}
    fwd = 48_281.6 / kernel_bw
    assert (1024 + 32768 + 8192) * 1.15 == pytest.approx(48_281.6, rel=1e-15)
    assert res["lookup_fwd_s"] == pytest.approx(fwd, rel=1e-9)
    assert res["lookup_bwd_s"] == pytest.approx(2 * fwd, rel=1e-9)
    assert res["hbm_max_gib"] == pytest.approx((hbm + 17_408 + 4_608 + 24_800) / GIB, rel=1e-12)
    assert res["ddr_max_gib"] == pytest.approx(ddr / GIB, rel=1e-12)
    assert res["critical_rank"] == 1.0
