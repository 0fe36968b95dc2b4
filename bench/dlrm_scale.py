"""DLRM planner at scale: 10^4 synthetic tables on 1024 GPUs (issue 17 item 7).

    PYTHONPATH=src python bench/dlrm_scale.py [--tables 10000] [--gpus 1024]
        [--methods greedy,beam,evolve] [--time-limit 30] [--profile greedy] [--constrained 0.2]
        [--json]

The tables follow the distribution of ``examples/dlrm/synthetic_856.csv``
(``scripts/gen_synthetic_tables.py``: log10(rows) ~ Normal(5.0, 1.1) clipped to [10^3, 10^8],
dims in {16, 32, 64, 128, 256}, pooling log-uniform on [1, 100]), with another seed; the dense
model, job and cluster are the 856-table example's (ZionEX tiers, 8 GPUs a node, the
cluster tier grown to gpus / 8 nodes), the global batch 256 samples per GPU. Reported per method: planning wall time (the planner's own clock, after
one warm-up plan of a small scenario that loads the numba kernels), kernel evaluations, the
step time of the plan and its gap to the lower bound. ``--profile METHOD`` prints the top of a
cProfile of that method instead.
"""

from __future__ import annotations

import argparse
import cProfile
import importlib.util
import json
import pstats
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _generator():
    spec = importlib.util.spec_from_file_location("gen", ROOT / "scripts/gen_synthetic_tables.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod.generate


def scenario(n_tables: int = 10_000, gpus: int = 1024, seed: int = 2026) -> dict:
    tables = [{"name": n, "rows": r, "dim": d, "pooling": float(p)}
              for n, r, d, p in _generator()(n_tables, seed)]
    return {"name": f"synthetic {n_tables} tables on {gpus} GPUs",
            "model": {"tables": tables, "dense_in_features": 512, "dense_arch": [512, 256, 128],
                      "over_arch": [1024, 1024, 512, 256, 1], "interaction": "dcn",
                      "dcn_layers": 2, "dcn_low_rank": 256},
            "job": {"global_batch": 256 * gpus, "embedding_dtype": "fp16", "comm_dtype": "fp16",
                    "bwd_comm_dtype": "bf16", "optimizer": "rowwise_adagrad"},
            "cluster": {"preset": "zionex", "gpus": gpus, "tiers": [
                {"name": "node", "size": 8, "bandwidth_GBps": 300.0, "latency_us": 3.4,
                 "efficiency": 0.8},
                {"name": "cluster", "size": max(1, -(-gpus // 8)), "bandwidth_GBps": 25.0,
                 "latency_us": 14.0, "efficiency": 0.85}]}}


def add_constraints(raw: dict, frac: float, seed: int = 7) -> dict:
    """Constraints on a fraction ``frac`` of the tables (docs/dlrm.md, Constraints): a third
    pinned to one node's ranks and table-/column-wise, a third allowed table-wise or
    table-row-wise only, a third in HBM or the UVM cache with column shards at least 32
    wide."""
    import numpy as np

    rng = np.random.default_rng(seed)
    gpus = raw["cluster"]["gpus"]
    cons = {}
    tables = raw["model"]["tables"]
    for i in np.flatnonzero(rng.random(len(tables)) < frac):
        kind = i % 3
        if kind == 0:
            lo = 8 * int(rng.integers(max(1, gpus // 8)))
            cons[tables[i]["name"]] = {"sharding_types": ["table_wise", "column_wise"],
                                       "ranks": list(range(lo, min(gpus, lo + 8)))}
        elif kind == 1:
            cons[tables[i]["name"]] = {"sharding_types": ["table_wise", "table_row_wise"]}
        else:
            cons[tables[i]["name"]] = {"compute_kernels": ["fused", "fused_uvm_caching"],
                                       "min_partition": 32}
    raw["constraints"] = cons
    return raw


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tables", type=int, default=10_000)
    ap.add_argument("--gpus", type=int, default=1024)
    ap.add_argument("--methods", default="greedy,beam,evolve")
    ap.add_argument("--time-limit", type=float, default=None,
                    help="planner time limit (default: the scenario default, [planner])")
    ap.add_argument("--iterations", type=int, default=None)
    ap.add_argument("--profile", default=None, help="cProfile this method and print the top")
    ap.add_argument("--constrained", type=float, default=0.0,
                    help="fraction of the tables given constraints (add_constraints)")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()

    from trainscape.dlrm import spec as S
    from trainscape.dlrm.planner import plan

    # warm-up: load (or compile) the planner's numba kernels on a small case
    plan(S.load(scenario(64, 16)), method="evolve", iterations=2000, time_limit_s=5.0)
    t0 = time.perf_counter()
    raw = scenario(args.tables, args.gpus)
    if args.constrained > 0:
        add_constraints(raw, args.constrained)
    sc = S.load(raw)
    load_s = time.perf_counter() - t0
    ps = sc.spec.planner
    limit = ps.time_limit_s if args.time_limit is None else args.time_limit
    iters = ps.iterations if args.iterations is None else args.iterations
    if args.profile:
        prof = cProfile.Profile()
        prof.enable()
        res = plan(sc, method=args.profile, iterations=iters, time_limit_s=limit)
        prof.disable()
        pstats.Stats(prof).sort_stats("cumulative").print_stats(35)
        print(f"{args.profile}: {res.elapsed_s:.2f} s, step {res.step_time_s * 1e3:.3f} ms")
        return
    rows = []
    res_plans = {}
    for m in args.methods.split(","):
        t1 = time.perf_counter()
        res = plan(sc, method=m, iterations=iters, time_limit_s=limit)
        res_plans[m] = res.plan
        wall = time.perf_counter() - t1
        rows.append({"method": m, "planning_s": round(res.elapsed_s, 3), "wall_s": round(wall, 3),
                     "evaluations": res.evaluations, "moves_scored": res.moves_scored,
                     "step_ms": round(res.step_time_s * 1e3, 4),
                     "lower_bound_ms": round(res.lower_bound_s * 1e3, 4),
                     "status": res.result["status"], "time_limited": res.time_limited})
    if sc.constraints is not None:
        for r, m in zip(rows, args.methods.split(",")):
            r["violations"] = len(sc.constraints.violations(res_plans[m]))
    doc = {"tables": args.tables, "gpus": args.gpus, "load_s": round(load_s, 3),
           "time_limit_s": limit, "iterations": iters, "results": rows}
    if args.json:
        print(json.dumps(doc, indent=1))
        return
    print(f"{args.tables} tables on {args.gpus} GPUs"
          + (f", {len(raw['constraints'])} constrained" if args.constrained > 0 else "")
          + f" (scenario load {load_s:.2f} s, "
          f"time limit {limit} s, iterations {iters})")
    for r in rows:
        print(f"  {r['method']:7s} planning {r['planning_s']:8.2f} s  step {r['step_ms']:.4f} ms"
              f"  (lower bound {r['lower_bound_ms']:.4f} ms)  evals {r['evaluations']}"
              f"  {r['status']}{'  time-limited' if r['time_limited'] else ''}"
              + (f"  constraint violations {r['violations']}" if "violations" in r else ""))


if __name__ == "__main__":
    main()
