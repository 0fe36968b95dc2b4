"""The native batch drivers' memos (csrc/batch.c and its numba twin in
trainscape.model.numba_kernel: per-worker memos of the core-row and (row, order) stages, used for
ranges of >= 16,384 configurations per worker) change no value: large batches that repeat rows
and orders, mixed with invalid and out-of-range columns, with more distinct rows than the memo
holds (it starts over) and with rows that rarely repeat (it turns itself off), equal the
memo-free path bit for bit and the reference to 1e-9 on every column. Every test runs once per
native backend."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import trainscape
from trainscape import layout as L
from trainscape.native import llm as native
from trainscape.backends import available_backends, evaluate_blocks
from trainscape.model import reference
from trainscape.space import design_space
from trainscape.spec import pack

from test_backends_differential import assert_same

NATIVE = [b for b in ("c", "numba") if available_backends()[b][0]]
pytestmark = pytest.mark.skipif(not NATIVE, reason="no native backend loaded")


@pytest.fixture(params=NATIVE)
def native_backend(request) -> str:
    return request.param


def _run(backend, sys, mdl, job, cfg, threads=1):
    return evaluate_blocks(sys, mdl, job, np.ascontiguousarray(cfg), backend=backend,
                           threads=threads)

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"
N = 40_000  # > 2 x 16,384: both workers of a two-thread call use their memos
WIDE = {"tp": [1, 2, 4, 8], "cp": [1, 2, 4], "pp": [1, 2, 4, 8, 16], "mbs": [1, 2, 4],
        "vpp": [1, 2, 4], "schedule": list(L.SCHEDULES), "recompute": list(L.RECOMPUTE),
        "zero": [0, 1, 2, 3], "order": "all", "sp": [True, False],
        "tp_overlap": [True, False], "dp_overlap": [True, False]}


def _scenario(name):
    return trainscape.load(EXAMPLES / name)


def _batch(sc, pool: int, seed: int, wide: bool, bad_frac: float) -> np.ndarray:
    """N columns drawn with replacement from ``pool`` configurations of the scenario's space
    (a wide space when ``wide``: many distinct rows, so memo sets overflow and evict), with
    ``bad_frac`` of them given an out-of-range or invalid field."""
    space = design_space(sc, WIDE) if wide else design_space(sc)
    rng = np.random.default_rng(seed)
    base = np.asarray(space.sample(pool, seed=seed), dtype=np.int32)
    cfg = base[:, rng.integers(0, base.shape[1], N)].copy()
    bad = np.flatnonzero(rng.random(N) < bad_frac)
    fields = rng.integers(0, L.N_CFG, bad.size)
    cfg[fields, bad] += rng.integers(-4, 5, bad.size).astype(np.int32)
    return np.ascontiguousarray(cfg)


@pytest.mark.parametrize("backend", NATIVE)
@settings(max_examples=4, deadline=None)
@given(example=st.sampled_from(["llama3-405b-2bldg.toml", "gpt3-175b-a100.toml",
                                "mixtral-8x7b-moe.toml"]),
       seed=st.integers(0, 2**31 - 1), wide=st.booleans(),
       pool=st.sampled_from([50, 3000, 40_000]), bad_frac=st.sampled_from([0.0, 0.1]))
def test_memoized_batch_equals_single_configs_and_reference(backend, example, seed, wide,
                                                            pool, bad_frac):
    sc = _scenario(example)
    sys, mdl, job = pack(sc)
    cfg = _batch(sc, pool, seed, wide, bad_frac)
    one_thread = _run(backend, sys, mdl, job, cfg, threads=1)
    two_threads = _run(backend, sys, mdl, job, cfg, threads=2)
    assert np.array_equal(one_thread, two_threads, equal_nan=True)
    rng = np.random.default_rng(seed + 1)
    # bit for bit the memo-free path (one configuration per call), on a sample of columns
    cols = rng.choice(N, 600, replace=False)
    if backend == "c":
        single = np.stack([native.cost(sys, mdl, job, cfg[:, i]) for i in cols], axis=1)
    else:
        single = _run(backend, sys, mdl, job, cfg[:, cols])
    assert np.array_equal(one_thread[:, cols], single, equal_nan=True)
    # and the reference, every column to 1e-9, on another sample
    cols = rng.choice(N, 300, replace=False)
    want = reference.evaluate_batch(sys, mdl, job, np.ascontiguousarray(cfg[:, cols]))
    assert_same(one_thread[:, cols], want, example)


def test_memo_is_used_and_matches_on_the_bench_batch(native_backend):
    """The bench's batch (the Llama-3-405B example's space, 10^5 columns, one thread: memo on)
    equals the same columns costed one call per 1,000 (memo off: below the threshold)."""
    from trainscape.cli.bench import bench_batch

    sys, mdl, job, cfg = bench_batch(100_000, seed=3)
    whole = _run(native_backend, sys, mdl, job, cfg)
    assert np.array_equal(whole, _chunked(native_backend, sys, mdl, job, cfg, 1000),
                          equal_nan=True)


@pytest.mark.parametrize("example", ["llama3-405b-2bldg.toml", "mixtral-8x7b-moe.toml"])
def test_many_distinct_rows_evict_without_mixing_them_up(native_backend, example):
    """A wide space's 40,000 distinct draws: thousands of core rows, neighbours in the hash
    table, and (row, order) pairs that rarely repeat."""
    sc = _scenario(example)
    sys, mdl, job = pack(sc)
    cfg = _batch(sc, N, 7, True, 0.0)
    got = _run(native_backend, sys, mdl, job, cfg)
    assert np.array_equal(got, _chunked(native_backend, sys, mdl, job, cfg, 2000),
                          equal_nan=True)


def _chunked(backend, sys, mdl, job, cfg, size):
    """The batch costed in calls of ``size`` columns (below the memo's threshold)."""
    return np.concatenate([_run(backend, sys, mdl, job, cfg[:, i:i + size])
                           for i in range(0, cfg.shape[1], size)], axis=1)


def test_more_rows_than_the_memo_holds_and_rows_that_never_repeat(native_backend):
    """Two batches past the memo's limits, equal to the memo-free path bit for bit: 60,000
    draws from 9,000 configurations whose data-parallel degree and micro-batch size vary (more
    distinct core rows than a worker holds, 4,096 in C and 1,024 in numba, so it starts over;
    valid and invalid rows mixed), and 40,000 columns whose every core row is new (the memo sees no row hit in its
    first window and costs the rest from scratch)."""
    sc = _scenario("llama3-405b-2bldg.toml")
    sys, mdl, job = pack(sc)
    rng = np.random.default_rng(11)
    base = np.asarray(design_space(sc, WIDE).sample(9000, seed=11), dtype=np.int32)
    base[L.CFG_DP] = rng.choice([1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048], 9000)
    base[L.CFG_MBS] = rng.integers(1, 9, 9000)
    many = np.ascontiguousarray(base[:, rng.integers(0, 9000, 60_000)])
    fresh = np.ascontiguousarray(
        np.asarray(design_space(sc, WIDE).sample(N, seed=12), dtype=np.int32))
    fresh[L.CFG_MBS] = np.arange(1, N + 1, dtype=np.int32)  # every core row distinct
    for cfg in (many, fresh):
        got = _run(native_backend, sys, mdl, job, cfg)
        assert np.array_equal(got, _chunked(native_backend, sys, mdl, job, cfg, 5000),
                              equal_nan=True)
        assert np.array_equal(got, _run(native_backend, sys, mdl, job, cfg, threads=2),
                              equal_nan=True)
    # the first batch is what it should be: more rows than the memo holds, hundreds of them
    # valid (the rest invalid: the data-parallel degree no longer matches the GPU count)
    core = [L.CFG_TP, L.CFG_CP, L.CFG_PP, L.CFG_DP, L.CFG_EP, L.CFG_MBS, L.CFG_VPP,
            L.CFG_SCHEDULE, L.CFG_SP, L.CFG_TP_OVERLAP]
    assert np.unique(many[core].T, axis=0).shape[0] > 4096
    assert np.count_nonzero(_chunked(native_backend, sys, mdl, job, many, 5000)[L.OUT_STATUS] == 0) > 500


@pytest.mark.parametrize("offset_bytes", [0, 8, 24, 4])
def test_large_batches_store_the_same_results_at_any_alignment(native_backend, offset_bytes):
    """Ranges of >= 65,536 configurations per worker store their results through a ring and
    whole cache lines (csrc/batch.c ts_stream_store): an odd column count (every result row
    starts at a different place in its cache line), one and two threads (the second worker's
    range starts mid-line), a caller's ``out`` buffer 8 or 24 bytes past a line, or not
    aligned to a double at all (4 bytes: stored plainly), all equal the batch costed in calls
    below the memo's threshold, bit for bit."""
    sc = _scenario("llama3-405b-2bldg.toml")
    sys, mdl, job = pack(sc)
    n = 2 * 65_536 + 1001
    rng = np.random.default_rng(offset_bytes)
    base = np.asarray(design_space(sc).sample(5000, seed=offset_bytes), dtype=np.int32)
    cfg = np.ascontiguousarray(base[:, rng.integers(0, 5000, n)])
    want = _chunked(native_backend, sys, mdl, job, cfg, 10_000)
    for threads in (1, 2):
        raw = np.zeros(L.N_OUT * n * 8 + 64 + offset_bytes, dtype=np.uint8)
        start = (-raw.ctypes.data) % 64 + offset_bytes
        out = np.frombuffer(raw[start:start + L.N_OUT * n * 8], dtype=np.float64)
        out = out.reshape(L.N_OUT, n)
        got = evaluate_blocks(sys, mdl, job, cfg, backend=native_backend, threads=threads,
                              out=out)
        assert got is out or np.shares_memory(got, out)
        assert np.array_equal(out, want, equal_nan=True), threads


def test_a_large_batch_whose_rows_never_repeat_stores_every_result(native_backend):
    """70,000 columns whose every core row is new: the memo turns itself off after its first
    window and the rest is costed from scratch, after the results kept in the ring so far are
    stored."""
    sc = _scenario("llama3-405b-2bldg.toml")
    sys, mdl, job = pack(sc)
    n = 70_000
    cfg = np.ascontiguousarray(
        np.asarray(design_space(sc, WIDE).sample(n, seed=5), dtype=np.int32))
    cfg[L.CFG_MBS] = np.arange(1, n + 1, dtype=np.int32)
    got = _run(native_backend, sys, mdl, job, cfg)
    assert np.array_equal(got, _chunked(native_backend, sys, mdl, job, cfg, 5000),
                          equal_nan=True)


@pytest.mark.parametrize("strategy", ["diloco", "delayed"])
def test_cross_site_sync_batch_equals_single_configs_and_reference(native_backend, strategy):
    """Under a cross-site ``job.sync`` ZeRO shards over each order's site groups, so the row's
    device memory per ZeRO stage (kept per row under synchronous data parallelism) is costed per
    configuration: a large batch of the two-building example, every order and ZeRO stage, equals
    the memo-free path bit for bit and the reference to 1e-9."""
    extra = [f'job.sync.strategy="{strategy}"']
    if strategy == "diloco":
        extra += ["job.sync.inner_steps=8", "job.sync.fragments=2"]
    sc = trainscape.load(EXAMPLES / "llama3-405b-2bldg.toml", extra)
    sys, mdl, job = pack(sc)
    space = design_space(sc, {"zero": [0, 1, 2], "order": "all", "dp_overlap": [True, False]})
    rng = np.random.default_rng(5)
    base = np.asarray(space.sample(3000, seed=5), dtype=np.int32)
    cfg = np.ascontiguousarray(base[:, rng.integers(0, base.shape[1], N)])
    got = _run(native_backend, sys, mdl, job, cfg)
    assert np.array_equal(got, _chunked(native_backend, sys, mdl, job, cfg, 2000), equal_nan=True)
    cols = rng.choice(N, 300, replace=False)
    want = reference.evaluate_batch(sys, mdl, job, np.ascontiguousarray(cfg[:, cols]))
    assert_same(got[:, cols], want, "llama3-405b-2bldg.toml")
    assert (got[L.OUT_STATUS] == L.STATUS_OK).any()


def test_state_memory_terms_fill_the_drivers_store():
    """The native drivers keep llm.state_memory_terms in stores llm.N_STATE wide: the tuple is
    that long, and with finish_config_state it gives finish_config's results."""
    from trainscape.model import llm

    sc = _scenario("llama3-405b-2bldg.toml")
    sys, mdl, job = pack(sc)
    cfg = _batch(sc, 50, 3, False, 0.0)[:, :1].copy()
    row = llm.row_terms(sys, mdl, job, cfg, 0)
    ordt = llm.order_terms(sys, mdl, job, row, cfg[L.CFG_ORDER, 0])
    rect = llm.recompute_terms(sys, mdl, job, row, ordt, cfg[L.CFG_RECOMPUTE, 0])
    zero = int(cfg[L.CFG_ZERO, 0])
    dpc = llm.data_parallel_comm(sys, job, row, ordt, zero)
    ranks = llm.zero_shard_ranks(sys, job, row, ordt)
    state = llm.state_memory_terms(mdl, job, row, zero, ranks[0], ranks[1])
    assert len(state) == llm.N_STATE
    whole = np.empty((L.N_OUT, 1))
    split = np.empty((L.N_OUT, 1))
    llm.finish_config(sys, mdl, job, row, ordt, rect, dpc[0], dpc[1], zero, True, whole, 0)
    llm.finish_config_state(sys, mdl, job, row, ordt, rect, dpc[0], dpc[1], zero, True,
                            ranks[0], ranks[1], np.array(state), split, 0)
    assert np.array_equal(whole, split)


def test_numba_inlines_only_reference_functions_on_the_hit_path(monkeypatch):
    # the batch driver compiles these reference functions inline at their call sites; a name
    # that is not a reference function would silently inline nothing, so the build refuses it
    from trainscape.model import llm, numba_kernel

    import numba

    assert numba_kernel.INLINED <= {n for n in dir(llm) if callable(getattr(llm, n))}
    if not numba.config.DISABLE_JIT:  # scripts/sanitize.sh runs the twins as plain functions
        for name in numba_kernel.INLINED:
            assert numba_kernel.jitted[name].targetoptions.get("inline") == "always", name
        assert numba_kernel.jitted["row_terms"].targetoptions.get("inline") == "never"
    monkeypatch.setattr(numba_kernel, "INLINED", numba_kernel.INLINED | {"not_a_function"})
    with pytest.raises(RuntimeError, match="not_a_function"):
        numba_kernel._build_namespace()
