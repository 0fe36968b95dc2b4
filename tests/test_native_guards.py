"""The C backend's edges: inputs checked in Python before C, bad blocks rejected by the kernel
with a ValueError naming the field, bad config values answered with the reference's status
codes (never an out-of-bounds read), the layout check at load, backend selection."""

from __future__ import annotations

import types

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import trainscape
from trainscape import layout as L
from trainscape.native import llm as native
from trainscape.native.build_llm import cdef_text
from trainscape.backends import (
    BACKENDS,
    available_backends,
    default_backend,
    evaluate_blocks,
)
from trainscape.model import reference
from trainscape.spec import pack, pack_configs

from strategies import INT32_MAX, INT32_MIN, scenarios


@pytest.fixture(scope="module")
def blocks(request):
    sc = trainscape.load(request.config.rootpath / "examples" / "llama3-405b-2bldg.toml")
    sys, mdl, job = pack(sc)
    return sys, mdl, job, pack_configs([sc.config])


def test_c_backend_is_default_and_loaded():
    ok, why = available_backends()["c"]
    assert ok, why
    assert default_backend() == "c"
    assert native.lib.ts_abi_version() == native.lib.TS_ABI_VERSION


def test_unknown_backend_lists_allowed(blocks):
    sys, mdl, job, cfg = blocks
    with pytest.raises(ValueError, match="backend: got 'fortran', expected one of c, numba, python"):
        evaluate_blocks(sys, mdl, job, cfg, backend="fortran")
    assert BACKENDS == ("c", "numba", "python")


@pytest.mark.parametrize("threads", [0, -1, 1.5, True])
def test_bad_thread_count(blocks, threads):
    sys, mdl, job, cfg = blocks
    with pytest.raises(ValueError, match="threads: got"):
        evaluate_blocks(sys, mdl, job, cfg, backend="c", threads=threads)


# ---- checked in Python, before C -------------------------------------------------------------


def test_block_dtype_shape_contiguity(blocks):
    sys, mdl, job, cfg = blocks
    with pytest.raises(ValueError, match=rf"system block: expected float64 of shape \({L.N_SYS},\)"):
        native.evaluate_batch(sys.astype(np.float32), mdl, job, cfg)
    with pytest.raises(ValueError, match="model block: expected float64"):
        native.evaluate_batch(sys, mdl[:-1], job, cfg)
    with pytest.raises(ValueError, match="job block: must be C-contiguous"):
        native.evaluate_batch(sys, mdl, np.repeat(job, 2)[::2], cfg)
    with pytest.raises(TypeError, match="system block: expected a numpy.ndarray"):
        native.evaluate_batch(list(sys), mdl, job, cfg)


def test_config_dtype_shape_contiguity(blocks):
    sys, mdl, job, cfg = blocks
    with pytest.raises(ValueError, match=r"configs: expected int32 of shape \(14, n\)"):
        native.evaluate_batch(sys, mdl, job, cfg.astype(np.int64))
    with pytest.raises(ValueError, match="configs: expected int32"):
        native.evaluate_batch(sys, mdl, job, cfg[:-1])
    wide = np.ascontiguousarray(np.tile(cfg, (1, 4)))
    with pytest.raises(ValueError, match="configs: must be C-contiguous"):
        native.evaluate_batch(sys, mdl, job, wide[:, ::2])
    with pytest.raises(ValueError, match="configs: must be C-contiguous"):
        native.evaluate_batch(sys, mdl, job, np.asfortranarray(wide))


def test_out_buffer_checked_and_filled_in_place(blocks):
    sys, mdl, job, cfg = blocks
    with pytest.raises(ValueError,
                       match=rf"out: expected float64 of shape \({L.N_OUT}, 1\)"):
        native.evaluate_batch(sys, mdl, job, cfg, out=np.empty((L.N_OUT, 2)))
    frozen = np.empty((L.N_OUT, 1))
    frozen.flags.writeable = False
    with pytest.raises(ValueError, match="out: must be C-contiguous and writeable"):
        native.evaluate_batch(sys, mdl, job, cfg, out=frozen)
    out = np.full((L.N_OUT, 1), np.nan)
    assert native.evaluate_batch(sys, mdl, job, cfg, out=out) is out
    np.testing.assert_allclose(out, reference.evaluate_batch(sys, mdl, job, cfg), rtol=1e-9)


def test_empty_batch(blocks):
    sys, mdl, job, cfg = blocks
    out = native.evaluate_batch(sys, mdl, job, cfg[:, :0])
    assert out.shape == (L.N_OUT, 0)


# ---- bad blocks: negative code from the kernel, ValueError naming the field -------------------

BAD_BLOCK_FIELDS = [
    ("sys", L.SYS_N_TIERS, 0.0, r"system\.n_tiers: got 0\.0, expected an integer in 1\.\.6"),
    ("sys", L.SYS_N_TIERS, 7.0, r"system\.n_tiers"),
    ("sys", L.SYS_N_TIERS, 2.5, r"system\.n_tiers"),
    ("sys", L.SYS_N_TIERS, np.nan, r"system\.n_tiers"),
    ("sys", L.SYS_N_TIERS, 1e300, r"system\.n_tiers"),
    ("sys", L.SYS_TIER_BASE + 1 * L.N_TIER + L.TIER_SIZE, 0.0,
     r"system\.tiers\[1\]\.size: got 0\.0, expected a finite number > 0"),
    ("sys", L.SYS_TIER_BASE + 2 * L.N_TIER + L.TIER_OVERSUBSCRIPTION, -1.0,
     r"system\.tiers\[2\]\.oversubscription"),
    ("sys", L.SYS_TIER_BASE + 0 * L.N_TIER + L.TIER_BANDWIDTH, np.inf,
     r"system\.tiers\[0\]\.bandwidth"),
    ("sys", L.SYS_TIER_BASE + 0 * L.N_TIER + L.TIER_LATENCY, -1e-6, r"system\.tiers\[0\]\.latency"),
    ("sys", L.SYS_GPUS, 0.0, r"system\.gpus"),
    ("sys", L.SYS_PEAK_FLOPS, -1.0, r"system\.peak_flops"),
    ("sys", L.SYS_HBM_BYTES, np.nan, r"system\.hbm_bytes"),
    ("mdl", L.MDL_HEADS, 0.0, r"model\.heads: got 0\.0, expected a number in \[1, 2\*\*53\]"),
    ("mdl", L.MDL_KV_HEADS, 0.5, r"model\.kv_heads"),
    ("mdl", L.MDL_LAYERS, 1e30, r"model\.layers"),
    ("mdl", L.MDL_EXPERTS, -8.0, r"model\.experts"),
    ("mdl", L.MDL_FIRST_DENSE_LAYERS, -1.0,
     r"model\.first_dense_layers: got -1\.0, expected a number in \[0, 2\*\*53\]"),
    ("mdl", L.MDL_FIRST_DENSE_LAYERS, np.nan, r"model\.first_dense_layers"),
    ("job", L.JOB_SEQ_LEN, 0.0, r"job\.seq_len"),
    ("job", L.JOB_GLOBAL_BATCH, -1.0, r"job\.global_batch"),
    ("job", L.JOB_COMM_BYTES, np.nan, r"job\.comm_bytes"),
    ("job", L.JOB_PIPELINE_EDGE_LAYERS, 1e30,
     r"job\.pipeline_edge_layers: got 1e\+30, expected a number in \[0, 2\*\*53\]"),
    ("job", L.JOB_PIPELINE_EDGE_LAYERS, np.nan, r"job\.pipeline_edge_layers"),
    ("job", L.JOB_DROPOUT, -1.0, r"job\.dropout"),
    ("sys", L.SYS_LINEAR_PEAK_FLOPS, 0.0,
     r"system\.linear_peak_flops: got 0\.0, expected a finite number > 0"),
    ("sys", L.SYS_LINEAR_EFFICIENCY_MAX, -0.5, r"system\.linear_efficiency_max"),
    ("sys", L.SYS_LINEAR_HALF_FLOPS, np.inf, r"system\.linear_half_flops"),
    ("sys", L.SYS_TP_OVERLAP_EXPOSED, 1.5,
     r"system\.tp_overlap_exposed: got 1\.5, expected a finite number in \[0, 1\]"),
    ("sys", L.SYS_TP_OVERLAP_SLOWDOWN, -0.1, r"system\.tp_overlap_slowdown"),
    ("sys", L.SYS_CP_OVERLAP_SLOWDOWN, np.nan, r"system\.cp_overlap_slowdown"),
    ("sys", L.SYS_ATTENTION_HALF_SEQ, -1.0, r"system\.attention_half_seq"),
    ("sys", L.SYS_ATTENTION_HEAD_DIM_HALF, np.inf, r"system\.attention_head_dim_half"),
    ("sys", L.SYS_STEP_OVERHEAD_S, -0.01, r"system\.step_overhead_s"),
    ("job", L.JOB_LINEAR_CAST_BYTES, -4.0, r"job\.linear_cast_bytes"),
    ("job", L.JOB_FP8_WEIGHT_CACHE_BYTES, np.inf, r"job\.fp8_weight_cache_bytes"),
    ("job", L.JOB_LINEAR_INPUT_BYTES, -1.0, r"job\.linear_input_bytes"),
    ("job", L.JOB_TP_GATHER_BYTES, np.nan,
     r"job\.tp_gather_bytes: got nan, expected a finite number >= 0"),
    ("job", L.JOB_EAGER_ELEMENTWISE, -1.0, r"job\.eager_elementwise"),
    ("job", L.JOB_TP_SEQUENCE_COPY, np.nan,
     r"job\.tp_sequence_copy: got nan, expected a finite number >= 0"),
    ("job", L.JOB_FSDP_PP_UNSHARDED, np.inf, r"job\.fsdp_pp_unsharded"),
    ("job", L.JOB_GROUPED_EXPERT_GEMM, -0.5, r"job\.grouped_expert_gemm"),
    ("job", L.JOB_DP_REPLICAS, -1.0,
     r"job\.dp_replicas: got -1\.0, expected a number in \[0, 2\*\*53\]"),
    ("job", L.JOB_DP_REPLICAS, np.nan, r"job\.dp_replicas"),
    ("job", L.JOB_RECOMPUTE_LAYERS, np.inf, r"job\.recompute_layers"),
    ("job", L.JOB_RECOMPUTE_LAYERS, -1.0, r"job\.recompute_layers"),
    ("sys", L.SYS_STREAM_MEMORY_EFFICIENCY, np.inf, r"system\.stream_memory_efficiency"),
    ("sys", L.SYS_HOST_OP_S, -1e-6, r"system\.host_op_s: got -1e-06, expected a finite number"),
    ("sys", L.SYS_HOST_OP_S, np.nan, r"system\.host_op_s"),
    ("job", L.JOB_EAGER_EXPERT_BIAS, np.inf, r"job\.eager_expert_bias"),
    ("job", L.JOB_EAGER_EXPERT_BIAS, -1.0, r"job\.eager_expert_bias"),
]


@pytest.mark.parametrize("block,index,value,message", BAD_BLOCK_FIELDS)
def test_bad_block_names_the_field(blocks, block, index, value, message):
    sys, mdl, job, cfg = (b.copy() for b in blocks)
    {"sys": sys, "mdl": mdl, "job": job}[block][index] = value
    for call in (lambda: native.evaluate_batch(sys, mdl, job, cfg, threads=1),
                 lambda: native.cost(sys, mdl, job, cfg[:, 0]),
                 lambda: native.config_error(sys, mdl, job, cfg[:, 0])):
        with pytest.raises(ValueError, match=message):
            call()


def test_unused_tier_slots_are_not_read(blocks):
    """Tier rows past n_tiers may hold anything (NaN): the kernel never reads them."""
    sys, mdl, job, cfg = (b.copy() for b in blocks)
    sys[L.SYS_TIER_BASE + 3 * L.N_TIER:] = np.nan
    want = reference.evaluate_batch(sys, mdl, job, cfg)
    np.testing.assert_allclose(native.evaluate_batch(sys, mdl, job, cfg), want, rtol=1e-9)


# ---- bad config values: the reference's status codes, never a wild read -----------------------

EXTREMES = [INT32_MIN, -1, 0, 1, 2, 3, 7, 8, 119, 120, 127, 4096, 2**20, INT32_MAX]


@given(data=st.data())
def test_out_of_range_config_values_match_reference(data):
    """Any int32 in any config field (indices, degrees, flags at their extremes): status and
    every column equal the reference's; bad indices report bad_index, the rest invalid_config."""
    sys, mdl, job = data.draw(scenarios())
    n = data.draw(st.integers(1, 12))
    cfg = np.ones((L.N_CFG, n), dtype=np.int32)
    cfg[L.CFG_DP] = int(sys[L.SYS_GPUS])
    cfg[[L.CFG_SCHEDULE, L.CFG_RECOMPUTE, L.CFG_ZERO, L.CFG_SP, L.CFG_ORDER,
         L.CFG_TP_OVERLAP, L.CFG_DP_OVERLAP]] = 0
    for i in range(n):
        field = data.draw(st.integers(0, L.N_CFG - 1))
        cfg[field, i] = data.draw(st.sampled_from(EXTREMES) | st.integers(INT32_MIN, INT32_MAX))
    want = reference.evaluate_batch(sys, mdl, job, cfg)
    got = native.evaluate_batch(sys, mdl, job, cfg)
    np.testing.assert_array_equal(got[L.OUT_STATUS], want[L.OUT_STATUS])
    np.testing.assert_array_equal(got[L.OUT_FEASIBLE], want[L.OUT_FEASIBLE])
    ok = want[L.OUT_STATUS] <= L.STATUS_OUT_OF_MEMORY
    np.testing.assert_allclose(got[:, ok], want[:, ok], rtol=1e-9, atol=1e-12)
    np.testing.assert_array_equal(got[:, ~ok], want[:, ~ok])


@pytest.mark.parametrize("field,value,status", [
    (L.CFG_SCHEDULE, L.N_SCHEDULES, L.STATUS_BAD_INDEX),
    (L.CFG_SCHEDULE, -1, L.STATUS_BAD_INDEX),
    (L.CFG_ORDER, L.N_ORDERS, L.STATUS_BAD_INDEX),
    (L.CFG_ORDER, INT32_MAX, L.STATUS_BAD_INDEX),
    (L.CFG_RECOMPUTE, len(L.RECOMPUTE), L.STATUS_BAD_INDEX),
    (L.CFG_ZERO, 4, L.STATUS_BAD_INDEX),
    (L.CFG_SP, 2, L.STATUS_BAD_INDEX),
    (L.CFG_TP, 0, L.STATUS_INVALID_CONFIG),
    (L.CFG_TP, INT32_MAX, L.STATUS_INVALID_CONFIG),
    (L.CFG_MBS, INT32_MAX, L.STATUS_INVALID_CONFIG),
    (L.CFG_VPP, INT32_MAX, L.STATUS_INVALID_CONFIG),
])
def test_bad_index_status(blocks, field, value, status):
    sys, mdl, job, cfg = (b.copy() for b in blocks)
    cfg[field, 0] = value
    out = native.evaluate_batch(sys, mdl, job, cfg)
    assert out[L.OUT_STATUS, 0] == status
    assert out[L.OUT_FEASIBLE, 0] == 0.0
    assert out[L.OUT_STEP_TIME_S, 0] == np.inf
    assert np.count_nonzero(out[:, 0]) == 2  # status and step only


# ---- layout agreement and the header fed to cffi ---------------------------------------------


def test_layout_check_passes_and_detects_a_stale_build(monkeypatch):
    native.check_layout()
    names = {n: getattr(native.lib, n) for n in dir(native.lib) if n.startswith("TS_")}
    names["TS_CFG_ORDER"] += 1  # a library built before a field was inserted
    monkeypatch.setattr(native, "lib", types.SimpleNamespace(**names))
    with pytest.raises(native.NativeLayoutError, match="TS_CFG_ORDER=12 but layout"):
        native.check_layout()


def test_cdef_is_the_header_text():
    text = cdef_text()
    directives = {line.split()[0] for line in text.splitlines() if line.startswith("#")}
    assert directives == {"#define"}
    assert "TS_CFG_TP_OVERLAP = 12," in text
    assert "int ts_llm_evaluate_batch(" in text
    assert "#define TS_ERR_ARG -1" in text
