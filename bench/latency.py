#!/usr/bin/env python3
"""Latency of the questions a scheduler asks (DESIGN.md "Performance targets").

1. One configuration from Python: ``native.cost`` (the C kernel on one config column) and
   ``trainscape.evaluate`` (validation + a Result object), in microseconds.
2. "Best configuration for this allocation": for each GPU count, build the design space of the
   Llama-3-405B example (constraints applied, ~10^5 valid configs) and sweep it for the fastest
   configuration that fits, in milliseconds. The first space built in a process also loads the
   compiled kernels; that one-time cost is printed separately.
3. The scheduler query ``ts_llm_best`` (csrc/best.c; what ``trainscape.best_for_allocation``
   and a C scheduler linked to libtrainscape call): candidate set built in-kernel for the GPU
   count and searched, pinned to one core. Warm: p50 / p99 over repeated queries
   (``best_query_p50_ms``, ``best_query_p99_ms``); cold: the first query in a fresh process
   (``best_query_cold_ms``) and that process's import + load + pack + first query
   (``best_query_cold_process_ms``). Also the Python API end to end
   (``best_for_allocation_p50_ms``: validation, packing, query, Result).

    python bench/latency.py            # table
    python bench/latency.py --json
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

try:
    import trainscape  # noqa: F401
except ImportError:  # run from a checkout without installing
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

import trainscape  # noqa: E402
from trainscape.explore.sweep import run_sweep  # noqa: E402
from trainscape.space import design_space  # noqa: E402
from trainscape.spec import pack  # noqa: E402

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "llama3-405b-2bldg.toml"
SPACE = {"tp": [1, 2, 4, 8], "cp": [1, 2, 4], "pp": [1, 2, 4, 8, 16, 32], "mbs": [1, 2, 4],
         "vpp": [1, 2, 4], "schedule": ["1f1b", "interleaved", "zb-h1", "zb-v"],
         "recompute": ["none", "full"], "zero": [1, 2, 3], "order": "all"}
ALLOCATIONS = (4096, 8192, 16384)


def median_time(fn, repeat: int) -> float:
    times = []
    for _ in range(repeat):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return statistics.median(times)


def one_config(repeat: int = 20000) -> dict:
    from trainscape.native import llm as native

    sc = trainscape.load(EXAMPLE)
    sys_, mdl, job = pack(sc)
    col = sc.space.enumerate(0, 1)[:, 0].copy()
    native.cost(sys_, mdl, job, col)
    t = time.perf_counter()
    for _ in range(repeat):
        native.cost(sys_, mdl, job, col)
    cost_us = (time.perf_counter() - t) / repeat * 1e6
    trainscape.evaluate(sc)
    evaluate_us = median_time(lambda: trainscape.evaluate(sc), 200) * 1e6
    return {"native_cost_us": cost_us, "evaluate_us": evaluate_us}


def allocation_queries(repeat: int = 20) -> dict:
    first = trainscape.load(EXAMPLE)
    t = time.perf_counter()
    design_space(first, SPACE)
    warmup_ms = (time.perf_counter() - t) * 1e3
    rows = []
    for gpus in ALLOCATIONS:
        sc = trainscape.load(EXAMPLE, [f"cluster.gpus={gpus}", f"config.dp={gpus // 128}"])
        build_ms = median_time(lambda: design_space(sc, SPACE), 5) * 1e3
        ds = design_space(sc, SPACE)
        run_sweep(sc, space=ds, top=1, backend="c")
        best_ms = median_time(lambda: run_sweep(sc, space=ds, top=1, backend="c"), repeat) * 1e3
        best = run_sweep(sc, space=ds, top=1, backend="c").records()[0]
        rows.append({"gpus": gpus, "valid_configs": ds.size, "build_space_ms": build_ms,
                     "best_config_ms": best_ms, "best_step_time_s": best["step_time_s"]})
    return {"first_space_in_process_ms": warmup_ms, "allocations": rows}


BEST_SPACE = dict(SPACE, dp_overlap=[False, True])  # >= 10^5 candidates per allocation
_COLD = """
import time
t0 = time.perf_counter()
import trainscape
from trainscape import layout as L
from trainscape.native import llm as native  # loads the C extension (counted in the cold process only)
from trainscape.embed.best import native_best
from trainscape.embed.space_vector import space_vector
from trainscape.space.design import resolve_axes
from trainscape.spec import pack
sc = trainscape.load({example!r})
sys_, mdl, job = pack(sc)
sv = space_vector(resolve_axes(sc, {space!r}))
t1 = time.perf_counter()
c1 = time.thread_time()
code = native_best(sys_, mdl, job, sv, {gpus}, L.OUT_STEP_TIME_S)[0]
t2 = time.perf_counter()
c2 = time.thread_time()
assert code == 0, code
print((t2 - t1) * 1e3, (c2 - c1) * 1e3, (t2 - t0) * 1e3)
"""


def best_queries(repeat: int = 300) -> dict:
    import os
    import subprocess

    from trainscape import layout as L
    from trainscape.embed.best import native_best
    from trainscape.embed.space_vector import space_vector
    from trainscape.space.design import resolve_axes

    pinned = None
    if hasattr(os, "sched_setaffinity"):
        pinned = min(os.sched_getaffinity(0))
        saved = os.sched_getaffinity(0)
        os.sched_setaffinity(0, {pinned})
    try:
        sc = trainscape.load(EXAMPLE)
        sys_, mdl, job = pack(sc)
        sv = space_vector(resolve_axes(sc, BEST_SPACE))
        rows, pooled, pooled_cpu = [], [], []
        for gpus in ALLOCATIONS:
            native_best(sys_, mdl, job, sv, gpus, L.OUT_STEP_TIME_S)
            times, cpu = [], []
            for _ in range(repeat):
                t, c = time.perf_counter(), time.thread_time()
                code, cfg, out, stats = native_best(sys_, mdl, job, sv, gpus, L.OUT_STEP_TIME_S)
                times.append((time.perf_counter() - t) * 1e3)
                cpu.append((time.thread_time() - c) * 1e3)
            pooled += times
            pooled_cpu += cpu
            times.sort()
            cpu.sort()
            rows.append({"gpus": gpus, "candidates": int(stats[0]), "costed": int(stats[1]),
                         "p50_ms": times[len(times) // 2],
                         "p99_ms": times[min(len(times) - 1, int(0.99 * len(times)))],
                         "cpu_p50_ms": cpu[len(cpu) // 2],
                         "cpu_p99_ms": cpu[min(len(cpu) - 1, int(0.99 * len(cpu)))],
                         "best_step_time_s": float(out[L.OUT_STEP_TIME_S])})
        pooled.sort()
        pooled_cpu.sort()
        data = sc.raw_dump()
        data["space"] = dict(BEST_SPACE)
        sc_best = trainscape.load(data)  # the same candidate axes through the Python API
        api_best = trainscape.best_for_allocation(sc_best, ALLOCATIONS[0])
        assert api_best.candidates == rows[0]["candidates"], (api_best.candidates, rows[0])
        api = median_time(lambda: trainscape.best_for_allocation(sc_best, ALLOCATIONS[0]), 20)
        cold, cold_cpu, cold_proc = [], [], []
        for _ in range(3):
            code = _COLD.format(example=str(EXAMPLE), space=BEST_SPACE, gpus=ALLOCATIONS[0])
            cmd = [sys.executable, "-c", code]
            if pinned is not None and hasattr(os, "sched_setaffinity"):
                res = subprocess.run(cmd, capture_output=True, text=True, check=True,
                                     preexec_fn=lambda: os.sched_setaffinity(0, {pinned}))
            else:
                res = subprocess.run(cmd, capture_output=True, text=True, check=True)
            first, first_cpu, proc = map(float, res.stdout.split())
            cold.append(first)
            cold_cpu.append(first_cpu)
            cold_proc.append(proc)
    finally:
        if pinned is not None:
            os.sched_setaffinity(0, saved)
    def p99(v):
        return v[min(len(v) - 1, int(0.99 * len(v)))]

    return {"best_query_p50_ms": pooled[len(pooled) // 2],
            "best_query_p99_ms": p99(pooled),
            # thread CPU time: the query's own cost, without the waits of a shared machine
            "best_query_cpu_p50_ms": pooled_cpu[len(pooled_cpu) // 2],
            "best_query_cpu_p99_ms": p99(pooled_cpu),
            "best_query_cold_ms": statistics.median(cold),
            "best_query_cold_cpu_ms": statistics.median(cold_cpu),
            "best_query_cold_process_ms": statistics.median(cold_proc),
            "best_for_allocation_p50_ms": api * 1e3,
            "min_candidates": min(r["candidates"] for r in rows),
            "one_core": pinned is not None, "load_average_1min": _load1(),
            "allocations": rows}


def _load1() -> float | None:
    try:
        return float(Path("/proc/loadavg").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return None


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true", help="print JSON only")
    args = parser.parse_args()
    # allocation queries first: the first space built in this process pays the kernel load
    queries = allocation_queries()
    report = {"one_config": one_config(), "best_config_for_allocation": queries}
    best = best_queries()
    report.update({k: v for k, v in best.items() if k != "allocations"})
    report["best_query"] = best["allocations"]
    if args.json:
        print(json.dumps(report, indent=2))
        return 0
    one = report["one_config"]
    print(f"one configuration: native.cost {one['native_cost_us']:.1f} us, "
          f"trainscape.evaluate {one['evaluate_us']:.1f} us")
    q = report["best_config_for_allocation"]
    print(f"best configuration for an allocation (first space in a process also loads the "
          f"kernels: {q['first_space_in_process_ms']:.0f} ms once)")
    print(f"{'gpus':>6} {'valid configs':>14} {'build space ms':>15} {'best config ms':>15} "
          f"{'best step s':>12}")
    for r in q["allocations"]:
        print(f"{r['gpus']:>6} {r['valid_configs']:>14,} {r['build_space_ms']:>15.1f} "
              f"{r['best_config_ms']:>15.2f} {r['best_step_time_s']:>12.3f}")
    print(f"scheduler query ts_llm_best (candidate set built in-kernel, "
          f"{'one core' if report['one_core'] else 'unpinned'}, load average "
          f"{report['load_average_1min']}): warm p50 "
          f"{report['best_query_p50_ms']:.2f} ms, p99 {report['best_query_p99_ms']:.2f} ms "
          f"(thread CPU p50 {report['best_query_cpu_p50_ms']:.2f}, p99 "
          f"{report['best_query_cpu_p99_ms']:.2f} ms); cold first query "
          f"{report['best_query_cold_ms']:.2f} ms (CPU {report['best_query_cold_cpu_ms']:.2f}), "
          f"cold process "
          f"{report['best_query_cold_process_ms']:.0f} ms; best_for_allocation p50 "
          f"{report['best_for_allocation_p50_ms']:.1f} ms")
    print(f"{'gpus':>6} {'candidates':>11} {'costed':>9} {'p50 ms':>8} {'p99 ms':>8} "
          f"{'best step s':>12}")
    for r in report["best_query"]:
        print(f"{r['gpus']:>6} {r['candidates']:>11,} {r['costed']:>9,} {r['p50_ms']:>8.2f} "
              f"{r['p99_ms']:>8.2f} {r['best_step_time_s']:>12.3f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
