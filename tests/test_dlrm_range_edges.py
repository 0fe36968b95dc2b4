"""DLRM scenarios at the ends of their documented ranges (issue 14), through the planner and
``trainscape shard``: accepted extremes give exit 0 and a finite, honest answer (a huge step,
``out_of_memory``, or no lower bound, never NaN / Infinity); a value just past a range is exit 2
with one message naming the field. Also the planners on blocks poked past the validator: a
plan whose costs left the float64 range is status ``overflow``, never a NaN step, bound or
baseline (the planner compares them)."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

import fuzzkit as F
from trainscape import dlrm
from trainscape import layout as L
from trainscape.dlrm import layout as D
from trainscape.dlrm.planner import plan as run_plan
from trainscape.spec import ranges as R

from test_dlrm_kernels import _criteo_like


def _edge_scenario(small_dense: bool, tiny_links: bool) -> dict:
    bw = R.MIN_GBPS if tiny_links else R.MAX_GBPS
    gpus = 64
    tiers = [{"name": "nv", "size": 8, "bandwidth_GBps": bw, "latency_us": R.MAX_US,
              "efficiency": R.MIN_FRACTION},
             {"name": "ib", "size": 8, "bandwidth_GBps": bw, "latency_us": R.MAX_US,
              "efficiency": R.MIN_FRACTION, "oversubscription": R.MAX_OVERSUB}]
    tables = [{"name": "huge", "rows": R.MAX_ROWS, "dim": R.MAX_EMB_DIM,
               "pooling": R.MAX_POOLING, "hit_rate": 0.0},
              {"name": "tiny", "rows": 1, "dim": 1, "pooling": 0.0},
              {"name": "mid", "rows": 1000, "dim": 64, "pooling": R.MAX_POOLING,
               "hit_rate": 1.0}]
    model = ({"dense_arch": [1], "over_arch": [1], "dcn_layers": 0} if small_dense else
             {"dense_arch": [R.MAX_DIM, 16], "over_arch": [32, 1], "dcn_layers": R.MAX_DIM,
              "dcn_low_rank": R.MAX_DIM})
    return {
        "name": "edges",
        "model": {"tables": tables, "interaction": "dcn", **model},
        "job": {"global_batch": R.MAX_BATCH // gpus * gpus,
                "lookup_efficiency": R.MIN_FRACTION, "dense_efficiency": R.MIN_FRACTION,
                "bwd_multiplier": R.MAX_FACTOR, "dp_update_factor": R.MAX_FACTOR},
        "cluster": {"gpus": gpus, "host_ddr_gb": R.MAX_DDR_GB,
                    "host_to_device_GBps": R.MIN_GBPS, "tiers": tiers,
                    "gpu": {"preset": "h100-sxm-80gb", "hbm_gb": R.MAX_HBM_GB,
                            "hbm_bandwidth_GBps": R.MIN_GBPS if tiny_links else R.MAX_GBPS,
                            "memory_efficiency": R.MIN_FRACTION,
                            "peak_tflops": {"bf16": R.MIN_TFLOPS}}},
        "planner": {"iterations": 2000, "time_limit_s": 5.0},
    }


@pytest.mark.parametrize("method", ["greedy", "beam", "evolve"])
@pytest.mark.parametrize("small_dense, tiny_links",
                         [(True, True), (True, False), (False, True)])
def test_shard_at_the_range_edges_is_finite_and_honest(tmp_path, method, small_dense,
                                                        tiny_links):
    path = F.write_scenario(_edge_scenario(small_dense, tiny_links), str(tmp_path))
    code, out, err, violation = F.run_cli(["shard", path, "--json", "--method", method,
                                           "--backend", "c"], cwd=tmp_path, timeout=120)
    assert violation is None, violation
    assert code == 0, err
    rep = json.loads(out)
    assert rep["status"] in ("ok", "out_of_memory")
    assert 0 < rep["step_time_s"] < math.inf
    assert rep["step_time_s"] == pytest.approx(sum(rep["breakdown"].values()), rel=1e-9)
    if rep["lower_bound_s"] is not None:
        assert rep["lower_bound_s"] <= rep["step_time_s"] * (1 + 1e-9)


@pytest.mark.parametrize("path, value, where", [
    (("model", "tables", 0, "rows"), R.MAX_ROWS + 1, "tables[huge].rows"),
    (("model", "tables", 0, "dim"), R.MAX_EMB_DIM + 1, "tables[huge].dim"),
    (("model", "tables", 2, "pooling"), R.MAX_POOLING * 1.5, "tables[mid].pooling"),
    (("job", "global_batch"), R.MAX_BATCH + 1, "job.global_batch"),
    (("cluster", "host_to_device_GBps"), R.MAX_GBPS * 2, "cluster.host_to_device_GBps"),
    (("cluster", "tiers", 0, "bandwidth_GBps"), R.MIN_GBPS / 2,
     "cluster.tiers[0].bandwidth_GBps"),
    (("cluster", "gpu", "memory_efficiency"), R.MIN_FRACTION / 2,
     "cluster.gpu.memory_efficiency"),
    (("job", "lookup_efficiency"), R.MIN_FRACTION / 2, "job.lookup_efficiency"),
])
def test_shard_just_past_a_range_names_the_field(tmp_path, path, value, where):
    raw = F.set_at(_edge_scenario(True, True), path, value)
    scen = F.write_scenario(raw, str(tmp_path))
    code, out, err, violation = F.run_cli(["shard", scen, "--method", "greedy"], cwd=tmp_path)
    assert violation is None, violation
    assert code == 2, out
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"Error: {where}"), err


POKES = [
    ("peak_flops=5e-324", "sys", L.SYS_PEAK_FLOPS, 5e-324),
    ("tier 0 bandwidth=1e-320", "sys", L.SYS_TIER_BASE + L.TIER_BANDWIDTH, 1e-320),
    ("hbm bandwidth=5e-324", "sys", L.SYS_HBM_BANDWIDTH, 5e-324),
    ("h2d bandwidth=5e-324", "job", D.DJOB_H2D_BANDWIDTH, 5e-324),
    ("dense_params=1e308", "job", D.DJOB_DENSE_PARAMS, 1e308),
    ("rows=1e308", "tables", (D.TAB_ROWS, 0), 1e308),
]


@pytest.mark.filterwarnings("ignore::RuntimeWarning")
@pytest.mark.parametrize("method", ["greedy", "beam", "evolve"])
@pytest.mark.parametrize("what, block, index, value", POKES, ids=[p[0] for p in POKES])
def test_planners_on_blocks_past_the_validator_never_nan(what, block, index, value, method):
    """Before the guard the lower bound was NaN for four of these pokes and the steps
    Infinity with status ok; numba raised ZeroDivisionError where the reference divides by an
    underflowed zero."""
    sc, _ = _criteo_like()
    getattr(sc, block)[index] = value
    res = run_plan(sc, method=method, beam_width=4, seed=0, iterations=2000,
                   time_limit_s=5.0, backend="c")
    r = res.result
    assert not math.isnan(res.lower_bound_s)
    assert not any(math.isnan(v) for v in res.baselines.values())
    assert r["status"] in ("ok", "out_of_memory", "overflow")
    if r["status"] == "overflow":
        assert r["step_time_s"] == math.inf and not r["feasible"]
    else:
        assert 0 < r["step_time_s"] < math.inf
    for k, v in r.items():
        if k not in ("step_time_s", "per_rank") and isinstance(v, float):
            assert math.isfinite(v), (k, v)
    # the plan it returns is costed the same by every backend
    out = {b: dlrm.evaluate_plans(sc, res.plan[None], backend=b) for b in ("python", "numba",
                                                                           "c")}
    for b in ("numba", "c"):
        np.testing.assert_array_equal(out[b][D.DO_STATUS], out["python"][D.DO_STATUS])


@pytest.mark.parametrize("layers", [0, 3, R.MAX_DIM])
def test_dcn_dense_part_by_hand(layers):
    """DCN-v2 dense part at the edge of ``dcn_layers`` (2^24 was a 2^24-step Python loop in
    ``load``; now the per-layer terms times the layer count). By hand, 13 dense features,
    bottom MLP [4], two tables of dim 2, low rank 5, top MLP [1]: bottom 13*4+4 = 56 params,
    2*13*4 = 104 FLOPs, 4 activations; cross layers over n = 4+2+2 = 8: 2*8*5+8 = 88 params,
    4*8*5 = 160 FLOPs, 8+5 = 13 activations each; top 8*1+1 = 9 params, 16 FLOPs, 1
    activation. Activation bytes: fp32 (4) x 2 (kept for the backward) x activations."""
    from trainscape.dlrm.spec import DenseSpec, dense_params_flops

    m = DenseSpec(dense_in_features=13, dense_arch=[4], over_arch=[1], interaction="dcn",
                  dcn_layers=layers, dcn_low_rank=5)
    params, flops, act_bytes = dense_params_flops(m, [2, 2])
    assert params == 56 + 88 * layers + 9
    assert flops == 104 + 160 * layers + 16
    assert act_bytes == 8 * (4 + 13 * layers + 1)
