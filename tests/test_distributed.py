"""Sweeps on a Dask cluster (``trainscape.explore.distributed``): a LocalCluster of two worker
processes gives the single-machine answer bit for bit -- also after one worker is killed
(SIGKILL) mid-sweep, and after the client is interrupted or killed and the sweep resumed from
its checkpoint. Without Dask, ``--dask`` exits 2 saying how to install it."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from click.testing import CliRunner
from hypothesis import given
from hypothesis import strategies as st

from trainscape.explore import distributed as D
from trainscape.cli import main as trainscape_main
from trainscape.explore.sweep import SweepInterrupted, run_sweep
from trainscape.space import design_space

from _explore_common import SMALL, small

K = 12
#: indices per chunk in these tests: the small space (~11k points) makes ~180 chunks, so a
#: kill lands while most of them are still to run.
CHUNK = 64

needs_dask = pytest.mark.skipif(not D.dask_available(),
                                reason="the optional Dask extra is not installed "
                                       "(pip install 'trainscape[dask]')")


@pytest.fixture(scope="module")
def sc():
    return small()


@pytest.fixture(scope="module")
def local(sc):
    """The single-machine sweep: the answer every distributed run must give."""
    return run_sweep(sc, top=K, workers=2)


@pytest.fixture(scope="module")
def cluster():
    if not D.dask_available():
        pytest.skip("the optional Dask extra is not installed (pip install 'trainscape[dask]')")
    with D.Cluster("local", workers=2, threads_per_worker=1, processes=True) as cl:
        yield cl


def assert_identical(got, want):
    """Same rows (indices and every result column, bit for bit) and the same counters."""
    for part in ("top", "front", "by_order"):
        g, w = getattr(got, part), getattr(want, part)
        assert g.index.tolist() == w.index.tolist(), part
        assert g.cfg.tobytes() == w.cfg.tobytes(), part
        assert g.out.tobytes() == w.out.tobytes(), part
    assert (got.evaluated, got.feasible, got.out_of_memory, got.invalid) == (
        want.evaluated, want.feasible, want.out_of_memory, want.invalid)
    assert got.min_memory_gib == want.min_memory_gib
    assert got.complete and want.complete


# ---------------------------------------------------------------------------------------------
# Index ranges (pure functions, no cluster)
# ---------------------------------------------------------------------------------------------


@given(st.integers(1, 5000), st.integers(1, 40), st.randoms(use_true_random=False))
def test_finished_ranges_cover_the_space_exactly_once(size, parts, rnd):
    """Chunks merged in any order join into [0, size); what is missing is what is not done."""
    chunks = D.split([(0, size)], -(-size // parts))
    assert sum(b - a for a, b in chunks) == size
    rnd.shuffle(chunks)
    done = []
    for j, (a, b) in enumerate(chunks):
        done = D.add_range(done, a, b)
        covered = {i for x, y in done for i in range(x, y)}
        assert covered == {i for x, y in chunks[: j + 1] for i in range(x, y)}
        missing = {i for x, y in D.missing_ranges(done, size) for i in range(x, y)}
        assert missing == set(range(size)) - covered
    assert done == [(0, size)]
    with pytest.raises(ValueError):
        D.add_range(done, 0, 1)  # a chunk merged twice would count its configurations twice


# ---------------------------------------------------------------------------------------------
# On a LocalCluster
# ---------------------------------------------------------------------------------------------


@needs_dask
@pytest.mark.parametrize("objective", ["step_time_s", "mfu"])
def test_dask_sweep_equals_the_local_sweep(cluster, sc, objective):
    want = local_sweep(sc, objective)
    got = D.run_dask_sweep(sc, dask=cluster, top=K, objective=objective, chunk=CHUNK)
    assert got.extra["chunks"] == -(-got.space_size // CHUNK)
    assert_identical(got, want)


def local_sweep(sc, objective):
    return run_sweep(sc, top=K, objective=objective, workers=2)


@needs_dask
def test_killing_a_worker_mid_sweep_gives_the_same_answer(cluster, sc, local):
    """SIGKILL one worker process while it runs chunks: the scheduler reruns them (and the
    inputs it held) on the other worker; the answer is the local sweep's."""
    client = cluster.client
    killed = {}

    def kill_one(merged, cl):
        if killed:
            return
        busy = {w: ks for w, ks in client.processing().items() if ks}
        if not busy:
            return  # between tasks: try again after the next chunk
        victim = sorted(busy)[0]
        killed["addr"] = victim
        killed["keys"] = list(busy[victim])
        killed["merged"] = merged
        pid = client.run(os.getpid, workers=[victim])[victim]
        os.kill(pid, signal.SIGKILL)

    got = D.run_dask_sweep(sc, dask=cluster, top=K, chunk=CHUNK, on_chunk=kill_one)
    assert killed, "no worker was ever busy when a chunk came back"
    assert any("chunk" in str(k) for k in killed["keys"])  # it died holding a chunk
    assert killed["merged"] < got.extra["chunks"]  # ... before the sweep was over
    assert_identical(got, local)
    # the scheduler saw it die (its nanny starts a fresh worker on another port)
    deadline = time.time() + 30
    while killed["addr"] in client.scheduler_info()["workers"] and time.time() < deadline:
        time.sleep(0.1)
    assert killed["addr"] not in client.scheduler_info()["workers"]
    client.wait_for_workers(2, timeout=60)


@needs_dask
def test_interrupted_client_resumes_from_the_checkpoint(cluster, sc, local, tmp_path):
    """Stop after some chunks (as Ctrl-C does), then resume with another chunk size: the
    finished ranges are not redone and the answer is the local sweep's."""
    ck = tmp_path / "ck.npz"
    with pytest.raises(SweepInterrupted):
        D.run_dask_sweep(sc, dask=cluster, top=K, chunk=CHUNK, checkpoint=ck,
                         stop_after_chunks=7)
    ranges, red = D.load_checkpoint(ck, fingerprint(sc))
    done = sum(b - a for a, b in ranges)
    assert done == red.evaluated and 0 < done < local.evaluated
    got = D.run_dask_sweep(sc, dask=cluster, top=K, chunk=3 * CHUNK + 1, checkpoint=ck,
                           resume=True)
    assert got.extra["resumed_at_index"] == done
    assert got.resumed_from == done  # configurations this run did not evaluate again
    assert_identical(got, local)


def fingerprint(sc, k=K):
    from trainscape.explore.sweep import fingerprint as fp

    return fp(sc, design_space(sc), "step_time_s", k)


@needs_dask
def test_killed_client_resumes_with_the_same_answer(cluster, sc, local, tmp_path):
    """A client process connected to the cluster's scheduler is killed (SIGKILL) mid-sweep; a
    new client resumes from its checkpoint and ends with the local sweep's answer."""
    ck = tmp_path / "ck.npz"
    script = tmp_path / "client.py"
    script.write_text(textwrap.dedent(f"""
        import sys, time
        sys.path[:0] = {[str(Path(__file__).parent), *sys.path]!r}
        from _explore_common import small
        from trainscape.explore import distributed as D

        def slow(merged, cl):
            print("chunk", merged, flush=True)
            time.sleep(0.02)

        if __name__ == "__main__":
            with D.Cluster({cluster.cluster.scheduler_address!r}) as cl:
                D.run_dask_sweep(small(), dask=cl, top={K}, chunk={CHUNK}, checkpoint={str(ck)!r},
                                 checkpoint_every_s=0.0, on_chunk=slow)
            print("finished", flush=True)
    """))
    proc = subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE, text=True,
                            env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)})
    lines = 0
    for line in proc.stdout:
        lines += line.startswith("chunk")
        if lines >= 10:
            break
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    assert lines >= 10
    ranges, red = D.load_checkpoint(ck, fingerprint(sc))
    done = sum(b - a for a, b in ranges)
    assert 0 < done < local.evaluated  # killed mid-way, with progress saved
    got = D.run_dask_sweep(sc, dask=cluster, top=K, chunk=CHUNK, checkpoint=ck, resume=True)
    assert got.extra["resumed_at_index"] == done
    assert_identical(got, local)


@needs_dask
def test_resume_refuses_another_sweeps_checkpoint(cluster, sc, tmp_path):
    from trainscape.spec.errors import ScenarioError

    ck = tmp_path / "ck.npz"
    with pytest.raises(SweepInterrupted):
        D.run_dask_sweep(sc, dask=cluster, top=K, chunk=CHUNK, checkpoint=ck,
                         stop_after_chunks=2)
    with pytest.raises(ScenarioError, match="different sweep"):
        D.run_dask_sweep(sc, dask=cluster, top=K + 1, checkpoint=ck, resume=True)
    plain = tmp_path / "plain.npz"  # a single-machine sweep's checkpoint is another format
    run_sweep(sc, top=K, checkpoint=plain, stop_after=100)
    with pytest.raises(ScenarioError, match="not a checkpoint of a Dask sweep"):
        D.run_dask_sweep(sc, dask=cluster, top=K, checkpoint=plain, resume=True)


@needs_dask
def test_search_and_explore_on_the_cluster_give_the_local_answer(cluster, sc):
    from trainscape.explore.main import run_explore
    from trainscape.explore.search import run_search

    for method in ("evolve", "beam"):
        want = run_search(sc, method, budget=400, seed=5, top=K)
        got = D.run_dask_search(sc, method, dask=cluster, budget=400, seed=5, top=K)
        assert_identical(got, want)
    # a time budget too small to sweep: evolve and beam run as two tasks, merged
    want = run_explore(sc, time_budget_s=1e-9, budget=400, top=K)
    got = D.run_dask_explore(sc, dask=cluster, time_budget_s=1e-9, budget=400, top=K)
    assert got.extra["mode"] == want.extra["mode"] == "search"
    assert_identical(got, want)
    got = D.run_dask_explore(sc, dask=cluster, top=K)
    assert got.extra["mode"] == "sweep"
    assert_identical(got, run_explore(sc, top=K))


@needs_dask
def test_an_unreachable_scheduler_is_one_line(cluster):
    from trainscape.spec.errors import ScenarioError

    with pytest.raises(ScenarioError, match=r"^--dask: cannot reach a Dask scheduler"):
        D.Cluster("tcp://127.0.0.1:9", timeout_s=1)


# ---------------------------------------------------------------------------------------------
# Command line
# ---------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def cli():
    return trainscape_main


def scenario_file(tmp_path) -> Path:
    p = tmp_path / "small.json"
    p.write_text(json.dumps(SMALL))
    return p


@needs_dask
def test_cli_sweep_on_a_local_cluster_equals_the_plain_sweep(cli, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # the default checkpoints go under .trainscape/ here
    path = scenario_file(tmp_path)
    r0 = CliRunner().invoke(cli, ["sweep", str(path), "--top", "5", "--json"],
                            catch_exceptions=False)
    r1 = CliRunner().invoke(cli, ["sweep", str(path), "--top", "5", "--json", "--dask", "local"],
                            catch_exceptions=False)
    assert r0.exit_code == 0 and r1.exit_code == 0, r1.output
    a, b = json.loads(r0.output), json.loads(r1.output)
    for part in ("top", "pareto", "best_by_order"):
        assert a[part] == b[part], part
    assert list((tmp_path / ".trainscape").glob("sweep-*-dask.npz"))


@pytest.mark.parametrize("command", ["sweep", "search", "explore"])
def test_dask_option_without_dask_exits_2_with_the_install_hint(cli, tmp_path, monkeypatch,
                                                                command):
    monkeypatch.setitem(sys.modules, "distributed", None)  # import distributed -> ImportError
    path = scenario_file(tmp_path)
    r = CliRunner().invoke(cli, [command, str(path), "--dask", "local"])
    assert r.exit_code == 2, r.output
    lines = r.output.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in r.output
    assert "--dask" in lines[0] and "pip install 'trainscape[dask]'" in lines[0]


def test_a_worker_with_another_space_or_version_refuses_the_work(sc):
    """The space is rebuilt on a worker from the scenario and its axes: a different table
    (another trainscape there) or another version/layout stops with a message, not a wrong
    answer."""
    from trainscape.spec import pack

    ds = design_space(sc)
    space, blocks = D._payload(sc, ds.axes, D.space_digest(ds), pack(sc), D.compat())
    assert D.space_digest(space) == D.space_digest(ds)
    with pytest.raises(RuntimeError, match="differs from the client's"):
        D._payload(sc, ds.axes, D.space_digest(design_space(small(zero=[1]))), pack(sc),
                   D.compat())
    with pytest.raises(RuntimeError, match="same trainscape on the client and every worker"):
        D._payload(sc, ds.axes, D.space_digest(ds), pack(sc), ("0.0.0", *D.compat()[1:]))
