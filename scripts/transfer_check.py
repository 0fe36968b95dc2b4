#!/usr/bin/env python3
"""Check the calibrated_from transfer (presets/gpus.toml) against published runs on GPUs that
have no fit of their own: B200 (H100 fit carried as fitted/stock ratios) and H200 / H800
(H100 fit copied). Nothing here is fitted; the runs only check.

    python scripts/transfer_check.py                       # docs/data/transfer_check_runs.csv
    python scripts/transfer_check.py FILE.csv [--json]

The CSV has the calibration set's column layout (../shared/calibration/README.md); its rows
and their provenance are described in docs/accuracy.md ("GPUs without a fit of their own").
Each row is costed like a ``trainscape validate`` row of the same source -- its own layout, the
assumptions that source's rows get -- on the DGX H100 SuperPOD fabric (8 x 400 Gb/s per node),
with the node tier at the GPU's own NVLink bandwidth (900 GB/s per direction on B200); the
torchtitan rows read like the calibration set's FSDP rows (their selective checkpointing as
``op_selective``). Rows of sources with no reader (a cloud operator's log, papers' GPU-hour
averages) or on a GPU without a preset are listed as skipped, with why.
"""

from __future__ import annotations

import argparse
import csv
import json
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

from trainscape import presets  # noqa: E402
from trainscape.calibration import Runner  # noqa: E402
from trainscape.calibration import published as P  # noqa: E402

DEFAULT = ROOT / "docs" / "data" / "transfer_check_runs.csv"
#: the row sources ``calibration.published.run_of`` reads, by the CSV's ``source`` column
READERS = {"nemo_perf_summary": "nemo_perf_summary", "nemo_long_sequence": "nemo_long_sequence",
           "torchtitan_benchmarks": "torchtitan_benchmarks"}
#: the GPUs checked (the calibrated H100 rows of the same tables ride along as the baseline)
GPUS = ("b200", "h200-141gb", "h800-sxm-80gb", "h100-sxm-80gb")


def runs_of(rows: list[dict[str, str]]) -> tuple[list, list[tuple[str, str]]]:
    # DGX B200 and HGX H200 nodes carry the same 8 x 400 Gb/s fabric as the DGX H100: the
    # H100 SuperPOD preset, with the node tier set to each GPU's own NVLink below
    for gpu in GPUS:
        P.GPU_CLUSTER.setdefault(gpu, "dgx-h100-superpod")
    runs, skipped = [], []
    for row in rows:
        reader = READERS.get(row["source"])
        if reader is None or row["gpu"] not in GPUS:
            skipped.append((row["case"], f"no reader for source {row['source']!r} / gpu "
                                         f"{row['gpu']!r}"))
            continue
        try:
            run = P.run_of(reader, row)
        except (KeyError, ValueError) as exc:
            skipped.append((row["case"], f"not costable: {exc}"))
            continue
        run.cluster_preset = "dgx-h100-superpod"
        nvlink = presets.gpu(row["gpu"])["nvlink_bandwidth_GBps"]
        run.cluster_overrides = {**run.cluster_overrides, "tier0_bandwidth_GBps": nvlink}
        runs.append(run)
    return runs, skipped


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("csv", nargs="?", default=str(DEFAULT))
    parser.add_argument("--json", action="store_true", help="print the rows as JSON")
    parser.add_argument("--backend", default="c", choices=("c", "numba", "python"))
    args = parser.parse_args()
    try:
        with open(args.csv, newline="") as f:
            rows = list(csv.DictReader(f))
    except OSError as exc:
        print(f"error: {args.csv}: {exc.strerror}", file=sys.stderr)
        return 2
    runs, skipped = runs_of(rows)
    runner = Runner(runs)
    results = [runner.cost(run, backend=args.backend) for run in runs]
    if args.json:
        print(json.dumps({"rows": [r.as_dict() for r in results],
                          "skipped": [{"case": c, "why": w} for c, w in skipped]}, indent=2))
        return 0
    for r in results:
        err = "   -  " if r.error is None else f"{100 * r.error:+6.1f}%"
        print(f"{r.case:46} {r.gpu:14} {r.dtype:5} {r.status:15} {err}")
    for gpu in GPUS:
        errs = [r.error for r in results if r.gpu == gpu and r.error is not None]
        failed = sum(1 for r in results if r.gpu == gpu and not r.feasible)
        if errs:
            print(f"{gpu:14} {len(errs):3} rows: median |error| "
                  f"{100 * statistics.median(abs(e) for e in errs):.1f} %, median error "
                  f"{100 * statistics.median(errs):+.1f} %, infeasible {failed}")
    for case, why in skipped:
        print(f"skipped {case}: {why}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
