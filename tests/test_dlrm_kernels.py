"""Differential tests: the C and numba DLRM kernels equal the reference on every result column
(relative 1e-9, same status) for drawn tables, plans and clusters; plus layout agreement."""

from __future__ import annotations

import math
import re
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from trainscape import dlrm
from trainscape.dlrm import layout as D
from trainscape.native.dlrm_header import header
from trainscape.layout import STATUS_INVALID_CONFIG

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
