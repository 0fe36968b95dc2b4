"""Sweep throughput on a Dask LocalCluster, by number of worker processes.

    python bench/dask_scaling.py                      # 1 and 2 workers, table
    python bench/dask_scaling.py --workers 1,2,4,8 --json
    python bench/dask_scaling.py --dask tcp://host:8786   # an existing cluster, as it is

Space: the 3.4 x 10^8-point DeepSeek-V3-class MoE space of ``bench/sweep.py`` (``space_1e8``),
over its first ``--limit`` indices (the rate is flat along the index range). Each worker
process runs one task (chunk) at a time with one kernel thread (``threads_per_worker=1``, the
default of ``trainscape sweep --dask local``), so ``n`` workers use ``n`` cores. Reported: the
sweep's configurations per second (from the first chunk submitted to the last merged; cluster
start-up and the first, warm-up run excluded; the fastest of ``--repeat`` runs) and, for
reference, the single-machine sweep (``run_sweep``) on as many threads, also the fastest of
``--repeat``. The 1-minute load average at the end is printed: on a shared machine other load
takes cores from the workers. Every run's top-K and Pareto front are checked equal.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT / "src"), str(ROOT / "bench")]


def same(a, b) -> bool:
    return all(getattr(a, p).index.tolist() == getattr(b, p).index.tolist()
               and getattr(a, p).out.tobytes() == getattr(b, p).out.tobytes()
               for p in ("top", "front", "by_order"))


def main() -> None:
    from sweep import moe_scenario, space_1e8  # bench/sweep.py

    from trainscape.explore.distributed import Cluster, run_dask_sweep
    from trainscape.explore.sweep import run_sweep

    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--workers", default="1,2", help="worker counts of the LocalCluster runs")
    ap.add_argument("--limit", type=float, default=4e7, help="indices swept per run")
    ap.add_argument("--chunk", type=int, default=None, help="indices per task (default: auto)")
    ap.add_argument("--dask", default=None, help="an existing scheduler instead of LocalClusters")
    ap.add_argument("--repeat", type=int, default=3, help="timed runs per count; the fastest "
                    "is reported (the least disturbed by other load)")
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args()

    sc = moe_scenario()
    space = space_1e8(sc)
    limit = int(min(a.limit, space.size))
    rows = []
    ref = None
    counts = [0] if a.dask else [int(x) for x in a.workers.split(",")]
    for n in counts:
        with (Cluster(a.dask) if a.dask else
              Cluster("local", workers=n, threads_per_worker=1, processes=True)) as cl:
            threads = cl.threads()
            run_dask_sweep(sc, dask=cl, space=space, limit=1 << 16)  # warm-up: kernel loads
            res = min((run_dask_sweep(sc, dask=cl, space=space, limit=limit, chunk=a.chunk)
                       for _ in range(a.repeat)), key=lambda r: r.elapsed_s)
        loc = min((run_sweep(sc, space=space, workers=threads, stop_after=limit)
                   for _ in range(a.repeat)), key=lambda r: r.elapsed_s)
        ref = ref or loc
        assert same(res, ref) and same(loc, ref), "a run disagrees with the others"
        rows.append({"workers": n or None, "worker_threads": threads, "configs": limit,
                     "chunks": res.extra["chunks"], "chunk": res.extra["chunk"],
                     "dask_configs_per_s": res.rate, "dask_elapsed_s": res.elapsed_s,
                     "task_cpu_s": res.extra["task_cpu_s"],
                     # what the workers would do on cores of their own: configs per CPU-second
                     # of a task, times the worker threads
                     "dask_configs_per_s_per_task_cpu_x_threads":
                         limit / res.extra["task_cpu_s"] * threads,
                     "local_threads_configs_per_s": loc.rate})
    out = {"space": space.size, "scenario": sc.name, "backend": res.backend,
           "machine": f"{platform.machine()}, {os.cpu_count()} cores",
           "load_average_1m": os.getloadavg()[0], "runs": rows}
    if a.json:
        print(json.dumps(out, indent=1))
        return
    print(f"{out['scenario']}: first {limit:,} of {space.size:,} configurations, "
          f"{out['backend']} kernel, {out['machine']} (load average {out['load_average_1m']:.1f})")
    print(f"{'threads':>8} {'chunks':>7} {'dask configs/s':>15} {'per task CPU-s x threads':>25}"
          f" {'local configs/s':>16}")
    for r in rows:
        print(f"{r['worker_threads']:>8} {r['chunks']:>7} {r['dask_configs_per_s']:>15,.0f} "
              f"{r['dask_configs_per_s_per_task_cpu_x_threads']:>25,.0f} "
              f"{r['local_threads_configs_per_s']:>16,.0f}")


if __name__ == "__main__":
    main()
