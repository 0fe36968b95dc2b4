"""``trainscape validate``: the model against every published calibration row, or against the
rows of a user's own files of published runs (``--runs``)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import click

from . import options as O

#: accuracy targets per calibration source (median and worst absolute step-time error)
TARGET_MEDIAN = 0.05
TARGET_WORST = 0.10


def within_target(s: dict) -> bool:
    """A source meets the target when every counted layout is feasible and its median and
    worst |error| are within bounds."""
    return (s["failed"] == 0 and s["median_abs_error"] is not None
            and s["median_abs_error"] <= TARGET_MEDIAN and s["worst_abs_error"] <= TARGET_WORST)


@click.command("validate")
@click.option("--json", "as_json", is_flag=True, help="Print every row and the summary as JSON.")
@click.option("--markdown", is_flag=True,
              help="Print the summary and every row as Markdown tables (docs/accuracy.md).")
@click.option("--rows", "show_rows", is_flag=True,
              help="Also print every row (default: the summary and the failed rows).")
@click.option("--source", "sources", multiple=True, metavar="GROUP",
              help="Only rows of this summary group (repeatable), e.g. llm_foundry_mpt.")
@click.option("--runs", "runs_paths", multiple=True, metavar="PATH",
              type=O.Path(exists=False, path_type=str),
              help="Cost the published runs of this CSV file, or of every *.csv in this "
                   "directory that is in the layout (others are skipped and named on stderr), "
                   "instead of the shipped calibration set (repeatable). Columns: the "
                   "calibration set's layout (docs/validate-runs.md).")
@click.option("--keep-going", is_flag=True,
              help="With --runs: cost every row that can be read and list the others (on "
                   "stderr, and as unreadable_rows with --json) instead of refusing the file "
                   "at the first row that is not what the layout allows (exit 2 only when no "
                   "row can be read).")
@click.option("--backend", type=click.Choice(["c", "numba", "python"]), default="python",
              show_default=True, help="Backend that evaluates the rows.")
@click.option("--progress/--no-progress", default=None,
              help="Progress bar on stderr (default: on a terminal, never with --json).")
@click.option("--plot", "plot_path", type=O.Path(dir_okay=False), default=None,
              metavar="FILE",
              help="Also write the accuracy figure (.png, .svg or .pdf): predicted vs "
                   "published step time, and every row's error per source.")
def command(as_json: bool, markdown: bool, show_rows: bool, sources: tuple[str, ...],
            runs_paths: tuple[str, ...], keep_going: bool, backend: str, progress: bool | None,
            plot_path: str | None) -> None:
    """Predict every published training run in the calibration set (Megatron-LM, NeMo and
    DGX Cloud benchmarks, Megatron-Core, MosaicML FSDP, BLOOM, Llama 3; A100 and H100; BF16 and
    FP8) with each run's own layout, and show predicted vs published step time, the error of
    every row, what was assumed where the source is silent, and the median and worst absolute
    error per source. Rows of older releases that a newer release repeats are shown but not
    counted; a published layout the model calls infeasible is a failed row. With --runs, the
    same for the runs of your own CSV files (the calibration set's columns)."""
    from .. import progress as P
    from ..calibration import summarize, validate, validate_runner
    from ..calibration.plots import plot_path_problem

    problem = None if plot_path is None else plot_path_problem(plot_path)
    if problem is not None:
        raise click.BadParameter(problem + ".", param_hint="'--plot'")
    if keep_going and not runs_paths:
        raise click.UsageError("--keep-going reads the rows of --runs files; give --runs")
    runner = None
    skipped_files: list[tuple[str, str]] = []
    unreadable: list[str] | None = [] if keep_going else None
    if runs_paths:
        from ..calibration.runs_file import RunsFileError, runner_for

        try:
            runner = runner_for(list(runs_paths), skipped_files, unreadable)
        except RunsFileError as exc:
            raise click.BadParameter(str(exc), param_hint="'--runs'") from None
        for path, why in skipped_files:
            click.echo(f"validate: skipped {path}: {why}", err=True)
        for message in unreadable or []:
            click.echo(f"validate: unreadable row (--keep-going): {message}", err=True)
    seen = [0, 0]

    def count(done: int, total: int) -> None:
        seen[:] = [done, total]
        bar(done, total)

    try:
        with P.Bar(P.wanted(as_json, progress), "validate", "rows") as bar:
            if runner is None:
                results, summary = validate(backend=backend, progress=count)
            else:
                results, summary = validate_runner(runner, backend=backend, progress=count)
    except KeyboardInterrupt:
        click.echo(f"validate: interrupted after {seen[0]} of {seen[1]} rows (nothing written)",
                   err=True)
        sys.exit(130)
    if sources:
        known = set(summary)
        unknown = [s for s in sources if s not in known]
        if unknown:
            raise click.UsageError(f"--source {unknown[0]!r}: not a summary group; allowed: "
                                   + ", ".join(sorted(known)))
        results = [r for r in results if r.group in sources]
        summary = summarize(results)
    rows = [r.as_dict() for r in results]
    for group, s in summary.items():
        s["within_target"] = within_target(s)
    if plot_path:
        write_plot(results, plot_path)
    if as_json:
        report = {"rows": rows, "summary": summary,
                  "targets": {"median_abs_error": TARGET_MEDIAN, "worst_abs_error": TARGET_WORST}}
        if runs_paths:
            report["skipped_files"] = [{"file": f, "why": w} for f, w in skipped_files]
        if unreadable is not None:
            report["unreadable_rows"] = list(unreadable)
        click.echo(json.dumps(report, indent=2, allow_nan=False, default=float))
        return
    if markdown:
        click.echo(markdown_tables(rows, summary))
        return
    from rich.table import Table

    from ..report import make_console

    console = make_console()
    if show_rows:
        table = row_table(rows, "Every published run")
        console.print(table)
    failed = [r for r in rows if r["counted"] and not r["feasible"]]
    if failed and not show_rows:
        console.print(row_table(failed, "Failed rows: published layouts the model calls "
                                        "invalid or out of memory"))
    table = Table(title="Per source: step-time error e over the counted rows (cnt; older "
                        "releases of a repeated layout are not counted), failed = infeasible "
                        "published layouts", title_justify="left")
    for col in ("source", "rows", "cnt", "fail", "med |e|", "max |e|", "med e", "target"):
        table.add_column(col, justify="left" if col == "source" else "right", overflow="fold")
    for group, s in summary.items():
        def pct(v):
            return "-" if v is None else f"{v:.1%}"

        ok = s["within_target"]
        table.add_row(group, str(s["rows"]), str(s["counted"]), str(s["failed"]),
                      pct(s["median_abs_error"]), pct(s["worst_abs_error"]),
                      "-" if s["median_error"] is None else f"{s['median_error']:+.1%}",
                      "[green]met[/]" if ok else "[red]missed[/]")
    console.print(table)
    console.print(f"targets: median |error| <= {TARGET_MEDIAN:.0%}, worst <= {TARGET_WORST:.0%}, "
                  "every counted layout feasible. error = predicted / published step time - 1 "
                  "(negative: the model is optimistic).")
    memory = [r for r in rows if r["memory_ratio"] is not None]
    if memory:
        console.print(memory_table(memory))
    if unreadable:
        console.print(f"[yellow]{len(unreadable)} row(s) could not be read and are not in the "
                      "report (--keep-going; each listed on stderr)[/]")


def memory_table(rows: list[dict]):
    """The rows that state a peak memory: the model's figure against it (allocations against
    an allocator's peak, the whole footprint against a device's), and the ratios' median."""
    import statistics

    from rich.table import Table

    ratios = [r["memory_ratio"] for r in rows]
    table = Table(title="Memory per GPU against the published peak (model / published; a "
                        "caching allocator's reserved peak is at least its allocations, so "
                        "below 1 is expected there)", title_justify="left",
                  caption=f"{len(rows)} rows: ratio median {statistics.median(ratios):.2f}, "
                          f"range {min(ratios):.2f} - {max(ratios):.2f}", caption_justify="left")
    for col in ("source", "case", "measure", "published GiB", "model GiB", "ratio"):
        table.add_column(col, justify="right" if col in ("published GiB", "model GiB", "ratio")
                         else "left", overflow="fold")
    for r in rows:
        published = r["published_memory_gib"]
        table.add_row(r["group"], r["case"], r["memory_measure"] or "-", f"{published:.1f}",
                      f"{r['memory_ratio'] * published:.1f}", f"{r['memory_ratio']:.2f}")
    return table


def write_plot(results: list, path: str) -> None:
    """The accuracy figure of ``results`` (:func:`trainscape.calibration.plots.plot_accuracy`),
    announced on stderr (stdout stays the report, or the JSON)."""
    from ..calibration.plots import plot_accuracy

    groups = len({r.group for r in results})
    try:
        plot_accuracy(results, path, f"trainscape validate: {len(results)} published runs, "
                                  f"{groups} sources (targets: median |error| <= "
                                  f"{TARGET_MEDIAN:.0%}, worst <= {TARGET_WORST:.0%})",
                      median_target=100 * TARGET_MEDIAN, worst_target=100 * TARGET_WORST)
    except OSError as exc:
        raise click.BadParameter(f"{path!r}: {exc.strerror or exc}", param_hint="'--plot'")
    click.echo(f"wrote {Path(path)}", err=True)


def _fmt_err(r: dict) -> str:
    return "-" if r["error_pct"] is None else f"{r['error_pct']:+.1f}%"


def row_table(rows: list[dict], title: str):
    # every column folds on a narrow terminal: a case name or status cut to "..." would hide
    # which run it is
    from rich.table import Table

    table = Table(title=title, title_justify="left")
    for col in ("source", "case", "published s", "predicted s", "error", "status", "counted",
                "assumed"):
        table.add_column(col, justify="right" if col in ("published s", "predicted s", "error")
                         else "left", overflow="fold")
    for r in rows:
        err = r["error_pct"]
        colour = "red" if err is None or abs(err) > 100 * TARGET_WORST else (
            "yellow" if abs(err) > 100 * TARGET_MEDIAN else "green")
        pred = "-" if r["predicted_step_s"] is None else f"{r['predicted_step_s']:.3f}"
        status = r["status"] + (f" ({r['reason']})" if r["reason"] else "")
        table.add_row(r["group"], r["case"], f"{r['published_step_s']:.3f}", pred,
                      f"[{colour}]{_fmt_err(r)}[/]", status, "yes" if r["counted"] else "no",
                      str(len(r["assumptions"])))
    return table


def markdown_tables(rows: list[dict], summary: dict) -> str:
    """The summary per source and every row, as Markdown."""
    def pct(v):
        return "-" if v is None else f"{v:.1%}"

    lines = ["| source | rows | counted | failed | median \\|error\\| | worst \\|error\\| | "
             "median error | target |", "|---|---|---|---|---|---|---|---|"]
    for source, s in summary.items():
        signed = "-" if s["median_error"] is None else f"{s['median_error']:+.1%}"
        lines.append(f"| {source} | {s['rows']} | {s['counted']} | {s['failed']} | "
                     f"{pct(s['median_abs_error'])} | {pct(s['worst_abs_error'])} | {signed} | "
                     f"{'met' if within_target(s) else 'missed'} |")
    lines += ["", "| source | case | dtype | published s | predicted s | error | status | "
                  "counted | hold-out | assumptions |",
              "|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        pred = "-" if r["predicted_step_s"] is None else f"{r['predicted_step_s']:.3f}"
        status = r["status"] + (f": {r['reason']}" if r["reason"] else "")
        notes = "; ".join(r["assumptions"]).replace("|", "/")
        lines.append(f"| {r['group']} | {r['case']} | {r['dtype']} | "
                     f"{r['published_step_s']:.3f} | {pred} | {_fmt_err(r)} | {status} | "
                     f"{'yes' if r['counted'] else 'no'} | {'yes' if r['holdout'] else 'no'} | "
                     f"{notes} |")
    return "\n".join(lines)
