"""Co-design: hardware axes searched jointly with the layout.

A scenario's ``[space]`` may list hardware values beside the config axes: ``gpu = [...]``
(presets), ``gpus = [...]`` and any scenario field by the path ``--set`` takes, quoted, e.g.
``"cluster.tiers[0].size" = [8, 72]`` or ``"cluster.tiers[1].bandwidth_GBps" = [50, 100]``
(:class:`trainscape.spec.models.SpaceSpec` keeps them in ``hardware``). Their product is the
set of *hardware points*; each point is the scenario with those values set (validated like
``--set``, so a bad value stops with its ``space."path"`` and the reason) and its layout space
swept or searched at native speed (:func:`trainscape.explore.main.run_explore`). A hardware point
with its best layout is one answer; every result row carries the hardware values it was costed
with (one column per path).

Cost per step is proportional to the step time on one hardware point (the same GPUs at the same
price for the step), so the time x cost Pareto front of all (hardware, layout) pairs is the
front of the points' best layouts: :func:`time_cost_front` reduces it with the sweep's own
Pareto rule (:func:`trainscape.explore.reduce.pareto_merge`, ties by index). Points without a
price (cost 0) are left out of the front and said so.
"""

from __future__ import annotations

import itertools
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from .hardware_axes import flatten_values, hardware_axes


@dataclass
class HardwarePoint:
    """One combination of hardware values and the scenario that has them."""

    values: dict[str, Any]  # path -> value, table values flattened (one column each)
    scenario: Any
    config_dropped: bool = False  # the scenario's [config] does not fit this hardware
    raw: dict[str, Any] = field(default_factory=dict)  # axis -> the value as written

    def label(self, axes=None) -> str:
        """Short text of the point: per axis (those in ``axes``, default all) its value, or a
        table value's ``name`` when it has one."""
        parts = []
        for k, v in self.raw.items():
            if axes is not None and k not in axes:
                continue
            if isinstance(v, dict):
                parts.append(str(v["name"]) if "name" in v else
                             f"{_short(k)}(" + ", ".join(f"{a}={b}" for a, b in v.items()) + ")")
            else:
                parts.append(f"{_short(k)}={v}")
        return ", ".join(parts)


def _short(path: str) -> str:
    """A short column label of a hardware path (``cluster.tiers[0].size`` -> ``tiers[0].size``)."""
    return path[len("cluster."):] if path.startswith("cluster.") else path


def hardware_note(scenario) -> str | None:
    """For commands that search the layout only (sweep, search): a one-line note that the
    scenario's hardware axes are left to ``explore`` (None without hardware axes)."""
    axes = hardware_axes(scenario)
    if not axes:
        return None
    return ("note: [space] has hardware axes (" + ", ".join(_short(k) for k in axes) + "); "
            "this command searches the layouts of the scenario's own hardware -- "
            "trainscape explore searches hardware x layout")


def hardware_points(scenario) -> list[HardwarePoint]:
    """Every hardware point (the product of the axes, first axis outermost), validated."""
    from ..spec.errors import ScenarioError
    from ..spec.load import apply_overrides, validate

    axes = hardware_axes(scenario)
    base = scenario.raw_dump()
    base.get("space", {}).pop("hardware", None)
    points = []
    for combo in itertools.product(*axes.values()):
        raw_values = dict(zip(axes, combo))
        values = flatten_values(raw_values)
        pairs = list(values.items())
        try:
            raw = apply_overrides(base, pairs)
        except ScenarioError as exc:
            path = _blame(exc, values)
            raise ScenarioError.at(f'space."{path}"', f"cannot set this hardware value: {exc}",
                                   values[path], show_got=False) from None
        dropped = False
        try:
            sc = validate(raw)
        except ScenarioError as exc:
            # a [config] written for the base hardware may not fit this point (GPU count):
            # the point is still searched, without it -- unless a pipeline layout is read
            # against it (job.pipeline_layout needs [config]'s pp)
            if raw.get("config") is None or raw.get("job", {}).get("pipeline_layout"):
                path = _blame(exc, values)
                raise ScenarioError.at(f'space."{path}"', f"invalid hardware value: {exc}",
                                       values[path], show_got=False) from None
            raw = dict(raw)
            raw.pop("config")
            try:
                sc = validate(raw)
            except ScenarioError as exc2:
                path = _blame(exc2, values)
                raise ScenarioError.at(f'space."{path}"', f"invalid hardware value: {exc2}",
                                       values[path], show_got=False) from None
            dropped = True
        pt = HardwarePoint(values, sc, dropped, raw_values)
        sc.name = f"{scenario.name} [{pt.label()}]"
        points.append(pt)
    return points


def value_columns(points: list[HardwarePoint]) -> list[str]:
    """The hardware paths of the points (table values flattened), in first-seen order."""
    cols: dict[str, None] = {}
    for p in points:
        for k in p.values:
            cols.setdefault(k)
    return list(cols)


def _blame(exc, values: dict[str, Any]) -> str:
    """The hardware path an error is about (the one its field path starts with, else the
    first)."""
    where = str(getattr(exc, "path", "") or exc)
    for k in values:
        if where.startswith(k) or k in where:
            return k
    return next(iter(values))


@dataclass
class CodesignResult:
    """What a co-design run found: per hardware point its exploration result, and the time x
    cost Pareto front of the points' best layouts."""

    scenario_name: str
    axes: dict[str, list]
    points: list[HardwarePoint]
    results: list[Any]  # SweepResult per point (None where nothing fits)
    reasons: list[str | None]  # why a point has no answer
    front: list[int] = field(default_factory=list)  # point indices on the time x cost front
    elapsed_s: float = 0.0

    def records(self, kind: str = "best") -> list[dict[str, Any]]:
        """One row per answer: the hardware values (a column per path), then the layout and
        every output. ``kind="best"``: each point's best layout; ``"top"``: every point's top-K."""
        out = []
        for i, (pt, res) in enumerate(zip(self.points, self.results)):
            if res is None:
                continue
            rows = res.top.records("top")
            if kind == "best":
                rows = rows[:1]
            for r in rows:
                rec = {"point": i, **{k: v for k, v in pt.values.items()}}
                rec["on_time_cost_front"] = i in self.front and r.get("rank", 1) == 1
                rec.update(r)
                out.append(rec)
        return out


def time_cost_front(step: np.ndarray, cost: np.ndarray) -> list[int]:
    """Indices (into the arrays) of the time x cost Pareto front, fastest first, of the points
    with a known cost (> 0) -- :func:`~trainscape.explore.reduce.pareto_merge`'s rule."""
    from .reduce import pareto_merge

    step = np.asarray(step, dtype=np.float64)
    cost = np.asarray(cost, dtype=np.float64)
    idx = np.arange(step.size, dtype=np.int64)
    known = np.isfinite(step) & (cost > 0)
    _, _, fi = pareto_merge(step[known], cost[known], idx[known])
    return [int(i) for i in fi]


def run_codesign(scenario, *, time_budget_s: float = 20.0, top: int = 10,
                 objective: str = "step_time_s", seed: int = 0, backend: str | None = None,
                 workers: int | None = None, progress: bool = False) -> CodesignResult:
    """Explore every hardware point's layouts (the time budget shared between them) and reduce
    the answers to the time x cost front."""
    from ..spec.errors import ScenarioError
    from .main import run_explore
    from .report import hbm_gib

    t0 = time.perf_counter()
    points = hardware_points(scenario)
    results, reasons = [], []
    for pt in points:
        try:
            res = run_explore(pt.scenario, time_budget_s=max(0.1, time_budget_s / len(points)),
                              top=top, objective=objective, seed=seed, backend=backend,
                              workers=workers, progress=progress)
        except ScenarioError as exc:  # an empty layout space at this point
            results.append(None)
            reasons.append(str(exc))
            continue
        if res.feasible == 0:
            results.append(None)
            reasons.append(res.no_feasible_reason(hbm_gib(pt.scenario)))
            continue
        results.append(res)
        reasons.append(None)
    out = CodesignResult(scenario.name, hardware_axes(scenario), points, results, reasons)
    from .. import layout as L

    have = [i for i, r in enumerate(results) if r is not None]
    step = np.array([results[i].top.out[L.OUT_STEP_TIME_S, 0] for i in have])
    cost = np.array([results[i].top.out[L.OUT_COST_PER_STEP_USD, 0] for i in have])
    out.front = [have[j] for j in time_cost_front(step, cost)] if have else []
    out.elapsed_s = time.perf_counter() - t0
    return out


# ---------------------------------------------------------------------------------------------
# Report
# ---------------------------------------------------------------------------------------------


def varying_columns(points: list[HardwarePoint]) -> list[str]:
    """The hardware axes whose value differs between points (what tells them apart)."""
    axes = list(points[0].raw) if points else []
    return [k for k in axes if len({str(p.raw.get(k)) for p in points}) > 1] or axes


def codesign_table(res: CodesignResult):
    """A rich table: one row per hardware point (its distinguishing values) with its best
    layout, step time, MFU, cost per step, tokens per dollar and per joule; ``*`` marks the
    time x cost front. Numbers never wrap; the layout folds."""
    from rich.table import Table

    from .report import _cfg_text

    t = Table(title=f"best layout per hardware point ({res.scenario_name}); * = on the "
                    "time x cost Pareto front", title_justify="left", box=None, pad_edge=False)
    varying = varying_columns(res.points)
    t.add_column("", no_wrap=True)
    t.add_column("hardware", overflow="fold", ratio=1)
    t.add_column("best layout", overflow="fold", ratio=2)
    for name in ("step s", "MFU", "$/step", "tok/$", "tok/J"):
        t.add_column(name, justify="right", no_wrap=True)
    for i, (pt, r) in enumerate(zip(res.points, res.results)):
        cells = ["*" if i in res.front else "", pt.label(varying)]
        if r is None:
            t.add_row(*cells, f"no answer: {res.reasons[i]}", "", "", "", "", "")
            continue
        rec = r.top.records()[0]
        cost = rec["cost_per_step_usd"]
        t.add_row(*cells, _cfg_text(rec), f"{rec['step_time_s']:.3f}",
                  f"{rec['mfu'] * 100:.1f}%", f"{cost:.2f}" if cost > 0 else "n/a",
                  f"{rec['tokens_per_usd']:,.0f}" if cost > 0 else "n/a",
                  f"{rec['tokens_per_joule']:.3f}" if rec["tokens_per_joule"] > 0 else "n/a")
    return t


def plot_time_cost(res: CodesignResult, path: Path) -> Path:
    """Cost per step against step time: every feasible (hardware, layout) answer kept (each
    point's top-K, small grey dots), each point's best layout (labelled), and the time x cost
    Pareto front joined point to point (no staircase through corners nobody reaches)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from .. import layout as L

    fig, ax = plt.subplots(figsize=(8.5, 5.5), dpi=120)
    xs, ys = [], []
    for r in res.results:
        if r is None:
            continue
        ok = r.top.out[L.OUT_COST_PER_STEP_USD] > 0
        xs.append(r.top.out[L.OUT_STEP_TIME_S, ok])
        ys.append(r.top.out[L.OUT_COST_PER_STEP_USD, ok])
    if xs:
        ax.scatter(np.concatenate(xs), np.concatenate(ys), s=10, color="#bbbbbb",
                   label="top layouts of every hardware point", zorder=1)
    bx, by = [], []
    varying = varying_columns(res.points)
    for i, (pt, r) in enumerate(zip(res.points, res.results)):
        if r is None or r.top.out[L.OUT_COST_PER_STEP_USD, 0] <= 0:
            continue
        x, y = r.top.out[L.OUT_STEP_TIME_S, 0], r.top.out[L.OUT_COST_PER_STEP_USD, 0]
        bx.append(x)
        by.append(y)
        ax.annotate(pt.label(varying), (x, y), textcoords="offset points", xytext=(5, 5), fontsize=8)
    if bx:
        ax.scatter(bx, by, s=40, color="#4c72b0", label="best layout per hardware point",
                   zorder=2)
    if res.front:
        fx = [res.results[i].top.out[L.OUT_STEP_TIME_S, 0] for i in res.front]
        fy = [res.results[i].top.out[L.OUT_COST_PER_STEP_USD, 0] for i in res.front]
        ax.plot(fx, fy, "-o", color="#c44e52", lw=1.5, ms=7, label="time x cost Pareto front",
                zorder=3)
    ax.set_xlabel("step time (s)", fontsize=11)
    ax.set_ylabel("cost per step (USD)", fontsize=11)
    ax.tick_params(labelsize=10)
    ax.set_title(f"Time vs cost per step, hardware x layout\n{res.scenario_name}", fontsize=11)
    ax.grid(alpha=0.3)
    if bx or xs:
        ax.legend(fontsize=9, loc="best")
    fig.savefig(path, bbox_inches="tight")
    plt.close(fig)
    return path


def write_codesign_report(res: CodesignResult, out_dir: str | Path) -> dict[str, Path]:
    """``codesign.parquet`` (every point's top-K with its hardware values), ``codesign_best.csv``
    (one row per point) and ``time_cost.png``."""
    from .report import write_records

    d = Path(out_dir)
    d.mkdir(parents=True, exist_ok=True)
    paths = {
        "all answers": write_records(res.records("top"), d / "codesign.parquet"),
        "best per point": write_records(res.records("best"), d / "codesign_best.csv"),
        "time x cost plot": plot_time_cost(res, d / "time_cost.png"),
    }
    (d / "README.txt").write_text(
        "time_cost.png: cost per step (USD) against step time (s). Grey dots: the top layouts "
        "of every hardware point; blue: each point's best layout, labelled with its hardware "
        "values; red line: the time x cost Pareto front (no answer is both faster and cheaper "
        "than a point on it). On one hardware point cost is proportional to time, so the "
        "front runs through best layouts only.\n")
    return paths


def _cost_col() -> int:
    from .. import layout as L

    return L.OUT_COST_PER_STEP_USD


__all__ = ["CodesignResult", "HardwarePoint", "codesign_table", "hardware_axes",
           "hardware_note", "hardware_points", "explore_codesign", "varying_columns", "plot_time_cost", "run_codesign", "time_cost_front",
           "write_codesign_report"]


def explore_codesign(scenario, console, out_dir, *, time_budget_s: float, top: int,
                     objective: str, seed: int) -> None:
    """What ``trainscape explore`` does for a scenario with hardware axes: explore every
    hardware point, print the best layout per point, write the report."""
    import sys

    from .main import default_report_dir

    axes = hardware_axes(scenario)
    n = int(np.prod([len(v) for v in axes.values()]))
    console.print(f"hardware axes: {', '.join(f'{_short(k)} {v}' for k, v in axes.items())} "
                  f"({n} hardware points)", soft_wrap=True)
    res = run_codesign(scenario, time_budget_s=time_budget_s, top=top, objective=objective,
                       seed=seed, progress=sys.stderr.isatty())
    if all(r is None for r in res.results):
        from ..spec.errors import ScenarioError

        raise ScenarioError.at("space", "no hardware point has a feasible layout: "
                               + (res.reasons[0] or ""), None, show_got=False)
    console.print(codesign_table(res))
    dropped = [p.label() for p in res.points if p.config_dropped]
    if dropped:
        console.print(f"note: the scenario's [config] does not fit {len(dropped)} hardware "
                      "point(s); they were searched without it", soft_wrap=True)
    if any(r is not None and r.top.out[_cost_col(), 0] <= 0
           for r in res.results):
        console.print("note: points without a GPU price (cluster.gpu.price_per_hour_usd) have "
                      "no cost and are left out of the time x cost front", soft_wrap=True)
    d = Path(out_dir) if out_dir else default_report_dir(scenario)
    paths = write_codesign_report(res, d)
    console.print(f"report written to {d}/ in {res.elapsed_s:.1f} s", soft_wrap=True)
    for what, p in paths.items():
        console.print(f"  {what:17s} {p}", soft_wrap=True)
