#!/usr/bin/env python3
"""Fit the per-GPU-type efficiency constants against the published calibration runs.

    python scripts/calibrate.py            # fit, print every row, write presets/calibrated.toml
    python scripts/calibrate.py --dry-run  # fit and print only
    python scripts/calibrate.py --dtype fp8  # write the fit as [<gpu>.fp8] (keeps the rest)

One set of constants per GPU type (the fields in ``calibration.FITTED_FIELDS``), shared by every
row of every source measured on that GPU -- never a constant per row. The fit minimizes the
sum of squared log step-time errors (scipy.optimize.least_squares, bounded, started from the
microbenchmark values of the GPU preset) and is deterministic. Needs scipy (``pip install
scipy``), which the package itself does not.
"""

from __future__ import annotations

import argparse
import datetime
import math
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

from trainscape import calibration as cal  # noqa: E402
from trainscape import presets  # noqa: E402

OUT = ROOT / "src" / "trainscape" / "presets" / "calibrated.toml"
LOG_FIELDS = {"gemm_half_flops"}  # fitted on a log scale


def to_vector(values: dict) -> np.ndarray:
    return np.array([math.log(values[k]) if k in LOG_FIELDS else values[k]
                     for k in cal.FITTED_FIELDS])


def from_vector(x: np.ndarray) -> dict:
    return {k: (math.exp(v) if k in LOG_FIELDS else float(v))
            for k, v in zip(cal.FITTED_FIELDS, x)}


def main() -> int:
    from scipy.optimize import least_squares

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dry-run", action="store_true")
    parser.add_argument("--dtype", choices=presets.CALIBRATED_DTYPES, default=None,
                        help="write the fit as the [<gpu>.<dtype>] table (for fits whose rows "
                        "are all jobs in this dtype); default: the [<gpu>] table, all dtypes")
    args = parser.parse_args()

    cases = cal.fitted_cases()
    start = presets.gpu(cal.GPU, calibrated=False)
    start.setdefault("layer_overhead_us", 0.0)
    x0 = to_vector({k: start[k] for k in cal.FITTED_FIELDS})
    lo = to_vector({k: b[0] for k, b in cal.FITTED_FIELDS.items()})
    hi = to_vector({k: b[1] for k, b in cal.FITTED_FIELDS.items()})
    x0 = np.clip(x0, lo + 1e-9, hi - 1e-9)

    def residuals(x):
        overrides = from_vector(x)
        return np.array([math.log(cal.predict(c, overrides, backend="numba",
                                              calibrated=False).step_s / c.published_step_s)
                         for c in cases])

    fit = least_squares(residuals, x0, bounds=(lo, hi), diff_step=1e-3, x_scale="jac")
    fitted = from_vector(fit.x)
    preds = [cal.predict(c, fitted, backend="numba", calibrated=False) for c in cases]
    summary = cal.summarize(preds)
    for p in preds:
        print(f"{p.case.source:22s} {p.case.label:26s} published {p.case.published_step_s:8.3f} s"
              f"  predicted {p.step_s:8.3f} s  error {p.error:+7.2%}")
    for source, s in summary.items():
        print(f"{source}: median |error| {s['median_abs_error']:.2%}, "
              f"worst {s['worst_abs_error']:.2%} over {s['rows']} rows")
    print("fitted:", {k: float(f"{v:.6g}") for k, v in fitted.items()})
    if args.dry_run:
        return 0

    provenance = {
        "script": "scripts/calibrate.py",
        "fitted": datetime.date.today().isoformat(),
        "sources": [cal.SOURCES[s][1] for s in cal.SOURCES],
        "rows": len(cases),
    }
    for source, s in summary.items():
        provenance[f"{source}_median_abs_error"] = round(s["median_abs_error"], 4)
        provenance[f"{source}_worst_abs_error"] = round(s["worst_abs_error"], 4)
    import tomllib

    doc = tomllib.loads(OUT.read_text()) if OUT.exists() else {}
    doc = cal.update_calibrated(doc, cal.GPU, fitted, provenance, dtype=args.dtype)
    OUT.write_text(cal.format_calibrated(doc))
    print(f"wrote {OUT}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
