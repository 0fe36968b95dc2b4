"""Known-answer tests of the sharding menu's row groups (table-row-wise with any group size,
grid sharding) and of the SSD tier with its prefetch pipeline; the hand derivations are in
the docstrings. The C and numba ports are held to these reference terms by
``tests/test_dlrm_kernels.py``."""

from __future__ import annotations

import math

import numpy as np
import pytest

from trainscape import dlrm
from trainscape.dlrm import layout as D
from trainscape.dlrm.reference import dense_bwd_time, dense_fwd_time
from trainscape.spec import ScenarioError
from test_dlrm_reference import B, TWO_TIERS, hbm_bw, link_bw, plan_for, ring_rs, scenario

GIB = 1073741824.0


def test_table_row_wise_group_of_four_inside_the_node():
    """8 ranks in one node, a table (1,000,002 rows, dim 64, pooling 6) table-row-wise over
    the group of 4 holding rank 5 (ranks 4..7). Each group rank looks up a quarter of the
    global batch's ids and writes the whole batch's partial output (TorchRec
    ``_get_twrw_sharding_perf``: inputs / group, outputs the batch) and, as a group other
    than the node, pays the kernel's width penalty of a 64-column shard (1.15, TorchRec
    ``HALF_BLOCK_PENALTY``): ``1.15 (B p/4 * 8 + B p/4 * 64 * 4 + B * 64 * 4) / hbm``; ranks
    0..3 do nothing. The group's
    reduce-scatter of the ``B x 64`` fp32 output is a ring over 4 ranks of the node link,
    ``3 lat + 3/4 bytes / bw``. After it each group rank holds 64/4 = 16 columns of the
    batch and sends them to the 7 other ranks (the 3 peers' share is over-counted: the
    all-to-all sees one node domain): busiest send 7 x 16, busiest receive 64 - 16 on a group
    rank, 64 on the others -> 112 units of ``B/8 x 4`` bytes, plus one latency. Each group
    rank stores ceil(rows / 4) = 250,001 rows with one fp32 Adagrad state each."""
    rows, dim, pool = 1_000_002, 64, 6.0
    sc = scenario([{"name": "a", "rows": rows, "dim": dim, "pooling": pool}], gpus=8,
                  comm_dtype="fp32")
    res = dlrm.evaluate(sc, plan_for(sc, {"a": {"type": "table_row_wise", "rank": 5,
                                                "group": 4}}))
    eb, ib, cb = 4.0, 8.0, 4.0
    fwd = 1.15 * (B * pool / 4 * ib + B * pool / 4 * dim * eb + B * dim * cb) / hbm_bw(sc)
    lf = res["per_rank"]["lookup_fwd_s"]
    np.testing.assert_allclose(lf[4:], fwd, rtol=1e-12)
    assert np.all(lf[:4] == 0.0)
    assert res["lookup_bwd_s"] == pytest.approx(2.0 * fwd, rel=1e-12)
    bw0 = link_bw(sc, 0)
    assert res["rs_fwd_s"] == pytest.approx(ring_rs(4, B * dim * cb, 2e-6, bw0), rel=1e-12)
    assert res["ag_bwd_s"] == pytest.approx(ring_rs(4, B * dim * cb, 2e-6, bw0), rel=1e-12)
    assert res["a2a_fwd_s"] == pytest.approx(2e-6 + B / 8 * cb * 7 * dim / 4 / bw0, rel=1e-12)
    hb = res["per_rank"]["hbm_bytes"]
    assert hb[5] - hb[1] == pytest.approx(
        250_001 * (dim * eb + 4.0) + B * pool / 4 * ib + 2 * B * dim * cb, rel=1e-12)


def test_grid_shard_two_blocks_on_two_nodes():
    """16 ranks in 2 nodes of 8; a 128-column table grid-sharded in k = 2 blocks of 64
    columns, block 0 on node 0 (rank 0), block 1 on node 1 (stride 1 node): every rank holds
    ceil(rows / 8) rows of one block and looks up an eighth of the batch's ids at width 64
    (TorchRec costs a grid shard as a table-row-wise shard of the block width,
    ``perf_func_emb_wall_time``; trainscape adds the width penalty of a 64-column block,
    1.15). Each node's reduce-scatter carries ``B x 64`` fp16 values
    (the node collective every rank's node runs, as for table-row-wise). After it a rank holds
    64/8 = 8 columns of the batch and sends them to the 8 ranks of the other node over the
    network: sent 8 x 8 = 64 units, received 128 (all) - 64 (own node) = 64; nothing crosses
    inside a node (the reduce-scatter served it) -> ``10 us + B/16 x 2 x 64 / bw1``. The ids
    go to both blocks: every rank owns pool / 8 of them, twice the row-wise total."""
    rows, dim, pool = 800_000, 128, 4.0
    tables = [{"name": "a", "rows": rows, "dim": dim, "pooling": pool}]
    sc = scenario(tables, gpus=16, tiers=TWO_TIERS, comm_dtype="fp16")
    grid = dlrm.evaluate(sc, plan_for(sc, {"a": {"type": "grid_shard", "shards": 2,
                                                 "rank": 0, "stride": 1}}))
    eb, ib, cb = 4.0, 8.0, 2.0
    fwd = 1.15 * (B * pool / 8 * ib + B * pool / 8 * 64 * eb + B * 64 * cb) / hbm_bw(sc)
    np.testing.assert_allclose(grid["per_rank"]["lookup_fwd_s"], fwd, rtol=1e-12)
    assert grid["a2a_fwd_s"] == pytest.approx(10e-6 + B / 16 * cb * 64 / link_bw(sc, 1),
                                              rel=1e-12)
    np.testing.assert_allclose(grid["per_rank"]["own_idx"], pool / 8, rtol=1e-12)
    # the node reduce-scatter equals that of a 64-column table-row-wise table
    half = scenario([{"name": "a", "rows": rows, "dim": 64, "pooling": pool}], gpus=16,
                    tiers=TWO_TIERS, comm_dtype="fp16")
    twrw = dlrm.evaluate(half, plan_for(half, {"a": {"type": "table_row_wise"}}))
    assert grid["rs_fwd_s"] == pytest.approx(twrw["rs_fwd_s"], rel=1e-12)
    assert grid["rs_fwd_s"] > 0.0
    hb = grid["per_rank"]["hbm_bytes"]
    assert np.allclose(hb, hb[0], rtol=1e-12)


def test_row_group_of_the_node_is_the_default_and_grid_of_one_block_is_table_row_wise():
    """``group`` = the node size is the node group (0); a grid of one block is the table
    itself table-row-wise over that group, for every group size (128 columns: no width
    penalty on either)."""
    tables = [{"name": f"t{i}", "rows": 100_000 * (i + 1), "dim": 128, "pooling": 2.0 + i}
              for i in range(3)]
    sc = scenario(tables, gpus=16, tiers=TWO_TIERS)
    base = dlrm.evaluate(sc, plan_for(sc, {"t1": {"type": "table_row_wise", "rank": 9}}))
    same = dlrm.evaluate(sc, plan_for(sc, {"t1": {"type": "table_row_wise", "rank": 9,
                                                  "group": 8}}))
    assert same["step_time_s"] == base["step_time_s"]
    for g in (2, 4, 8, 16):
        a = dlrm.evaluate(sc, plan_for(sc, {"t1": {"type": "table_row_wise", "rank": 9,
                                                   "group": g}}))
        b = dlrm.evaluate(sc, plan_for(sc, {"t1": {"type": "grid_shard", "shards": 1,
                                                   "rank": 9, "group": g}}))
        assert a["step_time_s"] == pytest.approx(b["step_time_s"], rel=1e-12)
    # a group spanning both nodes pays its reduce-scatter as TorchRec costs a process group
    # across hosts: the full B x 128 output over the network link, one latency
    wide = dlrm.evaluate(sc, plan_for(sc, {"t1": {"type": "table_row_wise", "group": 16}}))
    cb = 4.0
    assert wide["rs_fwd_s"] == pytest.approx(10e-6 + B * 128 * cb / link_bw(sc, 1), rel=1e-12)
    assert wide["rs_fwd_s"] > base["rs_fwd_s"]


SSD = {"capacity_gb": 1000.0, "bandwidth_GBps": 2.0, "prefetch_depth": 2}


def ssd_scenario(ssd, tables=None):
    tables = tables or [{"name": "a", "rows": 10_000_000, "dim": 128, "pooling": 5.0,
                         "hit_rate": 0.75}]
    sc = scenario(tables, gpus=8)
    raw = sc.spec.model_dump(exclude_none=True)
    raw["model"]["tables"] = tables
    raw.pop("plan", None)
    if ssd is not None:
        raw["ssd"] = ssd
    return dlrm.load(raw)


def test_ssd_prefetch_closed_form():
    """A key_value table (10M rows, dim 128, pooling 5, hit rate 0.75) table-wise on rank 2
    with an SSD of 2 GB/s and the prefetch pipeline 2 batches deep. Misses per step:
    ``B x 5 x 0.25``; each reads one row with its Adagrad state (128 x 4 + 4 bytes) and
    writes an evicted one back (FBGEMM SSD TBE prefetch): fetch = ``2 x misses x 516 / 2e9``.
    Prefetched, every lookup finds its row in the HBM cache: the lookup equals the hbm
    tier's (TorchRec ``kernel_bw_lookup``: ``prefetch_pipeline`` -> FUSED). The fetch runs
    beside the dense compute ``h`` of the step: exposed ``max(0, fetch - h)``, added to the
    step. The cache holds 2 batches of prefetched rows: ``2 x misses x 128 x 4`` bytes of HBM
    more than the key_value table without a pipeline; the SSD holds ``rows x 516`` bytes."""
    sc = ssd_scenario(SSD)
    kv = dlrm.evaluate(sc, plan_for(sc, {"a": {"type": "table_wise", "rank": 2,
                                               "tier": "key_value"}}))
    hbm = dlrm.evaluate(sc, plan_for(sc, {"a": {"type": "table_wise", "rank": 2}}))
    misses = B * 5.0 * 0.25
    fetch = 2.0 * misses * (128 * 4 + 4) / 2e9
    hide = dense_fwd_time(sc.sys, sc.job) + dense_bwd_time(sc.sys, sc.job)
    assert fetch > hide
    assert kv["ssd_fetch_s"] == pytest.approx(fetch, rel=1e-12)
    assert kv["ssd_prefetch_exposed_s"] == pytest.approx(fetch - hide, rel=1e-12)
    assert kv["lookup_fwd_s"] == pytest.approx(hbm["lookup_fwd_s"], rel=1e-12)
    assert kv["step_time_s"] - hbm["step_time_s"] == pytest.approx(fetch - hide, rel=1e-9)
    assert kv["ssd_max_gib"] * GIB == pytest.approx(10_000_000 * 516, rel=1e-12)
    no_pipe = dlrm.evaluate(ssd_scenario({**SSD, "prefetch_depth": 0}),
                            plan_for(sc, {"a": {"type": "table_wise", "rank": 2,
                                                "tier": "key_value"}}))
    assert (kv["per_rank"]["hbm_bytes"][2] - no_pipe["per_rank"]["hbm_bytes"][2]) == \
        pytest.approx(2 * misses * 128 * 4, rel=1e-12)
    # without the pipeline the misses are read before the lookups (all exposed) and the
    # lookup runs at TorchRec's KEY_VALUE bandwidth (the host link)
    assert no_pipe["ssd_prefetch_exposed_s"] == pytest.approx(fetch, rel=1e-12)
    h2d = sc.job[D.DJOB_H2D_BANDWIDTH]
    assert no_pipe["lookup_fwd_s"] == pytest.approx(hbm_bw(sc) / h2d * hbm["lookup_fwd_s"],
                                                    rel=1e-12)


def test_ssd_fetch_hidden_behind_the_dense_compute_and_capacity():
    """A fast SSD's fetch (``2 x misses x 516 / 1e16`` s) is shorter than the dense compute:
    nothing exposed. An SSD of 1 GB per GPU cannot hold 5.16 GB of rows + state: out of
    memory. Without an ``[ssd]`` the key_value store is host DRAM as before: no fetch."""
    fast = ssd_scenario({**SSD, "bandwidth_GBps": 1e7})
    res = dlrm.evaluate(fast, plan_for(fast, {"a": {"type": "table_wise", "tier": "key_value"}}))
    assert 0.0 < res["ssd_fetch_s"] < dense_fwd_time(fast.sys, fast.job)
    assert res["ssd_prefetch_exposed_s"] == 0.0
    small = ssd_scenario({**SSD, "capacity_gb": 1.0})
    res = dlrm.evaluate(small, plan_for(small, {"a": {"type": "row_wise", "tier": "key_value"}}))
    assert res["status"] == "ok"  # 5.16 GB / 8 ranks fits
    res = dlrm.evaluate(small, plan_for(small, {"a": {"type": "table_wise",
                                                      "tier": "key_value"}}))
    assert res["status"] == "out_of_memory"
    none = ssd_scenario(None)
    res = dlrm.evaluate(none, plan_for(none, {"a": {"type": "table_wise", "tier": "key_value"}}))
    assert res["ssd_fetch_s"] == 0.0 and res["ssd_prefetch_exposed_s"] == 0.0
    assert res["ssd_max_gib"] * GIB == pytest.approx(10_000_000 * 516, rel=1e-12)


def test_ssd_row_wise_spreads_the_fetch():
    """Row-wise, each of the 8 ranks serves 1/8 of the lookups: fetch / 8 per rank."""
    sc = ssd_scenario(SSD)
    tw = dlrm.evaluate(sc, plan_for(sc, {"a": {"type": "table_wise", "tier": "key_value"}}))
    rw = dlrm.evaluate(sc, plan_for(sc, {"a": {"type": "row_wise", "tier": "key_value"}}))
    assert rw["ssd_fetch_s"] == pytest.approx(tw["ssd_fetch_s"] / 8, rel=1e-12)
    np.testing.assert_allclose(rw["per_rank"]["ssd_bytes"],
                               math.ceil(10_000_000 / 8) * 516, rtol=1e-12)


@pytest.mark.parametrize("entry, msg", [
    ({"type": "table_row_wise", "group": 3},
     "tables[a].group: a row group must divide the 8 ranks (got 3; allowed: 0 (the node) or a "
     "divisor of 8)"),
    ({"type": "table_wise", "group": 2},
     "tables[a].group: only table_row_wise and grid_shard tables have row groups (type "
     "table_wise) (got 2; allowed: 0)"),
    ({"type": "grid_shard", "shards": 3},
     "tables[a].shards: 3 does not divide dim 128 (got 3; allowed: divisors of 128)"),
])
def test_row_group_errors_name_the_field(entry, msg):
    sc = ssd_scenario(None)
    with pytest.raises(ScenarioError) as exc:
        plan_for(sc, {"a": entry})
    assert str(exc.value) == msg


def test_evolve_spreads_a_hot_table_with_a_grid():
    """One hot table (pooling 100, 128 columns, 4M rows) among 5 small ones on 64 ranks (8
    nodes): before row groups and grid, no plan could beat 1.085 ms (the lower bound over
    the old forms, its table argument); the search's grid / row-group moves find a plan
    below it that uses them. The plan is feasible and the new lower bound holds."""
    from trainscape.dlrm import bounds, planner
    from test_dlrm_planner import TIERS

    tables = [{"name": "hot", "rows": 4_000_000, "dim": 128, "pooling": 100.0}]
    tables += [{"name": f"t{i}", "rows": 1000, "dim": 128, "pooling": 1.0} for i in range(5)]
    raw = {"model": {"tables": tables, "interaction": "dcn", "dense_arch": [64, 32],
                     "over_arch": [64, 1]},
           "job": {"global_batch": 65536, "embedding_dtype": "fp32"},
           "cluster": {"gpu": "h100-sxm-80gb", "gpus": 64,
                       "tiers": [dict(TIERS[0], size=8), dict(TIERS[1], size=8)],
                       "host_ddr_gb": 512.0, "host_to_device_GBps": 32.0}}
    sc = dlrm.load(raw)
    r = planner.plan(sc, "evolve", iterations=5000)
    assert r.result["feasible"]
    assert r.step_time_s < 1.08e-3
    hot = r.plan[:, 0]
    assert hot[D.PL_KIND] == D.SH_GRID or (hot[D.PL_KIND] == D.SH_TWRW and hot[D.PL_GROUP] > 0)
    assert bounds.lower_bound(sc) <= r.step_time_s


def test_evolve_moves_tables_to_the_ssd_only_when_there_is_one():
    """The Criteo tables with Adam (~310 GB) on 4 H100s do not fit HBM: without an SSD the
    plan spills to host DDR (no key_value table); with ``[ssd]`` the search puts tables on
    the SSD (key_value) and the step is lower."""
    import tomllib
    from pathlib import Path

    from trainscape.dlrm import planner

    path = Path(__file__).resolve().parents[1] / "examples/dlrm/criteo_1tb_4gpu_ssd.toml"
    with_ssd = dlrm.load(str(path))
    raw = tomllib.loads(path.read_text())
    raw.pop("ssd")
    without = dlrm.load(raw, base_dir=path.parent)
    a = planner.plan(without, "evolve", iterations=5000)
    b = planner.plan(with_ssd, "evolve", iterations=5000)
    assert a.result["feasible"] and b.result["feasible"]
    assert not np.any(a.plan[D.PL_TIER] == D.MT_KV)
    assert np.any(b.plan[D.PL_TIER] == D.MT_KV)
    assert b.step_time_s < a.step_time_s
    assert b.result["ssd_max_gib"] * GIB <= with_ssd.job[D.DJOB_SSD_BYTES]
