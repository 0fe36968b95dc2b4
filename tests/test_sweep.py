"""The exhaustive sweep: equal to a brute-force reference sweep, resumable after a kill with
identical results, and top-K / Pareto merging that does not depend on how work was split."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from trainscape import layout as L
from trainscape.native import sweep as kernel_c
from trainscape.explore.kernel_numba import pareto_insert, topk_insert
from trainscape.explore.reduce import Reduced, pareto_brute, pareto_merge, topk_merge
from trainscape.explore.sweep import run_sweep
from trainscape.model.reference import evaluate_batch
from trainscape.space import design_space
from trainscape.spec import pack

from _explore_common import brute_force_points, small, user_axes

BACKENDS = ["numba", "python"] + (["c"] if kernel_c.available() else [])
K = 12


@pytest.fixture(scope="module")
def sc():
    return small()


@pytest.fixture(scope="module")
def brute(sc):
    """Reference answers from the raw product: evaluate every distinct valid point with the
    pure-Python model; top-K by (step, index), Pareto front by the O(n^2) definition."""
    ds = design_space(sc)
    pts = np.array(brute_force_points(sc, user_axes(ds)), dtype=np.int32).T
    out = evaluate_batch(*pack(sc), np.ascontiguousarray(pts))
    idx = ds.index_of(pts)  # the tie-break key: global index of each point
    assert (idx >= 0).all()
    feas = out[L.OUT_FEASIBLE] == 1.0
    step, mem = out[L.OUT_STEP_TIME_S], out[L.OUT_MEMORY_GIB]
    order = np.lexsort((idx[feas], step[feas]))[:K]
    top = idx[feas][order]
    front = pareto_brute(step[feas], mem[feas], idx[feas])
    return {"top": top, "top_step": step[feas][order], "front": front,
            "n": pts.shape[1], "feasible": int(feas.sum())}


@pytest.mark.parametrize("backend", BACKENDS)
def test_sweep_equals_brute_force_reference(sc, brute, backend):
    res = run_sweep(sc, top=K, backend=backend, workers=2)
    assert res.evaluated == brute["n"]
    assert res.feasible == brute["feasible"]
    assert np.array_equal(res.top.index, brute["top"])
    assert np.allclose(res.top.out[L.OUT_STEP_TIME_S], brute["top_step"], rtol=1e-9, atol=0)
    assert set(res.front.index.tolist()) == brute["front"]
    # the front is sorted by step time with memory strictly decreasing
    assert np.all(np.diff(res.front.out[L.OUT_STEP_TIME_S]) > 0)
    assert np.all(np.diff(res.front.out[L.OUT_MEMORY_GIB]) < 0)


@pytest.mark.parametrize("backend", [b for b in BACKENDS if b != "python"])
def test_sweep_backends_agree_on_a_maximized_objective(sc, backend):
    ref = run_sweep(sc, top=5, objective="mfu", backend="python")
    got = run_sweep(sc, top=5, objective="mfu", backend=backend, workers=3)
    assert np.array_equal(got.top.index, ref.top.index)
    assert np.array_equal(got.by_order.index, ref.by_order.index)
    assert np.all(np.diff(got.top.out[L.OUT_MFU]) <= 0)


@settings(max_examples=10, deadline=None)
@given(st.integers(1, 10**6), st.integers(1, 5), st.integers(50, 3000))
def test_resume_after_interruption_is_identical(tmp_path_factory, sc, stop_frac, workers, chunk):
    full = run_sweep(sc, top=K, backend="numba", workers=2)
    ds = design_space(sc)
    stop = 1 + stop_frac % (ds.size - 1)
    ck = tmp_path_factory.mktemp("ck") / "sweep.npz"
    part = run_sweep(sc, space=ds, top=K, backend="numba", workers=workers, checkpoint=ck,
                     chunk=chunk, stop_after=stop, checkpoint_every_s=0.0)
    assert not part.complete
    res = run_sweep(sc, space=ds, top=K, backend="numba", workers=2, checkpoint=ck,
                    resume=True, chunk=chunk)
    assert res.complete and res.evaluated == full.evaluated
    assert np.array_equal(res.top.index, full.top.index)
    assert np.array_equal(res.front.index, full.front.index)
    assert np.array_equal(res.by_order.index, full.by_order.index)


def test_resume_after_sigkill_is_identical(tmp_path):
    """A sweep process killed (SIGKILL) at a random point, then resumed, ends with exactly the
    uninterrupted result and does not redo finished ranges."""
    sc = small(mbs=[1, 2, 4], dp_overlap=[True, False], zero=[0, 1, 2, 3])
    full = run_sweep(sc, top=K, backend="numba", workers=2)
    ck = tmp_path / "ck.npz"
    script = tmp_path / "run.py"
    script.write_text(textwrap.dedent(f"""
        import sys
        sys.path[:0] = {[str(Path(__file__).parent), *sys.path]!r}
        from _explore_common import small
        from trainscape.explore.sweep import run_sweep
        sc = small(mbs=[1, 2, 4], dp_overlap=[True, False], zero=[0, 1, 2, 3])
        print("ready", flush=True)
        run_sweep(sc, top={K}, backend="python", workers=1, checkpoint={str(ck)!r}, chunk=64,
                  checkpoint_every_s=0.0)
        print("finished", flush=True)
    """))
    rng = np.random.default_rng(int(time.time()))
    proc = subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE, text=True,
                            env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)})
    assert proc.stdout.readline().strip() == "ready"
    deadline = time.time() + 60
    while not ck.exists() and time.time() < deadline:
        time.sleep(0.02)
    time.sleep(float(rng.uniform(0.0, 0.5)))
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    ds = design_space(sc)
    with np.load(ck) as z:
        done = int(z["done"][0])
    assert 0 < done < ds.size  # killed mid-way, with progress saved
    res = run_sweep(sc, space=ds, top=K, backend="numba", workers=2, checkpoint=ck, resume=True)
    assert res.extra["resumed_at_index"] == done
    assert res.evaluated == full.evaluated == ds.size
    assert np.array_equal(res.top.index, full.top.index)
    assert np.array_equal(res.front.index, full.front.index)
    assert np.array_equal(res.by_order.index, full.by_order.index)


def test_resume_refuses_a_different_sweep(tmp_path, sc):
    from trainscape.spec import ScenarioError

    ck = tmp_path / "ck.npz"
    run_sweep(sc, top=K, backend="numba", checkpoint=ck, stop_after=100)
    with pytest.raises(ScenarioError, match="--resume: the checkpoint belongs to a different"):
        run_sweep(sc, top=K + 1, backend="numba", checkpoint=ck, resume=True)


# ---- merging (hypothesis) -------------------------------------------------------------------

values = st.lists(st.tuples(st.sampled_from([1.0, 2.0, 2.5, 3.0, 4.0, 7.5]),
                            st.sampled_from([1.0, 2.0, 3.0, 5.0, 8.0])), min_size=0, max_size=60)


@settings(max_examples=200, deadline=None)
@given(values, st.integers(1, 8), st.integers(1, 6), st.randoms(use_true_random=False))
def test_topk_and_pareto_merge_do_not_depend_on_the_split(pts, k, parts, rnd):
    idx = np.arange(len(pts), dtype=np.int64) * 3 + 1
    rnd.shuffle(pts)
    step = np.array([p[0] for p in pts])
    mem = np.array([p[1] for p in pts])
    key = step + 0.0
    whole_k = topk_merge(key, idx, k)
    whole_f = pareto_merge(step, mem, idx)
    assert set(whole_f[2].tolist()) == pareto_brute(step, mem, idx)
    # split into random parts, reduce each, merge in random order
    cut = sorted(rnd.sample(range(len(pts) + 1), min(parts, len(pts) + 1)))
    bounds = [0, *cut, len(pts)]
    reds = []
    for a, b in zip(bounds[:-1], bounds[1:]):
        tk, ti = topk_merge(key[a:b], idx[a:b], k)
        fs, fm, fi = pareto_merge(step[a:b], mem[a:b], idx[a:b])
        reds.append(Reduced(tk, ti, fs, fm, fi, np.full(L.N_ORDERS, np.inf),
                            np.full(L.N_ORDERS, -1, np.int64), b - a))
    rnd.shuffle(reds)
    acc = Reduced.empty()
    for r in reds:
        acc = acc.merge(r, k)
    assert np.array_equal(acc.topk_idx, whole_k[1]) and np.array_equal(acc.topk_key, whole_k[0])
    assert np.array_equal(acc.front_idx, whole_f[2])
    assert acc.evaluated == len(pts)


@settings(max_examples=200, deadline=None)
@given(values, st.integers(1, 8))
def test_kernel_inserts_equal_the_merge(pts, k):
    """The in-kernel top-K and Pareto insertions (numba twins of sweep.c) build exactly what
    the NumPy merge computes."""
    idx = np.arange(len(pts), dtype=np.int64)
    keys = np.full(k, np.inf)
    kidx = np.full(k, -1, dtype=np.int64)
    fs, fm, fi = np.zeros(64), np.zeros(64), np.zeros(64, dtype=np.int64)
    n = 0
    for g, (s, m) in enumerate(pts):
        topk_insert(keys, kidx, s, g)
        n = pareto_insert(fs, fm, fi, n, s, m, g)
        assert n >= 0
    step = np.array([p[0] for p in pts])
    mem = np.array([p[1] for p in pts])
    tk, ti = topk_merge(keys, kidx, k)
    ek, ei = topk_merge(step, idx, k)
    assert np.array_equal(ti, ei) and np.array_equal(tk, ek)
    ps, pm, pi = pareto_merge(step, mem, idx)
    assert np.array_equal(fi[:n], pi) and np.array_equal(fs[:n], ps)


def test_pareto_overflow_is_retried_not_lost(sc):
    """A front larger than a worker buffer: the kernel reports overflow, the driver retries
    with a larger buffer, the answer is unchanged."""
    from trainscape.explore import kernel_numba
    from trainscape.explore.reduce import WorkerState

    ds = design_space(sc)
    blocks = pack(sc)
    st_small = WorkerState(1, 4, cap=1)
    ok = kernel_numba.run_range(ds, blocks, 0, ds.size, L.OUT_STEP_TIME_S, 1.0, st_small)
    full = run_sweep(sc, top=4, backend="numba")
    assert len(full.front) > 1  # the premise: a front larger than the 1-point buffer
    assert not ok
    st_big = WorkerState(1, 4, cap=4096)
    assert kernel_numba.run_range(ds, blocks, 0, ds.size, L.OUT_STEP_TIME_S, 1.0, st_big)
    assert np.array_equal(st_big.reduced().front_idx, full.front.index)


@pytest.mark.parametrize("backend", [b for b in BACKENDS if b != "python"])
def test_cross_site_sync_sweep_equals_the_reference_sweep(backend):
    """Under a cross-site ``job.sync`` ZeRO shards over each order's site groups, so the native
    sweeps cost a row's device memory per configuration (under synchronous data parallelism they
    keep it per row and ZeRO stage): DiLoCo over the small scenario's two tiers, every order,
    gives the reference sweep's counts, top-K and front."""
    import copy

    import trainscape

    from _explore_common import SMALL

    raw = copy.deepcopy(SMALL)
    raw["job"]["sync"] = {"strategy": "diloco", "inner_steps": 8}
    raw["space"]["zero"] = [0, 1, 2]
    sc = trainscape.load(raw)
    ref = run_sweep(sc, top=K, backend="python")
    got = run_sweep(sc, top=K, backend=backend, workers=2)
    assert (got.evaluated, got.feasible) == (ref.evaluated, ref.feasible)
    assert ref.feasible > 0
    assert np.array_equal(got.top.index, ref.top.index)
    assert np.allclose(got.top.out[L.OUT_MEMORY_GIB], ref.top.out[L.OUT_MEMORY_GIB], rtol=1e-9,
                       atol=0)
    assert set(got.front.index.tolist()) == set(ref.front.index.tolist())
