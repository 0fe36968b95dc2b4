#!/usr/bin/env python3
"""Fit the efficiency constants per GPU type and dtype against the published runs.

    python scripts/calibrate.py              # fit, print every row, write presets/calibrated.toml
    python scripts/calibrate.py --dry-run    # fit and print only
    python scripts/calibrate.py --gpu h100-sxm-80gb

One set of constants per GPU type for 16-bit runs (``calibration.FITTED_FIELDS["bf16"]``), then,
with those fixed, the FP8 linear-layer constants (``FITTED_FIELDS["fp8"]``) from the same GPU's
FP8 runs -- never a constant per row, model or run. Every published run is costed with its own
layout. The fit minimizes squared log step-time errors (scipy.optimize.least_squares, bounded),
each summary group weighted equally (a residual weighs ``1/sqrt(rows of its group)``) so a
source with 200 rows does not drown one with 9. Rows held out by ``calibration.is_holdout``
(about one in five, by a hash of the case id), older releases of a repeated layout and layouts
the model calls invalid are not fitted; the hold-out error is printed beside the fit error.
Needs scipy (``pip install scipy``), which the package itself does not.
"""

from __future__ import annotations

import argparse
import datetime
import math
import statistics
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

from trainscape import calibration as cal  # noqa: E402
from trainscape import presets  # noqa: E402

OUT = ROOT / "src" / "trainscape" / "presets" / "calibrated.toml"


def to_vector(values: dict, fields: dict) -> np.ndarray:
    return np.array([math.log(values[k]) if k in cal.LOG_FIELDS else values[k] for k in fields])


def from_vector(x: np.ndarray, fields: dict) -> dict:
    return {k: (math.exp(v) if k in cal.LOG_FIELDS else float(v)) for k, v in zip(fields, x)}


class Problem:
    """The rows of one (GPU, dtype class) and how to cost them under trial constants."""

    def __init__(self, runner: cal.Runner, gpu: str, dtypes: tuple[str, ...], backend: str):
        self.runner, self.gpu, self.backend = runner, gpu, backend
        self.runs = [r for r in runner.runs if r.gpu == gpu and r.dtype in dtypes]
        self.legacy = [c for c in cal.legacy.fitted_cases()
                       if gpu == cal.legacy.GPU and c.scenario["job"]["dtype"] in dtypes]

    def results(self, overrides: dict) -> list[cal.Result]:
        out = [self.runner.cost(r, overrides, backend=self.backend) for r in self.runs]
        if self.legacy:
            out += [res for res in cal.legacy_results(self.backend, overrides, calibrated=False)
                    if res.dtype in {c.scenario["job"]["dtype"] for c in self.legacy}]
        return out

    def fit_rows(self, results: list[cal.Result]) -> list[cal.Result]:
        return [r for r in results if r.counted and not r.holdout and r.error is not None]


def residuals(problem: Problem, overrides: dict) -> np.ndarray:
    rows = problem.fit_rows(problem.results(overrides))
    sizes: dict[str, int] = {}
    for r in rows:
        sizes[r.group] = sizes.get(r.group, 0) + 1
    return np.array([math.log(r.predicted_step_s / r.published_step_s) / math.sqrt(sizes[r.group])
                     for r in rows])


def fit(problem: Problem, fields: dict, fixed: dict, start: dict) -> dict:
    from scipy.optimize import least_squares

    lo = to_vector({k: b[0] for k, b in fields.items()}, fields)
    hi = to_vector({k: b[1] for k, b in fields.items()}, fields)
    x0 = np.clip(to_vector(start, fields), lo + 1e-6, hi - 1e-6)

    def f(x):
        return residuals(problem, {**fixed, **from_vector(x, fields)})

    sol = least_squares(f, x0, bounds=(lo, hi), diff_step=1e-3, x_scale="jac", max_nfev=200)
    return {**fixed, **from_vector(sol.x, fields)}


def report(label: str, results: list[cal.Result]) -> dict:
    counted = [r for r in results if r.counted and r.error is not None]
    lines = {}
    for split, rows in (("fit", [r for r in counted if not r.holdout]),
                        ("hold-out", [r for r in counted if r.holdout])):
        errs = [abs(r.error) for r in rows]
        if errs:
            lines[split] = (statistics.median(errs), max(errs), len(errs))
            print(f"  {label} {split:8s}: median |error| {lines[split][0]:6.1%}, worst "
                  f"{lines[split][1]:6.1%} over {len(errs)} rows")
    return lines


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dry-run", action="store_true")
    parser.add_argument("--gpu", action="append", help="only this GPU type (repeatable)")
    parser.add_argument("--backend", default="c", choices=("c", "numba", "python"))
    args = parser.parse_args()

    runner = cal.Runner()
    gpus = sorted({r.gpu for r in runner.runs} | {cal.legacy.GPU})
    if args.gpu:
        gpus = [g for g in gpus if g in args.gpu]
    table: dict[str, dict] = {}
    for gpu in gpus:
        stock = presets.gpu(gpu, calibrated=False)
        fitted: dict = {}
        provenance: dict = {}
        for dclass, dtypes in cal.DTYPE_CLASSES.items():
            problem = Problem(runner, gpu, dtypes, args.backend)
            if not problem.runs and not problem.legacy:
                continue
            fields = cal.FITTED_FIELDS[dclass]
            start = {k: stock.get(k, (b[0] + b[1]) / 2 if k not in cal.LOG_FIELDS
                                  else math.sqrt(b[0] * b[1])) for k, b in fields.items()}
            fixed = dict(fitted)
            print(f"{gpu} {dclass}: fitting {list(fields)} to "
                  f"{len(problem.fit_rows(problem.results({**fixed, **start})))} rows")
            values = fit(problem, fields, fixed, start)
            results = problem.results(values)
            for r in sorted(results, key=lambda r: (r.group, r.case)):
                err = "   -   " if r.error is None else f"{r.error:+7.1%}"
                flag = ("" if r.counted else " (older release)") + (" [hold-out]" if r.holdout
                                                                     else "")
                print(f"    {r.group:26s} {r.case:44s} {err} {r.status}{flag}")
            split = report(f"{gpu} {dclass}", results)
            new = {k: v for k, v in values.items() if k in fields}
            print(f"  fitted: { {k: float(f'{v:.4g}') for k, v in new.items()} }")
            fitted.update(new)
            provenance[dclass] = {"fields": new, "split": split,
                                  "groups": sorted({r.group for r in results})}
        table[gpu] = {"provenance": provenance}
    if args.dry_run:
        return 0
    write(table)
    return 0


def write(table: dict) -> None:
    """Replace each fitted GPU's tables in calibrated.toml (other GPUs' fits kept)."""
    doc = presets._parse("calibrated.toml")
    for gpu, entry in table.items():
        prov = entry["provenance"]
        for dclass in cal.DTYPE_CLASSES:
            if dclass not in prov:
                continue
            p = prov[dclass]
            provenance = {"script": "scripts/calibrate.py",
                          "date": datetime.date.today().isoformat(),
                          "sources": p["groups"]}
            for split, (med, worst, n) in p["split"].items():
                key = split.replace("-", "")
                provenance[f"{key}_rows"] = n
                provenance[f"{key}_median_abs_error"] = round(med, 4)
                provenance[f"{key}_worst_abs_error"] = round(worst, 4)
            doc = cal.legacy.update_calibrated(doc, gpu, p["fields"], provenance,
                                               None if dclass == "bf16" else dclass)
    OUT.write_text(cal.legacy.format_calibrated(doc))
    print(f"wrote {OUT}")


if __name__ == "__main__":
    raise SystemExit(main())
