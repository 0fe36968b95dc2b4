#!/usr/bin/env python3
"""Fit the efficiency constants per GPU type and dtype against the published runs.

    python scripts/calibrate.py              # fit, print every row, write presets/calibrated.toml
    python scripts/calibrate.py --dry-run    # fit and print only
    python scripts/calibrate.py --async-tp-only [--dry-run]   # only the AsyncTP constant
    python scripts/calibrate.py --blackwell-only [--dry-run]  # only the Blackwell-family constants
    python scripts/calibrate.py --cross-validate 5  # K fits, each row's error out of its fold
    python scripts/calibrate.py --dry-run --bound bf16.gemm_half_flops=1e7:1.5e10  # what-if
    python scripts/calibrate.py --dry-run --leave-out 'nemo2511_qwen3-30b*'        # what-if

One set of constants per GPU type for 16-bit runs (``calibration.FITTED_FIELDS["bf16"]``), the
FP8 linear-layer constants (``FITTED_FIELDS["fp8"]``) from the same GPU's FP8 runs, where runs
need it the GPU's ``legacy_attention_fraction`` (``LEGACY_ATTENTION_BOUNDS``), and one set of
multipliers per software-stack profile (``STACK_FITTED_FIELDS``) -- never a constant per row,
model or run, all in one problem. Every published run is costed with its own layout. The fit
minimizes the soft-L1 loss of the log step-time errors (scipy.optimize.least_squares, bounded;
:func:`robust`), a residual weighted ``1 / rows_of_its_group ** GROUP_WEIGHT_EXPONENT`` so a
source with 200 rows does not drown one with 9, and a row the model cannot explain weighs
linearly, not quadratically. Rows held out by ``calibration.is_holdout`` (about one in five, by
a hash of the case id), older releases of a repeated layout and layouts the model calls invalid
are not fitted; the hold-out error is printed beside the fit error. Then, on the constants just
written, one more number: the fraction of TP traffic PyTorch's AsyncTP leaves exposed
(``stacks.toml [pytorch-fsdp.tp_overlap]``), from the speed-ups of torchtitan's published
vanilla-TP / AsyncTP pairs (:func:`fit_async_tp`; no calibration row runs AsyncTP). Last, on
the transfer of the H100 fit just written, the Blackwell parts' two constants of their own
(``calibrated.toml [b200]`` / ``[gb200]``): the FP8 GEMM ceiling and the attention share, one
multiplier each over the carried values, fitted to their dense published runs outside the
hold-out fold (:func:`fit_blackwell`; no calibration row runs on Blackwell); and on that fit,
Blackwell Ultra's (``[b300]`` / ``[gb300]``): the attention share carried through the doubled
exponential rate, both GEMM ceilings times one multiplier fitted to the dense GB300 runs
(:func:`fit_blackwell_ultra`).
Needs scipy (``pip install scipy``), which the package itself does not.

``--bound`` and ``--leave-out`` are what-if fits, printed and never written (with ``--dry-run``
or ``--cross-validate``): a GPU field fitted within other bounds, or fitted where the shipped
fit derives it; the counted rows a pattern names left out of the fit, still costed and printed.

``--cross-validate K`` writes nothing: it splits the counted rows into K folds by the same hash
(``calibration.case_fold``; fold 0 of 5 is the shipped hold-out), fits K times with one fold held out each time, and prints
every source's error on the rows no fit saw, and how far each constant moves between folds --
an estimate of the error on runs outside the calibration set that uses every row once.
"""

from __future__ import annotations

import argparse
import datetime
import fnmatch
import functools
import math
import statistics
import sys
from pathlib import Path
from typing import Callable

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))
sys.path.insert(0, str(ROOT / "scripts"))  # transfer_check, for the AsyncTP fit

from trainscape import calibration as cal  # noqa: E402
from trainscape import presets  # noqa: E402
from trainscape.spec.ranges import MAX_HALF_FLOPS, MAX_MS, MAX_US  # noqa: E402

OUT = ROOT / "src" / "trainscape" / "presets" / "calibrated.toml"


#: where the fit starts a constant the microbenchmark presets do not give (else mid-range)
START = {"layer_overhead_us": 20.0, "step_overhead_ms": 10.0}


class Param:
    """One fitted number: a GPU constant of (gpu, dtype class), or a stack multiplier."""

    def __init__(self, kind: str, key: str, name: str, lo: float, hi: float, start: float):
        self.kind, self.key, self.name = kind, key, name
        self.log = name in cal.LOG_FIELDS
        self.lo, self.hi = self.enc(lo), self.enc(hi)
        self.start = min(max(self.enc(start), self.lo + 1e-6), self.hi - 1e-6)

    def enc(self, v: float) -> float:
        return math.log(v) if self.log else v

    def dec(self, x: float) -> float:
        return math.exp(x) if self.log else float(x)


class Problem:
    """Every fitted row, and how to cost it under a trial vector of constants."""

    def __init__(self, runner: cal.Runner, gpus: list[str], backend: str,
                 held_out: Callable[[str], bool] | None = None,
                 fitted_fields: dict[str, dict[str, tuple[float, float]]] | None = None,
                 left_out: Callable[[str], bool] | None = None):
        self.runner, self.backend = runner, backend
        # counted rows a what-if fit leaves out (--leave-out): costed and reported, not fitted
        self.left_out = left_out
        # which GPU fields are fitted per dtype class, within which bounds (--bound changes them)
        fields = cal.FITTED_FIELDS if fitted_fields is None else fitted_fields
        # which counted rows the fit leaves out (default: calibration.is_holdout's split)
        self.held_out = held_out
        self.runs = [r for r in runner.runs if r.gpu in gpus]
        self.legacy = cal.legacy.GPU in gpus
        self.params: list[Param] = []
        for gpu in gpus:
            stock = presets.gpu(gpu, calibrated=False)
            for dclass, dtypes in cal.DTYPE_CLASSES.items():
                has_rows = any(r.dtype in dtypes for r in self.runs if r.gpu == gpu) or (
                    self.legacy and gpu == cal.legacy.GPU and dclass == "bf16")
                if not has_rows:
                    continue
                for name, (lo, hi) in fields[dclass].items():
                    start = stock.get(name, START.get(name, (lo + hi) / 2))
                    self.params.append(Param("gpu", f"{gpu}:{dclass}", name, lo, hi, start))
        for gpu in gpus:
            # a kernel written for an older architecture: only where the GPU has a newer path
            # (stock fraction < 1) and runs used such a kernel
            stock = presets.gpu(gpu, calibrated=False).get("legacy_attention_fraction", 1.0)
            if stock < 1.0 and any(r.gpu == gpu and r.scenario["job"].get("attention_kernel")
                                   == "legacy" for r in self.runs):
                lo, hi = cal.LEGACY_ATTENTION_BOUNDS
                self.params.append(Param("gpu", f"{gpu}:bf16", "legacy_attention_fraction",
                                         lo, hi, stock))
        stacks = {r.stack for r in self.runs} | ({cal.legacy.STACK} if self.legacy else set())
        for stack in sorted(stacks - {presets.DEFAULT_STACK}):
            fused = any(r.scenario["job"].get("flash_attention", True) for r in self.runs
                        if r.stack == stack)
            for name, (lo, hi) in cal.STACK_FITTED_FIELDS.items():
                if name == "attention_efficiency" and not fused:
                    continue  # no fused attention kernel in this stack's runs: nothing to fit
                self.params.append(Param("stack", stack, name, lo, hi, 1.0))

    def constants(self, x: np.ndarray) -> tuple[dict, dict]:
        """(gpu:dclass -> {field: value}, stack -> {field: multiplier}) of a vector."""
        gpu_c: dict = {}
        stack_c: dict = {}
        for p, v in zip(self.params, x):
            (gpu_c if p.kind == "gpu" else stack_c).setdefault(p.key, {})[p.name] = p.dec(v)
        return gpu_c, stack_c

    def overrides(self, gpu_c: dict, stack_c: dict, gpu: str, dtype: str, stack: str) -> dict:
        out = dict(gpu_c.get(f"{gpu}:bf16", {}))
        if dtype == "fp8":
            out.update(gpu_c.get(f"{gpu}:fp8", {}))
        for name, factor in stack_c.get(stack, {}).items():
            if name in out:
                out[name] = out[name] * factor
        return out

    def results(self, x: np.ndarray) -> list[cal.Result]:
        gpu_c, stack_c = self.constants(x)
        out = [self.runner.cost(r, self.overrides(gpu_c, stack_c, r.gpu, r.dtype, r.stack),
                                backend=self.backend) for r in self.runs]
        if self.legacy:
            ov = self.overrides(gpu_c, stack_c, cal.legacy.GPU, "bf16", cal.legacy.STACK)
            out += cal.legacy_results(self.backend, ov, calibrated=False)
        if self.held_out is not None:
            for r in out:
                r.holdout = r.counted and self.held_out(r.case)
        return out


def cross_validate(runner: cal.Runner, gpus: list[str], backend: str, folds: int,
                   robust_scale: float, fitted_fields: dict | None = None,
                   left_out: Callable[[str], bool] | None = None
                   ) -> tuple[list[cal.Result], list[dict]]:
    """Every counted row's result from the fit that held its fold out, and each fold's fitted
    constants (``{"gpu:dclass" or stack: {field: value}}``)."""
    out_of_fold: list[cal.Result] = []
    constants: list[dict] = []
    for k in range(folds):
        problem = Problem(runner, gpus, backend,
                          held_out=lambda case, k=k: cal.case_fold(case, folds) == k,
                          fitted_fields=fitted_fields, left_out=left_out)
        x = fit(problem, robust_scale)
        out_of_fold += [r for r in problem.results(x) if r.holdout]
        gpu_c, stack_c = problem.constants(x)
        constants.append({**gpu_c, **stack_c})
        print(f"fold {k + 1}/{folds}: fitted, {len(out_of_fold)} rows out of fold so far",
              flush=True)
    return out_of_fold, constants


def report_cross_validation(out_of_fold: list[cal.Result], constants: list[dict],
                            folds: int) -> None:
    """Per source, the median and worst |error| of the rows costed by the fit that did not see
    them; all of them together; and each constant's range over the folds."""
    by_group: dict[str, list[float]] = {}
    for r in out_of_fold:
        if r.error is not None:
            by_group.setdefault(r.group, []).append(abs(r.error))
    print(f"{folds}-fold cross-validation: |error| of every counted row, costed by the fit "
          "that held it out")
    for group, errs in by_group.items():
        print(f"  {group:28s} {len(errs):4d} rows: median {statistics.median(errs):6.1%}, "
              f"worst {max(errs):6.1%}")
    every = [e for errs in by_group.values() for e in errs]
    print(f"  {'all':28s} {len(every):4d} rows: median {statistics.median(every):6.1%}, "
          f"worst {max(every):6.1%}")
    infeasible = sum(1 for r in out_of_fold if not r.feasible)
    print(f"  published layouts the model calls infeasible: {infeasible}")
    print("constants over the folds (min .. max):")
    for key in constants[0]:
        for name in constants[0][key]:
            values = [c[key][name] for c in constants if name in c.get(key, {})]
            print(f"  {key:24s} {name:26s} {min(values):.4g} .. {max(values):.4g}")


def fit_rows(results: list[cal.Result],
             left_out: Callable[[str], bool] | None = None) -> list[cal.Result]:
    """The rows the fit minimizes over: counted, not held out, costed, not left out."""
    return [r for r in results if r.counted and not r.holdout and r.error is not None
            and not (left_out is not None and left_out(r.case))]


#: log step-time error beyond which a row weighs linearly, not quadratically (soft-L1)
ROBUST_SCALE = 0.10
#: a residual weighs ``1 / rows_of_its_group ** GROUP_WEIGHT_EXPONENT``: 0.5 would make every
#: summary group count the same however many runs it holds (one BLOOM run as much as 89 DGX
#: Cloud ones), 0 every run the same (MosaicML's 216 would dominate); in between, a group's
#: pull grows slowly with its evidence (its summed squared weight as n^0.3). docs/accuracy.md
#: reports the held-out error at 0.5, 0.35 and 0.25.
GROUP_WEIGHT_EXPONENT = 0.35


def robust(e: float, scale: float) -> float:
    """A residual whose square is the soft-L1 loss of ``e``: ``2 c^2 (sqrt(1 + (e/c)^2) - 1)``
    (scipy ``least_squares(loss="soft_l1")``), sign kept. Quadratic within about ``c`` of 0,
    linear beyond, so the few rows whose effect the model lacks (a release at half speed, an
    overlap it does not see) cannot drag every constant after them. ``scale = 0``: plain."""
    if scale <= 0.0:
        return e
    return math.copysign(scale * math.sqrt(2.0 * (math.sqrt(1.0 + (e / scale) ** 2) - 1.0)), e)


#: weight of the prior that a stack profile's efficiency multipliers are 1 (its kernels as fast
#: as Megatron-Core's) and a GPU's legacy_attention_fraction is the cited stock value: one
#: residual ``PRIOR_WEIGHT * log(value / prior)`` per such parameter. Where the runs pin only a
#: product -- an A100 attention efficiency that no Megatron-Core A100 run measures, times the
#: FSDP profile's multiplier that only A100 and H100 FSDP runs see -- the loss is flat along it
#: and the optimizer stopped wherever its path ended (two starts: A100 attention 0.27 or 0.35 at
#: the same loss). The prior picks the point of that ridge nearest the cited values; at 0.01 it
#: moves the loss by well under 1 % where the runs do decide.
PRIOR_WEIGHT = 0.01
#: stack multipliers the prior pulls to 1 (layer_overhead_us is not an efficiency: the stacks'
#: overheads differ by design, 0 to 30 times Megatron-Core's)
PRIOR_STACK_FIELDS = ("gemm_efficiency_max", "attention_efficiency", "memory_efficiency")


def prior_residuals(problem: Problem, x: np.ndarray) -> list[float]:
    """:data:`PRIOR_WEIGHT` times the log distance of each prior-held parameter from its prior:
    stack efficiency multipliers from 1, a legacy attention fraction from its stock value."""
    out = []
    for p, v in zip(problem.params, x):
        value = p.dec(v)
        if p.kind == "stack" and p.name in PRIOR_STACK_FIELDS:
            out.append(PRIOR_WEIGHT * math.log(value))
        elif p.name == "legacy_attention_fraction":
            stock = presets.gpu(p.key.split(":")[0], calibrated=False)[p.name]
            out.append(PRIOR_WEIGHT * math.log(value / stock))
    return out


def residuals(problem: Problem, x: np.ndarray, robust_scale: float = ROBUST_SCALE) -> np.ndarray:
    """One residual per fitted row: its log step-time error through :func:`robust`, weighted
    ``1 / rows_of_its_group ** GROUP_WEIGHT_EXPONENT``; then :func:`prior_residuals`."""
    rows = fit_rows(problem.results(x), problem.left_out)
    sizes: dict[str, int] = {}
    for r in rows:
        sizes[r.group] = sizes.get(r.group, 0) + 1
    return np.array([robust(math.log(r.predicted_step_s / r.published_step_s), robust_scale)
                     / sizes[r.group] ** GROUP_WEIGHT_EXPONENT for r in rows]
                    + prior_residuals(problem, x))


def fit(problem: Problem, robust_scale: float = ROBUST_SCALE) -> np.ndarray:
    from scipy.optimize import least_squares

    lo = np.array([p.lo for p in problem.params])
    hi = np.array([p.hi for p in problem.params])
    x0 = np.array([p.start for p in problem.params])
    sol = least_squares(lambda x: residuals(problem, x, robust_scale), x0, bounds=(lo, hi),
                        diff_step=1e-3, x_scale="jac", max_nfev=300)
    print(f"least_squares: {sol.nfev} evaluations, status {sol.status} ({sol.message}), "
          f"cost {sol.cost:.6g}")
    return sol.x


def split_errors(results: list[cal.Result],
                 left_out: Callable[[str], bool] | None = None) -> dict:
    """``{split: (median |error|, worst |error|, rows)}`` over the counted rows the fit used
    ("fit"), held out ("hold-out") and, in a what-if fit, left out ("left-out")."""
    counted, out_of_fit = [], []
    for r in results:
        if r.counted and r.error is not None:
            (out_of_fit if left_out is not None and left_out(r.case) else counted).append(r)
    out = {}
    for split, rows in (("fit", [r for r in counted if not r.holdout]),
                        ("hold-out", [r for r in counted if r.holdout]),
                        ("left-out", out_of_fit)):
        errs = [abs(r.error) for r in rows]
        if errs:
            out[split] = (statistics.median(errs), max(errs), len(errs))
    return out


#: bounds of the PyTorch stack's fitted AsyncTP exposed fraction (fit_async_tp)
ASYNC_TP_BOUNDS = (0.0, 1.0)


def fit_async_tp(backend: str) -> float:
    """``stacks.toml [pytorch-fsdp.tp_overlap] tp_overlap_exposed``: the fraction of the TP
    traffic PyTorch's AsyncTP leaves on the critical path, fitted (least squares in log speed-up,
    bounded) so that the model's vanilla-TP over AsyncTP step matches the published speed-ups
    of ``transfer_check.ASYNC_TP_FIT_PAIRS``. A ratio of two runs of one layout on one machine,
    so whatever else the model gets wrong on them cancels. Costed with the shipped presets
    (after the main fit has written them)."""
    from scipy.optimize import minimize_scalar

    import transfer_check

    sol = minimize_scalar(transfer_check.async_tp_loss, args=(backend,),
                          bounds=ASYNC_TP_BOUNDS, method="bounded", options={"xatol": 1e-4})
    x = float(sol.x)
    for case, published, model in transfer_check.async_tp_speedups(x, backend):
        print(f"  AsyncTP {case:52s} published {published:.3f}x, model {model:.3f}x")
    print(f"fitted pytorch-fsdp AsyncTP: tp_overlap_exposed {x:.4g} ({sol.nfev} evaluations)")
    return x


def write_async_tp(exposed: float) -> None:
    """The fitted AsyncTP exposed fraction into stacks.toml's [pytorch-fsdp.tp_overlap]."""
    path = ROOT / "src" / "trainscape" / "presets" / "stacks.toml"
    text = path.read_text()
    head = "[pytorch-fsdp.tp_overlap]\n"
    start = text.index(head) + len(head)
    key = "tp_overlap_exposed = "
    at = text.index(key, start)
    end = text.index("\n", at)
    text = text[:at] + f"{key}{exposed:.4g}" + text[end:]
    path.write_text(text)
    print(f"wrote {path}")


#: bounds of the Blackwell fit's multipliers on the transferred constants (fit_blackwell)
BLACKWELL_BOUNDS = (0.5, 2.0)


def print_fit(label: str, results: list[cal.Result]) -> None:
    """Every row a fit of the transfer file's runs costed (its hold-out marked), then the
    median / worst |error| of its fit and hold-out splits."""
    for r in sorted(results, key=lambda r: (r.gpu, r.case)):
        err = "   -   " if r.error is None else f"{r.error:+7.1%}"
        print(f"  {label} {r.gpu:6s} {r.case:48s} {err} {r.status}"
              + (" [hold-out]" if r.holdout else ""))
    for split, (med, worst, n) in split_errors(results).items():
        print(f"{label} {split:8s}: median |error| {med:6.1%}, worst {worst:6.1%} over {n} rows")


def fit_blackwell(backend: str) -> dict[str, float]:
    """The Blackwell parts' own fit (``transfer_check.BLACKWELL``, one die): a multiplier on
    each of ``transfer_check.BLACKWELL_FIELDS`` -- the FP8 GEMM ceiling and the attention
    kernel's share of peak -- over the values the H100 fit carries to them by ratio, shared by
    B200 and GB200, fitted (the soft-L1 loss of the log step-time errors, :func:`robust`,
    bounded by :data:`BLACKWELL_BOUNDS`) to their dense Megatron-Core runs outside the hold-out
    fold (``transfer_check.blackwell_fit_cases``). The carried shares are the H100 stacks'
    shares of Hopper microbenchmarks; these runs show Blackwell's FP8 GEMMs reaching less of
    theirs and NeMo's attention more, which no per-kernel figure at hand gives. Costed with the
    shipped presets (after the main fit has written them)."""
    from scipy.optimize import least_squares

    import transfer_check

    fields = transfer_check.BLACKWELL_FIELDS
    lo, hi = (math.log(b) for b in BLACKWELL_BOUNDS)
    sol = least_squares(lambda x: blackwell_residuals(dict(zip(fields, np.exp(x))), backend),
                        np.zeros(len(fields)), bounds=(lo, hi), diff_step=1e-3)
    multipliers = {k: float(v) for k, v in zip(fields, np.exp(sol.x))}
    print_fit("Blackwell", blackwell_costed(multipliers, backend))
    print(f"fitted Blackwell multipliers ({sol.nfev} evaluations, cost {sol.cost:.4g}): "
          + ", ".join(f"{k} x {v:.4g}" for k, v in multipliers.items()))
    return multipliers


def log_residuals(results: list[cal.Result]) -> np.ndarray:
    """Each costed run's log step-time error through :func:`robust`: what a fit of the transfer
    file's runs minimizes the squares of."""
    return np.array([robust(math.log(r.predicted_step_s / r.published_step_s), ROBUST_SCALE)
                     for r in results])


def with_holdout(results_of) -> list[cal.Result]:
    """A fit's runs, ``results_of()``, and its hold-out's, ``results_of(holdout=True)``, the
    hold-out's marked ``holdout`` (as :meth:`Problem.results` marks the calibration rows), so
    that :func:`split_errors` splits them."""
    held = results_of(holdout=True)
    for r in held:
        r.holdout = True
    return results_of() + held


def blackwell_residuals(multipliers: dict[str, float], backend: str) -> np.ndarray:
    """What :func:`fit_blackwell` minimizes the squares of (:func:`log_residuals`), the
    Blackwell constants at ``multipliers`` times their carried values."""
    import transfer_check

    return log_residuals(transfer_check.blackwell_results(multipliers, backend))


def blackwell_costed(multipliers: dict[str, float], backend: str) -> list[cal.Result]:
    """The Blackwell fit's runs and its hold-out's at ``multipliers`` (:func:`with_holdout`)."""
    import transfer_check

    return with_holdout(functools.partial(transfer_check.blackwell_results, multipliers,
                                          backend))


def fit_provenance(stage: str, results: list[cal.Result], on_top_of: str) -> dict:
    """The provenance a fit of the transfer file's runs writes beside its constants: the stage
    that fitted them, the date, the sources of its fit rows, what it is laid over, and the
    median / worst |error| and row count of its fit and hold-out splits (:func:`split_errors`)."""
    provenance = {"script": f"scripts/calibrate.py ({stage}, on the runs of "
                            "docs/data/transfer_check_runs.csv)",
                  "date": datetime.date.today().isoformat(),
                  "sources": sorted({r.source for r in results if not r.holdout}),
                  "on_top_of": on_top_of}
    for split, (med, worst, n) in split_errors(results).items():
        key = split.replace("-", "")
        provenance[f"{key}_rows"] = n
        provenance[f"{key}_median_abs_error"] = round(med, 4)
        provenance[f"{key}_worst_abs_error"] = round(worst, 4)
    return provenance


def write_fitted(values: dict[str, dict[str, float]], provenance: dict) -> None:
    """Each GPU's fitted ``values`` into calibrated.toml with ``provenance``: the FP8 ceiling
    (``fp8_gemm_efficiency_max``) in its fp8 sub-table, every other field in its GPU table
    (every dtype)."""
    doc = presets._parse("calibrated.toml")
    for gpu, value in values.items():
        rounded = {k: round(v, 6) for k, v in value.items()}
        fp8 = {k: v for k, v in rounded.items() if k == "fp8_gemm_efficiency_max"}
        doc = cal.update_calibrated(doc, gpu, {k: v for k, v in rounded.items()
                                               if k not in fp8}, provenance)
        doc = cal.update_calibrated(doc, gpu, fp8, provenance, "fp8")
    OUT.write_text(cal.format_calibrated(doc))


def write_blackwell(multipliers: dict[str, float], backend: str) -> None:
    """The Blackwell fit into calibrated.toml: for each of ``transfer_check.BLACKWELL``, its
    multiplied constants as a fit of its own (``presets`` resolves them over the donor's
    transferred fit), the attention share in the GPU table (every dtype), the FP8 ceiling in its
    fp8 sub-table."""
    import transfer_check

    presets._parse.cache_clear()  # the base values: the transfer of the fit just written
    provenance = fit_provenance("fit_blackwell", blackwell_costed(multipliers, backend),
                                "the h100-sxm-80gb fit, transferred by ratio (gpus.toml)")
    values = {}
    for gpu in transfer_check.BLACKWELL:
        base = transfer_check.blackwell_transferred(gpu, "fp8")
        values[gpu] = {k: base[k] * multipliers[k] for k in multipliers}
    write_fitted(values, provenance)
    presets._parse.cache_clear()
    print(f"wrote {OUT}")


def fit_blackwell_ultra(backend: str) -> float:
    """Blackwell Ultra's own constant (``transfer_check.BLACKWELL_ULTRA``): one multiplier on
    both GEMM ceilings (BF16 and FP8, ``transfer_check.ULTRA_FIELDS``) its Blackwell sibling's
    fit gives it, shared by B300 and GB300, fitted (the soft-L1 loss of the log step-time
    errors, bounded by :data:`BLACKWELL_BOUNDS`) to the dense Megatron-Core GB300 runs outside
    the hold-out fold; the attention share is carried, not fitted
    (``transfer_check.ultra_carried``: the sibling's times the exponential-rate ratio). The
    datasheets give Blackwell Ultra Blackwell's dense BF16 and FP8 rates; its runs are faster
    per GPU at the same layout, in FP8 and in BF16 alike (more power: 1.4 against 1.2 kW on
    GB300), which this multiplier holds. Costed on the Blackwell fit just written."""
    from scipy.optimize import least_squares

    import transfer_check

    lo, hi = (math.log(b) for b in BLACKWELL_BOUNDS)
    sol = least_squares(lambda x: ultra_residuals(float(np.exp(x[0])), backend), np.zeros(1),
                        bounds=(lo, hi), diff_step=1e-3)
    multiplier = float(np.exp(sol.x[0]))
    print_fit("Blackwell Ultra", ultra_costed(multiplier, backend))
    print(f"fitted Blackwell Ultra multiplier ({sol.nfev} evaluations, cost {sol.cost:.4g}): "
          f"{' and '.join(transfer_check.ULTRA_FIELDS)} x {multiplier:.4g}")
    return multiplier


def ultra_residuals(multiplier: float, backend: str) -> np.ndarray:
    """What :func:`fit_blackwell_ultra` minimizes the squares of (:func:`log_residuals`), both
    GEMM ceilings at ``multiplier`` times their carried values."""
    import transfer_check

    return log_residuals(transfer_check.ultra_results(multiplier, backend))


def ultra_costed(multiplier: float, backend: str) -> list[cal.Result]:
    """The Blackwell Ultra fit's runs and its hold-out's at ``multiplier``
    (:func:`with_holdout`)."""
    import transfer_check

    return with_holdout(functools.partial(transfer_check.ultra_results, multiplier, backend))


def write_blackwell_ultra(multiplier: float, backend: str) -> None:
    """The Blackwell Ultra fit into calibrated.toml: for B300 and GB300, the attention share and
    BF16 GEMM ceiling (GPU table, every dtype) and the FP8 ceiling (fp8 sub-table)
    :func:`fit_blackwell_ultra` costed, with the fit's provenance."""
    import transfer_check

    presets._parse.cache_clear()  # the sibling's values: the Blackwell fit just written
    provenance = fit_provenance(
        "fit_blackwell_ultra", ultra_costed(multiplier, backend),
        "the b200 / gb200 fit: attention share times the exponential-rate ratio, BF16 and FP8 "
        f"GEMM ceilings times the fitted multiplier {multiplier:.4g}")
    values = {}
    for gpu in transfer_check.BLACKWELL_ULTRA:
        values[gpu] = transfer_check.ultra_carried(gpu, "fp8")
        for k in transfer_check.ULTRA_FIELDS:
            values[gpu][k] *= multiplier
    write_fitted(values, provenance)
    presets._parse.cache_clear()
    print(f"wrote {OUT}")


#: GPU fields a --bound may fit, with the largest value the preset schema accepts
#: (spec.models.GpuSpec, spec.ranges): the curve and overhead constants, not the datasheet
#: figures (peak FLOP/s, bandwidths, memory)
BOUNDABLE_FIELDS = {"gemm_efficiency_max": 1.0, "gemm_half_flops": MAX_HALF_FLOPS,
                    "attention_efficiency": 1.0, "memory_efficiency": 1.0,
                    "layer_overhead_us": MAX_US, "step_overhead_ms": MAX_MS,
                    "fp8_gemm_efficiency_max": 1.0, "fp8_gemm_half_flops": MAX_HALF_FLOPS}


def parse_bound(text: str) -> tuple[str, str, float, float]:
    """``CLASS.FIELD=LO:HI`` (``--bound``) as ``(class, field, lo, hi)``; ValueError naming
    what is allowed otherwise."""
    where, sep, span = text.partition("=")
    dclass, dot, name = where.strip().partition(".")
    if not sep or not dot:
        raise ValueError(f"{text!r}: expected CLASS.FIELD=LO:HI, e.g. "
                         "bf16.gemm_half_flops=1e7:1.5e10")
    if dclass not in cal.FITTED_FIELDS:
        raise ValueError(f"{text!r}: CLASS must be one of {', '.join(cal.FITTED_FIELDS)}")
    if name not in BOUNDABLE_FIELDS:
        raise ValueError(f"{text!r}: FIELD must be one of {', '.join(BOUNDABLE_FIELDS)}")
    lo_text, colon, hi_text = span.partition(":")
    try:
        lo, hi = float(lo_text), float(hi_text)
    except ValueError:
        lo = hi = math.nan
    if not colon or not (math.isfinite(lo) and math.isfinite(hi)) or not lo < hi:
        raise ValueError(f"{text!r}: LO:HI must be two finite numbers, LO < HI")
    if name.startswith("fp8_") and dclass != "fp8":
        raise ValueError(f"{text!r}: {name} costs only FP8 jobs: CLASS must be fp8")
    if lo < 0.0:
        raise ValueError(f"{text!r}: {name} is not negative: LO must be >= 0")
    if (name in cal.LOG_FIELDS or "efficiency" in name) and lo <= 0.0:
        raise ValueError(f"{text!r}: {name} is fitted above 0: LO must be > 0")
    if hi > BOUNDABLE_FIELDS[name]:
        raise ValueError(f"{text!r}: {name} is at most {BOUNDABLE_FIELDS[name]:g}: HI must be "
                         "no more")
    return dclass, name, lo, hi


def bounded_fields(bounds: list[tuple[str, str, float, float]]) -> dict:
    """:data:`calibration.FITTED_FIELDS` with each ``--bound`` applied: a fitted field's bounds
    replaced, a field not fitted by default added to its class."""
    fields = {dclass: dict(f) for dclass, f in cal.FITTED_FIELDS.items()}
    for dclass, name, lo, hi in bounds:
        fields[dclass][name] = (lo, hi)
    return fields


def leave_out_rule(patterns: list[str], runner: cal.Runner) -> Callable[[str], bool] | None:
    """The ``--leave-out`` predicate over case ids (None without patterns); ValueError where a
    pattern matches no counted row (a mistyped case id must not silently fit everything)."""
    if not patterns:
        return None
    cases = ([r.case for r in runner.runs if r.counted]
             + [c.label for c in cal.legacy.fitted_cases()])
    for pattern in patterns:
        if not any(fnmatch.fnmatchcase(case, pattern) for case in cases):
            raise ValueError(f"{pattern!r}: no counted row's case id matches it "
                             "(trainscape validate --json lists them)")
    return lambda case: any(fnmatch.fnmatchcase(case, p) for p in patterns)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dry-run", action="store_true")
    parser.add_argument("--backend", default="c", choices=("c", "numba", "python"))
    parser.add_argument("--robust-scale", type=float, default=ROBUST_SCALE,
                        help="soft-L1 margin in log step-time error (0: plain least squares)")
    # one fit at a time: a single-constant fit or the cross-validation, never one silently
    # in place of the other
    mode = parser.add_mutually_exclusive_group()
    mode.add_argument("--async-tp-only", action="store_true",
                      help="fit only the PyTorch stack's AsyncTP constant, on the shipped "
                           "GPU constants")
    mode.add_argument("--blackwell-only", action="store_true",
                      help="fit only the Blackwell parts' two constants (B200 and GB200), on "
                           "the shipped H100 fit, then Blackwell Ultra's one (B300 and GB300) "
                           "on theirs")
    mode.add_argument("--cross-validate", type=int, metavar="K", default=None,
                      help="K fits, each holding one fold of the rows out; print every "
                           "source's out-of-fold error and the constants' spread (writes "
                           "nothing)")
    parser.add_argument("--bound", action="append", default=[], metavar="CLASS.FIELD=LO:HI",
                        help="what-if fit: fit FIELD of dtype class CLASS (bf16, fp8) within "
                             "[LO, HI] instead of its documented bounds, or fit a field not "
                             "fitted by default (e.g. fp8.fp8_gemm_half_flops=1e9:1e12); "
                             "repeatable; only with --dry-run or --cross-validate")
    parser.add_argument("--leave-out", action="append", default=[], metavar="GLOB",
                        help="what-if fit: leave the counted rows whose case id matches GLOB "
                             "(fnmatch, e.g. 'nemo2511_qwen3-30b*') out of the fit; they are "
                             "still costed and printed; repeatable; only with --dry-run or "
                             "--cross-validate")
    args = parser.parse_args()
    if args.cross_validate is not None and args.cross_validate < 2:
        parser.error("--cross-validate: K must be at least 2")
    try:
        bounds = [parse_bound(b) for b in args.bound]
    except ValueError as exc:
        parser.error(f"--bound {exc}")
    what_if = [flag for flag, used in (("--bound", bounds), ("--leave-out", args.leave_out))
               if used]
    if what_if and not (args.dry_run or args.cross_validate is not None):
        parser.error(f"{what_if[0]} is a what-if fit: add --dry-run or --cross-validate (the "
                     "shipped constants are fitted to every counted row, within "
                     "calibration.FITTED_FIELDS' bounds)")
    if what_if and args.async_tp_only:
        parser.error(f"{what_if[0]}: --async-tp-only fits no GPU constant")
    if what_if and args.blackwell_only:
        parser.error(f"{what_if[0]}: --blackwell-only fits no constant a what-if changes")
    if args.blackwell_only:
        multipliers = fit_blackwell(args.backend)
        if not args.dry_run:
            write_blackwell(multipliers, args.backend)
        ultra = fit_blackwell_ultra(args.backend)  # on the Blackwell fit as written (or shipped)
        if not args.dry_run:
            write_blackwell_ultra(ultra, args.backend)
        return 0
    if args.async_tp_only:
        exposed = fit_async_tp(args.backend)
        if not args.dry_run:
            write_async_tp(exposed)
        return 0
    fields = bounded_fields(bounds)
    runner = cal.Runner()
    try:
        left_out = leave_out_rule(args.leave_out, runner)
    except ValueError as exc:
        parser.error(f"--leave-out {exc}")
    gpus = sorted({r.gpu for r in runner.runs} | {cal.legacy.GPU})
    if args.cross_validate is not None:
        out_of_fold, constants = cross_validate(runner, gpus, args.backend,
                                                args.cross_validate, args.robust_scale, fields,
                                                left_out)
        report_cross_validation(out_of_fold, constants, args.cross_validate)
        return 0
    problem = Problem(runner, gpus, args.backend, fitted_fields=fields, left_out=left_out)
    start = problem.results(np.array([p.start for p in problem.params]))
    print(f"fitting {len(problem.params)} constants to {len(fit_rows(start, left_out))} rows")
    x = fit(problem, args.robust_scale)
    results = problem.results(x)
    for r in sorted(results, key=lambda r: (r.group, r.case)):
        err = "   -   " if r.error is None else f"{r.error:+7.1%}"
        flag = ("" if r.counted else " (older release)") + (" [hold-out]" if r.holdout else "")
        if r.counted and left_out is not None and left_out(r.case):
            flag += " [left out]"
        print(f"  {r.group:26s} {r.case:44s} {r.dtype:5s} {err} {r.status}{flag}")
    by_group: dict[str, list] = {}
    for r in results:
        by_group.setdefault(r.group, []).append(r)
    for group, rows in by_group.items():
        for split, (med, worst, n) in split_errors(rows, left_out).items():
            print(f"{group:26s} {split:8s}: median |error| {med:6.1%}, worst {worst:6.1%} "
                  f"over {n} rows")
    gpu_c, stack_c = problem.constants(x)
    for key, values in {**gpu_c, **stack_c}.items():
        print(f"fitted {key}: { {k: float(f'{v:.4g}') for k, v in values.items()} }")
    if args.dry_run:
        return 0
    table = {}
    for gpu in gpus:
        prov = {}
        for dclass, dtypes in cal.DTYPE_CLASSES.items():
            if f"{gpu}:{dclass}" not in gpu_c:
                continue
            rows = [r for r in results if r.gpu == gpu and r.dtype in dtypes]
            prov[dclass] = {"fields": gpu_c[f"{gpu}:{dclass}"], "split": split_errors(rows),
                            "groups": sorted({r.group for r in rows})}
        table[gpu] = {"provenance": prov}
    write(table)
    write_stacks(stack_c)
    presets._parse.cache_clear()  # the AsyncTP fit costs its runs on the constants just written
    write_async_tp(fit_async_tp(args.backend))
    presets._parse.cache_clear()  # and the Blackwell fit its runs on the transfer of them
    write_blackwell(fit_blackwell(args.backend), args.backend)
    presets._parse.cache_clear()  # and Blackwell Ultra's on its sibling's fit just written
    write_blackwell_ultra(fit_blackwell_ultra(args.backend), args.backend)
    return 0


def write_stacks(stack_c: dict) -> None:
    """The fitted stack multipliers into stacks.toml's [<stack>.scale] tables."""
    path = ROOT / "src" / "trainscape" / "presets" / "stacks.toml"
    text = path.read_text()
    for stack, values in stack_c.items():
        head = f"[{stack}.scale]\n"
        start = text.index(head) + len(head)
        end = text.find("\n[", start)
        end = len(text) if end < 0 else end + 1
        body = "".join(f"{k} = {v:.4g}\n" for k, v in values.items())
        text = text[:start] + body + text[end:].lstrip("\n")
        if end < len(text):
            text = text[:start + len(body)] + "\n" + text[start + len(body):]
    path.write_text(text)
    print(f"wrote {path}")


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
            doc = cal.update_calibrated(doc, gpu, p["fields"], provenance,
                                               None if dclass == "bf16" else dclass)
    OUT.write_text(cal.format_calibrated(doc))
    print(f"wrote {OUT}")


if __name__ == "__main__":
    raise SystemExit(main())
