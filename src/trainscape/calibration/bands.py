"""How far the model has been from published runs it was never fitted on: an error band per
GPU preset, software stack and kind of model (dense, or MoE).

The evidence is every published run whose step time the fit did not see -- the calibration
set's held-out rows (:func:`~trainscape.calibration.is_holdout`) and the runs of
``docs/data/transfer_check_runs.csv`` (other papers and tables on A100 / H100, and the GPUs
without a fit of their own: B200, H200, the 500 W H100 HBM2e) -- each costed with its own
layout. ``scripts/error_bands.py`` groups their errors ``e = predicted / published - 1`` by
GPU preset, stack and model kind and writes ``data/calibration/error_bands.json``; this module
reads it. The kinds are kept apart because the model errs differently on them: on H100 with
Megatron-Core the middle 8 in 10 dense runs lay within -12 / +4 %, the MoE runs within
-28 / +18 % (expert all-to-all, routing and grouped-GEMM costs the dense runs do not have), and
a dense job's band drawn over both would be twice as wide as its evidence says.

A band says what happened on those runs, not what will happen on the next one: the median
error and the 10th and 90th percentiles (so 8 in 10 of the runs lay between them). For a
prediction ``P`` a run that errs like the middle 80 % took between ``P / (1 + p90)`` and
``P / (1 + p10)``. A band needs :data:`MIN_ROWS` runs of one GPU preset on one stack and of
one kind: runs of another stack on the same GPU would speak for kernels and overlaps the job
does not run, runs of the other kind for terms it does not have. A group with fewer runs keeps
its count, median and range (``thin`` in the file), which the no-band sentence quotes.
"""

from __future__ import annotations

import json
import math
import statistics
from dataclasses import dataclass
from functools import lru_cache
from importlib import resources
from typing import Any, Iterable

#: the shipped bands (written by scripts/error_bands.py)
BANDS_FILE = "error_bands.json"
#: fewest never-fitted runs a band is drawn from
MIN_ROWS = 8
#: the kinds of model a band speaks for: a model with experts, or without
KINDS = ("dense", "moe")


def model_kind(experts: float) -> str:
    """``"moe"`` for a model that routes tokens to experts (``model.experts > 0``), else
    ``"dense"``."""
    return "moe" if experts > 0 else "dense"


@dataclass(frozen=True)
class ErrorBand:
    """The model's step-time errors ``predicted / published - 1`` on ``rows`` published runs of
    ``kind`` models (:data:`KINDS`) on ``gpu`` with ``stack`` that no fit saw. Negative: the
    model was faster than the run."""

    gpu: str
    stack: str
    kind: str
    rows: int
    infeasible: int  # of them, layouts that ran but the model calls invalid or out of memory
    median: float
    p10: float
    p90: float
    median_abs: float
    sources: tuple[str, ...]

    def step_interval(self, predicted_s: float) -> tuple[float, float]:
        """The step times of a run that errs like the middle 80 % of the band's runs, for a
        predicted step of ``predicted_s`` seconds: ``(P / (1 + p90), P / (1 + p10))``."""
        return predicted_s / (1.0 + self.p90), predicted_s / (1.0 + self.p10)

    def as_dict(self, predicted_s: float | None = None) -> dict[str, Any]:
        out: dict[str, Any] = {
            "gpu": self.gpu, "stack": self.stack, "kind": self.kind, "rows": self.rows,
            "infeasible": self.infeasible, "median_error": self.median,
            "p10_error": self.p10, "p90_error": self.p90,
            "median_abs_error": self.median_abs, "sources": list(self.sources),
        }
        if predicted_s is not None and math.isfinite(predicted_s) and predicted_s > 0.0:
            low, high = self.step_interval(predicted_s)
            out["step_time_low_s"] = low
            out["step_time_high_s"] = high
        return out

    def sentence(self, predicted_s: float | None = None) -> str:
        """One line for a person: what the band is and, with a prediction, the interval."""
        text = (f"{self.rows} published runs of {self.kind} models on {self.gpu} with "
                f"{self.stack} that no fit saw: "
                f"the model's step time erred by {100 * self.median:+.1f} % at the median, 8 in "
                f"10 between {100 * self.p10:+.1f} % and {100 * self.p90:+.1f} % (negative: "
                "faster than the run)")
        if self.infeasible:
            text += f", and called {self.infeasible} of those layouts infeasible"
        if predicted_s is not None and math.isfinite(predicted_s) and predicted_s > 0.0:
            low, high = self.step_interval(predicted_s)
            text += f". Erring like them, this step would take {low:.3g}-{high:.3g} s"
        return text


def band_stats(errors: Iterable[float]) -> dict[str, float] | None:
    """``median``, ``p10``, ``p90`` (inclusive deciles) and ``median_abs`` of the errors, each
    rounded to 0.1 %; None for fewer than :data:`MIN_ROWS` finite errors."""
    errs = sorted(e for e in errors if math.isfinite(e))
    if len(errs) < MIN_ROWS:
        return None
    deciles = statistics.quantiles(errs, n=10, method="inclusive")
    return {"median": round(statistics.median(errs), 3), "p10": round(deciles[0], 3),
            "p90": round(deciles[8], 3),
            "median_abs": round(statistics.median(abs(e) for e in errs), 3)}


def thin_stats(errors: Iterable[float]) -> dict[str, float] | None:
    """What a group too small for a band still says: ``median``, ``low`` and ``high`` (its
    smallest and largest error), each rounded to 0.1 %; None without a finite error."""
    errs = sorted(e for e in errors if math.isfinite(e))
    if not errs:
        return None
    return {"median": round(statistics.median(errs), 3), "low": round(errs[0], 3),
            "high": round(errs[-1], 3)}


def _band_of(entry: dict[str, Any]) -> ErrorBand:
    return ErrorBand(gpu=entry["gpu"], stack=entry["stack"], kind=entry["kind"],
                     rows=int(entry["rows"]), infeasible=int(entry["infeasible"]),
                     median=float(entry["median"]), p10=float(entry["p10"]),
                     p90=float(entry["p90"]), median_abs=float(entry["median_abs"]),
                     sources=tuple(entry["sources"]))


@lru_cache(maxsize=1)
def _shipped() -> dict[str, Any]:
    text = resources.files("trainscape.data.calibration").joinpath(BANDS_FILE).read_text()
    return json.loads(text)


def load_bands() -> dict[tuple[str, str, str], ErrorBand]:
    """The shipped bands, keyed by ``(gpu preset, stack, kind)``."""
    return {(e["gpu"], e["stack"], e["kind"]): _band_of(e) for e in _shipped()["bands"]}


def error_band(gpu: str, stack: str, kind: str = "dense") -> ErrorBand | None:
    """The band of ``kind`` models (:data:`KINDS`) on GPU preset ``gpu`` with software stack
    ``stack``; None when fewer than :data:`MIN_ROWS` never-fitted runs of them were published."""
    return load_bands().get((gpu, stack, kind))


def thin_group(gpu: str, stack: str, kind: str = "dense") -> dict[str, Any] | None:
    """The count, median and range of a group with runs but too few for a band (the file's
    ``thin`` entries); None for a group with none or with a band."""
    for e in _shipped().get("thin", []):
        if (e["gpu"], e["stack"], e["kind"]) == (gpu, stack, kind):
            return e
    return None


def _same(a: Any, b: Any) -> bool:
    if isinstance(a, dict) or isinstance(b, dict):
        return isinstance(a, dict) and isinstance(b, dict) and a.keys() == b.keys() \
            and all(_same(a[k], b[k]) for k in a)
    if isinstance(a, (int, float)) and isinstance(b, (int, float)):
        return math.isclose(float(a), float(b), rel_tol=1e-9, abs_tol=0.0)
    return a == b


def scenario_band(scenario) -> tuple[ErrorBand | None, str]:
    """The band that speaks for ``scenario``'s predictions, and a sentence saying which or why
    none does. Only a GPU preset with its fitted constants unchanged has one: constants
    written over the preset's, ``calibrated = false`` or a GPU of one's own describe a model
    the published runs did not check."""
    from .. import presets

    gpu = scenario.cluster.gpu
    if scenario.cluster.sites is not None:
        return None, ("no error band: no published run the bands draw on spanned sites "
                      "(cluster.sites)")
    if gpu.preset is None:
        return None, ("no error band: the GPU is not a preset, so no published run checked "
                      "these constants")
    if not gpu.calibrated:
        return None, ("no error band: cluster.gpu.calibrated = false (the bands describe the "
                      "fitted constants)")
    expected = presets.resolve_gpu(gpu.preset, dtype=scenario.job.dtype,
                                   stack=scenario.job.stack, calibrated=True)
    written = gpu.model_dump()
    for key, value in expected.items():
        if key in written and key not in ("name", "preset", "calibrated") \
                and not _same(written[key], value):
            return None, (f"no error band: cluster.gpu.{key} differs from the {gpu.preset} "
                          "preset's, and the bands describe the preset's constants")
    kind = model_kind(scenario.model.experts)
    band = error_band(gpu.preset, scenario.job.stack, kind)
    if band is None:
        why = (f"no error band: fewer than {MIN_ROWS} published runs of {kind} models on "
               f"{gpu.preset} with {scenario.job.stack} that no fit saw")
        thin = thin_group(gpu.preset, scenario.job.stack, kind)
        if thin is not None:
            why += (f" ({thin['rows']}: the model's step time erred by "
                    f"{100 * thin['median']:+.1f} % at the median, from "
                    f"{100 * thin['low']:+.1f} % to {100 * thin['high']:+.1f} %)")
        return None, why
    return band, ""
