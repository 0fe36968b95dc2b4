"""Plan quality and planning time of the DLRM planner on the example cases, and (optionally)
the cost under the current model of plans saved earlier (``shard --json --out`` reports, e.g.
from before a model change).

    PYTHONPATH=src python bench/dlrm_compare.py [--old DIR] [--json]

``DIR`` holds ``<case>.json`` reports; their ``plan`` entries are re-costed as they are.
Planning time is the warm figure (second run in this process).
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

from trainscape import dlrm
from trainscape.dlrm import planner
from trainscape.dlrm.torchrec_plan import entries_to_plan

ROOT = Path(__file__).resolve().parents[1]
CASES = {"criteo_1tb_8gpu": ROOT / "examples/dlrm/criteo_1tb_8gpu.toml",
         "criteo_1tb_64gpu": ROOT / "examples/dlrm/criteo_1tb_64gpu.toml",
         "synthetic_856_128gpu": ROOT / "examples/dlrm/synthetic_856_128gpu.toml",
         "criteo_1tb_4gpu_ssd": ROOT / "examples/dlrm/criteo_1tb_4gpu_ssd.toml"}


def narrow_shards(sc, plan) -> int:
    """Column-wise shards under 64 columns in ``plan``."""
    from trainscape.dlrm import layout as D

    n = 0
    for i in range(sc.n_tables):
        if plan[D.PL_KIND, i] == D.SH_CW:
            k = int(plan[D.PL_SHARDS, i])
            if sc.tables[D.TAB_DIM, i] / k < 64:
                n += k
    return n


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--old", type=Path, default=None)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    rows = []
    for name, path in CASES.items():
        sc = dlrm.load(str(path))
        row = {"case": name, "tables": sc.n_tables, "world": sc.world}
        for method in ("greedy", "evolve"):
            planner.plan(sc, method=method, iterations=sc.spec.planner.iterations)  # warm
            t0 = time.perf_counter()
            res = planner.plan(sc, method=method, iterations=sc.spec.planner.iterations)
            row[f"{method}_ms"] = res.step_time_s * 1e3
            row[f"{method}_planning_s"] = time.perf_counter() - t0
            row[f"{method}_narrow_cw_shards"] = narrow_shards(sc, res.plan)
        if args.old is not None and (args.old / f"{name}.json").exists():
            old = json.loads((args.old / f"{name}.json").read_text())
            plan = entries_to_plan(sc, old["plan"])
            r = dlrm.evaluate(sc, plan)
            row["old_plan_old_model_ms"] = old["step_time_s"] * 1e3
            row["old_plan_new_model_ms"] = r["step_time_s"] * 1e3
            row["old_plan_narrow_cw_shards"] = narrow_shards(sc, plan)
        rows.append(row)
    if args.json:
        print(json.dumps(rows, indent=2))
    else:
        for row in rows:
            print("  ".join(f"{k}={v:.4g}" if isinstance(v, float) else f"{k}={v}"
                            for k, v in row.items()))


if __name__ == "__main__":
    main()
