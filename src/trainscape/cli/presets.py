"""``trainscape presets``: the built-in GPUs, clusters and models with their key figures, or one
preset in full with the source of every value."""

from __future__ import annotations

import json

import click

from .. import presets as P


@click.command("presets")
@click.argument("kind", required=False, type=click.Choice(P.KINDS))
@click.option("--json", "as_json", is_flag=True, help="Print the rows as JSON.")
@click.option("--show", "show", metavar="NAME",
              help="Every value of one preset of KIND and where it comes from; a GPU as the "
                   "model resolves it for --dtype and --stack (fitted constants, a donor's "
                   "transferred fit, the stack profile).")
@click.option("--dtype", type=click.Choice(P.CALIBRATED_DTYPES), default="bf16",
              show_default=True, help="With --show on a GPU: the job dtype it is resolved for.")
@click.option("--stack", type=click.Choice(P.STACKS), default=P.DEFAULT_STACK,
              show_default=True, help="With --show on a GPU: the software-stack profile.")
@click.option("--stock", is_flag=True,
              help="With --show on a GPU: the microbenchmark values, without any fit.")
def command(kind: str | None, as_json: bool, show: str | None, dtype: str, stack: str,
            stock: bool) -> None:
    """List presets of KIND (gpu, cluster, model, dlrm, stack), or all kinds; --show NAME
    prints one preset in full. Every value's public source is in the data files
    (docs/presets.md); a stack's multipliers are fitted by scripts/calibrate.py
    (docs/accuracy.md)."""
    if show is not None:
        _show(kind, show, dtype, stack, stock, as_json)
        return
    kinds = [kind] if kind else list(P.KINDS)
    if as_json:
        click.echo(json.dumps({k: P.summary_rows(k) for k in kinds}, indent=2, default=str))
        return
    from rich.table import Table

    from ..report import make_console

    console = make_console()
    for k in kinds:
        rows = P.summary_rows(k)
        cols = [c for c in rows[0] if c != "name"]  # the id names it; the long name is in --json
        widths = {c: max(len(c), *(len(_fmt(r[c])) for r in rows)) for c in cols}
        shown = _columns_that_fit(cols, widths, console.width)
        hidden = [c for c in cols if c not in shown]
        caption = (f"{len(hidden)} more columns at a wider terminal, or with --json or "
                   f"--show ID: {', '.join(hidden)}" if hidden else None)
        table = Table(title=f"{k} presets", title_justify="left", caption=caption,
                      caption_justify="left")
        for col in shown:
            table.add_column(col, justify="left" if col == "id" else "right", no_wrap=True,
                             min_width=widths[col])
        for row in rows:
            table.add_row(*[_fmt(row[c]) for c in shown])
        console.print(table)


#: a rich table's frame: "│ " before the first column, " │ " between two, " │" after the last
TABLE_EDGE_CHARS = 4
TABLE_SEPARATOR_CHARS = 3


def _columns_that_fit(cols: list[str], widths: dict[str, int], width: int) -> list[str]:
    """The leading columns whose full width fits ``width`` characters: a summary's columns come
    most telling first, so a narrow terminal keeps whole values (never "..." cells) and the
    caption names the columns left out. The id column is always kept."""
    shown: list[str] = []
    used = TABLE_EDGE_CHARS - TABLE_SEPARATOR_CHARS
    for col in cols:
        used += widths[col] + TABLE_SEPARATOR_CHARS
        if used > width and shown:
            break
        shown.append(col)
    return shown


def _show(kind: str | None, name: str, dtype: str, stack: str, stock: bool,
          as_json: bool) -> None:
    """One preset, field by field with its source (exit 2 for a missing KIND or unknown NAME)."""
    if kind is None:
        raise click.UsageError("--show needs KIND: one of " + ", ".join(P.KINDS))
    try:
        name = P.preset_id(kind, name)  # an id, or another name of one (a GPU's "NVIDIA H200")
    except P.UnknownPreset:
        raise click.BadParameter(f"{name!r} is not a {kind} preset; one of "
                                 + ", ".join(P.names(kind)), param_hint="--show") from None
    if kind == "gpu":
        table = P.resolve_gpu(name, dtype=dtype, stack=stack, calibrated=not stock)
        title = (f"{name} for {dtype} jobs on the {stack} stack profile"
                 + (" (stock, no fit)" if stock else ""))
    elif kind == "stack":
        table = P.stack_profile(name)
        title = f"{name} stack profile"
    else:
        table = P.get(kind, name)
        title = f"{kind} preset {name}"
    sources = table.pop("sources", {}) if isinstance(table.get("sources"), dict) else {}
    if as_json:
        click.echo(json.dumps({"preset": name, "kind": kind, "values": table,
                               "sources": sources}, indent=2, default=str))
        return
    from rich.markup import escape
    from rich.table import Table

    from ..report import make_console

    out = Table(title=title, title_justify="left", show_lines=False)
    out.add_column("field", no_wrap=True)
    out.add_column("value", justify="right")
    out.add_column("source", overflow="fold")
    for key, value in table.items():
        shown = json.dumps(value, default=str) if isinstance(value, (dict, list)) else _fmt(value)
        # a source names TOML tables ("calibrated.toml [gb300]"): text, not console markup
        out.add_row(key, escape(shown), escape(str(sources.get(key, ""))))
    make_console().print(out)


def _fmt(value) -> str:
    if value is None:  # a figure the preset does not have (an A100's FP8 rate)
        return "-"
    if isinstance(value, float):
        return f"{value:.4g}"
    return str(value)
