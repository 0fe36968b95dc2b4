"""Differential tests: the C and numba DLRM kernels equal the reference on every result column
(relative 1e-9, same status) for drawn tables, plans and clusters; plus layout agreement."""

from __future__ import annotations

import math
import re
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from trainscape import dlrm
from trainscape import layout as L
from trainscape.dlrm import layout as D
from trainscape.native.dlrm_header import header
from trainscape.layout import STATUS, STATUS_INVALID_CONFIG, STATUS_OVERFLOW
from trainscape.spec import ranges as R
from trainscape.spec.errors import ScenarioError

ROOT = Path(__file__).resolve().parents[1]
BACKENDS = ["numba", "c"]


def test_header_is_generated_from_layout():
    assert (ROOT / "csrc" / "dlrm.h").read_text() == header()


def test_header_enums_match_layout():
    text = (ROOT / "csrc" / "dlrm.h").read_text()
    found = dict(re.findall(r"^\s+(DL_[A-Z0-9_]+) = (\d+),", text, flags=re.M))
    for _, fields, prefix in D.GROUPS:
        for i, f in enumerate(fields):
            assert int(found[D.c_name(prefix, f)]) == i


@st.composite
def cases(draw):
    n_tiers = draw(st.integers(1, 3))
    sizes = [draw(st.sampled_from([2, 4, 8]))] + [draw(st.integers(2, 4))
                                                  for _ in range(n_tiers - 1)]
    cap = int(np.prod(sizes))
    gpus = draw(st.integers(1, min(cap, 40)))
    tiers = [{"name": f"t{i}", "size": s, "bandwidth_GBps": draw(st.floats(10, 500)),
              "latency_us": draw(st.floats(0.5, 50)), "efficiency": draw(st.floats(0.5, 1.0)),
              "oversubscription": draw(st.sampled_from([1.0, 2.0, 4.0]))}
             for i, s in enumerate(sizes)]
    n_t = draw(st.integers(1, 12))
    tables = [{"name": f"t{i}", "rows": draw(st.integers(1, 10**7)),
               "dim": draw(st.sampled_from([4, 8, 16, 24, 64, 128, 256])),
               "pooling": draw(st.floats(0, 60)),
               "hit_rate": draw(st.floats(0, 1))} for i in range(n_t)]
    job = {"global_batch": gpus * draw(st.integers(1, 512)),
           "embedding_dtype": draw(st.sampled_from(["fp32", "fp16", "int8"])),
           "comm_dtype": draw(st.sampled_from(["fp32", "bf16", "fp16", "fp8"])),
           "optimizer": draw(st.sampled_from(list(D.OPTIMIZERS)))}
    raw = {"model": {"tables": tables, "interaction": "dcn", "dense_arch": [64, 16],
                     "over_arch": [32, 1], "dcn_layers": 1, "dcn_low_rank": 8},
           "job": job,
           "cluster": {"gpu": {"preset": draw(st.sampled_from(["h100-sxm-80gb",
                                                               "a100-sxm-40gb"]))},
                       "gpus": gpus, "tiers": tiers, "host_ddr_gb": draw(st.floats(1, 2048)),
                       "host_to_device_GBps": 32.0}}
    if draw(st.booleans()):  # an SSD tier behind key_value, with or without the prefetch
        raw["ssd"] = {"capacity_gb": draw(st.floats(0.001, 4000)),
                      "bandwidth_GBps": draw(st.floats(0.5, 20)),
                      "prefetch_depth": draw(st.integers(0, 3))}
    sc = dlrm.load(raw)
    groups = [0] + [g for g in range(1, gpus + 1) if gpus % g == 0]
    n_plans = draw(st.integers(1, 6))
    plans = np.zeros((n_plans, D.N_PLAN, n_t), np.int32)
    for p in range(n_plans):
        for i in range(n_t):
            kind = draw(st.integers(0, len(D.SHARDING) - 1))
            plans[p, D.PL_KIND, i] = kind
            plans[p, D.PL_RANK, i] = draw(st.integers(0, gpus - 1))
            plans[p, D.PL_TIER, i] = draw(st.integers(0, len(D.MEMORY_TIERS) - 1))
            dim = tables[i]["dim"]
            divs = [k for k in (1, 2, 4, 8) if dim % k == 0 and k <= gpus]
            plans[p, D.PL_SHARDS, i] = (draw(st.sampled_from(divs))
                                        if kind in (D.SH_CW, D.SH_GRID) else 1)
            plans[p, D.PL_STRIDE, i] = draw(st.integers(0, gpus))
            plans[p, D.PL_GROUP, i] = draw(st.sampled_from(groups))
    # sometimes a bad entry, which every backend must report the same way
    if draw(st.booleans()) and draw(st.booleans()):
        p, i = draw(st.integers(0, n_plans - 1)), draw(st.integers(0, n_t - 1))
        f = draw(st.sampled_from([D.PL_RANK, D.PL_KIND, D.PL_TIER, D.PL_SHARDS, D.PL_GROUP]))
        plans[p, f, i] = draw(st.sampled_from([-1, 3, 5, gpus, 1000]))
    return sc, plans


def assert_same(ref, got):
    assert ref.shape == got.shape
    np.testing.assert_array_equal(ref[D.DO_STATUS], got[D.DO_STATUS])
    np.testing.assert_array_equal(ref[D.DO_FEASIBLE], got[D.DO_FEASIBLE])
    for f in range(D.N_DOUT):
        a, b = ref[f], got[f]
        inf = ~np.isfinite(a)
        np.testing.assert_array_equal(inf, ~np.isfinite(b), err_msg=D.DOUT_FIELDS[f])
        np.testing.assert_allclose(b[~inf], a[~inf], rtol=1e-9, atol=1e-300,
                                   err_msg=D.DOUT_FIELDS[f])


@pytest.mark.parametrize("backend", BACKENDS)
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(case=cases())
def test_backend_equals_reference(backend, case):
    sc, plans = case
    ref = dlrm.evaluate_plans(sc, plans, backend="python")
    got = dlrm.evaluate_plans(sc, plans, backend=backend)
    assert_same(ref, got)


@pytest.mark.parametrize("backend", BACKENDS)
def test_backend_per_rank_rows_equal_reference(backend):
    sc, plans = _criteo_like()
    w_ref, w_got = dlrm.new_work(sc.world), dlrm.new_work(sc.world)
    dlrm.evaluate_plans(sc, plans[:1], backend="python", work=w_ref)
    dlrm.evaluate_plans(sc, plans[:1], backend=backend, work=w_got)
    keep = [i for i, f in enumerate(D.RANK_FIELDS)]
    np.testing.assert_allclose(w_got[keep], w_ref[keep], rtol=1e-9, atol=1e-300)


def _criteo_like():
    raw = {"model": {"preset": "dlrm-mlperf"}, "job": {"comm_dtype": "fp16"},
           "cluster": {"preset": "dgx-h100-superpod", "gpus": 64},
           "ssd": {"capacity_gb": 2000.0, "bandwidth_GBps": 6.0, "prefetch_depth": 2}}
    sc = dlrm.load(raw)
    rng = np.random.default_rng(1)
    plans = np.zeros((300, D.N_PLAN, sc.n_tables), np.int32)
    plans[:, D.PL_SHARDS] = 1
    plans[:, D.PL_RANK] = rng.integers(0, 64, plans[:, D.PL_RANK].shape)
    plans[:, D.PL_KIND] = rng.choice([0, 1, 3, 4, 5], plans[:, D.PL_KIND].shape)
    grid = plans[:, D.PL_KIND] == D.SH_GRID
    plans[:, D.PL_SHARDS][grid] = rng.choice([1, 2, 4], grid.sum())
    plans[:, D.PL_STRIDE] = rng.integers(0, 8, plans[:, D.PL_STRIDE].shape)
    plans[:, D.PL_GROUP] = rng.choice([0, 2, 4, 16], plans[:, D.PL_GROUP].shape)
    plans[:, D.PL_TIER] = rng.integers(0, 5, plans[:, D.PL_TIER].shape)
    return sc, plans


@pytest.mark.parametrize("backend", BACKENDS)
def test_large_batch_threads_equal_reference(backend):
    sc, plans = _criteo_like()
    big = np.concatenate([plans] * 8)  # > 1024 plans: numba prange / C threads
    ref = dlrm.evaluate_plans(sc, plans, backend="python")
    got = dlrm.evaluate_plans(sc, big, backend=backend, threads=2)
    for k in range(8):
        assert_same(ref, got[:, k * 300:(k + 1) * 300])


def test_c_rejects_small_scratch():
    from trainscape.native import dlrm as native

    sc, plans = _criteo_like()
    out = np.zeros((D.N_DOUT, 1))
    with pytest.raises(ValueError):
        native.evaluate_plans(sc.sys, sc.job, sc.tables, plans[:1], out,
                              work=np.zeros((D.N_RANK, 3)))
    assert out[D.DO_STATUS, 0] == 3 and math.isinf(out[D.DO_STEP_TIME_S, 0])


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("field", [D.TAB_ROWS, D.TAB_DIM, D.TAB_POOLING])
def test_nan_table_field_in_a_raw_block_is_an_invalid_plan_not_a_nan(backend, field):
    """The spec rejects NaN at the edge; a raw table block that carries one anyway (an
    embedding caller packing its own) gets ``invalid_config`` from every backend, never a NaN
    step time."""
    sc, plans = _criteo_like()
    sc.tables[field, 3] = math.nan
    out = dlrm.evaluate_plans(sc, plans[:5], backend=backend)
    assert (out[D.DO_STATUS] == STATUS_INVALID_CONFIG).all()
    assert np.isinf(out[D.DO_STEP_TIME_S]).all()
    assert not np.isnan(out).any()


# ---------------------------------------------------------------------------------------------
# Range edges (issue 14): every numeric field at an end of its documented range
# (spec/ranges.py), one of them or many at once, and the plans the validator accepts
# ---------------------------------------------------------------------------------------------


def _edge(lo, hi, mid):
    return st.sampled_from([lo, hi, mid])


@st.composite
def edge_cases(draw):
    gpus = draw(st.sampled_from([1, 3, 8, 16]))
    node = draw(st.sampled_from([1, 2, 8, R.MAX_GPUS]))
    node = min(node, gpus)

    def tier(name, size, oversub):
        return {"name": name, "size": size,
                "bandwidth_GBps": draw(_edge(R.MIN_GBPS, R.MAX_GBPS, 100.0)),
                "latency_us": draw(_edge(0.0, R.MAX_US, 5.0)),
                "efficiency": draw(_edge(R.MIN_FRACTION, 1.0, 0.8)),
                "oversubscription": draw(_edge(1.0, R.MAX_OVERSUB, 2.0)) if oversub else 1.0}

    tiers = [tier("t0", node, False)]
    if gpus > node:
        tiers.append(tier("t1", -(-gpus // node), True))
    n_t = draw(st.integers(1, 6))
    tables = [{"name": f"t{i}", "rows": draw(_edge(1, R.MAX_ROWS, 10**6)),
               "dim": draw(_edge(1, R.MAX_EMB_DIM, 64)),
               "pooling": draw(_edge(0.0, R.MAX_POOLING, 20.0)),
               "hit_rate": draw(_edge(0.0, 1.0, 0.5))} for i in range(n_t)]
    batch = draw(_edge(1, R.MAX_BATCH, 4096))
    batch = max(gpus, batch // gpus * gpus)
    job = {"global_batch": batch,
           "lookup_efficiency": draw(_edge(R.MIN_FRACTION, 1.0, 0.7)),
           "dense_efficiency": draw(_edge(R.MIN_FRACTION, 1.0, 0.5)),
           "uvm_cache_fraction": draw(_edge(0.0, 1.0, 0.2)),
           "bwd_multiplier": draw(_edge(1e-300, R.MAX_FACTOR, 2.0)),
           "dp_update_factor": draw(_edge(0.0, R.MAX_FACTOR, 9.22)),
           "embedding_dtype": draw(st.sampled_from(["fp32", "int8"])),
           "optimizer": draw(st.sampled_from(list(D.OPTIMIZERS)))}
    arch = draw(_edge(1, R.MAX_DIM, 64))
    model = {"tables": tables, "interaction": "dcn", "dense_arch": [arch, 16],
             "over_arch": [32, 1], "dcn_layers": draw(_edge(0, R.MAX_DIM, 1)),
             "dcn_low_rank": draw(_edge(1, R.MAX_DIM, 8))}
    gpu = {"preset": "h100-sxm-80gb", "hbm_reserve_gb": 0.0,
           "hbm_bandwidth_GBps": draw(_edge(R.MIN_GBPS, R.MAX_GBPS, 3000.0)),
           "memory_efficiency": draw(_edge(R.MIN_FRACTION, 1.0, 0.8)),
           "hbm_gb": draw(_edge(R.MIN_GBPS, R.MAX_HBM_GB, 80.0)),
           "peak_tflops": {"bf16": draw(_edge(R.MIN_TFLOPS, R.MAX_TFLOPS, 900.0))}}
    raw = {"model": model, "job": job,
           "cluster": {"gpu": gpu, "gpus": gpus, "tiers": tiers,
                       "host_ddr_gb": draw(_edge(0.0, R.MAX_DDR_GB, 1024.0)),
                       "host_to_device_GBps": draw(_edge(R.MIN_GBPS, R.MAX_GBPS, 32.0))}}
    try:
        sc = dlrm.load(raw)
    except ScenarioError:
        assume(False)  # a cross-field check refused it (e.g. a table larger than all memory)
    n_plans = draw(st.integers(1, 4))
    plans = np.zeros((n_plans, D.N_PLAN, n_t), np.int32)
    for p in range(n_plans):
        for i in range(n_t):
            kind = draw(st.integers(0, 4))
            dim = tables[i]["dim"]
            divs = [k for k in (1, 2, 4, 8, 16) if dim % k == 0 and k <= gpus]
            plans[p, D.PL_KIND, i] = kind
            plans[p, D.PL_RANK, i] = draw(st.integers(0, gpus - 1))
            plans[p, D.PL_TIER, i] = draw(st.integers(0, len(D.MEMORY_TIERS) - 1))
            plans[p, D.PL_SHARDS, i] = draw(st.sampled_from(divs)) if kind == D.SH_CW else 1
            plans[p, D.PL_STRIDE, i] = draw(st.sampled_from([0, 1, gpus, R.MAX_DLRM_GPUS]))
    return sc, plans


def assert_contract(out):
    """ok / out_of_memory: every output finite; overflow: zeros and an infinite step; never
    NaN."""
    assert not np.isnan(out).any()
    for p in range(out.shape[1]):
        col = out[:, p]
        status = STATUS[int(col[D.DO_STATUS])]
        if status in ("ok", "out_of_memory"):
            assert np.isfinite(col).all(), (status, col)
        else:
            assert col[D.DO_STEP_TIME_S] == math.inf and col[D.DO_FEASIBLE] == 0.0
            if status == "overflow":
                assert not np.delete(col, [D.DO_STATUS, D.DO_STEP_TIME_S]).any()


@pytest.mark.parametrize("backend", BACKENDS)
@settings(max_examples=60, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])
@given(case=edge_cases())
def test_backend_equals_reference_at_range_edges(backend, case):
    """Accepted but extreme scenarios (huge rows, dims, pooling, batch; the smallest
    bandwidths and efficiencies; the largest latencies): the same status and outputs from
    every backend, and finite answers (the ranges keep every product in float64)."""
    sc, plans = case
    ref = dlrm.evaluate_plans(sc, plans, backend="python")
    got = dlrm.evaluate_plans(sc, plans, backend=backend)
    assert_contract(ref)
    assert_contract(got)
    assert_same(ref, got)
    assert not (ref[D.DO_STATUS] == STATUS_OVERFLOW).any()  # inside the ranges: no overflow


# blocks poked past the validator (raw blocks, pack files, an embedding caller): values the
# ranges refuse, a time or a memory that leaves the float64 range, a division by (an
# underflowed) zero
POKES = [
    ("peak_flops=5e-324", "sys", L.SYS_PEAK_FLOPS, 5e-324),
    ("tier 0 bandwidth=1e-320", "sys", L.SYS_TIER_BASE + L.TIER_BANDWIDTH, 1e-320),
    ("tier 0 bandwidth=0", "sys", L.SYS_TIER_BASE + L.TIER_BANDWIDTH, 0.0),
    ("hbm bandwidth=5e-324", "sys", L.SYS_HBM_BANDWIDTH, 5e-324),
    ("hbm bytes=1e308", "sys", L.SYS_HBM_BYTES, 1e308),
    ("h2d bandwidth=5e-324", "job", D.DJOB_H2D_BANDWIDTH, 5e-324),
    ("lookup_efficiency=0", "job", D.DJOB_LOOKUP_EFFICIENCY, 0.0),
    ("global_batch=1e300", "job", D.DJOB_GLOBAL_BATCH, 1e300),
    ("dense_params=1e308", "job", D.DJOB_DENSE_PARAMS, 1e308),
    ("dense_flops=1e308", "job", D.DJOB_DENSE_FLOPS_PER_SAMPLE, 1e308),
    ("rows=1e300", "tables", (D.TAB_ROWS, 0), 1e300),
    ("rows=inf", "tables", (D.TAB_ROWS, 0), math.inf),
    ("pooling=1e300", "tables", (D.TAB_POOLING, 2), 1e300),
    ("dim=1e300", "tables", (D.TAB_DIM, 1), 1e300),
]


@pytest.mark.filterwarnings("ignore::RuntimeWarning")  # the reference's NumPy scalars overflow
@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("what, block, index, value", POKES, ids=[p[0] for p in POKES])
def test_blocks_past_the_validator_agree_and_never_nan(backend, what, block, index, value):
    """The kernels defend themselves: a non-finite result is status ``overflow`` (zeros,
    infinite step), the same from every backend; numba divides by zero as the reference does
    (no ZeroDivisionError); rows and dims beyond 2^53 or 2^63 are no int64 overflow. Column-wise
    plans too (the dim poke divides)."""
    sc, plans = _criteo_like()
    plans = plans[:40].copy()
    plans[20:, D.PL_KIND, :] = D.SH_CW  # dims of 128: 1, 2, 4 shards
    plans[20:, D.PL_SHARDS, :] = np.array([1, 2, 4])[np.arange(sc.n_tables) % 3]
    plans[20:, D.PL_STRIDE, :] = 1
    getattr(sc, block)[index] = value
    ref = dlrm.evaluate_plans(sc, plans, backend="python")
    got = dlrm.evaluate_plans(sc, plans, backend=backend)
    assert_contract(ref)
    assert_contract(got)
    assert_same(ref, got)
