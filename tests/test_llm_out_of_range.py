"""C, numba and the reference outside the validated ranges (issue 14): the LLM kernels may be
called from the C library or with pack files directly, without the validator. Blocks of real
scenarios, with one to three fields set *just outside* their documented ranges
(``spec/ranges.py``: a decade past each end, 0, subnormal, a negative where only >= 0 is
allowed), must give the same status code (and outputs, to 1e-9) from every backend and never
NaN -- a result that left the float64 range is status ``overflow`` on all of them
(``llm.guard_finite``). Values outside the C library's own block domain (``native/llm.py``
``_field_rule``: a zero bandwidth, a negative count) are refused by the C kernel with one
``ValueError`` naming the field: an explicit answer, not a status; the reference and numba
still agree and give no NaN there."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

import trainscape
from trainscape import layout as L
from trainscape.api import evaluate_columns
from trainscape.backends import available_backends
from trainscape.native.llm import field_path
from trainscape.spec import pack, pack_configs
from trainscape.spec import ranges as R

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"
OTHERS = [n for n, (ok, _) in available_backends().items() if ok and n != "python"]
pytestmark = [pytest.mark.filterwarnings("ignore::RuntimeWarning"),
              pytest.mark.skipif(not OTHERS, reason="no compiled backend loaded")]

GB = 1e9
SUB = 5e-324  # the smallest subnormal


def _outside(lo, hi):
    """Values just outside ``[lo, hi]``: a decade below and above, 0, a subnormal, -lo."""
    vals = [hi * 10.0, 0.0, SUB, -max(lo, 1e-6)]
    if lo > 0:
        vals.append(lo / 10.0)
    return vals


def _tier(i, f):
    return L.SYS_TIER_BASE + i * L.N_TIER + f


# (block, index, values) of the packed fields and their values outside the ranges, in the
# packed units (bytes/s, FLOP/s, seconds)
FIELDS = [
    ("sys", L.SYS_PEAK_FLOPS, _outside(R.MIN_TFLOPS * 1e12, R.MAX_TFLOPS * 1e12)),
    ("sys", L.SYS_LINEAR_PEAK_FLOPS, _outside(R.MIN_TFLOPS * 1e12, R.MAX_TFLOPS * 1e12)),
    ("sys", L.SYS_HBM_BANDWIDTH, _outside(R.MIN_GBPS * GB, R.MAX_GBPS * GB)),
    ("sys", L.SYS_HBM_BYTES, _outside(1.0, R.MAX_HBM_GB * GB)),
    ("sys", L.SYS_GEMM_EFFICIENCY_MAX, _outside(R.MIN_FRACTION, 1.0)),
    ("sys", L.SYS_LINEAR_EFFICIENCY_MAX, _outside(R.MIN_FRACTION, 1.0)),
    ("sys", L.SYS_ATTENTION_EFFICIENCY, _outside(R.MIN_FRACTION, 1.0)),
    ("sys", L.SYS_MEMORY_EFFICIENCY, _outside(R.MIN_FRACTION, 1.0)),
    ("sys", L.SYS_GEMM_HALF_FLOPS, _outside(0.0, R.MAX_HALF_FLOPS)),
    ("sys", L.SYS_LINEAR_HALF_FLOPS, _outside(0.0, R.MAX_HALF_FLOPS)),
    ("sys", L.SYS_LAYER_OVERHEAD_S, _outside(0.0, R.MAX_US * 1e-6)),
    ("sys", L.SYS_STEP_OVERHEAD_S, _outside(0.0, R.MAX_MS * 1e-3)),
    ("sys", L.SYS_TP_OVERLAP_EXPOSED, _outside(0.0, 1.0)),
    ("sys", L.SYS_TP_OVERLAP_SLOWDOWN, _outside(0.0, R.MAX_SLOWDOWN)),
    ("sys", L.SYS_ATTENTION_HALF_SEQ, _outside(0.0, R.MAX_HALF_SEQ)),
    ("sys", L.SYS_ATTENTION_HEAD_DIM_HALF, _outside(0.0, R.MAX_HALF_SEQ)),
    ("sys", L.SYS_USD_PER_GPU_S, _outside(0.0, R.MAX_PRICE / 3600.0)),
    ("sys", L.SYS_POWER_W, _outside(0.0, R.MAX_POWER_W)),
    ("sys", _tier(0, L.TIER_BANDWIDTH), _outside(R.MIN_GBPS * GB, R.MAX_GBPS * GB)),
    ("sys", _tier(1, L.TIER_BANDWIDTH), _outside(R.MIN_GBPS * GB, R.MAX_GBPS * GB)),
    ("sys", _tier(1, L.TIER_LATENCY), _outside(0.0, R.MAX_US * 1e-6)),
    ("sys", _tier(0, L.TIER_EFFICIENCY), _outside(R.MIN_FRACTION, 1.0)),
    ("sys", _tier(1, L.TIER_EFFICIENCY), _outside(R.MIN_FRACTION, 1.0)),
    ("sys", _tier(1, L.TIER_OVERSUBSCRIPTION), _outside(1.0, R.MAX_OVERSUB)),
    ("mdl", L.MDL_LAYERS, [float(R.MAX_DIM * 2), 0.0]),
    ("mdl", L.MDL_HIDDEN, [float(R.MAX_DIM * 2), 0.0]),
    ("mdl", L.MDL_FFN_HIDDEN, [float(R.MAX_DIM * 2), 0.0]),
    ("mdl", L.MDL_VOCAB, [float(R.MAX_DIM * 2), 0.0]),
    ("mdl", L.MDL_HEAD_DIM, [float(R.MAX_DIM * 2), 0.0]),
    ("job", L.JOB_SEQ_LEN, [float(R.MAX_DIM * 2), 0.0]),
    ("job", L.JOB_GLOBAL_BATCH, [float(R.MAX_BATCH) + 1.0, 2.0**40, 0.0]),
]

SCENARIOS = ["gpt3-175b-a100.toml", "mixtral-8x7b-moe.toml"]


def _blocks(name):
    sc = trainscape.load(EXAMPLES / name)
    sys, mdl, job = pack(sc)
    return sys, mdl, job, pack_configs([sc.config])


BLOCKS = {name: _blocks(name) for name in SCENARIOS}


@st.composite
def poked(draw):
    name = draw(st.sampled_from(SCENARIOS))
    sys, mdl, job, cfg = (b.copy() for b in BLOCKS[name])
    blocks = {"sys": sys, "mdl": mdl, "job": job}
    pokes = []
    for block, index, values in draw(st.lists(st.sampled_from(FIELDS), min_size=1,
                                              max_size=3, unique_by=lambda f: (f[0], f[1]))):
        value = draw(st.sampled_from(values))
        blocks[block][index] = value
        pokes.append((block, index, value))
    return name, pokes, sys, mdl, job, cfg


_BLOCK_NUMBER = {"sys": 1, "mdl": 2, "job": 3}


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(case=poked())
def test_backends_agree_outside_the_ranges(case):
    name, pokes, sys, mdl, job, cfg = case
    ref = evaluate_columns(sys, mdl, job, cfg, backend="python")
    assert not np.isnan(ref).any(), (pokes, ref)
    for backend in OTHERS:
        try:
            got = evaluate_columns(sys, mdl, job, cfg, backend=backend)
        except ValueError as exc:  # the C library's block check: must name a poked field
            assert backend == "c", (backend, exc)
            paths = [field_path(_BLOCK_NUMBER[b], i) for b, i, _ in pokes]
            assert str(exc).split(":")[0] in paths, (exc, paths)
            event("C refused the block")
            continue
        event(f"{backend}: {sorted({L.STATUS[int(x)] for x in got[L.OUT_STATUS]})}")
        assert not np.isnan(got).any(), (backend, pokes)
        np.testing.assert_array_equal(got[L.OUT_STATUS], ref[L.OUT_STATUS],
                                      err_msg=f"{backend} {name} {pokes}")
        np.testing.assert_allclose(got, ref, rtol=1e-9, atol=0, err_msg=f"{backend} {pokes}")
