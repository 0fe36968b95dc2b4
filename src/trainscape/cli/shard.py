"""``trainscape shard SCENARIO``: plan the embedding sharding of a DLRM scenario.

The lead wires it in with :func:`register` (``register(main_group)``)."""

from __future__ import annotations

import json
import math

import click
import numpy as np

from . import options as O
from ..spec.errors import ScenarioError
from ..dlrm import layout as D


class _BadInput(click.ClickException):
    exit_code = 2


def _report(sc, res) -> dict:
    from ..dlrm.spec import plan_entries

    r = res.result
    return {
        "scenario": sc.name,
        "method": res.method,
        "world": sc.world,
        "tables": sc.n_tables,
        "status": r["status"],
        "feasible": r["feasible"],
        "step_time_s": r["step_time_s"],
        "samples_per_s": r["samples_per_s"],
        "lower_bound_s": res.lower_bound_s,
        # no bound when no plan fits (lower bound infinite): null in JSON, not -1
        "gap_to_lower_bound": (r["step_time_s"] / res.lower_bound_s - 1.0
                               if 0 < res.lower_bound_s < math.inf else math.nan),
        "greedy_baselines_s": res.baselines,
        "breakdown": {f: r[f] for f in D.DBREAKDOWN_FIELDS},
        "dense_allreduce_s": r["dense_allreduce_s"],
        "hbm_max_gib": r["hbm_max_gib"],
        "ddr_max_gib": r["ddr_max_gib"],
        "critical_rank": int(r["critical_rank"]),
        "planning_s": res.elapsed_s,
        "evaluations": res.evaluations,
        "moves_scored": res.moves_scored,
        "time_limited": res.time_limited,
        "per_rank": {k: [float(x) for x in v] for k, v in r["per_rank"].items()
                     if k in ("lookup_fwd_s", "lookup_bwd_s", "a2a_s", "hbm_bytes",
                              "ddr_bytes")},
        "plan": plan_entries(sc, res.plan),
    }


#: plan rows the text report prints (a 10^4-table plan takes rich seconds to draw and no
#: person reads it on a terminal; --json / --out carry every table)
PLAN_ROWS = 200


def _print_text(rep: dict) -> None:
    from rich.table import Table

    from ..report import make_console

    con = make_console()
    con.print(f"[bold]{rep['scenario']}[/bold]: {rep['tables']} tables on {rep['world']} ranks,"
              f" method {rep['method']}")
    bound = (f"lower bound {rep['lower_bound_s'] * 1e3:.4f} ms  (gap "
             f"{100 * rep['gap_to_lower_bound']:.1f}%)"
             if math.isfinite(rep["gap_to_lower_bound"]) else "no lower bound (no plan fits)")
    con.print(f"step {rep['step_time_s'] * 1e3:.4f} ms  ({rep['samples_per_s']:.4g} samples/s)"
              f"  {bound}  status {rep['status']}")
    con.print("greedy baselines: " + ", ".join(
        f"{k} {v * 1e3:.4f} ms" if math.isfinite(v) else f"{k} infeasible"
        for k, v in rep["greedy_baselines_s"].items()))
    bd = Table(title="breakdown (sums to the step)")
    bd.add_column("term")
    bd.add_column("ms", justify="right")
    for k, v in rep["breakdown"].items():
        bd.add_row(k, f"{v * 1e3:.4f}")
    con.print(bd)
    hbm = np.array(rep["per_rank"]["hbm_bytes"]) / 2**30
    load = (np.array(rep["per_rank"]["lookup_fwd_s"]) + np.array(rep["per_rank"]["lookup_bwd_s"])
            + np.array(rep["per_rank"]["a2a_s"])) * 1e3
    con.print(f"per-rank load ms: min {load.min():.4f} mean {load.mean():.4f} max "
              f"{load.max():.4f}; HBM GiB: max {hbm.max():.2f}; DDR GiB max "
              f"{rep['ddr_max_gib']:.2f}")
    shown = rep["plan"] if len(rep["plan"]) <= PLAN_ROWS else rep["plan"][:PLAN_ROWS]
    pt = Table(title="plan" if shown is rep["plan"] else
               f"plan (first {PLAN_ROWS} of {len(rep['plan'])} tables; --json or --out for all)")
    for c in ("table", "type", "shards", "ranks", "tier"):
        pt.add_column(c)
    for e in shown:
        ranks = e["ranks"] if isinstance(e["ranks"], str) else (
            ",".join(map(str, e["ranks"][:8])) + (" ..." if len(e["ranks"]) > 8 else ""))
        pt.add_row(e["table"], e["type"], str(e["shards"]), ranks, e["tier"])
    con.print(pt)
    if shown is not rep["plan"]:
        from collections import Counter

        kinds = Counter((e["type"], e["tier"]) for e in rep["plan"])
        con.print("all tables: " + ", ".join(f"{n} {t} ({tier})" for (t, tier), n in
                                              sorted(kinds.items(), key=lambda x: -x[1])))


def _on_terminal() -> bool:
    """Progress only for a person: stdout and stderr both a terminal (not piped)."""
    import sys

    try:
        return sys.stdout.isatty() and sys.stderr.isatty()
    except (AttributeError, ValueError):
        return False


class _PlanProgress:
    """A rich progress line on stderr while ``shard`` plans: the phase, the candidates
    evaluated, and a bar of the time spent against the time limit (the planner reports
    between its steps; rich redraws the clock meanwhile). Off (a no-op) unless ``show``."""

    def __init__(self, show: bool, limit: float, method: str, sc):
        import time

        self.show, self.limit, self.phase = show, float(limit), "start"
        self.t0 = time.perf_counter()
        self._p = None
        self._desc = f"shard {method} ({sc.n_tables}x{sc.world})"

    def elapsed(self) -> float:
        import time

        return time.perf_counter() - self.t0

    def __enter__(self):
        if self.show:
            from rich.console import Console
            from rich.progress import Progress, ProgressColumn, TextColumn
            from rich.progress_bar import ProgressBar
            from rich.text import Text

            limit = self.limit

            class _TimeBar(ProgressColumn):
                def render(self, task):
                    done = min(1.0, (task.elapsed or 0.0) / limit)
                    return ProgressBar(total=1.0, completed=done, width=20)

            class _Clock(ProgressColumn):
                def render(self, task):
                    return Text(f"{task.elapsed or 0.0:5.1f} / {limit:g} s")

            self._p = Progress(TextColumn("{task.description}"),
                               TextColumn("[cyan]{task.fields[phase]:<9}"),
                               TextColumn("{task.fields[cands]:>11,} cand."),
                               _TimeBar(), _Clock(), console=Console(stderr=True),
                               transient=True, refresh_per_second=4)
            self._p.start()
            self._task = self._p.add_task(self._desc, total=None, phase="start", cands=0)
        return self

    def update(self, phase: str, candidates: int) -> None:
        self.phase = phase
        if self._p is not None:
            self._p.update(self._task, phase=phase, cands=int(candidates))

    def stop(self) -> None:
        if self._p is not None:
            self._p.stop()
            self._p = None

    def __exit__(self, *exc):
        self.stop()
        return False


@click.command("shard")
@click.argument("scenario", type=O.Path(dir_okay=False))
@click.option("--method", type=click.Choice(["greedy", "beam", "evolve"]), default=None,
              help="planner (default: the scenario's [planner] method, else evolve)")
@click.option("--json", "as_json", is_flag=True, help="print the report as JSON")
@click.option("--out", "out_path", type=O.Path(dir_okay=False), default=None,
              help="also write the JSON report to this file")
@click.option("--plot", "plot_path", type=O.Path(dir_okay=False), default=None,
              help="write a per-rank load plot (PNG)")
@click.option("--backend", type=click.Choice(["c", "numba", "python"]), default=None)
@click.option("--iterations", type=O.ITERATIONS, default=None, help="evolutionary moves to score")
@click.option("--beam-width", type=O.WIDTH, default=None)
@click.option("--seed", type=O.SEED, default=None)
@click.option("--time-limit", "time_limit", type=O.TIME_LIMIT, default=None,
              help="seconds of planning (default: the scenario's [planner] time_limit_s)")
@click.option("--format", "fmt", type=click.Choice(["text", "json", "torchrec"]), default=None,
              help="output: text (default), json (the report), torchrec (the plan as a "
                   "TorchRec ShardingPlan document; --out writes it)")
@click.option("--from-torchrec", "from_torchrec", type=click.Path(dir_okay=False),
              default=None, help="cost this TorchRec plan document instead of planning")
@click.option("--wait-compile", is_flag=True,
              help="on a cold numba cache, compile evolve's kernels now instead of answering "
                   "with the C beam planner meanwhile")
def shard(scenario, method, as_json, out_path, plot_path, backend, iterations, beam_width,
          seed, time_limit, fmt, from_torchrec, wait_compile):
    """Plan the sharding of SCENARIO's embedding tables over its GPUs."""
    try:
        _shard(scenario, method, as_json, out_path, plot_path, backend, iterations, beam_width,
               seed, time_limit, fmt, from_torchrec, wait_compile)
    except KeyboardInterrupt:  # outside the planning (reading, reporting): one line too
        click.echo("shard: interrupted (Ctrl-C); no plan written", err=True)
        raise SystemExit(130) from None


def _shard(scenario, method, as_json, out_path, plot_path, backend, iterations, beam_width,
           seed, time_limit, fmt, from_torchrec, wait_compile):
    from ..dlrm import evaluate
    from ..dlrm.spec import load

    O.check_suffix(out_path, "--out", (".json",))
    O.check_suffix(plot_path, "--plot", (".png",))
    try:
        sc = load(scenario)
        if from_torchrec:
            from ..dlrm.torchrec_plan import load_plan_file, plan_result

            res = plan_result(sc, load_plan_file(sc, from_torchrec), backend=backend)
    except ScenarioError as exc:
        raise _BadInput(str(exc)) from None
    note = None
    if not from_torchrec:
        from ..dlrm import coldstart
        from ..dlrm.planner import plan as run_plan

        ps = sc.spec.planner
        want = method or ps.method
        use = coldstart.choose_method(want, backend, wait_compile)
        limit = ps.time_limit_s if time_limit is None else time_limit
        show = not (as_json or fmt in ("json", "torchrec")) and _on_terminal()
        with _PlanProgress(show, limit, use, sc) as bar:
            try:
                res = run_plan(sc, method=use, beam_width=beam_width or ps.beam_width,
                               seed=ps.seed if seed is None else seed,
                               iterations=iterations or ps.iterations, backend=backend,
                               time_limit_s=limit, progress=bar.update)
            except KeyboardInterrupt:
                bar.stop()
                click.echo(f"shard: interrupted (Ctrl-C) in phase {bar.phase} after "
                           f"{bar.elapsed():.1f} s; no plan written", err=True)
                raise SystemExit(130) from None
        if use != want:
            note = coldstart.NOTE
        elif use == "evolve":
            coldstart.mark_ready()
    if fmt == "torchrec":
        from ..dlrm.torchrec_plan import export_plan

        text = json.dumps(export_plan(sc, res.plan), indent=1)
        if out_path:
            with open(out_path, "w", encoding="utf-8") as fh:
                fh.write(text + "\n")
        click.echo(text)
        return
    as_json = as_json or fmt == "json"
    rep = _report(sc, res)
    if note:
        rep["requested_method"] = want
        rep["note"] = note
        click.echo(f"note: {note}", err=True)
    if sc.plan is not None:
        given = evaluate(sc, sc.plan, backend=backend)
        rep["given_plan"] = {"step_time_s": given["step_time_s"], "status": given["status"]}
        if sc.constraints is not None:  # the scenario's own plan is costed as given
            rep["given_plan"]["breaks_constraints"] = [
                f"tables[{sc.table_names[t]}].{f}" for t, f in sc.constraints.violations(sc.plan)]
    if plot_path:
        from ..dlrm.plot import plot_rank_load

        plot_rank_load(res.result["per_rank"], plot_path,
                       f"{sc.name}: {res.method}, step {res.step_time_s * 1e3:.3f} ms",
                       res.lower_bound_s, step_time_s=res.step_time_s)
        rep["plot"] = plot_path
    from ..jsonsafe import dumps

    text = dumps(rep, indent=2, default=float)
    if out_path:
        with open(out_path, "w", encoding="utf-8") as fh:
            fh.write(text + "\n")
    if as_json:
        click.echo(text)
    else:
        _print_text(rep)


command = shard
