"""TorchRec plan interop: export -> import round trips, TorchRec's shard arithmetic, refusals
with field paths, the ``shard --format torchrec`` / ``--from-torchrec`` commands, and (with
the optional ``torchrec`` installed) TorchRec's own objects."""

from __future__ import annotations

import json

import numpy as np
import pytest
from click.testing import CliRunner
from hypothesis import given, settings
from hypothesis import strategies as st

from trainscape import dlrm
from trainscape.dlrm import layout as D
from trainscape.dlrm import torchrec_plan as tp
from trainscape.spec import ScenarioError
from _dlrm_common import write_tiny_scenario

TIERS = [
    {"name": "node", "size": 4, "bandwidth_GBps": 400.0, "latency_us": 2.0, "efficiency": 1.0},
    {"name": "pod", "size": 4, "bandwidth_GBps": 50.0, "latency_us": 10.0, "efficiency": 1.0},
]


def scenario(gpus=10):
    tables = [{"name": f"t{i}", "rows": 1000 * (i + 1) + 7 * i, "dim": (32, 64, 128)[i % 3],
               "pooling": 1.0 + i, "hit_rate": 0.5} for i in range(9)]
    raw = {"model": {"tables": tables, "interaction": "dcn", "dense_arch": [64, 32],
                     "over_arch": [64, 1]},
           "job": {"global_batch": 128 * gpus},
           "cluster": {"gpu": "h100-sxm-80gb", "gpus": gpus, "tiers": TIERS,
                       "host_ddr_gb": 512.0, "host_to_device_GBps": 32.0}}
    return dlrm.load(raw)


@st.composite
def plans(draw):
    gpus = draw(st.integers(1, 16))
    sc = scenario(gpus)
    plan = np.zeros((D.N_PLAN, sc.n_tables), dtype=np.int32)
    kinds = list(range(len(D.SHARDING)))
    if gpus % sc.node_size:
        kinds.remove(D.SH_GRID)  # TorchRec's grid needs whole nodes
    for i in range(sc.n_tables):
        kind = draw(st.sampled_from(kinds))
        dim = int(sc.tables[D.TAB_DIM, i])
        plan[D.PL_KIND, i] = kind
        plan[D.PL_RANK, i] = draw(st.integers(0, gpus - 1))
        plan[D.PL_STRIDE, i] = draw(st.integers(0, 2 * gpus))
        plan[D.PL_TIER, i] = draw(st.integers(0, len(D.MEMORY_TIERS) - 1))
        divs = [k for k in (1, 2, 4, 8) if dim % k == 0 and k <= gpus]
        plan[D.PL_SHARDS, i] = (draw(st.sampled_from(divs))
                                if kind in (D.SH_CW, D.SH_GRID) else 1)
        if kind in (D.SH_TWRW, D.SH_GRID):  # TorchRec's row group is the node
            plan[D.PL_GROUP, i] = draw(st.sampled_from([0, sc.node_size]
                                                       if gpus % sc.node_size == 0 else [0]))
    return sc, plan


@settings(max_examples=60, deadline=None)
@given(plans())
def test_export_import_round_trip(case):
    sc, plan = case
    doc = json.loads(json.dumps(tp.export_plan(sc, plan)))  # through JSON text
    back = tp.import_plan(sc, doc)
    np.testing.assert_array_equal(tp.canonical(sc, back), tp.canonical(sc, plan))
    a, b = dlrm.evaluate(sc, plan), dlrm.evaluate(sc, back)
    assert a["status"] == b["status"]
    assert a["step_time_s"] == b["step_time_s"] or not np.isfinite(a["step_time_s"])
    # every shard listed covers the table exactly once
    for name, ps in doc["plan"][tp.DEFAULT_MODULE].items():
        i = sc.table_names.index(name)
        rows, dim = int(sc.tables[D.TAB_ROWS, i]), int(sc.tables[D.TAB_DIM, i])
        if ps["sharding_spec"] is None:
            assert ps["sharding_type"] == "data_parallel"
            continue
        area = sum(s["shard_sizes"][0] * s["shard_sizes"][1]
                   for s in ps["sharding_spec"]["shards"])
        assert area == rows * dim


def test_torchrec_shard_arithmetic():
    # TorchRec sharding_plan._calculate_rw_shard_sizes_and_offsets docstring: 10 rows on 4
    # ranks -> 3, 3, 3, 1; 5 rows on 4 ranks -> 2, 2, 1, 0
    assert tp.rw_shard_sizes(10, 4) == [3, 3, 3, 1]
    assert tp.rw_shard_sizes(5, 4) == [2, 2, 1, 0]
    sc = scenario(10)
    plan = dlrm.plan_from_entries(sc, {
        "t2": {"type": "column_wise", "shards": 4, "rank": 7, "stride": 2},
        "t1": {"type": "table_row_wise", "rank": 9, "tier": "uvm_cache"},
        "t0": {"type": "row_wise", "tier": "ddr"}})
    doc = tp.export_plan(sc, plan)["plan"][tp.DEFAULT_MODULE]
    cw = doc["t2"]  # dim 128 in 4 shards of 32 on ranks 7, 9, 1, 3 (mod 10)
    assert cw["ranks"] == [7, 9, 1, 3] and cw["compute_kernel"] == "fused"
    assert [s["shard_offsets"] for s in cw["sharding_spec"]["shards"]] == [
        [0, 0], [0, 32], [0, 64], [0, 96]]
    assert cw["sharding_spec"]["shards"][1]["placement"] == "rank:9/cuda:1"  # local size 4
    tr = doc["t1"]  # rank 9 lies in the partial last node {8, 9}: 2007 rows -> 1004, 1003
    assert tr["ranks"] == [8, 9] and tr["compute_kernel"] == "fused_uvm_caching"
    assert [s["shard_sizes"] for s in tr["sharding_spec"]["shards"]] == [[1004, 64],
                                                                         [1003, 64]]
    assert tr["cache_params"] == {"load_factor": sc.job[D.DJOB_UVM_CACHE_FRACTION]}
    rw = doc["t0"]
    assert rw["compute_kernel"] == "fused_uvm" and rw["ranks"] == list(range(10))
    assert [s["shard_sizes"][0] for s in rw["sharding_spec"]["shards"]] == [100] * 10
    assert doc["t3"]["sharding_type"] == "table_wise" and doc["t3"]["ranks"] == [0]


def test_table_column_wise_imports_as_column_wise():
    sc = scenario(8)
    plan = dlrm.plan_from_entries(sc, {"t2": {"type": "column_wise", "shards": 4, "rank": 4,
                                              "stride": 1}})
    doc = tp.export_plan(sc, plan)
    doc["plan"][tp.DEFAULT_MODULE]["t2"]["sharding_type"] = "table_column_wise"
    np.testing.assert_array_equal(tp.canonical(sc, tp.import_plan(sc, doc)),
                                  tp.canonical(sc, plan))


def _doc(sc):
    return tp.export_plan(sc, dlrm.plan_from_entries(sc, {
        "t2": {"type": "column_wise", "shards": 4, "rank": 0, "stride": 1}}))


@pytest.mark.parametrize("edit, path", [
    (lambda d: d["plan"]["embedding_bag_collection"]["t0"].update(compute_kernel="quant"),
     "plan.embedding_bag_collection.t0.compute_kernel"),
    (lambda d: d["plan"]["embedding_bag_collection"]["t0"].update(sharding_type="grid"),
     "plan.embedding_bag_collection.t0.sharding_type"),
    (lambda d: d["plan"]["embedding_bag_collection"]["t0"].update(sharding_type="grid_shard"),
     "plan.embedding_bag_collection.t0.ranks"),
    (lambda d: d["plan"]["embedding_bag_collection"]["t2"].update(ranks=[0, 1, 3, 2]),
     "plan.embedding_bag_collection.t2.ranks"),
    (lambda d: d["plan"]["embedding_bag_collection"].pop("t5"),
     "plan.embedding_bag_collection"),
    (lambda d: d["plan"]["embedding_bag_collection"]["t0"].update(ranks=[99]),
     "plan.embedding_bag_collection.t0.ranks"),
    (lambda d: d["plan"]["embedding_bag_collection"]["t2"]["sharding_spec"]["shards"][0].update(
        shard_sizes=[5, 32]), "plan.embedding_bag_collection.t2.sharding_spec.shards"),
    (lambda d: d.update(world_size=3), "world_size"),
])
def test_import_refuses_what_it_cannot_cost(edit, path):
    sc = scenario(10)
    doc = _doc(sc)
    edit(doc)
    with pytest.raises(ScenarioError) as exc:
        tp.import_plan(sc, doc)
    assert str(exc.value).startswith(path + ":")


def test_shard_format_torchrec_and_from_torchrec(tmp_path):
    from trainscape.cli import main as group

    scen = write_tiny_scenario(tmp_path)
    runner = CliRunner()
    res = runner.invoke(group, ["shard", str(scen), "--method", "greedy", "--json"])
    assert res.exit_code == 0, res.output
    planned = json.loads(res.output)
    out = tmp_path / "plan.json"
    res = runner.invoke(group, ["shard", str(scen), "--method", "greedy", "--format",
                                "torchrec", "--out", str(out)])
    assert res.exit_code == 0, res.output
    doc = json.loads(out.read_text())
    assert doc["format"] == tp.FORMAT and len(doc["plan"][tp.DEFAULT_MODULE]) == 12
    res = runner.invoke(group, ["shard", str(scen), "--from-torchrec", str(out), "--json"])
    assert res.exit_code == 0, res.output
    costed = json.loads(res.output)
    assert costed["method"] == "torchrec-plan"
    assert costed["step_time_s"] == planned["step_time_s"]
    assert costed["plan"] == planned["plan"]
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    res = runner.invoke(group, ["shard", str(scen), "--from-torchrec", str(bad)])
    assert res.exit_code == 2 and "from_torchrec: not JSON" in res.output
    assert "Traceback" not in res.output


def test_torchrec_loads_the_exported_plan():
    pytest.importorskip("torchrec", reason="torchrec (optional extra) is not installed: "
                        "cannot check that TorchRec's ParameterSharding loads the plan")
    sc = scenario(10)
    plan = dlrm.plan_from_entries(sc, {
        "t2": {"type": "column_wise", "shards": 4, "rank": 1, "stride": 3},
        "t1": {"type": "table_row_wise", "rank": 5, "tier": "uvm_cache"},
        "t0": {"type": "row_wise"}, "t4": {"type": "data_parallel"}})
    doc = tp.export_plan(sc, plan)
    trec = tp.to_torchrec(doc)
    back = tp.import_plan(sc, tp.from_torchrec(trec))
    np.testing.assert_array_equal(tp.canonical(sc, back), tp.canonical(sc, plan))


def test_grid_shard_exports_as_torchrec_cuts_it():
    """TorchRec ``sharding_plan.grid_shard(host_indexes=[1, 2])`` with local size 4 lists the
    ranks node by node (4..7, then 8..11); ``_calculate_grid_shard_sizes_and_offsets`` cuts
    the rows as row-wise over the 4 ranks of a node (t2: 3014 rows -> ceil 754: 754, 754, 754,
    752 at offsets 0, 754, 1508, 2262) and the 128 columns into 2 blocks of 64, block-major.
    trainscape's grid at rank 4 (node 1) with stride 1 (node steps) is that plan."""
    sc = scenario(12)
    plan = dlrm.plan_from_entries(sc, {"t2": {"type": "grid_shard", "shards": 2, "rank": 5,
                                              "stride": 1}})
    ps = tp.export_plan(sc, plan)["plan"][tp.DEFAULT_MODULE]["t2"]
    assert ps["sharding_type"] == "grid_shard" and ps["ranks"] == list(range(4, 12))
    shards = ps["sharding_spec"]["shards"]
    assert [s["shard_offsets"] for s in shards] == [
        [0, 0], [754, 0], [1508, 0], [2262, 0], [0, 64], [754, 64], [1508, 64], [2262, 64]]
    assert [s["shard_sizes"][0] for s in shards] == [754, 754, 754, 752] * 2
    assert shards[4]["placement"] == "rank:8/cuda:0"
    back = tp.import_plan(sc, tp.export_plan(sc, plan))
    np.testing.assert_array_equal(tp.canonical(sc, back), tp.canonical(sc, plan))
    # blocks on nodes 2 then 0 of 3 (a step of 1 mod 3), shards left to TorchRec (null spec)
    doc = tp.export_plan(sc, plan)
    doc["plan"][tp.DEFAULT_MODULE]["t2"]["ranks"] = list(range(8, 12)) + list(range(4))
    doc["plan"][tp.DEFAULT_MODULE]["t2"]["sharding_spec"] = None
    np.testing.assert_array_equal(
        tp.import_plan(sc, doc)[:, 2],
        dlrm.plan_from_entries(sc, {"t2": {"type": "grid_shard", "shards": 2, "rank": 8,
                                           "stride": 1}})[:, 2])


def test_row_group_other_than_the_node_is_refused_on_export():
    """TorchRec's table-row-wise and grid split rows over the local world size only
    (``sharding_plan._get_parameter_size_offsets``: ``TABLE_ROW_WISE`` / ``GRID_SHARD`` with
    ``local_world_size``): a group of 2 on 4-rank nodes has no TorchRec form."""
    sc = scenario(8)
    plan = dlrm.plan_from_entries(sc, {"t1": {"type": "table_row_wise", "group": 2}})
    with pytest.raises(ScenarioError) as exc:
        tp.export_plan(sc, plan)
    assert str(exc.value).startswith("tables[t1].group:")


def test_key_value_with_a_prefetched_ssd_exports_prefetch_pipeline():
    """TorchRec reads ``CacheParams.prefetch_pipeline`` (``shard_estimators.
    _is_prefetch_pipelined``): a key_value table of a scenario whose ``[ssd]`` prefetches
    (depth >= 1) carries it; the UVM cache and a scenario without an SSD do not."""
    sc = scenario(8)
    raw = sc.spec.model_dump(exclude_none=True)
    raw["ssd"] = {"capacity_gb": 100.0, "bandwidth_GBps": 4.0, "prefetch_depth": 1}
    ssd = dlrm.load(raw)
    entries = {"t1": {"type": "table_wise", "tier": "key_value"},
               "t2": {"type": "table_wise", "tier": "uvm_cache"}}
    doc = tp.export_plan(ssd, dlrm.plan_from_entries(ssd, entries))["plan"][tp.DEFAULT_MODULE]
    assert doc["t1"]["cache_params"]["prefetch_pipeline"] is True
    assert "prefetch_pipeline" not in doc["t2"]["cache_params"]
    doc = tp.export_plan(sc, dlrm.plan_from_entries(sc, entries))["plan"][tp.DEFAULT_MODULE]
    assert "prefetch_pipeline" not in doc["t1"]["cache_params"]
