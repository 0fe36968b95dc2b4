"""Accuracy: the model against published measurements of real training runs.

Two kinds of source, one result row per published run:

- :mod:`.legacy` -- the two 2021-22 Megatron-LM tables (Narayanan et al. SC'21 Table 1,
  Korthikanti et al. 2022 Table 5), A100, with their own column layouts;
- :mod:`.published` -- every file in the shared column layout (NeMo / DGX Cloud benchmarks,
  Megatron-Core, MosaicML FSDP, BLOOM, Llama 3), A100 and H100, BF16 and FP8.

Each row is costed with the row's own layout on the presets of the machine it ran on, through
the same constant resolution every other entry point uses (``presets.gpu``). The result says
which settings the source left out and what was assumed for them; a published layout the
model calls invalid or out of memory is a *failed* row, reported, never dropped.

Constants are fitted per GPU type and dtype (never per row) by ``scripts/calibrate.py``; see
``docs/accuracy.md``.
"""

from __future__ import annotations

import hashlib
import statistics
from dataclasses import dataclass, field
from typing import Any, Callable

from .. import layout as L
from . import legacy
from .constants_file import format_calibrated, update_calibrated
from .legacy import preset_cluster
from .published import (PRECISION_FALLBACK_WORDS, PUBLISHED_FILES, UNSTATED_EP_NOTE,
                        UNSTATED_RECOMPUTE_NOTE, PublishedRun,
                        published_runs)

#: every calibration source id -> citation (legacy ids are their file names)
SOURCES = {**{k: v[1] for k, v in legacy.SOURCES.items()},
           **{k: v[1] for k, v in PUBLISHED_FILES.items()}}

#: a counted row is held out of the fit when its case id hashes into this residue class
HOLDOUT_MODULUS = 5
#: ``memory_measure`` values that name a caching allocator's peak (PyTorch's
#: ``max_memory_allocated`` / ``max_memory_reserved``), compared with the model's allocations;
#: any other (``nvidia-smi``, ``device``) is compared with its whole footprint, reserve included
ALLOCATOR_MEASURES = ("max_allocated", "max_reserved", "allocated", "reserved")


@dataclass
class Result:
    """One published run against the model."""

    source: str
    group: str  # summary group (JAX rows of a source on their own)
    case: str
    gpu: str
    dtype: str
    stack: str
    published_metric: str
    published_value: float
    published_step_s: float
    predicted_step_s: float | None  # None: the layout is not a valid configuration
    status: str  # ok | out_of_memory | invalid_config
    config: dict[str, Any]
    assumptions: list[str] = field(default_factory=list)
    counted: bool = True
    holdout: bool = False
    memory_gib: float | None = None  # per GPU, the GPU's reserve included
    memory_reserve_gib: float | None = None  # of which the reserve (CUDA context, NCCL, slack)
    breakdown: dict[str, float] = field(default_factory=dict)
    reason: str = ""  # why an invalid layout is invalid
    published_memory_gib: float | None = None  # a peak memory per GPU the source printed
    memory_measure: str = ""  # what it measures: an allocator's peak, or the device's
    moe: bool = False  # the run's model routes tokens to experts (model.experts > 0)

    @property
    def memory_ratio(self) -> float | None:
        """The model's memory over the published peak: its allocations (the reserve left out)
        against a caching allocator's peak (``max_allocated`` / ``max_reserved``), its whole
        footprint against a device-level figure (``nvidia-smi``); None without both."""
        if self.published_memory_gib is None or self.memory_gib is None:
            return None
        model = self.memory_gib
        if self.memory_measure in ALLOCATOR_MEASURES:
            model -= self.memory_reserve_gib or 0.0
        return model / self.published_memory_gib

    @property
    def feasible(self) -> bool:
        return self.status == "ok"

    @property
    def error(self) -> float | None:
        """Signed relative step-time error (predicted / published - 1)."""
        if self.predicted_step_s is None:
            return None
        return self.predicted_step_s / self.published_step_s - 1.0

    def as_dict(self) -> dict[str, Any]:
        err = self.error
        return {
            "source": self.source, "group": self.group, "case": self.case, "gpu": self.gpu,
            "dtype": self.dtype, "stack": self.stack, "moe": self.moe,
            "published_metric": self.published_metric,
            "published_value": self.published_value,
            "published_step_s": self.published_step_s,
            "predicted_step_s": self.predicted_step_s,
            "error_pct": None if err is None else 100.0 * err,
            "feasible": self.feasible, "status": self.status, "reason": self.reason,
            "counted": self.counted, "holdout": self.holdout,
            "memory_gib": self.memory_gib, "memory_reserve_gib": self.memory_reserve_gib,
            "config": self.config,
            "assumptions": self.assumptions, "breakdown": self.breakdown,
            "published_memory_gib": self.published_memory_gib,
            "memory_measure": self.memory_measure or None, "memory_ratio": self.memory_ratio,
        }


def case_fold(case: str, folds: int = HOLDOUT_MODULUS) -> int:
    """The fold of a row among ``folds``, by a hash of its id: the hold-out split and
    ``scripts/calibrate.py --cross-validate`` share it."""
    return int(hashlib.sha256(case.encode()).hexdigest(), 16) % folds


def is_holdout(case: str) -> bool:
    """Deterministic hold-out split: about one counted row in five (fold 0 of
    :data:`HOLDOUT_MODULUS`)."""
    return case_fold(case) == 0


class Runner:
    """Costs published runs; keeps each run's validated scenario so a fit can re-cost it under
    other GPU constants without re-validating."""

    def __init__(self, runs: list[PublishedRun] | None = None):
        self.runs = published_runs() if runs is None else runs
        self._scenarios: dict[str, Any] = {}

    def scenario(self, run: PublishedRun):
        from ..api import load

        sc = self._scenarios.get(run.case)
        if sc is None:
            cluster = preset_cluster(run.cluster_preset, run.config_gpus(), None, True)
            for k, tier in enumerate(cluster["tiers"]):  # tier<k>_bandwidth_GBps overrides
                bw = run.cluster_overrides.get(f"tier{k}_bandwidth_GBps")
                if bw is not None:
                    tier["bandwidth_GBps"] = bw
            cluster["gpu"] = {"preset": run.gpu}
            sc = load({**run.scenario, "cluster": cluster})
            self._scenarios[run.case] = sc
        return sc

    def packed(self, run: PublishedRun, gpu_overrides: dict[str, Any] | None = None):
        """``(sys, mdl, job, cfg)``: the run's scenario (its GPU constants overridden by
        ``gpu_overrides``) and its one configuration, packed for the kernels."""
        from ..spec import ConfigSpec, pack, pack_configs

        sc = self.scenario(run)
        if gpu_overrides:
            gpu = sc.cluster.gpu.model_copy(update=gpu_overrides)
            sc = sc.model_copy(update={"cluster": sc.cluster.model_copy(update={"gpu": gpu})})
        sys_, mdl, job = pack(sc)
        return sys_, mdl, job, pack_configs([ConfigSpec(**run.config)], gpus=sc.cluster.gpus)

    def settle_layout(self, run: PublishedRun, backend: str | None = "python") -> None:
        """Settle what a run's row does not print where its reading does not fit the GPU: the
        recompute (``run.recompute_fallbacks``), an MoE row's expert parallelism
        (``run.ep_fallbacks``) and, only where none of those fits, the precisions of its
        gradients, weights and optimizer states (``run.precision_fallbacks``, lightest
        departure first). The published run did fit, so it recomputed, sharded its experts or
        kept lighter states: at the first precision step at which anything fits, the lightest
        recompute of the stack at which some expert-parallel degree fits, and of those degrees
        the fastest (a published benchmark ran its tuned layout), said in the run's
        assumptions; where nothing fits, the reading stays (a failed row). Once per run: memory
        does not depend on the fitted constants, and the backends agree on it."""
        from ..backends import evaluate_blocks

        if not (run.recompute_fallbacks or run.ep_fallbacks or run.precision_fallbacks):
            return
        recomputes = (run.config["recompute"],) + run.recompute_fallbacks
        eps = (run.config["ep"],) + run.ep_fallbacks
        precisions = ({},) + run.precision_fallbacks
        run.recompute_fallbacks, run.ep_fallbacks, run.precision_fallbacks = (), (), ()
        job = dict(run.scenario["job"])

        def use(precision: dict[str, Any]) -> None:
            run.scenario = {**run.scenario, "job": {**job, **precision}}
            self._scenarios.pop(run.case, None)

        def cost(recompute: str, ep: int) -> tuple[str, float, float]:
            run.config.update(recompute=recompute, ep=ep)
            out = evaluate_blocks(*self.packed(run), backend=backend)[:, 0]
            return (L.STATUS[int(out[L.OUT_STATUS])], float(out[L.OUT_STEP_TIME_S]),
                    float(out[L.OUT_MEMORY_GIB]))

        status, _, first = cost(recomputes[0], eps[0])
        if status != "out_of_memory":
            run.config.update(recompute=recomputes[0], ep=eps[0])
            return  # fits (or fails otherwise) as read
        for precision in precisions:
            if precision:
                use(precision)
            for recompute in recomputes:
                # at the lightest recompute that lets any degree fit, the fastest degree that
                # fits: a published benchmark ran its tuned layout
                fits = []
                for ep in eps:
                    if not precision and (recompute, ep) == (recomputes[0], eps[0]):
                        continue  # the reading as printed, costed above: it does not fit
                    status, step, gib = cost(recompute, ep)
                    if status == "ok":
                        fits.append((step, gib, ep))
                if fits:
                    step, gib, ep = min(fits)
                    run.config.update(recompute=recompute, ep=ep)
                    self._settled(run, recomputes[0], eps[0], precision, first, gib)
                    return
        use({})
        run.config.update(recompute=recomputes[0], ep=eps[0])
        tried = [f"{r} recompute" for r in recomputes[1:]] + [f"EP {e}" for e in eps[1:]]
        # every precision field tried, in the order the steps first tried it
        fields = dict.fromkeys(k for step in precisions for k in step)
        tried += [PRECISION_FALLBACK_WORDS[k] for k in fields]
        run.assumptions.append(f"not printed, and the layout as read does not fit ({first:.1f} "
                               f"GiB), nor with {' or '.join(tried)}")

    @staticmethod
    def _settled(run: PublishedRun, recompute: str, ep: int, precision: dict[str, Any],
                 first: float, gib: float) -> None:
        """The notes of :meth:`settle_layout` once a reading fits."""
        changed = []
        if run.config["recompute"] != recompute:
            run.assumptions = [a for a in run.assumptions if a != UNSTATED_RECOMPUTE_NOTE]
            changed.append(f"{run.config['recompute']} recompute (the lightest of the stack's "
                           "modes that fits)")
        if run.config["ep"] != ep:
            run.assumptions = [a for a in run.assumptions if a != UNSTATED_EP_NOTE]
            changed.append(f"EP {run.config['ep']} (of the expert-parallel degrees that fit, "
                           "the fastest: a published benchmark ran its tuned layout)")
        changed += [PRECISION_FALLBACK_WORDS[k] for k in precision]
        run.assumptions.append(f"not printed, and as read the layout needs {first:.1f} GiB and "
                               f"does not fit, so the published run did otherwise: "
                               f"{' and '.join(changed)} assumed ({gib:.1f} GiB)")

    def cost(self, run: PublishedRun, gpu_overrides: dict[str, Any] | None = None,
             backend: str | None = "python") -> Result:
        from ..backends import evaluate_blocks
        from ..model.llm import config_error_message

        self.settle_layout(run, backend)
        sys_, mdl, job, cfg = self.packed(run, gpu_overrides)
        out = evaluate_blocks(sys_, mdl, job, cfg, backend=backend)[:, 0]
        status = L.STATUS[int(out[L.OUT_STATUS])]
        result = Result(
            source=run.source, group=run.group, case=run.case, gpu=run.gpu, dtype=run.dtype,
            stack=run.stack, published_metric=run.metric, published_value=run.value,
            published_step_s=run.published_step_s, predicted_step_s=None, status=status,
            config=dict(run.config), assumptions=list(run.assumptions), counted=run.counted,
            holdout=run.counted and run.shipped and is_holdout(run.case),
            published_memory_gib=run.published_memory_gib, memory_measure=run.memory_measure,
            moe=bool(mdl[L.MDL_EXPERTS] > 0.0))
        if status in ("ok", "out_of_memory"):
            result.predicted_step_s = float(out[L.OUT_STEP_TIME_S])
            result.memory_gib = float(out[L.OUT_MEMORY_GIB])
            result.memory_reserve_gib = float(out[L.OUT_MEM_RESERVE_GIB])
            result.breakdown = {f: float(out[L.OUTPUT_FIELDS.index(f)])
                                for f in L.BREAKDOWN_FIELDS}
        else:
            from ..model.llm import config_error

            code = config_error(sys_, mdl, job, cfg, 0)
            fld, msg = config_error_message(code)
            result.reason = f"{fld}: {msg}"
        return result


def legacy_results(backend: str | None = "python",
                   gpu_overrides: dict[str, Any] | None = None,
                   calibrated: bool = True, cases: list | None = None,
                   on_row: Callable[[], None] | None = None) -> list[Result]:
    """The two Megatron tables as results (their unprinted knobs tuned, and said so).
    ``cases``: the legacy cases (default :func:`legacy.fitted_cases`); ``on_row`` is called after
    every row."""
    results = []
    for case in (legacy.fitted_cases() if cases is None else cases):
        p = legacy.predict(case, gpu_overrides, backend=backend, calibrated=calibrated)
        open_knobs = [k for k in ("mbs", "vpp") if len({c[k] for c in case.candidates}) > 1]
        notes = [f"{k} = {p.config[k]} not printed: the fastest feasible value was taken (the "
                 f"paper reports its best tuned runs)" for k in open_knobs]
        results.append(Result(
            source=case.source, group=case.source, case=case.label, gpu=legacy.GPU,
            dtype=case.scenario["job"]["dtype"], stack=legacy.STACK,
            published_metric="step_time_s" if case.published_tflops is None
            else "tflops_per_gpu (Megatron eq. 3, hardware FLOPs)",
            published_value=case.published_step_s if case.published_tflops is None
            else case.published_tflops,
            published_step_s=case.published_step_s, predicted_step_s=p.step_s,
            status="ok" if p.feasible else "out_of_memory", config=p.config,
            assumptions=notes, holdout=is_holdout(case.label), breakdown=p.breakdown,
            memory_gib=p.memory_gib))
        if on_row is not None:
            on_row()
    return results


def validate(backend: str | None = "python",
             progress: Callable[[int, int], None] | None = None
             ) -> tuple[list[Result], dict[str, dict]]:
    """Every published run through the model with the shipped presets. ``progress(done,
    total)`` is called once before the first row (``done = 0``) and after every row."""
    runner = Runner()
    cases = legacy.fitted_cases()
    total = len(cases) + len(runner.runs)
    done = 0

    def tick() -> None:
        nonlocal done
        done += 1
        if progress is not None:
            progress(done, total)

    if progress is not None:
        progress(0, total)
    results = legacy_results(backend, cases=cases, on_row=tick)
    for run in runner.runs:
        results.append(runner.cost(run, backend=backend))
        tick()
    return results, summarize(results)


def validate_runner(runner: Runner, backend: str | None = "python",
                    progress: Callable[[int, int], None] | None = None
                    ) -> tuple[list[Result], dict[str, dict]]:
    """:func:`validate` over the runs of ``runner`` alone (a user's files of published runs,
    :func:`.runs_file.runner_for`)."""
    total = len(runner.runs)
    if progress is not None:
        progress(0, total)
    results = []
    for done, run in enumerate(runner.runs, start=1):
        results.append(runner.cost(run, backend=backend))
        if progress is not None:
            progress(done, total)
    return results, summarize(results)


def summarize(results: list[Result],
              group_of: Callable[[Result], str] | None = None) -> dict[str, dict[str, Any]]:
    """Per summary group (``group_of`` of a result, default its ``group``; in order of first
    appearance): rows, counted rows, failed (infeasible) counted rows, and the median, worst
    and signed median step-time error over the counted rows the model could cost."""
    group_of = group_of or (lambda r: r.group)
    summary: dict[str, dict[str, Any]] = {}
    for group in dict.fromkeys(group_of(r) for r in results):
        rows = [r for r in results if group_of(r) == group]
        counted = [r for r in rows if r.counted]
        errors = [r.error for r in counted if r.error is not None]
        failed = [r for r in counted if not r.feasible]
        summary[group] = {
            "rows": len(rows), "counted": len(counted), "failed": len(failed),
            "median_abs_error": statistics.median(abs(e) for e in errors) if errors else None,
            "worst_abs_error": max(abs(e) for e in errors) if errors else None,
            "median_error": statistics.median(errors) if errors else None,
        }
    return summary


__all__ = ["SOURCES", "format_calibrated", "update_calibrated", "Result", "Runner", "legacy",
           "legacy_results", "published_runs", "summarize", "validate", "validate_runner",
           "is_holdout", "case_fold"]


#: dtype classes fitted separately, and the dtypes of each
DTYPE_CLASSES = {"bf16": ("bf16", "fp16"), "fp8": ("fp8",)}
#: the GPU constants fitted per dtype class, with the bounds the fit keeps them in
FITTED_FIELDS = {
    "bf16": {
        "gemm_efficiency_max": (0.3, 0.95),
        "gemm_half_flops": (1e7, 1e12),
        "attention_efficiency": (0.25, 0.8),
        "memory_efficiency": (0.5, 0.95),
        # the reference stack's (Megatron-Core) fixed GPU-visible cost per layer pass: launch
        # gaps of a few tens of kernels (~1-2 us each) -- at most 100 us; a stack with per-module
        # hooks (FSDP) scales it by its own fitted multiplier
        "layer_overhead_us": (0.0, 100.0),
        # the training loop's fixed host-side cost per step (model.llm.step_overhead): a few
        # synchronisations and a batch fetch -- at most 100 ms
        "step_overhead_ms": (0.0, 100.0),
    },
    "fp8": {
        "fp8_gemm_efficiency_max": (0.2, 0.95),
    },
}
#: bounds of a fitted legacy_attention_fraction (fitted only for GPUs whose stock value is
#: below 1, from runs with job.attention_kernel = "legacy"; presets/gpus.toml cites 0.47 on H100)
LEGACY_ATTENTION_BOUNDS = (0.3, 1.0)
#: multipliers a software-stack profile fits (stacks.toml), relative to Megatron-Core
STACK_FITTED_FIELDS = {
    "gemm_efficiency_max": (0.7, 1.2),
    "attention_efficiency": (0.5, 1.5),
    "memory_efficiency": (0.5, 2.0),
    "layer_overhead_us": (0.0, 30.0),
    "step_overhead_ms": (0.0, 5.0),
}
#: fitted on a log scale (fp8_gemm_half_flops only in a what-if fit: calibrate.py --bound)
LOG_FIELDS = {"gemm_half_flops", "fp8_gemm_half_flops"}
