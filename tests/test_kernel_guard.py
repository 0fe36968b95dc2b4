"""The kernels defend themselves (issue 14): whatever reaches them -- blocks packed by hand,
or a future input the validator's ranges miss -- a result that leaves the float64 range is
status ``overflow`` (infeasible, zeros, infinite step), never NaN or Infinity with status ok.

Before the guard, ``gemm_half_flops = 1e308`` gave status ok and a NaN step time, and a
subnormal tier efficiency gave an infinite step time with status ok (then a crash in the text
table). The validator now refuses both (tests/test_reliability_battery.py); here the packed
blocks are poked directly, past the validator, on every loaded backend, with finite values
(a non-finite block value is refused by the C kernel's block check, tests/test_native_guards.py).
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest

import trainscape
from trainscape import layout as L
from trainscape.api import evaluate_columns
from trainscape.spec import pack, pack_configs

# the pokes make the reference's NumPy scalars overflow on purpose
pytestmark = pytest.mark.filterwarnings("ignore::RuntimeWarning")

GPT3 = Path(__file__).resolve().parent.parent / "examples" / "gpt3-175b-a100.toml"


def _blocks():
    sc = trainscape.load(GPT3)
    sys, mdl, job = pack(sc)
    cfg = pack_configs([sc.config])
    return sys.copy(), mdl.copy(), job.copy(), cfg


POKES = [
    ("gemm_half_flops=1e308", "sys", L.SYS_GEMM_HALF_FLOPS, 1e308),
    ("linear_half_flops=1e308", "sys", L.SYS_LINEAR_HALF_FLOPS, 1e308),
    ("peak_flops=5e-324 (subnormal)", "sys", L.SYS_PEAK_FLOPS, 5e-324),
    ("tier 1 efficiency=1e-310", "sys", L.SYS_TIER_BASE + L.N_TIER + L.TIER_EFFICIENCY, 1e-310),
    ("tier 1 bandwidth=1e-320", "sys", L.SYS_TIER_BASE + L.N_TIER + L.TIER_BANDWIDTH, 1e-320),
    ("hbm bandwidth=5e-324", "sys", L.SYS_HBM_BANDWIDTH, 5e-324),
    ("layers=2**53", "mdl", L.MDL_LAYERS, 2.0**53),
]


@pytest.mark.parametrize("what, block, index, value", POKES, ids=[p[0] for p in POKES])
def test_non_finite_results_become_overflow(backend, what, block, index, value):
    sys, mdl, job, cfg = _blocks()
    {"sys": sys, "mdl": mdl, "job": job}[block][index] = value
    out = evaluate_columns(sys, mdl, job, cfg, backend=backend)[:, 0]
    status = L.STATUS[int(out[L.OUT_STATUS])]
    others = np.delete(out, L.OUT_STEP_TIME_S)
    assert np.isfinite(others).all(), (what, out)
    if status == "overflow":
        assert out[L.OUT_FEASIBLE] == 0.0 and out[L.OUT_STEP_TIME_S] == math.inf
        assert not others[1:].any()  # every other output zeroed
    else:  # the poke stayed in range for this configuration: an honest finite answer
        assert status in ("ok", "out_of_memory"), (what, status)
        assert 0 < out[L.OUT_STEP_TIME_S] < math.inf


def test_untouched_blocks_are_not_overflow(backend):
    sys, mdl, job, cfg = _blocks()
    out = evaluate_columns(sys, mdl, job, cfg, backend=backend)[:, 0]
    assert L.STATUS[int(out[L.OUT_STATUS])] == "ok"
    assert np.isfinite(out).all()


# fields at the ends of their documented ranges (spec/ranges.py), one at a time
EDGES = [
    ("cluster.tiers[1].bandwidth_GBps", 1e7), ("cluster.tiers[1].bandwidth_GBps", 1e-3),
    ("cluster.tiers[0].bandwidth_GBps", 1e-3), ("cluster.tiers[1].efficiency", 1e-6),
    ("cluster.tiers[1].latency_us", 1e9), ("cluster.tiers[1].oversubscription", 1e6),
    ("cluster.gpu.gemm_half_flops", 1e18), ("cluster.gpu.gemm_efficiency_max", 1e-6),
    ("cluster.gpu.attention_efficiency", 1e-6), ("cluster.gpu.memory_efficiency", 1e-6),
    ("cluster.gpu.peak_tflops.bf16", 1e6), ("cluster.gpu.peak_tflops.bf16", 1e-3),
    ("cluster.gpu.hbm_bandwidth_GBps", 1e-3), ("cluster.gpu.hbm_gb", 1e6),
    ("cluster.gpu.layer_overhead_us", 1e9), ("cluster.gpu.attention_half_seq", 2.0**24),
    ("cluster.gpu.attention_head_dim_half", 2.0**24),
    ("job.global_batch", 2147483136),
]


@pytest.mark.parametrize("field, value", EDGES, ids=[f"{f}={v:g}" for f, v in EDGES])
def test_backends_agree_at_the_range_edges(field, value):
    """C, numba and the reference give the same status and outputs for a scenario at the edge
    of the validator's ranges (where products are largest or smallest)."""
    from trainscape.backends import available_backends

    sc = trainscape.load(GPT3, [f"{field}={value!r}"])
    sys, mdl, job = pack(sc)
    cfg = pack_configs([sc.config])
    ref = evaluate_columns(sys, mdl, job, cfg, backend="python")[:, 0]
    assert np.isfinite(np.delete(ref, L.OUT_STEP_TIME_S)).all()
    for name, (ok, _) in available_backends().items():
        if not ok or name == "python":
            continue
        got = evaluate_columns(sys, mdl, job, cfg, backend=name)[:, 0]
        assert got[L.OUT_STATUS] == ref[L.OUT_STATUS], name
        np.testing.assert_allclose(got, ref, rtol=1e-9, atol=0, err_msg=name)
