"""C and numba equal the reference on every output column (relative 1e-9, identical status and
feasibility), over hypothesis-drawn blocks and config batches, including invalid configs."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import trainscape
from trainscape import layout as L
from trainscape.backends import available_backends, evaluate_blocks
from trainscape.model import llm, reference
from trainscape.spec import pack, pack_configs

from backend_fixture import LOADED, warm_backends  # noqa: F401  (session fixture)
from strategies import batches, config_column, scenarios, site_batches

NATIVE = tuple(b for b in ("c", "numba") if b in LOADED)
RTOL = 1e-9
ATOL = 1e-12


def assert_same(got: np.ndarray, want: np.ndarray, label: str) -> None:
    """Every column equal to ``want``: status and feasibility exactly, the rest to RTOL (ATOL
    near zero), infinities equal."""
    assert got.shape == want.shape, label
    for k, name in enumerate(L.OUTPUT_FIELDS):
        g, w = got[k], want[k]
        if name in ("status", "feasible"):
            bad = np.flatnonzero(g != w)
        else:
            both_inf = np.isinf(g) & np.isinf(w) & (np.sign(g) == np.sign(w))
            with np.errstate(invalid="ignore"):  # inf - inf where both are inf
                close = np.abs(g - w) <= ATOL + RTOL * np.abs(w)
            bad = np.flatnonzero(~(both_inf | close))
        assert bad.size == 0, (
            f"{label}: column {name} differs at {bad[:5].tolist()}: "
            f"got {g[bad[:5]].tolist()}, reference {w[bad[:5]].tolist()}"
        )


def test_native_backends_loaded():
    """Both native backends are available here (the differential tests are not vacuous)."""
    status = available_backends()
    assert status["numba"][0], status["numba"][1]
    assert status["c"][0], status["c"][1]


@pytest.mark.parametrize("name", NATIVE)
@given(batch=batches())
def test_native_equals_reference(name, batch, warm_backends):  # noqa: F811
    sys, mdl, job, cfg = batch
    want = reference.evaluate_batch(sys, mdl, job, cfg)
    got = evaluate_blocks(sys, mdl, job, cfg, backend=name)
    assert_same(got, want, name)


@pytest.mark.parametrize("name", NATIVE)
@given(batch=batches(moe=True, max_size=24))
def test_native_equals_reference_moe(name, batch, warm_backends):  # noqa: F811
    sys, mdl, job, cfg = batch
    want = reference.evaluate_batch(sys, mdl, job, cfg)
    assert_same(evaluate_blocks(sys, mdl, job, cfg, backend=name), want, name)


@pytest.mark.parametrize("name", NATIVE)
@given(batch=batches(moe=True, max_size=24, folded=True))
def test_native_equals_reference_moe_folded(name, batch, warm_backends):  # noqa: F811
    """MoE parallel folding (ep | tp * dp, not dp: expert TP 1) costed alike."""
    sys, mdl, job, cfg = batch
    want = reference.evaluate_batch(sys, mdl, job, cfg)
    assert_same(evaluate_blocks(sys, mdl, job, cfg, backend=name), want, name)


def test_folded_strategy_draws_valid_folded_configs():
    """The folded differential test is not vacuous: its strategy yields valid folded configs."""
    from hypothesis import find

    def valid_folded(batch):
        sys, mdl, job, cfg = batch
        out = reference.evaluate_batch(sys, mdl, job, cfg)
        valid = out[L.OUTPUT_FIELDS.index("status")] != L.STATUS_INVALID_CONFIG
        folded = (cfg[L.CFG_DP] % np.maximum(cfg[L.CFG_EP], 1) != 0) & (cfg[L.CFG_EP] > 1)
        return bool((valid & folded).any())

    find(batches(moe=True, max_size=24, folded=True), valid_folded,
         settings=settings(max_examples=200, database=None, derandomize=True))


@given(data=st.data())
def test_c_config_error_equals_reference(data):
    """The kernel's config_error is the reference's, code for code (not just the status)."""
    from trainscape.native import llm as native

    sys, mdl, job = data.draw(scenarios())
    for _ in range(8):
        col = data.draw(config_column(sys, mdl, job, invalid_rate=3))
        want = llm.config_error(sys, mdl, job, col.reshape(L.N_CFG, 1), 0)
        assert native.config_error(sys, mdl, job, col) == want, col.tolist()


@given(batch=batches(max_size=16))
def test_c_single_config_equals_batch(batch):
    """``ts_llm_cost`` (one config, the entry point in-kernel sweeps call) equals the batch."""
    from trainscape.native import llm as native

    sys, mdl, job, cfg = batch
    whole = native.evaluate_batch(sys, mdl, job, cfg, threads=1)
    for i in range(cfg.shape[1]):
        one = native.cost(sys, mdl, job, cfg[:, i])
        np.testing.assert_array_equal(one, whole[:, i])


@pytest.mark.parametrize("name", NATIVE)
def test_every_order_and_schedule(name, warm_backends, llama_example):  # noqa: F811
    """A grid over all 120 placement orders x 8 schedules x recompute x zero on the Llama 3
    example (16K GPUs, three tiers): every placement rule and schedule branch is exercised."""
    sc = trainscape.load(llama_example)
    sys, mdl, job = pack(sc)
    base = pack_configs([sc.config])[:, 0]
    cols = []
    for order in range(L.N_ORDERS):
        for schedule in range(L.N_SCHEDULES):
            for recompute, zero, ep_sp in ((0, 0, 0), (1, 1, 1), (2, 3, 1), (0, 2, 0),
                                           (L.RECOMPUTE_DOTS, 1, 1),
                                           (L.RECOMPUTE_DOTS_NO_MLP_IN, 0, 1),
                                           (L.RECOMPUTE_DOTS_ATTN, 3, 0),
                                           (L.RECOMPUTE_QKV_PROJ, 2, 1),
                                           (L.RECOMPUTE_OP_SELECTIVE, 1, 1),
                                           (L.RECOMPUTE_OP_SELECTIVE, 3, 0)):
                c = base.copy()
                c[L.CFG_ORDER] = order
                c[L.CFG_SCHEDULE] = schedule
                c[L.CFG_VPP] = 2 if schedule == L.SCHED_INTERLEAVED else 1
                c[L.CFG_RECOMPUTE] = recompute
                c[L.CFG_ZERO] = zero
                c[L.CFG_SP] = ep_sp
                c[L.CFG_TP_OVERLAP] = ep_sp
                c[L.CFG_DP_OVERLAP] = 1 - ep_sp
                cols.append(c)
    cfg = np.ascontiguousarray(np.stack(cols, axis=1))
    want = reference.evaluate_batch(sys, mdl, job, cfg)
    assert (want[L.OUT_STATUS] != L.STATUS_INVALID_CONFIG).sum() > cfg.shape[1] // 2
    assert_same(evaluate_blocks(sys, mdl, job, cfg, backend=name), want, name)


@pytest.mark.parametrize("name", NATIVE)
def test_examples_equal_reference(name, example_path, warm_backends):  # noqa: F811
    sc = trainscape.load(example_path)
    sys, mdl, job = pack(sc)
    cfg = pack_configs([sc.config])
    want = reference.evaluate_batch(sys, mdl, job, cfg)
    assert want[L.OUT_STATUS, 0] in (L.STATUS_OK, L.STATUS_OUT_OF_MEMORY)
    assert_same(evaluate_blocks(sys, mdl, job, cfg, backend=name), want, name)


@pytest.mark.parametrize("name", NATIVE)
@given(batch=site_batches())
def test_native_equals_reference_on_site_graphs(name, batch, warm_backends):  # noqa: F811
    """Site graphs (per-pair links in the system block, pipelines paying the links they
    cross): C and numba equal the reference."""
    sys, mdl, job, cfg = batch
    want = reference.evaluate_batch(sys, mdl, job, cfg)
    assert_same(evaluate_blocks(sys, mdl, job, cfg, backend=name), want, name)


def test_site_strategy_takes_the_site_path():
    """The site-graph differential test is not vacuous: every site batch ends with a column
    whose pipeline stages sit on different sites (strategies.site_crossing_column), and that
    column, whenever the drawn blocks let it be costed, pays the per-link path
    (collectives.site_path_transfers); most drawn batches get it costed."""
    from trainscape.model import collectives

    calls = []
    real = collectives.site_path_transfers

    def spy(*args):
        calls.append(args)
        return real(*args)

    costed = []
    collectives.site_path_transfers = spy
    try:
        @settings(max_examples=60, derandomize=True)
        @given(batch=site_batches())
        def run(batch):
            sys, mdl, job, cfg = batch
            before = len(calls)
            out = reference.evaluate_batch(sys, mdl, job, np.ascontiguousarray(cfg[:, -1:]))
            if out[L.OUT_STATUS, 0] in (L.STATUS_OK, L.STATUS_OUT_OF_MEMORY):
                assert out[L.OUT_PP_COMM_S, 0] > 0.0
                assert len(calls) > before, "a site-crossing pipeline skipped the site links"
                costed.append(1)

        run()
    finally:
        collectives.site_path_transfers = real
    assert len(costed) >= 15


@pytest.mark.parametrize("name", NATIVE)
@settings(max_examples=5)
@given(batch=batches(max_size=8))
def test_threads_split_gives_same_columns(name, batch, warm_backends):  # noqa: F811
    """A batch split over threads gives the columns of one thread, bit for bit."""
    sys, mdl, job, cfg = batch
    big = np.ascontiguousarray(np.tile(cfg, (1, 1 + 20000 // cfg.shape[1])))
    one = evaluate_blocks(sys, mdl, job, big, backend=name, threads=1)
    two = evaluate_blocks(sys, mdl, job, big, backend=name, threads=2)
    np.testing.assert_array_equal(one, two)
    small = evaluate_blocks(sys, mdl, job, cfg, backend=name, threads=1)
    np.testing.assert_array_equal(one[:, : cfg.shape[1]], small)


@pytest.mark.parametrize("name", NATIVE)
@pytest.mark.parametrize("dtype,limit", [("fp8", 4), ("fp8", 0), ("bf16", 1), ("bf16", 2)])
def test_moe_all_to_all_across_nodes_equals_reference(name, dtype, limit,
                                                      warm_backends):  # noqa: F811
    """A DeepSeek-V3-shaped MoE whose expert-parallel groups span nodes, with FP8 dispatch /
    BF16 combine and node-limited routing: every placement puts EP somewhere else, so the
    node-limited share is exercised at every group shape (and changes the answer)."""
    raw = {
        "model": {"preset": "deepseek-v3", "layers": 16, "max_route_nodes": limit},
        "job": {"seq_len": 4096, "global_batch": 1024, "dtype": dtype},
        "cluster": {"gpu": "h100-sxm-80gb", "gpus": 1024, "tiers": [
            {"name": "node", "size": 8, "bandwidth_GBps": 450, "latency_us": 2},
            {"name": "fabric", "size": 64, "bandwidth_GBps": 50, "latency_us": 10},
            {"name": "region", "size": 2, "bandwidth_GBps": 50, "latency_us": 2000,
             "oversubscription": 8}]},
        "space": {"tp": [1, 2], "pp": [4, 8], "ep": [8, 16, 32, 64], "mbs": [1],
                  "schedule": ["1f1b", "dualpipe"], "order": "all"},
    }
    sc = trainscape.load(raw)
    sys, mdl, job = pack(sc)
    cfg = np.ascontiguousarray(sc.space.sample(3000, seed=1))
    want = reference.evaluate_batch(sys, mdl, job, cfg)
    ok = want[L.OUT_STATUS] != L.STATUS_INVALID_CONFIG
    assert ok.sum() > 1000 and (want[L.OUT_EP_COMM_S][ok] > 0).any()
    assert_same(evaluate_blocks(sys, mdl, job, cfg, backend=name), want, name)
    if limit:  # the limit binds somewhere: the same batch without it costs more EP time
        mdl_free = mdl.copy()
        mdl_free[L.MDL_MAX_ROUTE_NODES] = 0
        free = reference.evaluate_batch(sys, mdl_free, job, cfg)
        assert (free[L.OUT_EP_COMM_S] > want[L.OUT_EP_COMM_S]).any()
        assert (free[L.OUT_EP_COMM_S] >= want[L.OUT_EP_COMM_S]).all()
