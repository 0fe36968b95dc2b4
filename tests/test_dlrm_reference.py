"""Known-answer tests of the DLRM reference model (closed forms) and its input errors."""

from __future__ import annotations

import math

import numpy as np
import pytest

from trainscape import dlrm
from trainscape import layout as L
from trainscape.dlrm import layout as D
from trainscape.model.collectives import all_to_all_time
from trainscape.spec import ScenarioError

B = 4096
GPU = {"preset": "h100-sxm-80gb"}


def scenario(tables, gpus=8, tiers=None, **job):
    tiers = tiers or [{"name": "node", "size": 8, "bandwidth_GBps": 400.0, "latency_us": 2.0,
                       "efficiency": 1.0}]
    raw = {
        "name": "t",
        "model": {"tables": tables, "interaction": "dcn", "dense_arch": [64, 32],
                  "over_arch": [64, 1], "dcn_layers": 1, "dcn_low_rank": 16},
        "job": {"global_batch": B, **job},
        "cluster": {"gpu": GPU, "gpus": gpus, "tiers": tiers, "host_ddr_gb": 1024.0,
                    "host_to_device_GBps": 32.0},
    }
    return dlrm.load(raw)


TWO_TIERS = [
    {"name": "node", "size": 8, "bandwidth_GBps": 400.0, "latency_us": 2.0, "efficiency": 1.0},
    {"name": "pod", "size": 4, "bandwidth_GBps": 50.0, "latency_us": 10.0, "efficiency": 1.0},
]
THREE_TIERS = TWO_TIERS[:1] + [
    {"name": "rack", "size": 2, "bandwidth_GBps": 50.0, "latency_us": 5.0, "efficiency": 0.9},
    {"name": "dc", "size": 4, "bandwidth_GBps": 40.0, "latency_us": 20.0, "efficiency": 0.8,
     "oversubscription": 2.0},
]


def plan_for(sc, entries):
    return dlrm.plan_from_entries(sc, entries)


def hbm_bw(sc):
    return sc.sys[L.SYS_HBM_BANDWIDTH] * sc.job[D.DJOB_LOOKUP_EFFICIENCY]


def tier(sc, i, f):
    return sc.sys[L.SYS_TIER_BASE + i * L.N_TIER + f]


def link_bw(sc, i):
    return tier(sc, i, L.TIER_BANDWIDTH) * tier(sc, i, L.TIER_EFFICIENCY) / tier(
        sc, i, L.TIER_OVERSUBSCRIPTION)


def test_single_table_wise_table_closed_form():
    rows, dim, pool = 100_000, 64, 5.0
    sc = scenario([{"name": "a", "rows": rows, "dim": dim, "pooling": pool}], gpus=16,
                  tiers=TWO_TIERS, comm_dtype="fp32")
    res = dlrm.evaluate(sc, plan_for(sc, {"a": {"type": "table_wise", "rank": 3}}))
    eb, ib, cb = 4.0, 8.0, 4.0
    # a 64-column table fills half of FBGEMM's 128-column block: TorchRec's
    # _get_tw_sharding_perf charges HALF_BLOCK_PENALTY (1.15) on all its kernel bytes
    fwd = 1.15 * (B * pool * ib + B * pool * dim * eb + B * dim * cb) / hbm_bw(sc)
    assert res["lookup_fwd_s"] == pytest.approx(fwd, rel=1e-12)
    assert res["lookup_bwd_s"] == pytest.approx(2.0 * fwd, rel=1e-12)
    w = 16
    unit = B / w * dim * cb
    # owner sends its outputs to 7 node peers over NVLink and 8 ranks in the other node;
    # a rank of the other node receives one share over the network
    a2a = 10e-6 + max(7 * unit / link_bw(sc, 0), 8 * unit / link_bw(sc, 1))
    assert res["a2a_fwd_s"] == pytest.approx(a2a, rel=1e-12)
    unit_idx = B / w * pool * ib
    idx = 10e-6 + max(7 * unit_idx / link_bw(sc, 0), 8 * unit_idx / link_bw(sc, 1))
    assert res["idx_a2a_s"] == pytest.approx(idx, rel=1e-12)
    assert res["rs_fwd_s"] == 0.0 and res["ag_bwd_s"] == 0.0 and res["dp_allreduce_s"] == 0.0
    state = rows * dim * eb + rows * 4.0  # row-wise Adagrad: one fp32 per row
    per_rank = res["per_rank"]
    others = np.delete(per_rank["hbm_bytes"], 3)
    assert per_rank["hbm_bytes"][3] - others.max() == pytest.approx(
        state + B * pool * ib + 2 * B * dim * cb, rel=1e-12)
    assert per_rank["lookup_fwd_s"][3] == pytest.approx(fwd, rel=1e-12)
    assert np.all(np.delete(per_rank["lookup_fwd_s"], 3) == 0.0)


def ring_rs(n, nbytes, lat, bw):
    return (n - 1) * lat + (n - 1) / n * nbytes / bw


def test_row_wise_table_closed_form():
    rows, dim, pool = 1_000_003, 32, 10.0
    sc = scenario([{"name": "a", "rows": rows, "dim": dim, "pooling": pool}], gpus=8,
                  comm_dtype="fp16")
    res = dlrm.evaluate(sc, plan_for(sc, {"a": {"type": "row_wise"}}))
    w, eb, ib, cb = 8, 4.0, 8.0, 2.0
    # row-wise: no block penalty (TorchRec _get_rw_sharding_perf has none), full width read
    fwd = (B * pool / w * ib + B * pool / w * dim * eb + B * dim * cb) / hbm_bw(sc)
    assert res["lookup_fwd_s"] == pytest.approx(fwd, rel=1e-12)
    # backward: 2 x forward plus the batched copy of the gradient output, 2.455 x its bytes
    # (global batch x dim x bwd comm dtype, fp16 here) at the kernel bandwidth
    bwd = 2.0 * fwd + 2.455 * B * dim * cb / hbm_bw(sc)
    assert res["lookup_bwd_s"] == pytest.approx(bwd, rel=1e-12)
    # one flat reduce-scatter over the world as TorchRec's RW sharder issues it: the full
    # pooled output over the (here: only) node link, one latency
    nbytes = B * dim * cb
    assert res["rs_fwd_s"] == pytest.approx(2e-6 + nbytes / link_bw(sc, 0), rel=1e-12)
    assert res["ag_bwd_s"] == pytest.approx(2e-6 + nbytes / link_bw(sc, 0), rel=1e-12)
    assert res["a2a_fwd_s"] == 0.0
    # indices bucketized by row: every rank sends pool/W of its local ids to each peer
    idx = 2e-6 + (B / w) * (pool / w) * ib * (w - 1) / link_bw(sc, 0)
    assert res["idx_a2a_s"] == pytest.approx(idx, rel=1e-12)
    shard = math.ceil(rows / w) * (dim * eb + 4.0)
    hb = res["per_rank"]["hbm_bytes"]
    assert np.allclose(hb, hb[0], rtol=0, atol=0)
    assert res["hbm_max_gib"] * D_GIB >= shard


D_GIB = 1024.0 ** 3


def test_row_wise_across_nodes_pays_full_output_on_the_slow_link():
    # 16 ranks in two nodes: TorchRec's RW estimator (BasicCommsBandwidths.get_bw: world >
    # local world -> inter-host bandwidth) sends the whole pooled output B x dim x dtype over
    # the network link, plus the latency of that tier; no hierarchical reduce-scatter
    dim = 128
    sc = scenario([{"name": "a", "rows": 1_000_000, "dim": dim, "pooling": 4.0}], gpus=16,
                  tiers=TWO_TIERS, comm_dtype="fp16", bwd_comm_dtype="fp32")
    res = dlrm.evaluate(sc, plan_for(sc, {"a": {"type": "row_wise"}}))
    assert res["rs_fwd_s"] == pytest.approx(10e-6 + B * dim * 2.0 / link_bw(sc, 1), rel=1e-12)
    assert res["ag_bwd_s"] == pytest.approx(10e-6 + B * dim * 4.0 / link_bw(sc, 1), rel=1e-12)


@pytest.mark.parametrize("k, factor, read", [(1, 1.0, 128), (2, 1.15, 64), (4, 1.75, 32),
                                             (8, 1.75, 32), (16, 1.75, 32)])
def test_column_wise_shard_width_penalty(k, factor, read):
    # a column-wise shard of width w = 128 / k: TorchRec _get_tw_sharding_perf multiplies the
    # kernel bytes by 1 (w >= 128), HALF_BLOCK_PENALTY 1.15 (64 <= w < 128) or
    # QUARTER_BLOCK_PENALTY 1.75 (w < 64) and reads rows of max(w, 32) columns; so k = 8, 16
    # (w = 16, 8) cost each rank as much as k = 4 (w = 32) but write fewer outputs
    dim, pool = 128, 6.0
    sc = scenario([{"name": "a", "rows": 50_000, "dim": dim, "pooling": pool}], gpus=16,
                  tiers=TWO_TIERS, comm_dtype="fp32")
    res = dlrm.evaluate(sc, plan_for(sc, {"a": {"type": "column_wise", "shards": k}}))
    w = dim / k
    fwd = factor * (B * pool * 8.0 + B * pool * read * 4.0 + B * w * 4.0) / hbm_bw(sc)
    assert res["lookup_fwd_s"] == pytest.approx(fwd, rel=1e-12)
    assert res["lookup_bwd_s"] == pytest.approx(2.0 * fwd, rel=1e-12)


def test_data_parallel_table_closed_form():
    rows, dim, pool = 200_000, 64, 2.0
    sc = scenario([{"name": "a", "rows": rows, "dim": dim, "pooling": pool}], gpus=8)
    res = dlrm.evaluate(sc, plan_for(sc, {"a": {"type": "data_parallel"}}))
    w, eb, ib, cb = 8, 4.0, 8.0, 4.0
    local = B / w
    fwd = (local * pool * ib + local * pool * dim * eb + local * dim * cb) / hbm_bw(sc)
    assert res["lookup_fwd_s"] == pytest.approx(fwd, rel=1e-12)
    bwd = 2.0 * fwd + 9.22 * rows * dim * eb / hbm_bw(sc)
    assert res["lookup_bwd_s"] == pytest.approx(bwd, rel=1e-12)
    nbytes = rows * dim * 4.0
    ring = 2 * (w - 1) * 2e-6 + 2 * (w - 1) / w * nbytes / link_bw(sc, 0)
    tree = 2 * math.ceil(math.log2(w)) * 2e-6 + 2 * nbytes / link_bw(sc, 0)
    assert ring < tree
    assert res["dp_allreduce_s"] == pytest.approx(ring, rel=1e-12)
    assert res["a2a_fwd_s"] == 0.0 and res["idx_a2a_s"] == 0.0


@pytest.mark.parametrize("gpus,tiers", [(8, None), (32, TWO_TIERS), (64, THREE_TIERS)])
def test_balanced_table_wise_all_to_all_is_the_collective(gpus, tiers):
    dim = 128
    tabs = [{"name": f"t{i}", "rows": 1000, "dim": dim, "pooling": 1.0} for i in range(gpus)]
    sc = scenario(tabs, gpus=gpus, tiers=tiers, comm_dtype="bf16")
    res = dlrm.evaluate(sc, plan_for(sc, {f"t{i}": {"type": "table_wise", "rank": i}
                                          for i in range(gpus)}))
    expect = all_to_all_time(sc.sys, B * dim * 2.0, float(gpus), 1.0, 1.0, 1.0, 1.0, 1.0)
    assert res["a2a_fwd_s"] == pytest.approx(expect, rel=1e-12)
    expect_idx = all_to_all_time(sc.sys, B * 1.0 * 8.0, float(gpus), 1.0, 1.0, 1.0, 1.0, 1.0)
    assert res["idx_a2a_s"] == pytest.approx(expect_idx, rel=1e-12)


def mixed(sc_kw=None):
    tabs = [{"name": "tw", "rows": 50_000, "dim": 64, "pooling": 3.0},
            {"name": "rw", "rows": 2_000_000, "dim": 64, "pooling": 20.0},
            {"name": "cw", "rows": 300_000, "dim": 128, "pooling": 4.0},
            {"name": "twrw", "rows": 900_000, "dim": 32, "pooling": 7.0, "hit_rate": 0.5},
            {"name": "dp", "rows": 100, "dim": 16, "pooling": 1.0}]
    sc = scenario(tabs, gpus=32, tiers=TWO_TIERS, **(sc_kw or {}))
    plan = plan_for(sc, {"tw": {"type": "table_wise", "rank": 5},
                         "rw": {"type": "row_wise"},
                         "cw": {"type": "column_wise", "shards": 4, "rank": 1, "stride": 9},
                         "twrw": {"type": "table_row_wise", "rank": 17, "tier": "uvm_cache"},
                         "dp": {"type": "data_parallel", "tier": "hbm"}})
    return sc, plan


def test_step_is_the_sum_of_its_parts():
    sc, plan = mixed()
    res = dlrm.evaluate(sc, plan)
    parts = sum(res[f] for f in D.DBREAKDOWN_FIELDS)
    assert res["step_time_s"] == pytest.approx(parts, rel=1e-12)
    assert all(res[f] >= 0.0 for f in D.DBREAKDOWN_FIELDS)
    assert res["rs_fwd_s"] > 0 and res["dp_allreduce_s"] > 0 and res["a2a_fwd_s"] > 0
    emb_bwd = res["a2a_bwd_s"] + res["ag_bwd_s"] + res["lookup_bwd_s"] + res["dp_allreduce_s"]
    assert res["dense_allreduce_exposed_s"] == pytest.approx(
        max(0.0, res["dense_allreduce_s"] - emb_bwd), rel=1e-12, abs=1e-18)
    assert res["samples_per_s"] == pytest.approx(B / res["step_time_s"], rel=1e-12)


def test_quantized_communication_scales_the_all_to_all_bytes():
    sc32, plan = mixed({"comm_dtype": "fp32"})
    sc16, _ = mixed({"comm_dtype": "fp16", "bwd_comm_dtype": "fp8"})
    r32, r16 = dlrm.evaluate(sc32, plan), dlrm.evaluate(sc16, plan)
    lat = 10e-6
    assert r16["a2a_fwd_s"] - lat == pytest.approx(0.5 * (r32["a2a_fwd_s"] - lat), rel=1e-12)
    assert r16["a2a_bwd_s"] - lat == pytest.approx(0.25 * (r32["a2a_bwd_s"] - lat), rel=1e-12)
    assert r16["idx_a2a_s"] == pytest.approx(r32["idx_a2a_s"], rel=1e-12)  # ids not quantized


def test_uvm_and_ddr_tiers_are_slower_and_move_memory():
    sc = scenario([{"name": "a", "rows": 10_000_000, "dim": 64, "pooling": 5.0,
                    "hit_rate": 0.8}], gpus=8)
    res = {t: dlrm.evaluate(sc, plan_for(sc, {"a": {"type": "table_wise", "tier": t}}))
           for t in D.MEMORY_TIERS}
    assert res["hbm"]["lookup_fwd_s"] < res["uvm_cache"]["lookup_fwd_s"] < res["ddr"][
        "lookup_fwd_s"]
    h2d = sc.job[D.DJOB_H2D_BANDWIDTH]
    # TorchRec kernel_bw_lookup: FUSED_UVM_CACHING runs at (r hbm + (1 - r) h2d) / 10 with r
    # the cached share (the hit rate here), FUSED_UVM at h2d / 10, FUSED at hbm
    ratio = hbm_bw(sc) / ((0.8 * hbm_bw(sc) + 0.2 * h2d) / 10.0)
    assert res["uvm_cache"]["lookup_fwd_s"] == pytest.approx(
        ratio * res["hbm"]["lookup_fwd_s"], rel=1e-12)
    assert res["ddr"]["lookup_fwd_s"] == pytest.approx(
        hbm_bw(sc) / (h2d / 10.0) * res["hbm"]["lookup_fwd_s"], rel=1e-12)
    assert res["hbm"]["ddr_max_gib"] == 0.0
    state = 10_000_000 * (64 * 4.0 + 4.0)
    assert res["ddr"]["ddr_max_gib"] * D_GIB == pytest.approx(state, rel=1e-12)
    assert res["uvm_cache"]["hbm_max_gib"] - res["ddr"]["hbm_max_gib"] == pytest.approx(
        0.2 * 10_000_000 * 64 * 4.0 / D_GIB, rel=1e-9)


def test_dense_and_key_value_kernels():
    # TorchRec kernel_bw_lookup: DENSE at 0.5 x HBM bandwidth, KEY_VALUE at the host link
    # (hbm_to_ddr_mem_bw, not divided by 10); dense keeps everything in HBM, key-value keeps
    # rows and state in the SSD store and a uvm_cache_fraction (KV_CACHING_RATIO 0.2) cache in HBM
    rows, dim = 10_000_000, 128
    sc = scenario([{"name": "a", "rows": rows, "dim": dim, "pooling": 5.0}], gpus=8)
    res = {t: dlrm.evaluate(sc, plan_for(sc, {"a": {"type": "table_wise", "tier": t}}))
           for t in ("hbm", "dense", "key_value", "ddr")}
    h2d = sc.job[D.DJOB_H2D_BANDWIDTH]
    lf = res["hbm"]["lookup_fwd_s"]
    assert res["dense"]["lookup_fwd_s"] == pytest.approx(2.0 * lf, rel=1e-12)
    assert res["key_value"]["lookup_fwd_s"] == pytest.approx(hbm_bw(sc) / h2d * lf, rel=1e-12)
    assert res["ddr"]["lookup_fwd_s"] == pytest.approx(
        10.0 * res["key_value"]["lookup_fwd_s"], rel=1e-12)
    assert res["dense"]["hbm_max_gib"] == res["hbm"]["hbm_max_gib"]
    assert res["dense"]["ddr_max_gib"] == 0.0 and res["key_value"]["ddr_max_gib"] == 0.0
    state = rows * (dim * 4.0 + 4.0)
    assert (res["hbm"]["hbm_max_gib"] - res["key_value"]["hbm_max_gib"]) * D_GIB == \
        pytest.approx(state - 0.2 * rows * dim * 4.0, rel=1e-9)


def test_out_of_memory_is_flagged():
    sc = scenario([{"name": "a", "rows": 200_000_000, "dim": 128, "pooling": 1.0}], gpus=8)
    tw = dlrm.evaluate(sc, plan_for(sc, {"a": {"type": "table_wise"}}))
    rw = dlrm.evaluate(sc, plan_for(sc, {"a": {"type": "row_wise"}}))
    assert tw["status"] == "out_of_memory" and not tw["feasible"]
    assert rw["status"] == "ok" and rw["feasible"]


def test_kernel_defends_bad_indexes():
    sc, plan = mixed()
    for field, value in ((D.PL_RANK, 32), (D.PL_RANK, -1), (D.PL_KIND, len(D.SHARDING)),
                         (D.PL_TIER, len(D.MEMORY_TIERS)), (D.PL_GROUP, -1)):
        bad = plan.copy()
        bad[field, 0] = value
        res = dlrm.evaluate(sc, bad)
        assert res["status"] == "bad_index" and res["step_time_s"] == math.inf
    bad = plan.copy()
    bad[D.PL_SHARDS, 2] = 3  # does not divide 128
    assert dlrm.evaluate(sc, bad)["status"] == "invalid_config"


# ---------------------------------------------------------------------------------------------
# Input errors: one line naming table and field
# ---------------------------------------------------------------------------------------------


def one_line_error(fn):
    with pytest.raises(ScenarioError) as exc:
        fn()
    msg = str(exc.value)
    assert "\n" not in msg
    return msg


def test_error_column_shards_not_dividing_dim():
    sc, _ = mixed()
    msg = one_line_error(lambda: plan_for(sc, {"cw": {"type": "column_wise", "shards": 3}}))
    assert msg == "tables[cw].shards: 3 does not divide dim 128 (got 3; allowed: divisors of 128)"


def test_error_unknown_sharding_type():
    sc, _ = mixed()
    msg = one_line_error(lambda: plan_for(sc, {"tw": {"type": "diagonal"}}))
    assert msg.startswith("tables[tw].type: unknown sharding type (got 'diagonal'; allowed: ")
    assert "table_row_wise" in msg


def test_error_rank_out_of_range():
    sc, _ = mixed()
    msg = one_line_error(lambda: plan_for(sc, {"tw": {"type": "table_wise", "rank": 32}}))
    assert msg == "tables[tw].rank: rank out of range for 32 ranks (got 32; allowed: 0..31)"


def test_error_table_larger_than_all_memory():
    msg = one_line_error(lambda: scenario(
        [{"name": "huge", "rows": 10**12, "dim": 256, "pooling": 1.0}], gpus=8))
    assert msg.startswith("tables[huge].rows: the table needs ")
    assert "more than the" in msg


def test_error_bad_table_field_names_the_table():
    msg = one_line_error(lambda: scenario(
        [{"name": "ok", "rows": 10, "dim": 8}, {"name": "neg", "rows": -5, "dim": 8}]))
    assert msg.startswith("tables[neg].rows: ")


def test_error_unknown_key():
    msg = one_line_error(lambda: scenario([{"name": "a", "rows": 10, "dim": 8, "colour": 1}]))
    assert msg.startswith("tables[a].colour: unknown key")
