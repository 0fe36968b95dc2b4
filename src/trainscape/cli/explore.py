"""The ``sweep``, ``search`` and ``explore`` commands (the engines live in
:mod:`trainscape.explore`). Bad input prints one line on stderr and exits with code 2.
"""

from __future__ import annotations

import functools
import os
import sys

import click

from ..explore.results import OBJECTIVE_ALIASES, OBJECTIVES
from . import options as O
from . import InputError

_OBJ_HELP = "Objective: " + ", ".join([*OBJECTIVES, *OBJECTIVE_ALIASES]) + "."


def _one_line_errors(fn):
    """ScenarioError (and our own ValueErrors at the edge) -> one line, exit 2; a sweep chunk
    the Dask cluster could not finish -> one line, exit 1 (the checkpoint keeps the rest)."""

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        from ..explore.distributed import DistributedSweepError
        from ..spec.errors import ScenarioError

        try:
            return fn(*args, **kwargs)
        except ScenarioError as exc:
            raise InputError(str(exc)) from None
        except DistributedSweepError as exc:
            raise click.ClickException(str(exc)) from None

    return wrapper


def _load(path: str | None, overrides):
    from ..api import load

    if path is None:
        from ..explore.main import DEFAULT_SCENARIO

        return load(DEFAULT_SCENARIO, overrides)
    return load(path, overrides)


def _console():
    from ..report import make_console

    return make_console()


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
_dask_option = click.option(
    "--dask", "dask", metavar="ADDRESS", default=None,
    help="Run on a Dask cluster: a scheduler address (tcp://host:8786), or 'local' for a "
         "LocalCluster on this machine (needs: pip install 'trainscape[dask]').")


def _prepare(scenario: str | None, overrides, top: int, out: str | None = None,
             hardware_note: bool = True):
    """What every command checks and builds first: ``--top``, the ``--out`` path, the
    scenario and its non-empty design space. Returns ``(scenario, space)``."""
    from ..space import design_space
    from ..explore.report import check_out_path

    _check_top(top)
    if out:
        check_out_path(out)
    sc = _load(scenario, overrides)
    space = design_space(sc)
    space.check_nonempty()
    if hardware_note:
        from ..explore.hardware import hardware_note as note

        text = note(sc)
        if text:
            click.echo(text, err=True)
    return sc, space


def _check_top(top: int) -> None:
    from ..spec.errors import ScenarioError

    if top < 1:
        raise ScenarioError.at("--top", "must be a positive integer", top, ">= 1")


def _require_dask(dask) -> None:
    """``--dask`` without Dask installed: a ScenarioError saying how to install it (exit 2)."""
    if dask:
        from ..explore.distributed import require_dask

        require_dask()


def _check_feasible(res, scenario) -> None:
    """A space with valid configurations none of which fits: a one-line error (exit 2)."""
    from ..spec.errors import ScenarioError
    from ..explore.report import hbm_gib

    if res.feasible == 0 and res.complete:
        reason = res.no_feasible_reason(hbm_gib(scenario))
        if res.backend in ("evolve", "beam", "evolve+beam"):
            reason += f" (among the {res.evaluated:,} configurations searched)"
        raise ScenarioError.at("space", reason, None, show_got=False)


def _emit(res, scenario, out, as_json, console, extra_lines=()):
    from ..explore.report import (
        hardware_columns,
        headline,
        print_result,
        result_summary,
        with_hardware,
        write_records,
    )

    _check_feasible(res, scenario)
    if out:
        write_records(with_hardware(res.top.records("top") + res.front.records("pareto"),
                                    hardware_columns(scenario)), out)
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


#: Spaces above this size get a note on the sweep's duration and the alternatives.
SWEEP_HINT_SIZE = 10**9
#: Configurations per second per core of the C sweep kernel, for that note only
#: (bench/throughput.py measures 10-30 M/s on the bench scenarios).
SWEEP_RATE_PER_CORE = 1e7


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
              help="Worker threads (default: every core; with --dask: kernel threads per "
                   "chunk, default 1).")
@click.option("--progress/--no-progress", default=None,
              help="Progress bar on stderr (default: when stderr is a terminal).")
@_set_option
@_json_option
@_dask_option
@_one_line_errors
def sweep(scenario, top, objective, out, resume, checkpoint, backend, threads, progress,
          overrides, as_json, dask):
    """Evaluate every configuration of SCENARIO's design space; keep the top-K, the Pareto
    front (step time vs memory per GPU) and the best per placement order. With --dask, chunks
    of the space run on a Dask cluster's workers (--threads: kernel threads per chunk)."""
    from ..explore.results import SweepInterrupted, default_checkpoint, fingerprint, objective_column
    from ..explore.sweep import run_sweep

    _require_dask(dask)
    sc, space = _prepare(scenario, overrides, top, out)
    col = objective_column(objective)[0]
    console = _console()
    if not as_json:
        console.print(f"space: {space.describe()}", soft_wrap=True)
        if space.size > SWEEP_HINT_SIZE:
            cores = threads or os.cpu_count() or 1
            minutes = space.size / (SWEEP_RATE_PER_CORE * cores) / 60
            rate = SWEEP_RATE_PER_CORE / 1e6
            console.print(f"note: sweeping {space.size:,} configurations takes about "
                          f"{minutes:,.0f} min on {cores} core(s) at ~{rate:.0f} M/s each (the "
                          "bar shows the real rate; Ctrl-C leaves a checkpoint for --resume); "
                          "`trainscape search` or `explore` samples the space instead",
                          soft_wrap=True)
    show = sys.stderr.isatty() if progress is None else progress
    try:
        if dask:
            from ..explore.distributed import run_cli_sweep

            res = run_cli_sweep(dask, sc, space=space, top=top, objective=objective,
                                backend=backend, threads=threads, checkpoint=checkpoint,
                                resume=resume, progress=show)
        else:
            ck = checkpoint or default_checkpoint(fingerprint(sc, space, col, top))
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
@_dask_option
@_one_line_errors
def search(scenario, method, budget, seed, width, multi, top, objective, out, overrides,
           as_json, dask):
    """Search SCENARIO's design space without enumerating it (evolve or beam)."""
    from ..explore.search import run_search

    _require_dask(dask)
    sc, space = _prepare(scenario, overrides, top, out)
    console = _console()
    if not as_json:
        console.print(f"space: {space.describe()}", soft_wrap=True)
    kw = dict(space=space, budget=budget, seed=seed, top=top, objective=objective)
    if method == "beam":
        kw["width"] = width
    else:
        kw["multi"] = multi
    if dask:
        from ..explore.distributed import run_cli_search

        res = run_cli_search(dask, sc, method, **kw)
    else:
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
@click.option("--sensitivity/--no-sensitivity", default=None,
              help="Sensitivity grid of the outermost tier's bandwidth x latency (>= 2 tiers; "
                   "default: when it fits the time budget).")
@_top_option
@_obj_option
@_set_option
@_dask_option
@_one_line_errors
def explore(scenario, out_dir, time_budget, seed, sensitivity, top, objective, overrides, dask):
    """Find the best ways to lay out SCENARIO's training job (default: a built-in Llama-3
    405B scenario on 16K GPUs in two buildings) and write a report with plots."""
    from pathlib import Path

    from ..explore.main import default_report_dir, run_explore
    from ..explore.report import headline, print_result, write_report

    _require_dask(dask)
    sc, space = _prepare(scenario, overrides, top, hardware_note=False)
    console = _console()
    from ..explore.hardware import explore_codesign
    from ..explore.hardware_axes import hardware_axes

    if hardware_axes(sc):  # co-design: hardware points x layouts
        return explore_codesign(sc, console, out_dir, time_budget_s=time_budget, top=top,
                                objective=objective, seed=seed)
    if scenario is None:
        console.print(f"no scenario given: exploring the built-in one ({sc.name})", soft_wrap=True)
    console.print(f"space: {space.describe()}", soft_wrap=True)
    kw = dict(time_budget_s=time_budget, top=top, objective=objective, seed=seed,
              progress=sys.stderr.isatty())
    if dask:
        from ..explore.distributed import run_cli_explore

        res = run_cli_explore(sc, dask=dask, **kw)
    else:
        res = run_explore(sc, **kw)
    _check_feasible(res, sc)
    console.print(headline(res), soft_wrap=True)
    print_result(res, console, sc)
    d = Path(out_dir) if out_dir else default_report_dir(sc)
    paths = write_report(res, d, sc)
    from ..explore.sensitivity import explore_sensitivity

    paths.update(explore_sensitivity(sc, d, console, sensitivity, time_budget))
    console.print(f"report written to {d}/", soft_wrap=True)
    for what, p in paths.items():
        console.print(f"  {what:15s} {p}", soft_wrap=True)

