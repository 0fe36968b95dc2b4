"""``trainscape validate``: the model against every published calibration row."""

from __future__ import annotations

import json

import click

#: accuracy targets per calibration source (median and worst absolute step-time error)
TARGET_MEDIAN = 0.05
TARGET_WORST = 0.10


@click.command("validate")
@click.option("--json", "as_json", is_flag=True, help="Print every row and the summary as JSON.")
@click.option("--markdown", is_flag=True,
              help="Print the summary and every row as Markdown tables (docs/accuracy.md).")
@click.option("--backend", type=click.Choice(["c", "numba", "python"]), default="python",
              show_default=True, help="Backend that evaluates the rows.")
def command(as_json: bool, markdown: bool, backend: str) -> None:
    """Predict every published training run in the calibration set (Megatron-LM SC'21 Table 1,
    Korthikanti et al. 2022 Table 5) and show predicted vs published step time and TFLOP/s per
    GPU, the error of every row, and the median and worst absolute error per source."""
    from ..calibration import FITTED_SOURCES, SOURCES, validate

    predictions, summary = validate(backend=backend)
    rows = [{
        "source": p.case.source,
        "row": p.case.label,
        "published_step_s": p.case.published_step_s,
        "predicted_step_s": p.step_s,
        "error": p.error,
        "published_tflops_per_gpu": p.case.published_tflops,
        "predicted_tflops_per_gpu": p.tflops,
        "config": p.config,
    } for p in predictions]
    if as_json:
        click.echo(json.dumps({"rows": rows, "summary": summary,
                               "fitted_sources": list(FITTED_SOURCES),
                               "targets": {"median_abs_error": TARGET_MEDIAN,
                                           "worst_abs_error": TARGET_WORST}}, indent=2))
        return
    if markdown:
        click.echo(markdown_tables(rows, summary))
        return
    from rich.console import Console
    from rich.table import Table

    console = Console()
    for source, (_, citation) in SOURCES.items():
        table = Table(title=citation, title_justify="left")
        for col in ("row", "published s", "predicted s", "error", "published TFLOP/s",
                    "predicted TFLOP/s", "mbs", "vpp"):
            table.add_column(col, justify="left" if col == "row" else "right")
        for r in rows:
            if r["source"] != source:
                continue
            err = r["error"]
            colour = "green" if abs(err) <= TARGET_MEDIAN else (
                "yellow" if abs(err) <= TARGET_WORST else "red")
            pub_tf = r["published_tflops_per_gpu"]
            table.add_row(r["row"], f"{r['published_step_s']:.3f}", f"{r['predicted_step_s']:.3f}",
                          f"[{colour}]{err:+.1%}[/]", "-" if pub_tf is None else f"{pub_tf:.0f}",
                          f"{r['predicted_tflops_per_gpu']:.0f}", str(r["config"]["mbs"]),
                          str(r["config"]["vpp"]))
        console.print(table)
        s = summary[source]
        if source not in FITTED_SOURCES:
            console.print(f"  out of sample (no constant fitted to it): median |error| "
                          f"{s['median_abs_error']:.2%}, worst {s['worst_abs_error']:.2%} over "
                          f"{s['rows']} rows\n")
            continue
        ok = s["median_abs_error"] <= TARGET_MEDIAN and s["worst_abs_error"] <= TARGET_WORST
        console.print(f"  median |error| {s['median_abs_error']:.2%} (target {TARGET_MEDIAN:.0%}), "
                      f"worst {s['worst_abs_error']:.2%} (target {TARGET_WORST:.0%}) over "
                      f"{s['rows']} rows: " + ("[green]within target[/]" if ok
                                               else "[red]outside target[/]") + "\n")


def markdown_tables(rows: list[dict], summary: dict) -> str:
    """The summary per source and every row, as Markdown."""
    lines = ["| source | rows | median abs error | worst abs error |", "|---|---|---|---|"]
    for source, s in summary.items():
        lines.append(f"| {source} | {s['rows']} | {s['median_abs_error']:.2%} | "
                     f"{s['worst_abs_error']:.2%} |")
    lines += ["", "| source | row | published s | predicted s | error | published TFLOP/s | "
                  "predicted TFLOP/s | mbs | vpp |", "|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        pub = r["published_tflops_per_gpu"]
        lines.append(f"| {r['source']} | {r['row']} | {r['published_step_s']:.3f} | "
                     f"{r['predicted_step_s']:.3f} | {r['error']:+.1%} | "
                     f"{'-' if pub is None else f'{pub:.0f}'} | "
                     f"{r['predicted_tflops_per_gpu']:.0f} | {r['config']['mbs']} | "
                     f"{r['config']['vpp']} |")
    return "\n".join(lines)
