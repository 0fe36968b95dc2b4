#!/usr/bin/env python3
"""Write the error bands: how far the model was from published runs no fit saw, per GPU preset,
software stack and kind of model, dense or MoE (``trainscape.calibration.bands``; shown by
``trainscape evaluate``).

    python scripts/error_bands.py            # after the model, the fit or the runs changed
    python scripts/error_bands.py --check    # exit 1 when the shipped file is out of date
    python scripts/error_bands.py --dry-run  # print the bands, write nothing

The runs: the calibration set's held-out rows (``calibration.is_holdout``; counted rows only,
not older releases of a repeated layout) and every costed row of
``docs/data/transfer_check_runs.csv`` that counts there (an older release of a layout a newer
release repeats does not, as in ``trainscape validate``) and is not a calibration row itself
(the H100 NeMo rows riding along there as the B200 baseline are), nor one of the four that
set the PyTorch stack's AsyncTP constant (``transfer_check.ASYNC_TP_FIT_CASES``) or the
Blackwell parts' two constants (``transfer_check.blackwell_fit_cases``) or Blackwell Ultra's
(``transfer_check.ultra_fit_cases``), nor one whose
framework names no stack the reader knows (a band describes its stack's runs). Each is costed
as ``trainscape validate`` and ``scripts/transfer_check.py`` cost it (C backend when built, else the
reference), its error ``predicted / published - 1`` counted whether or not the model calls the
layout feasible.
"""

from __future__ import annotations

import argparse
import csv
import json
import sys
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))
sys.path.insert(0, str(ROOT / "scripts"))

from trainscape import calibration as cal  # noqa: E402
from trainscape.backends import available_backends  # noqa: E402
from trainscape.calibration import published as P  # noqa: E402
from trainscape.calibration.bands import (MIN_ROWS, band_stats, model_kind,  # noqa: E402
                                          thin_stats)

OUT = ROOT / "src" / "trainscape" / "data" / "calibration" / "error_bands.json"


def never_fitted_results(backend: str) -> list:
    """The held-out calibration rows and the out-of-sample runs, costed."""
    import transfer_check

    results, _ = cal.validate(backend=backend)
    calibration_cases = {r.case for r in results}
    held_out = [r for r in results if r.counted and r.holdout and r.error is not None]
    with open(transfer_check.DEFAULT, newline="") as f:
        rows = list(csv.DictReader(f))
    runs, _ = transfer_check.runs_of(rows)
    runner = transfer_check.runner_of(runs)
    fitted = (calibration_cases | transfer_check.ASYNC_TP_FIT_CASES
              | transfer_check.blackwell_fit_cases() | transfer_check.ultra_fit_cases())
    # a band describes runs of its stack: a row whose framework names none (read as
    # Megatron-Core, and said) is checked by transfer_check.py, not banded
    frameworks = {row["case"]: row["framework"] for row in rows}
    outside = [res for res in (runner.cost(run, backend=backend) for run in runs
                               if run.case not in fitted and run.counted
                               and P.names_known_stack(frameworks[run.case]))
               if res.error is not None]
    return held_out + outside


def bands_of(results: list) -> dict:
    """The file's content: one band per (GPU preset, stack, model kind) with at least MIN_ROWS
    runs; the smaller groups' count, median and range as ``thin``."""
    groups: dict[tuple[str, str, str], list] = defaultdict(list)
    for r in results:
        groups[(r.gpu, r.stack, model_kind(1.0 if r.moe else 0.0))].append(r)
    bands, thin = [], []
    for (gpu, stack, kind), rows in sorted(groups.items()):
        head = {"gpu": gpu, "stack": stack, "kind": kind, "rows": len(rows),
                "infeasible": sum(1 for r in rows if not r.feasible)}
        stats = band_stats(r.error for r in rows)
        if stats is not None:
            bands.append({**head, **stats, "sources": sorted({r.source for r in rows})})
        elif (few := thin_stats(r.error for r in rows)) is not None:
            thin.append({**head, **few, "sources": sorted({r.source for r in rows})})
    return {
        "generated_by": "scripts/error_bands.py",
        "basis": "step-time error predicted / published - 1 of published runs no fit saw: the "
                 "calibration set's held-out rows and docs/data/transfer_check_runs.csv (less "
                 "the rows that set the PyTorch stack's AsyncTP constant and the Blackwell "
                 "constants), grouped by GPU preset, stack and model kind (dense, moe)",
        "min_rows": MIN_ROWS,
        "bands": bands,
        "thin": thin,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true",
                        help="compare with the shipped file instead of writing it")
    parser.add_argument("--dry-run", action="store_true", help="print, write nothing")
    args = parser.parse_args()
    backend = "c" if available_backends().get("c", (False,))[0] else "python"
    text = json.dumps(bands_of(never_fitted_results(backend)), indent=2) + "\n"
    if args.check:
        if not OUT.exists() or OUT.read_text() != text:
            print(f"{OUT.relative_to(ROOT)} is out of date: run scripts/error_bands.py",
                  file=sys.stderr)
            return 1
        return 0
    if args.dry_run:
        print(text, end="")
        return 0
    OUT.write_text(text)
    print(f"wrote {OUT.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
