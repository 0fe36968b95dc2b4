"""Per-table planner constraints and storage reservation (issue 17 item 4).

Every plan a planner returns is checked against the constraints by :func:`violations` below,
written from the documented meaning (docs/dlrm.md, Constraints) on the plan as people read it
(``plan_entries``: type, shards, ranks, tier) -- not with the planner's own
``Constraints`` class."""

from __future__ import annotations

import json

import numpy as np
import pytest
from click.testing import CliRunner
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from trainscape import dlrm
from trainscape.dlrm import layout as D
from trainscape.dlrm import planner
from trainscape.dlrm.spec import plan_entries
from trainscape.spec.errors import ScenarioError

KERNEL_TIER = {"fused": "hbm", "fused_uvm_caching": "uvm_cache", "fused_uvm": "ddr",
               "dense": "dense", "key_value": "key_value"}
TYPES = ["table_wise", "row_wise", "column_wise", "table_row_wise", "data_parallel",
         "table_column_wise", "grid_shard"]
TIERS = [{"name": "node", "size": 4, "bandwidth_GBps": 300.0, "latency_us": 2.0},
         {"name": "net", "size": 4, "bandwidth_GBps": 25.0, "latency_us": 10.0}]


def raw_scenario(seed: int, gpus: int = 16, n_t: int = 14) -> dict:
    rng = np.random.default_rng(seed)
    tables = [{"name": f"t{i}", "rows": int(10 ** rng.uniform(2.5, 6.5)),
               "dim": int(rng.choice([16, 32, 64, 128])), "pooling": float(rng.uniform(1, 30))}
              for i in range(n_t)]
    return {"model": {"tables": tables, "interaction": "dcn", "dense_arch": [64, 32],
                      "over_arch": [64, 1], "dcn_layers": 1, "dcn_low_rank": 32},
            "job": {"global_batch": gpus * 128, "comm_dtype": "fp16"},
            "cluster": {"gpu": "a100-sxm-40gb", "gpus": gpus, "tiers": TIERS,
                        "host_ddr_gb": 512.0, "host_to_device_GBps": 32.0}}


def violations(sc, plan, given_: dict[str, dict], node: int) -> list[str]:
    """What in ``plan`` breaks the constraints ``given_`` (table name -> fields)."""
    out = []
    world = sc.world
    dims = {n: int(sc.tables[D.TAB_DIM, i]) for i, n in enumerate(sc.table_names)}
    for e in plan_entries(sc, plan):
        c = given_.get(e["table"])
        if not c:
            continue
        name, typ, ranks = e["table"], e["type"], e["ranks"]
        ranks = list(range(world)) if ranks == "all" else list(ranks)
        if "sharding_types" in c:
            ok = typ in c["sharding_types"]
            if (not ok and typ == "column_wise" and "table_column_wise" in c["sharding_types"]):
                # table-column-wise: consecutive ranks inside one node
                ok = (ranks == list(range(ranks[0], ranks[0] + len(ranks)))
                      and ranks[0] // node == ranks[-1] // node)
            if not ok:
                out.append(f"{name}: type {typ} not in {c['sharding_types']}")
        if "compute_kernels" in c:
            allowed = {KERNEL_TIER.get(k, k) for k in c["compute_kernels"]}
            if e["tier"] not in allowed:
                out.append(f"{name}: tier {e['tier']} not in {sorted(allowed)}")
        if "min_partition" in c and typ in ("column_wise", "grid_shard"):
            if dims[name] // e["shards"] < c["min_partition"]:
                out.append(f"{name}: {e['shards']} shards of dim {dims[name]} under "
                           f"min_partition {c['min_partition']}")
        if "ranks" in c and not set(ranks) <= set(c["ranks"]):
            out.append(f"{name}: ranks {ranks} outside {c['ranks']}")
    return out


@st.composite
def constraint_sets(draw, gpus=16, n_t=14):
    out = {}
    for i in draw(st.lists(st.integers(0, n_t - 1), min_size=1, max_size=6, unique=True)):
        c = {}
        if draw(st.booleans()):
            c["sharding_types"] = draw(st.lists(st.sampled_from(TYPES), min_size=1, max_size=3,
                                                unique=True))
        if draw(st.booleans()):
            c["compute_kernels"] = draw(st.lists(
                st.sampled_from(["fused", "fused_uvm_caching", "fused_uvm", "hbm", "ddr"]),
                min_size=1, max_size=2, unique=True))
        if draw(st.booleans()):
            c["min_partition"] = draw(st.sampled_from([4, 8, 16, 32, 64]))
        if draw(st.booleans()):
            if draw(st.booleans()):
                c["ranks"] = [draw(st.integers(0, gpus - 1))]
            else:
                lo = draw(st.integers(0, gpus - 1))
                c["ranks"] = list(range(lo, min(gpus, lo + draw(st.integers(2, gpus)))))
        if c:
            out[f"t{i}"] = c
    return out


def _load(seed, cons):
    raw = raw_scenario(seed)
    raw["constraints"] = cons
    return dlrm.load(raw)


def _check_all(sc, cons, methods, iterations=3000):
    for m in methods:
        res = planner.plan(sc, method=m, iterations=iterations, time_limit_s=20.0)
        bad = violations(sc, res.plan, cons, node=4)
        assert not bad, (m, bad)
        assert np.isfinite(res.step_time_s)


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(0, 10**6), cons=constraint_sets())
def test_greedy_and_beam_plans_satisfy_random_constraints(seed, cons):
    try:
        sc = _load(seed, cons)
    except ScenarioError as exc:  # an infeasible combination: named, table and field
        msg = str(exc)
        assert msg.startswith("constraints[t") and any(f in msg.split(":")[0] for f in (
            "sharding_types", "compute_kernels", "min_partition", "ranks")), msg
        return
    _check_all(sc, cons, ("greedy", "beam"))


@settings(max_examples=6, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(0, 10**6), cons=constraint_sets())
def test_evolve_plans_satisfy_random_constraints(seed, cons):
    try:
        sc = _load(seed, cons)
    except ScenarioError:
        return
    _check_all(sc, cons, ("evolve",))


def test_infeasible_combinations_are_refused_at_load():
    """Row-wise touches every rank, so pinned to two of 16 it has no form; a min_partition
    above the dim with only column-wise allowed neither; a rank past the world is out of
    range."""
    with pytest.raises(ScenarioError, match=r"^constraints\[t0\]\.ranks: no sharding"):
        _load(0, {"t0": {"sharding_types": ["row_wise"], "ranks": [0, 1]}})
    with pytest.raises(ScenarioError, match=r"^constraints\[t1\]\.min_partition: no sharding"):
        _load(0, {"t1": {"sharding_types": ["column_wise"], "min_partition": 4096}})
    with pytest.raises(ScenarioError, match=r"^constraints\[t2\]\.ranks: rank out of range"):
        _load(0, {"t2": {"ranks": [16]}})
    with pytest.raises(ScenarioError, match=r"^constraints\[nope\]: no such table"):
        _load(0, {"nope": {"ranks": [1]}})


def test_table_too_large_for_its_allowed_forms_is_refused():
    """A 10^9-row, 128-wide fp32 table (512 GB plus optimizer state) fits no 40 GB GPU
    table-wise in HBM: allowed only that, no planner could place it."""
    raw = raw_scenario(1)
    raw["model"]["tables"][0].update(rows=10**9, dim=128)
    raw["constraints"] = {"t0": {"sharding_types": ["table_wise"], "compute_kernels": ["fused"]}}
    with pytest.raises(ScenarioError, match=r"^constraints\[t0\]\.compute_kernels: table t0 "
                                            r"fits no rank"):
        dlrm.load(raw)


@pytest.mark.parametrize("method", ["greedy", "beam", "evolve"])
def test_pinned_rank_and_disallowed_types(method):
    """t3 pinned to rank 11 and table-wise; no table may be row-wise or data-parallel; t5
    only table-row-wise on the second node (ranks 4-7); t6 in the UVM cache."""
    allowed = ["table_wise", "column_wise", "table_row_wise"]
    cons = {f"t{i}": {"sharding_types": allowed} for i in range(14)}
    cons["t3"] = {"sharding_types": ["table_wise"], "ranks": [11]}
    cons["t5"] = {"sharding_types": ["table_row_wise"], "ranks": [4, 5, 6, 7]}
    cons["t6"] = {"sharding_types": allowed, "compute_kernels": ["fused_uvm_caching"]}
    sc = _load(7, cons)
    res = planner.plan(sc, method=method, iterations=3000, time_limit_s=20.0)
    ent = {e["table"]: e for e in plan_entries(sc, res.plan)}
    assert ent["t3"]["type"] == "table_wise" and ent["t3"]["ranks"] == [11]
    assert ent["t5"]["type"] == "table_row_wise" and ent["t5"]["ranks"] == [4, 5, 6, 7]
    assert ent["t6"]["tier"] == "uvm_cache"
    assert not {e["type"] for e in ent.values()} & {"row_wise", "data_parallel"}
    assert not violations(sc, res.plan, cons, node=4)


def test_reservation_shrinks_the_packed_capacities():
    """percentage p keeps (1 - p) of HBM and DDR (TorchRec _reserve_storage_percentage), hbm_gb
    / ddr_gb come off on top: A100 40 GB (HBM "GB" are GiB, as the GPU's hbm_gb), p = 0.25,
    hbm_gb = 2 -> 10 + 2 = 12 GiB more held back; DDR (GB = 1e9 bytes, as host_ddr_gb)
    512 GB / 4 GPUs a node = 128 GB -> 0.75 * 128 - 8 = 88 GB."""
    from trainscape import layout as L

    base = dlrm.load(raw_scenario(2))
    raw = raw_scenario(2)
    raw["reservation"] = {"percentage": 0.25, "hbm_gb": 2.0, "ddr_gb": 8.0}
    sc = dlrm.load(raw)
    hbm = base.sys[L.SYS_HBM_BYTES]
    assert hbm == 40 * 2**30
    assert sc.sys[L.SYS_HBM_RESERVE_BYTES] - base.sys[L.SYS_HBM_RESERVE_BYTES] == \
        pytest.approx(12 * 2**30)
    assert base.job[D.DJOB_DDR_BYTES] == pytest.approx(128e9)
    assert sc.job[D.DJOB_DDR_BYTES] == pytest.approx(88e9)
    raw["reservation"] = {"hbm_gb": 41.0}
    with pytest.raises(ScenarioError, match=r"^reservation\.hbm_gb: leaves no HBM"):
        dlrm.load(raw)
    raw["reservation"] = {"percentage": 1.0}
    with pytest.raises(ScenarioError, match=r"reservation\.percentage"):
        dlrm.load(raw)


def test_reservation_makes_a_fitting_plan_infeasible():
    """One rank's tables (~10 GB) fit 40 GiB HBM but not with 80 % of it reserved (8 GiB
    left, less the GPU's own reserve): the same plan turns infeasible, which the kernels read
    from the packed capacity."""
    raw = raw_scenario(3)
    raw["model"]["tables"][0].update(rows=20_000_000, dim=128)  # ~10.3 GB fp32 + state
    sc = dlrm.load(raw)
    p = np.zeros((D.N_PLAN, sc.n_tables), np.int32)
    p[D.PL_SHARDS] = 1
    assert dlrm.evaluate(sc, p)["feasible"]
    raw["reservation"] = {"percentage": 0.8}
    assert not dlrm.evaluate(dlrm.load(raw), p)["feasible"]


# ------------------------------------------------------------------------------------------
# the tables CSV and the command line
# ------------------------------------------------------------------------------------------


def _write(tmp_path, header, rows, extra=""):
    (tmp_path / "t.csv").write_text(header + "\n" + "\n".join(rows) + "\n")
    scen = tmp_path / "s.toml"
    scen.write_text('[model]\ntables_csv = "t.csv"\ninteraction = "dcn"\n'
                    '[job]\nglobal_batch = 1024\n[cluster]\npreset = "zionex"\ngpus = 16\n'
                    '[planner]\nmethod = "greedy"\n' + extra)
    return scen


def _shard(args):
    from trainscape.cli.shard import shard

    return CliRunner().invoke(shard, args)


def test_csv_constraint_columns_are_honoured(tmp_path):
    rows = [f"c{i},{1000 * (i + 1)},64,{i % 5 + 1},,,," for i in range(10)]
    rows[2] = "c2,3000,64,3,table_wise,fused_uvm,,5"
    rows[4] = "c4,5000,64,1,column_wise|table_wise,,32,0-7"
    scen = _write(tmp_path, "table,rows,dim,pooling,sharding_types,compute_kernels,"
                  "min_partition,ranks", rows)
    for method in ("greedy", "beam"):
        r = _shard([str(scen), "--json", "--method", method])
        assert r.exit_code == 0, r.output
        ent = {e["table"]: e for e in json.loads(r.output)["plan"]}
        assert ent["c2"] == {"table": "c2", "type": "table_wise", "shards": 1, "ranks": [5],
                             "tier": "ddr"}
        assert ent["c4"]["type"] in ("column_wise", "table_wise")
        assert set(ent["c4"]["ranks"]) <= set(range(8))
        assert ent["c4"]["type"] == "table_wise" or 64 // ent["c4"]["shards"] >= 32


@pytest.mark.parametrize("cell,column,words", [
    ("sharding_types", "table_wise|diagonal", "unknown sharding type"),
    ("compute_kernels", "fused|quant", "unknown compute kernel"),
    ("min_partition", "x", "not a number"),
    ("min_partition", "0", "out of range"),
    ("ranks", "3-1", "bad range of ranks"),
    ("ranks", "a", "not a rank"),
])
def test_bad_csv_cell_names_line_and_column(tmp_path, cell, column, words):
    cols = ["sharding_types", "compute_kernels", "min_partition", "ranks"]
    rows = [f"c{i},{1000 * (i + 1)},64,1,,,," for i in range(4)]
    vals = ["", "", "", ""]
    vals[cols.index(cell)] = column
    rows[2] = "c2,3000,64,1," + ",".join(vals)
    scen = _write(tmp_path, "table,rows,dim,pooling," + ",".join(cols), rows)
    r = _shard([str(scen)])
    assert r.exit_code == 2, r.output
    assert f"model.tables_csv line 4 column {cell}: {words}" in r.output
    assert "Traceback" not in r.output


def test_csv_rank_out_of_range_and_infeasible_name_the_cell(tmp_path):
    rows = [f"c{i},{1000 * (i + 1)},64,1,," for i in range(4)]
    rows[1] = "c1,2000,64,1,,99"
    scen = _write(tmp_path, "table,rows,dim,pooling,sharding_types,ranks", rows)
    r = _shard([str(scen)])
    assert r.exit_code == 2
    assert "model.tables_csv line 3 column ranks: rank out of range for 16 ranks" in r.output
    rows[1] = "c1,2000,64,1,data_parallel,0-3"
    scen = _write(tmp_path, "table,rows,dim,pooling,sharding_types,ranks", rows)
    r = _shard([str(scen)])
    assert r.exit_code == 2
    assert "model.tables_csv line 3 column ranks: no sharding satisfies" in r.output


def test_scenario_table_fields_and_constraints_section(tmp_path):
    """Constraint fields on a [[model.tables]] entry; [constraints.NAME] overrides them."""
    scen = tmp_path / "s.toml"
    tables = "".join(
        f'[[model.tables]]\nname = "c{i}"\nrows = {1000 * (i + 1)}\ndim = 64\npooling = 2.0\n'
        + ('ranks = [9]\nsharding_types = ["table_wise"]\n' if i == 1 else "")
        for i in range(6))
    scen.write_text('[model]\ninteraction = "dcn"\n' + tables
                    + '[job]\nglobal_batch = 1024\n[cluster]\npreset = "zionex"\ngpus = 16\n'
                    '[planner]\nmethod = "beam"\n'
                    '[constraints.c3]\nranks = [12]\nsharding_types = ["table_wise"]\n')
    r = _shard([str(scen), "--json"])
    assert r.exit_code == 0, r.output
    ent = {e["table"]: e for e in json.loads(r.output)["plan"]}
    assert ent["c1"]["ranks"] == [9] and ent["c3"]["ranks"] == [12]
    scen.write_text(scen.read_text().replace("ranks = [9]", "ranks = [99]"))
    r = _shard([str(scen)])
    assert r.exit_code == 2 and "tables[c1].ranks: rank out of range" in r.output


def test_given_plan_breaking_constraints_is_reported(tmp_path):
    """A scenario's own [plan] is costed as given; the report says which constraints it
    breaks (the planned plan keeps them all)."""
    rows = [f"c{i},{1000 * (i + 1)},64,1" for i in range(6)]
    scen = _write(tmp_path, "table,rows,dim,pooling", rows,
                  '[constraints.c1]\nranks = [3]\n[plan.c1]\ntype = "table_wise"\nrank = 5\n')
    r = _shard([str(scen), "--json"])
    assert r.exit_code == 0, r.output
    rep = json.loads(r.output)
    assert rep["given_plan"]["breaks_constraints"] == ["tables[c1].ranks"]
    assert {e["table"]: e for e in rep["plan"]}["c1"]["ranks"] == [3]


@pytest.mark.parametrize("method", ["greedy", "beam"])
def test_large_table_kept_out_of_row_wise_still_fits(method):
    """t0, ~60 GB with its optimizer state (116M rows x 128 fp32), allowed table- or
    column-wise in HBM only: 40 GiB GPUs hold it in 4 or more column shards, and the greedy
    and beam plans do so (feasible), not the table-wise form that fits no rank."""
    raw = raw_scenario(4)
    raw["model"]["tables"][0].update(rows=116_000_000, dim=128)
    cons = {"t0": {"sharding_types": ["table_wise", "column_wise"], "compute_kernels": ["fused"]}}
    raw["constraints"] = cons
    sc = dlrm.load(raw)
    res = planner.plan(sc, method=method)
    ent = plan_entries(sc, res.plan)[0]
    assert ent["type"] == "column_wise" and ent["shards"] >= 4 and ent["tier"] == "hbm"
    assert res.result["feasible"]
    assert not violations(sc, res.plan, cons, node=4)


def test_footprint_of_row_groups_and_grids():
    """By hand, 16 ranks in nodes of 4: table-row-wise over a group of 2 at base 5 holds ranks
    4-5; over the node (group 0) 4-7; a grid of 2 column blocks on groups of 4 with stride 1
    at base 4 holds groups 1 and 2 (ranks 4-11), and wraps: base 12 holds 12-15 and 0-3."""
    from trainscape.dlrm.constraints import footprint

    assert footprint(D.SH_TWRW, 1, 0, 5, 16, 4, 2).tolist() == [4, 5]
    assert footprint(D.SH_TWRW, 1, 0, 5, 16, 4, 0).tolist() == [4, 5, 6, 7]
    assert footprint(D.SH_GRID, 2, 1, 4, 16, 4, 0).tolist() == list(range(4, 12))
    assert footprint(D.SH_GRID, 2, 1, 12, 16, 4, 0).tolist() == [0, 1, 2, 3, 12, 13, 14, 15]


def test_pinned_tables_never_take_a_row_group_or_grid_outside_their_ranks():
    """Every table pinned to the first node (ranks 0-3 of 16): evolve's menu (row groups,
    grids) may only use groups inside it, and every plan satisfies the pins."""
    raw = raw_scenario(7)
    cons = {f"t{i}": {"ranks": [0, 1, 2, 3]} for i in range(0, 14, 2)}
    raw["constraints"] = cons
    sc = dlrm.load(raw)
    res = planner.plan(sc, method="evolve", iterations=3000, time_limit_s=20.0)
    assert not violations(sc, res.plan, cons, node=4)

