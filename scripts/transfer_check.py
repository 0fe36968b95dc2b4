#!/usr/bin/env python3
"""Check the model against published runs it was never fitted on: GPUs without a fit of their
own -- B200 (H100 fit carried as fitted/stock ratios), H200 / H800 and the 500 W Grand Teton H100
(``h100-hbm2e-96gb``; H100 fit copied) -- and
papers' and tables' runs on the fitted GPUs (A100, H100) that are not in the calibration set.
The runs only check, but for one A/B pair per model in torchtitan's AsyncTP benchmark, which
sets the PyTorch stack's AsyncTP constant (``ASYNC_TP_FIT_PAIRS``), the dense B200 / GB200
runs outside the hold-out fold, which set the Blackwell parts' two constants of their own
(``blackwell_fit_cases``), and the dense GB300 runs outside it, which set Blackwell Ultra's one
(``ultra_fit_cases``): all marked, and left out of the summaries.

    python scripts/transfer_check.py                       # docs/data/transfer_check_runs.csv
    python scripts/transfer_check.py FILE.csv [--json]
    python scripts/transfer_check.py --plot transfer.png   # also the accuracy figure
    python scripts/transfer_check.py --blind               # no source's rules: columns only

The CSV has the calibration set's column layout (../shared/calibration/README.md); its rows
and their provenance are described in docs/data/transfer_check_runs.md. Each row is costed like a
``trainscape validate`` row of the same source -- its own layout, the assumptions that source's
rows get, plus what a paper's stack did that the columns cannot say
(``calibration.published.SOURCE_SETTINGS``). GPUs
without a fit run on the DGX H100 SuperPOD fabric (8 x 400 Gb/s per node) with the node tier at
the GPU's own NVLink bandwidth (900 GB/s per direction on B200); A100 and H100 rows run on their
own DGX SuperPOD presets. The torchtitan rows read like the calibration set's FSDP rows (their
selective checkpointing as ``op_selective``, AsyncTP as TP overlap, torchao's FP8 FSDP
all-gather as ``fp8_param_gather``). Rows of sources with no reader (a cloud operator's
log, papers' GPU-hour averages) or on a GPU without a preset are listed as skipped, with why.
The summary is per GPU, then per source on the fitted GPUs (the H100 ``nemo_perf_summary``
rows are the calibration set's own, riding along as the B200 rows' baseline).
"""

from __future__ import annotations

import argparse
import csv
import functools
import json
import math
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

from trainscape import presets  # noqa: E402
from trainscape.calibration import Runner, is_holdout  # noqa: E402
from trainscape.calibration import published as P  # noqa: E402
from trainscape.calibration.runs_file import OPTIONAL, hardware_steps, read_row  # noqa: E402

DEFAULT = ROOT / "docs" / "data" / "transfer_check_runs.csv"
#: peak memory the sources printed for some of those runs (torchtitan's ``memory:`` log line,
#: the caching allocator's peak reserved bytes), by case: docs/data/transfer_check_memory.csv
MEMORY = ROOT / "docs" / "data" / "transfer_check_memory.csv"
#: the CSV ``source`` values ``calibration.published.run_of`` reads (each is passed as its own
#: source id)
READABLE_SOURCES = ("nemo_perf_summary", "nemo_long_sequence", "torchtitan_benchmarks",
                    "mtnlg_paper", "megascale_paper", "nemotron4_15b_report",
                    "nemotron4_340b_report", "dgxc_benchmarking", "automodel_perf_summary",
                    "nemo_perf_summary_2407", "nemo_perf_summary_2502", "mlperf_training_v3.0",
                    "mlperf_training_v3.1", "mlperf_training_v4.0", "mlperf_training_v4.1",
                    "mlperf_training_v5.0", "mlperf_training_v5.1", "opt_paper",
                    "bloomberggpt_paper", "gpt_neox_20b_paper", "flagperf",
                    "nanotron_ultrascale_playbook", "tinyllama_paper", "megatron_lm_readme",
                    "maxtext_gpu")
#: the GPUs checked (the calibrated H100 and A100 rows ride along as the baseline, and the
#: papers' runs outside the calibration set check the fitted GPUs themselves)
GPUS = ("b200", "gb200", "b300", "gb300", "h200-141gb", "h800-sxm-80gb", "h100-hbm2e-96gb",
        "h100-sxm-80gb", "a100-sxm-80gb", "a100-sxm-40gb")
#: GPUs that have a fit of their own (their rows check the fit, not a transfer)
FITTED = ("h100-sxm-80gb", "a100-sxm-80gb", "a100-sxm-40gb")
#: the published A/B of PyTorch's AsyncTP that sets its exposed fraction (``scripts/calibrate.py``
#: fits ``stacks.toml [pytorch-fsdp.tp_overlap] tp_overlap_exposed`` so that the model's vanilla
#: over AsyncTP step matches these runs' speed-ups): torchtitan
#: ``benchmarks/asyncTP_llama3_h100_2025-06_torchtitan.md``, BF16 -- Llama 3.1 70B, FSDP 32 x
#: TP 8 on 256 H100 (597.3 -> 652.4 tokens/s/GPU) and 8B, FSDP 8 x TP 8 on 64 (4378 -> 4809.4).
#: Their four rows are marked and left out of the summaries; the file's float8 pairs and the
#: other AsyncTP runs still only check.
ASYNC_TP_FIT_PAIRS = (
    ("torchtitan_asynctp2506_llama3.1-70b_bf16_vanilla_256",
     "torchtitan_asynctp2506_llama3.1-70b_bf16_asynctp_256"),
    ("torchtitan_asynctp2506_llama3.1-8b_bf16_vanilla_64",
     "torchtitan_asynctp2506_llama3.1-8b_bf16_asynctp_64"),
)
ASYNC_TP_FIT_CASES = frozenset(c for pair in ASYNC_TP_FIT_PAIRS for c in pair)


@functools.lru_cache(maxsize=None)
def _async_tp_runner(path: Path) -> tuple[Runner, dict]:
    """The :data:`ASYNC_TP_FIT_PAIRS` runs of ``path`` and a runner keeping their validated
    scenarios (read once: a fit costs them at every trial value; the GPU constants are the
    presets' as they stood at the first call in this process)."""
    with open(path, newline="") as f:
        rows = {r["case"]: r for r in csv.DictReader(f) if r["case"] in ASYNC_TP_FIT_CASES}
    runs, skipped = runs_of([rows[c] for pair in ASYNC_TP_FIT_PAIRS for c in pair])
    if skipped:
        raise ValueError(f"AsyncTP fit rows not costable: {skipped}")
    return runner_of(runs), {run.case: run for run in runs}


def async_tp_speedups(exposed: float | None = None, backend: str = "c",
                      path: Path = DEFAULT) -> list[tuple[str, float, float]]:
    """``(AsyncTP case, published speed-up, model speed-up)`` of each pair of
    :data:`ASYNC_TP_FIT_PAIRS`: vanilla-TP step over AsyncTP step, the model's with the AsyncTP
    run's ``tp_overlap_exposed`` set to ``exposed`` (``None``: the shipped stack profile's)."""
    runner, by_case = _async_tp_runner(path)
    overrides = None if exposed is None else {"tp_overlap_exposed": exposed}
    out = []
    for vanilla, asynctp in ASYNC_TP_FIT_PAIRS:
        v, a = by_case[vanilla], by_case[asynctp]
        model_v = runner.cost(v, backend=backend).predicted_step_s
        model_a = runner.cost(a, overrides, backend=backend).predicted_step_s
        out.append((asynctp, v.published_step_s / a.published_step_s, model_v / model_a))
    return out


def async_tp_loss(exposed: float | None = None, backend: str = "c") -> float:
    """What ``scripts/calibrate.py`` minimizes over ``exposed``: the summed squared log ratio of
    the model's to the published speed-up over :data:`ASYNC_TP_FIT_PAIRS`."""
    return sum(math.log(model / published) ** 2
               for _, published, model in async_tp_speedups(exposed, backend))


#: Blackwell parts with a fit of their own over the H100 fit they carry by ratio: two constants
#: (:data:`BLACKWELL_FIELDS`), fitted by ``scripts/calibrate.py`` (``fit_blackwell``) on these
#: GPUs' dense Megatron-Core rows outside the hold-out fold (``calibration.is_holdout``, the
#: calibration set's rule). Those rows are marked and left out of the summaries; the hold-out
#: fold's dense rows and every MoE row still only check.
BLACKWELL = ("b200", "gb200")
#: the constants the Blackwell fit sets, each a multiplier on the value the ratio transfer gives
BLACKWELL_FIELDS = ("fp8_gemm_efficiency_max", "attention_efficiency")


def _dense_on(run, parts) -> bool:
    """A dense Megatron-Core run on one of ``parts``, counted (the newest release of its
    layout): the runs a Blackwell-family fit splits into its fit and hold-out."""
    return (run.gpu in parts and run.stack == "megatron-core"
            and not run.scenario["model"].get("experts") and run.counted)


def blackwell_transferred(gpu: str, dtype: str) -> dict[str, float]:
    """:data:`BLACKWELL_FIELDS` of ``gpu`` for a ``dtype`` job as the ratio transfer of its
    donor's fit gives them, before the Blackwell fit's own values."""
    donor = presets.calibration_donor(gpu)
    values = presets.gpu(gpu, calibrated=False)
    if donor is not None:
        values.update({k: v for k, v, _ in presets._transferred_items(gpu, donor, dtype)})
    return {k: float(values[k]) for k in BLACKWELL_FIELDS}


@functools.lru_cache(maxsize=None)
def _fit_runner(path: Path, parts: tuple[str, ...]) -> tuple[Runner, tuple, tuple]:
    """A runner over ``path``'s rows on ``parts``, their fit runs (dense, outside the hold-out
    fold) and their hold-out runs (read once: a fit costs them at every trial value)."""
    with open(path, newline="") as f:
        rows = [r for r in csv.DictReader(f) if r["gpu"] in parts]
    runs, _ = runs_of(rows)
    dense = [r for r in runs if _dense_on(r, parts)]
    return (runner_of(runs), tuple(r for r in dense if not is_holdout(r.case)),
            tuple(r for r in dense if is_holdout(r.case)))


def blackwell_fit_cases(path: Path = DEFAULT) -> frozenset[str]:
    """The case ids of the Blackwell fit's runs in ``path`` (read as the shipped file is)."""
    return frozenset(run.case for run in _fit_runner(path, BLACKWELL)[1])


def _fit_results(parts: tuple[str, ...], overrides_of, backend: str, path: Path,
                 holdout: bool) -> list:
    """The fit runs of :func:`_fit_runner` on ``parts`` (``holdout``: its hold-out runs), each
    costed with the GPU constants ``overrides_of(run)`` gives (``overrides_of`` None: the
    shipped presets)."""
    runner, fit, check = _fit_runner(path, parts)
    return [runner.cost(run, None if overrides_of is None else overrides_of(run),
                        backend=backend) for run in (check if holdout else fit)]


def blackwell_results(multipliers: dict[str, float] | None = None, backend: str = "c",
                      path: Path = DEFAULT, holdout: bool = False) -> list:
    """The Blackwell fit's runs (``holdout``: its hold-out runs) costed with each of
    :data:`BLACKWELL_FIELDS` at ``multipliers`` times its transferred value
    (:func:`blackwell_transferred`); ``None``: the shipped presets."""
    def overrides(run):
        base = blackwell_transferred(run.gpu, run.dtype)
        return {k: base[k] * multipliers[k] for k in BLACKWELL_FIELDS}

    return _fit_results(BLACKWELL, None if multipliers is None else overrides, backend, path,
                        holdout)


#: Blackwell Ultra and the Blackwell part each is built like: the same dual-die GPU with the
#: same dense BF16 / FP8 rates, twice the exponential rate and more power (gpus.toml). Each
#: takes its sibling's fit: the attention share carried through the exponential rate
#: (:func:`trainscape.model.llm.exponential_rate_attention_ratio`), both GEMM ceilings times
#: one multiplier fitted by ``scripts/calibrate.py`` (``fit_blackwell_ultra``) on the dense
#: GB300 rows outside the hold-out fold, shared by B300 (no dense B300 row is published)
BLACKWELL_ULTRA = {"b300": "b200", "gb300": "gb200"}
#: the constants the Blackwell Ultra fit multiplies: the tensor cores' BF16 and FP8 ceilings
ULTRA_FIELDS = ("gemm_efficiency_max", "fp8_gemm_efficiency_max")


def ultra_carried(gpu: str, dtype: str) -> dict[str, float]:
    """The attention share and GEMM ceilings Blackwell Ultra part ``gpu`` takes from its
    Blackwell sibling's fit (its own fields in calibrated.toml over the ones it carries from
    the H100 fit), before a multiplier of its own: the attention share times the
    exponential-rate ratio at 128-wide heads, the ceilings as the sibling has them."""
    from trainscape.model.llm import exponential_rate_attention_ratio

    sibling = BLACKWELL_ULTRA[gpu]
    fitted = {k: float(v) for k, v, _ in presets._calibrated_items(sibling, dtype)}
    ratio = exponential_rate_attention_ratio(
        presets.gpu(sibling, calibrated=False)["attention_head_dim_half"],
        presets.gpu(gpu, calibrated=False)["attention_head_dim_half"])
    return {"attention_efficiency": fitted["attention_efficiency"] * ratio,
            **{k: fitted[k] for k in ULTRA_FIELDS}}


def ultra_fit_cases(path: Path = DEFAULT) -> frozenset[str]:
    """The case ids of the Blackwell Ultra fit's runs in ``path``."""
    return frozenset(run.case for run in _fit_runner(path, tuple(BLACKWELL_ULTRA))[1])


def ultra_results(multiplier: float | None = None, backend: str = "c", path: Path = DEFAULT,
                  holdout: bool = False) -> list:
    """The Blackwell Ultra fit's runs (``holdout``: its hold-out runs) costed with
    :func:`ultra_carried`'s constants, each of :data:`ULTRA_FIELDS` times ``multiplier``;
    ``None``: the shipped presets."""
    def overrides(run):
        carried = ultra_carried(run.gpu, run.dtype)
        return {**carried, **{k: carried[k] * multiplier for k in ULTRA_FIELDS}}

    return _fit_results(tuple(BLACKWELL_ULTRA), None if multiplier is None else overrides,
                        backend, path, holdout)


#: ``--blind`` reads each row under this prefix of its source id: a source the reader has no
#: rules, recipe tables or settings for, as a published run it has never seen would be
BLIND_PREFIX = "blind_"


def runs_of(rows: list[dict[str, str]], blind: bool = False
            ) -> tuple[list, list[tuple[str, str]]]:
    """The costable runs of ``rows`` (older releases of a repeated layout marked not counted,
    as ``trainscape validate`` marks them) and ``(case, why)`` of the rows skipped. ``blind``:
    each row read from its columns alone, its source renamed (:data:`BLIND_PREFIX`)."""
    runs, skipped, rows_runs = [], [], []
    for row in rows:
        if row["source"] not in READABLE_SOURCES or row["gpu"] not in GPUS:
            skipped.append((row["case"], f"no reader for source {row['source']!r} / gpu "
                                         f"{row['gpu']!r}"))
            continue
        if blind:
            row = dict(row, source=BLIND_PREFIX + row["source"])
        try:  # read as `validate --runs` reads a row (runs_file.read_row)
            run = read_row({**{c: "" for c in OPTIONAL}, **row}, row["case"])
        except (KeyError, ValueError) as exc:  # (RunsFileError is a ValueError)
            skipped.append((row["case"], f"not costable: {exc}"))
            continue
        runs.append(run)
        rows_runs.append((row, run))
    # as `trainscape validate` counts: of a layout repeated across releases, the newest
    P.mark_older_releases(rows_runs)
    return runs, skipped


def runner_of(runs: list) -> Runner:
    """A runner over ``runs``, as ``validate --runs`` builds one (``runs_file.hardware_steps``:
    a run measured in hardware TFLOP/s alone gets its published step)."""
    return hardware_steps(Runner(runs))


def summary_line(label: str, results: list) -> None:
    """One summary line over the counted runs: median |error|, median signed error (negative:
    the model is faster than the run) and the layouts the model calls infeasible."""
    counted = [r for r in results if r.counted]
    errs = [r.error for r in counted if r.error is not None]
    failed = sum(1 for r in counted if not r.feasible)
    if errs:
        print(f"{label:30} {len(errs):3} rows: median |error| "
              f"{100 * statistics.median(abs(e) for e in errs):.1f} %, median error "
              f"{100 * statistics.median(errs):+.1f} %, infeasible {failed}")


def memory_rows(results, path: Path = MEMORY) -> list[dict]:
    """The rows whose source printed a peak memory, beside the model's
    (:attr:`~trainscape.calibration.Result.memory_ratio`: against a caching allocator's peak
    reserved bytes, its allocations per GPU -- ``memory_gib`` less the GPU's reserve, the CUDA
    context, NCCL buffers and allocator slack that a reserved-bytes peak does not hold, or holds
    only in part). A reserved peak is at least the allocated one, so the ratio sits below 1
    where the model's allocations are right; above 1 the model holds more than the run had."""
    with open(path, newline="") as f:
        printed = {r["case"]: r for r in csv.DictReader(f)}
    out = []
    for r in results:
        p = printed.get(r.case)
        if p is None or r.memory_gib is None:
            continue
        r.published_memory_gib, r.memory_measure = float(p["peak_memory_gib"]), p["measure"]
        out.append({"case": r.case, "gpu": r.gpu, "published_peak_gib": r.published_memory_gib,
                    "measure": r.memory_measure,
                    "model_gib": r.memory_ratio * r.published_memory_gib,
                    "ratio": r.memory_ratio})
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("csv", nargs="?", default=str(DEFAULT))
    parser.add_argument("--json", action="store_true", help="print the rows as JSON")
    parser.add_argument("--backend", default="c", choices=("c", "numba", "python"))
    parser.add_argument("--blind", action="store_true",
                        help="read every row from its columns alone, as a run of a source the "
                             "reader has no rules or settings for (its source id prefixed "
                             f"{BLIND_PREFIX!r}): how the reader does on published runs "
                             "it has never seen")
    parser.add_argument("--plot", metavar="FILE",
                        help="also write the accuracy figure (.png, .svg or .pdf): predicted vs "
                             "published step time, and every row's error per source and GPU")
    args = parser.parse_args()
    if args.plot is not None:
        from trainscape.calibration.plots import plot_path_problem

        problem = plot_path_problem(args.plot)
        if problem is not None:
            parser.error(f"--plot: {problem}")
    try:
        with open(args.csv, newline="") as f:
            rows = list(csv.DictReader(f))
    except OSError as exc:
        print(f"error: {args.csv}: {exc.strerror}", file=sys.stderr)
        return 2
    runs, skipped = runs_of(rows, blind=args.blind)
    runner = runner_of(runs)
    results = [runner.cost(run, backend=args.backend) for run in runs]
    memory = memory_rows(results) if args.csv == str(DEFAULT) and not args.blind else []
    ultra = ultra_fit_cases()
    fitted = ASYNC_TP_FIT_CASES | blackwell_fit_cases() | ultra
    held_out = frozenset(run.case for parts in (BLACKWELL, tuple(BLACKWELL_ULTRA))
                         for run in _fit_runner(DEFAULT, parts)[2])
    checks = [r for r in results if r.case not in fitted]
    if args.plot is not None and checks:
        from trainscape.calibration.plots import plot_accuracy

        plot_accuracy(checks, args.plot,
                      f"trainscape transfer check: {len(checks)} published runs the fit never "
                      "saw (NeMo's H100 rows ride along as the B200 baseline)",
                      group_of=lambda r: f"{r.source} · {r.gpu}", fitted=False)
        print(f"wrote {args.plot}", file=sys.stderr)
    if args.json:
        print(json.dumps({"rows": [{**r.as_dict(), "fitted": r.case in fitted}
                                   for r in results],
                          "skipped": [{"case": c, "why": w} for c, w in skipped],
                          "memory": memory}, indent=2))
        return 0
    for r in results:
        err = "   -  " if r.error is None else f"{100 * r.error:+6.1f}%"
        fit = ("  (sets the AsyncTP constant)" if r.case in ASYNC_TP_FIT_CASES
               else "  (sets the Blackwell Ultra constant)" if r.case in ultra
               else "  (sets the Blackwell constants)" if r.case in fitted
               else "" if r.counted else "  (older release of a repeated layout: not counted)")
        print(f"{r.case:46} {r.gpu:14} {r.dtype:5} {r.status:15} {err}{fit}")
    for gpu in GPUS:
        summary_line(gpu, [r for r in checks if r.gpu == gpu])
        if gpu in BLACKWELL or gpu in BLACKWELL_ULTRA:  # a fit's hold-out: dense rows it never saw
            summary_line(f"  {gpu} dense (held out)",
                         [r for r in checks if r.gpu == gpu and r.case in held_out])
    # the fitted GPUs' rows by source: each paper or table is one stack, era and scale range
    sources = dict.fromkeys(r.source for r in checks if r.gpu in FITTED)
    for source in sources:
        summary_line(f"  {source}", [r for r in checks if r.gpu in FITTED
                                     and r.source == source])
    n_async = sum(1 for r in results if r.case in ASYNC_TP_FIT_CASES)
    n_ultra = sum(1 for r in results if r.case in ultra)
    n_blackwell = len(results) - len(checks) - n_async - n_ultra
    if n_async:
        print(f"{n_async} rows (marked) set the AsyncTP constant and are not in the summaries")
    if n_blackwell:
        print(f"{n_blackwell} rows (marked) set the Blackwell constants and are not in the "
              "summaries")
    if n_ultra:
        print(f"{n_ultra} rows (marked) set the Blackwell Ultra constant and are not in the "
              "summaries")
    for case, why in skipped:
        print(f"skipped {case}: {why}")
    if memory:
        print("peak memory printed by the source (GiB): model allocations / published peak")
        for m in memory:
            print(f"  {m['case']:52} {m['model_gib']:6.1f} / {m['published_peak_gib']:5.1f} "
                  f"({m['measure']})  {m['ratio']:.2f}")
        ratios = [m["ratio"] for m in memory]
        print(f"  {len(ratios)} rows: ratio median {statistics.median(ratios):.2f}, "
              f"range {min(ratios):.2f} - {max(ratios):.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
