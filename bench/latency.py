#!/usr/bin/env python3
"""Latency of the questions a scheduler asks (DESIGN.md "Performance targets").

1. One configuration from Python: ``native.cost`` (the C kernel on one config column) and
   ``trainscape.evaluate`` (validation + a Result object), in microseconds.
2. "Best configuration for this allocation": for each GPU count, build the design space of the
   Llama-3-405B example (constraints applied, ~10^5 valid configs) and sweep it for the fastest
   configuration that fits, in milliseconds. The first space built in a process also loads the
   compiled kernels; that one-time cost is printed separately.

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


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true", help="print JSON only")
    args = parser.parse_args()
    # allocation queries first: the first space built in this process pays the kernel load
    queries = allocation_queries()
    report = {"one_config": one_config(), "best_config_for_allocation": queries}
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
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
