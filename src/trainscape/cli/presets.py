"""``trainscape presets``: the built-in GPUs, clusters and models with their key figures."""

from __future__ import annotations

import json

import click

from .. import presets as P


@click.command("presets")
@click.argument("kind", required=False, type=click.Choice(P.KINDS))
@click.option("--json", "as_json", is_flag=True, help="Print the rows as JSON.")
def command(kind: str | None, as_json: bool) -> None:
    """List presets of KIND (gpu, cluster, model, dlrm, stack), or all kinds. Every value's
    public source is in the data files (docs/presets.md); a stack's multipliers are fitted by
    scripts/calibrate.py (docs/accuracy.md)."""
    kinds = [kind] if kind else list(P.KINDS)
    if as_json:
        click.echo(json.dumps({k: P.summary_rows(k) for k in kinds}, indent=2, default=str))
        return
    from rich.console import Console
    from rich.table import Table

    console = Console()
    for k in kinds:
        rows = P.summary_rows(k)
        table = Table(title=f"{k} presets", title_justify="left")
        for col in rows[0]:
            if col == "name":  # the id names it; the long name is in --json and the docs
                continue
            table.add_column(col, justify="left" if col == "id" else "right",
                             no_wrap=col == "id")
        for row in rows:
            table.add_row(*[_fmt(v) for c, v in row.items() if c != "name"])
        console.print(table)


def _fmt(value) -> str:
    if isinstance(value, float):
        return f"{value:.4g}"
    return str(value)
