"""The ``sweep``, ``search`` and ``explore`` commands.

``register(group)`` adds the three to a click group; each is also importable on its own
(``sweep``, ``search``, ``explore``), e.g. for ``trainscape.commands.<name>`` modules doing
``from ..explore.cli import sweep as command``. Bad input prints one line on stderr and exits
with code 2.
"""

from __future__ import annotations

import functools
import json
import sys

import click

from ..spec import options as O
from .sweep import OBJECTIVE_ALIASES, OBJECTIVES

EXIT_BAD_INPUT = 2
_OBJ_HELP = "Objective: " + ", ".join([*OBJECTIVES, *OBJECTIVE_ALIASES]) + "."


class _BadInput(click.ClickException):
    exit_code = EXIT_BAD_INPUT


def _one_line_errors(fn):
    """ScenarioError (and our own ValueErrors at the edge) -> one line, exit 2."""

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        from ..spec.errors import ScenarioError

        try:
            return fn(*args, **kwargs)
        except ScenarioError as exc:
            raise _BadInput(str(exc)) from None

    return wrapper


def _load(path: str | None, overrides):
    from ..api import load

    if path is None:
        from .main import DEFAULT_SCENARIO

        return load(DEFAULT_SCENARIO, overrides)
    return load(path, overrides)


def _console():
    from rich.console import Console

    return Console()


_set_option = click.option(
    "--set", "overrides", multiple=True, metavar="PATH=VALUE",
    help="Override a scenario field, e.g. --set cluster.tiers[2].bandwidth_GBps=100 "
         "(repeatable).")
_top_option = click.option("--top", "top", type=O.TOP, default=10, show_default=True,
                           help="How many best configurations to keep (K).")
_obj_option = click.option("--objective", default="step_time_s", show_default=True,
                           help=_OBJ_HELP)
_out_option = click.option("--out", "out", type=O.Path(dir_okay=False), default=None,
                           help="Write the top-K and the Pareto front to FILE "
                                "(.parquet, .csv or .json).")
_json_option = click.option("--json", "as_json", is_flag=True,
                            help="Print the result as JSON on stdout.")


def _prepare(scenario: str | None, overrides, top: int, out: str | None = None):
    """What every command checks and builds first: ``--top``, the ``--out`` path, the
    scenario and its non-empty design space. Returns ``(scenario, space)``."""
    from ..space import design_space
    from .report import check_out_path

    _check_top(top)
    if out:
        check_out_path(out)
    sc = _load(scenario, overrides)
    space = design_space(sc)
    space.check_nonempty()
    return sc, space


def _check_top(top: int) -> None:
    from ..spec.errors import ScenarioError

    if top < 1:
        raise ScenarioError.at("--top", "must be a positive integer", top, ">= 1")


def _check_feasible(res, scenario) -> None:
    """A space with valid configurations none of which fits: a one-line error (exit 2)."""
    from ..spec.errors import ScenarioError
    from .report import hbm_gib

    if res.feasible == 0 and res.complete:
        reason = res.no_feasible_reason(hbm_gib(scenario))
        if res.backend in ("evolve", "beam", "evolve+beam"):
            reason += f" (among the {res.evaluated:,} configurations searched)"
        raise ScenarioError.at("space", reason, None, show_got=False)


def _emit(res, scenario, out, as_json, console, extra_lines=()):
    from .report import headline, print_result, result_summary, write_records

    _check_feasible(res, scenario)
    if out:
        write_records(res.top.records("top") + res.front.records("pareto"), out)
    if as_json:
        from ..jsonsafe import dumps

        click.echo(dumps(result_summary(res, scenario), default=str, indent=1))
        return
    console.print(headline(res), soft_wrap=True)
    print_result(res, console, scenario)
    for line in extra_lines:
        console.print(line, soft_wrap=True)
    if out:
        console.print(f"results written to {out}", soft_wrap=True)


@click.command("sweep")
@click.argument("scenario", type=O.Path(dir_okay=False))
@_top_option
@_obj_option
@_out_option
@click.option("--resume", is_flag=True,
              help="Continue an interrupted sweep from its checkpoint.")
@click.option("--checkpoint", type=O.Path(dir_okay=False), default=None,
              help="Checkpoint file (default: .trainscape/sweep-<id>.npz).")
@click.option("--backend", type=click.Choice(["c", "numba", "python"]), default=None,
              help="Sweep kernel (default: C when built, else numba).")
@click.option("--threads", type=O.THREADS, default=None,
              help="Worker threads (default: every core).")
@click.option("--progress/--no-progress", default=None,
              help="Progress bar on stderr (default: when stderr is a terminal).")
@_set_option
@_json_option
@_one_line_errors
def sweep(scenario, top, objective, out, resume, checkpoint, backend, threads, progress,
          overrides, as_json):
    """Evaluate every configuration of SCENARIO's design space; keep the top-K, the Pareto
    front (step time vs memory per GPU) and the best per placement order."""
    from .sweep import SweepInterrupted, default_checkpoint, fingerprint, objective_column
    from .sweep import run_sweep

    sc, space = _prepare(scenario, overrides, top, out)
    col = objective_column(objective)[0]
    ck = checkpoint or default_checkpoint(fingerprint(sc, space, col, top))
    console = _console()
    if not as_json:
        console.print(f"space: {space.describe()}", soft_wrap=True)
    show = sys.stderr.isatty() if progress is None else progress
    try:
        res = run_sweep(sc, space=space, top=top, objective=objective, backend=backend,
                        workers=threads, checkpoint=ck, resume=resume, progress=show)
    except SweepInterrupted as exc:
        click.echo(str(exc), err=True)
        sys.exit(130)
    _emit(res, sc, out, as_json, console)


@click.command("search")
@click.argument("scenario", type=O.Path(dir_okay=False))
@click.option("--method", type=click.Choice(["evolve", "beam"]), default="evolve",
              show_default=True, help="Evolutionary search or beam search.")
@click.option("--budget", type=O.BUDGET, default=None,
              help="Distinct configurations to evaluate (default: 1% of the space, "
                   "200..20,000).")
@click.option("--seed", type=O.SEED, default=0, show_default=True, help="Random seed.")
@click.option("--width", type=O.WIDTH, default=8, show_default=True,
              help="Beam width: at most this many partial configurations go on from a "
                   "level (beam only).")
@click.option("--multi-objective", "multi", is_flag=True,
              help="NSGA-II on step time and memory (evolve only).")
@_top_option
@_obj_option
@_out_option
@_set_option
@_json_option
@_one_line_errors
def search(scenario, method, budget, seed, width, multi, top, objective, out, overrides,
           as_json):
    """Search SCENARIO's design space without enumerating it (evolve or beam)."""
    from .search import run_search

    sc, space = _prepare(scenario, overrides, top, out)
    console = _console()
    if not as_json:
        console.print(f"space: {space.describe()}", soft_wrap=True)
    kw = dict(space=space, budget=budget, seed=seed, top=top, objective=objective)
    if method == "beam":
        kw["width"] = width
    else:
        kw["multi"] = multi
    res = run_search(sc, method, **kw)
    _emit(res, sc, out, as_json, console)


@click.command("explore")
@click.argument("scenario", type=O.Path(dir_okay=False), required=False)
@click.option("--out-dir", type=O.Path(file_okay=False), default=None,
              help="Report folder (default: trainscape-report/<scenario>).")
@click.option("--time-budget", type=O.TIME_BUDGET, default=20.0,
              show_default=True,
              help="Seconds a full sweep may take; larger spaces are searched instead.")
@click.option("--seed", type=O.SEED, default=0, show_default=True)
@_top_option
@_obj_option
@_set_option
@_one_line_errors
def explore(scenario, out_dir, time_budget, seed, top, objective, overrides):
    """Find the best ways to lay out SCENARIO's training job (default: a built-in Llama-3
    405B scenario on 16K GPUs in two buildings) and write a report with plots."""
    from pathlib import Path

    from .main import default_report_dir, run_explore
    from .report import headline, print_result, write_report

    sc, space = _prepare(scenario, overrides, top)
    console = _console()
    if scenario is None:
        console.print(f"no scenario given: exploring the built-in one ({sc.name})", soft_wrap=True)
    console.print(f"space: {space.describe()}", soft_wrap=True)
    res = run_explore(sc, time_budget_s=time_budget, top=top, objective=objective, seed=seed,
                      progress=sys.stderr.isatty())
    _check_feasible(res, sc)
    console.print(headline(res), soft_wrap=True)
    print_result(res, console, sc)
    d = Path(out_dir) if out_dir else default_report_dir(sc)
    paths = write_report(res, d, sc)
    console.print(f"report written to {d}/", soft_wrap=True)
    for what, p in paths.items():
        console.print(f"  {what:15s} {p}", soft_wrap=True)


def register(group: click.Group) -> None:
    """Add ``sweep``, ``search`` and ``explore`` to a click group."""
    for cmd in (sweep, search, explore):
        group.add_command(cmd)
