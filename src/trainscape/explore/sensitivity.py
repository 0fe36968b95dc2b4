"""Sensitivity grid: what a better (or worse) cross-site link buys (issue 13, item 7).

For a scenario with at least two network tiers, the outermost tier is taken as the cross-site
link. Over a grid of its bandwidth x latency, every cell is the scenario with that tier set to
the cell's values (through the same ``cluster.tiers[i].bandwidth_GBps`` / ``latency_us``
overrides a user would pass to ``--set``, so transports, oversubscription and efficiency apply as
usual). In each cell:

- the best layout is found by the exhaustive sweep of the design space
  (:func:`trainscape.explore.sweep.run_sweep`, C backend when built), objective step time;
- the scenario's ``[config]`` is costed with the same tier values;
- the speedup is ``config step / best step``.

Cells are independent. The best is the best of the ``[space]`` (feasible layouts only): when the
``[config]`` is not a point of the space (e.g. a ZeRO stage the space does not list), a speedup
below 1 is possible and says the space misses something at least as good as the config;
:attr:`SensitivityGrid.config_in_space` says which case holds.
"""

from __future__ import annotations

import csv
import math
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from .. import layout as L

#: Default grid: the outermost tier's bandwidth times these factors ...
DEFAULT_BANDWIDTH_FACTORS = (1 / 8, 1 / 2, 1.0, 2.0)
#: ... and these one-way latencies (64 us: metro / same campus; 1 ms: ~200 km of fibre;
#: 5 ms: ~1,000 km; 20 ms: cross-continent).
DEFAULT_LATENCIES_US = (64.0, 1000.0, 5000.0, 20000.0)


@dataclass
class SensitivityGrid:
    """A bandwidth x latency grid for tier ``tier`` (the outermost one). Matrices are indexed
    ``[i_bandwidth, j_latency]``; a cell with no feasible layout has NaN best step and speedup
    and ``None`` as its best layout."""

    scenario_name: str
    tier: int
    tier_name: str
    base_bandwidth_GBps: float
    base_latency_us: float
    bandwidth_GBps: tuple[float, ...]
    latency_us: tuple[float, ...]
    speedup: np.ndarray
    best_step_s: np.ndarray
    config_step_s: np.ndarray
    config_feasible: np.ndarray
    best_layout: list[list[dict | None]]
    config: dict
    config_in_space: bool
    backend: str
    elapsed_s: float
    extra: dict = field(default_factory=dict)

    def records(self) -> list[dict]:
        """One row per cell: the tier values, the steps, the speedup (None where no layout
        fits) and the best layout's fields (prefixed ``best_``)."""
        rows = []
        for i, b in enumerate(self.bandwidth_GBps):
            for j, lat in enumerate(self.latency_us):
                s = float(self.speedup[i, j])
                best = self.best_layout[i][j] or {}
                r = {"tier": self.tier_name, "bandwidth_GBps": b, "latency_us": lat,
                     "config_step_s": _num(self.config_step_s[i, j]),
                     "config_feasible": bool(self.config_feasible[i, j]),
                     "best_step_s": _num(self.best_step_s[i, j]),
                     "speedup": _num(s)}
                for k in LAYOUT_KEYS:
                    r["best_" + k] = best.get(k)
                rows.append(r)
        return rows


#: The layout fields shown per cell (the CSV has them all as ``best_<field>``).
LAYOUT_KEYS = L.CONFIG_FIELDS


def _num(x) -> float | None:
    x = float(x)
    return x if math.isfinite(x) else None


def outer_tier(scenario) -> int:
    """Index of the cross-site tier (the outermost); ScenarioError with fewer than 2 tiers."""
    from ..spec.errors import ScenarioError

    if scenario.cluster.sites is not None:
        raise ScenarioError.at("cluster.sites", "the sensitivity grid varies one uniform "
                               "outermost tier; a site graph's links differ per pair (vary "
                               "them with --set cluster.links[i].bandwidth_GBps / latency_us)",
                               None, "a tier-only cluster", show_got=False)
    n = len(scenario.cluster.tiers)
    if n < 2:
        raise ScenarioError.at("cluster.tiers", "a sensitivity grid needs at least 2 network "
                               "tiers (the outermost is the cross-site link)", n, ">= 2 tiers")
    return n - 1


def grid_axes(scenario, bandwidth_GBps=None, latency_us=None):
    """The grid's axes (sorted, positive, finite): given values, or the defaults around the
    scenario's outermost tier."""
    from ..spec.errors import ScenarioError

    t = scenario.cluster.tiers[outer_tier(scenario)]
    bws = (tuple(float(t.bandwidth_GBps) * f for f in DEFAULT_BANDWIDTH_FACTORS)
           if bandwidth_GBps is None else tuple(float(x) for x in bandwidth_GBps))
    lats = DEFAULT_LATENCIES_US if latency_us is None else tuple(float(x) for x in latency_us)
    for name, vals in (("bandwidth_GBps", bws), ("latency_us", lats)):
        if not vals or any(not (math.isfinite(v) and v > 0) for v in vals):
            raise ScenarioError.at(f"sensitivity.{name}", "must be a non-empty list of "
                                   "positive finite numbers", list(vals), "e.g. [6.25, 50]")
    return tuple(sorted(set(bws))), tuple(sorted(set(lats)))


def estimate_seconds(scenario, n_cells: int, backend: str | None = None,
                     workers: int | None = None) -> float:
    """Rough time of a grid of ``n_cells`` sweeps (the rates ``explore`` uses to choose sweep
    or search)."""
    from ..space import design_space
    from .main import RATE_PER_CORE
    from .sweep import default_workers, sweep_backend

    size = design_space(scenario).size
    rate = RATE_PER_CORE[sweep_backend(backend)] * (workers or default_workers())
    return n_cells * size / rate


def _config_in_space(space, scenario) -> bool:
    """Whether the scenario's ``[config]`` is a point of the space."""
    from ..spec.pack import pack_configs

    return bool(space.index_of(pack_configs([scenario.config]))[0] >= 0)


def sensitivity_grid(scenario, *, bandwidth_GBps=None, latency_us=None,
                     backend: str | None = None, workers: int | None = None) -> SensitivityGrid:
    """The speedup of the best layout of the space over the scenario's ``[config]`` on a grid
    of the outermost tier's bandwidth (GB/s per GPU) x latency (us). See the module doc."""
    from ..api import _as_config, evaluate_columns, load
    from ..space import config_dict, design_space
    from ..spec.pack import pack, pack_configs
    from .sweep import run_sweep, sweep_backend

    sc0 = _as_config(scenario, None)
    ti = outer_tier(sc0)
    tier = sc0.cluster.tiers[ti]
    bws, lats = grid_axes(sc0, bandwidth_GBps, latency_us)
    space = design_space(sc0)
    space.check_nonempty()
    name = sweep_backend(backend)
    shape = (len(bws), len(lats))
    speed = np.full(shape, np.nan)
    best = np.full(shape, np.nan)
    conf = np.full(shape, np.nan)
    conf_ok = np.zeros(shape, bool)
    layouts: list[list[dict | None]] = [[None] * len(lats) for _ in bws]
    t0 = time.perf_counter()
    for i, b in enumerate(bws):
        for j, lat in enumerate(lats):
            sc = load(sc0, [f"cluster.tiers[{ti}].bandwidth_GBps={b!r}",
                            f"cluster.tiers[{ti}].latency_us={lat!r}"])
            sys, mdl, job = pack(sc)
            out = evaluate_columns(sys, mdl, job, pack_configs([sc.config]), backend=name)
            conf[i, j] = out[L.OUT_STEP_TIME_S, 0]
            conf_ok[i, j] = out[L.OUT_FEASIBLE, 0] == 1.0
            res = run_sweep(sc, space=design_space(sc), top=1, objective="step_time_s",
                            backend=name, workers=workers)
            if len(res.top):
                best[i, j] = res.top.out[L.OUT_STEP_TIME_S, 0]
                layouts[i][j] = config_dict(res.top.cfg[:, 0])
                speed[i, j] = conf[i, j] / best[i, j]
    cfg = sc0.config.as_dict()
    return SensitivityGrid(
        scenario_name=sc0.name, tier=ti, tier_name=tier.name,
        base_bandwidth_GBps=float(tier.bandwidth_GBps), base_latency_us=float(tier.latency_us),
        bandwidth_GBps=bws, latency_us=lats, speedup=speed, best_step_s=best,
        config_step_s=conf, config_feasible=conf_ok, best_layout=layouts, config=cfg,
        config_in_space=_config_in_space(space, sc0), backend=name,
        elapsed_s=time.perf_counter() - t0, extra={"space_size": space.size})


# ---------------------------------------------------------------------------------------------
# Output: table, CSV, heat map
# ---------------------------------------------------------------------------------------------

def _bw_label(b: float) -> str:
    return f"{b:,.3g} GB/s"


def _lat_label(us: float) -> str:
    return f"{us / 1000:g} ms" if us >= 1000 else f"{us:g} us"


def _layout_short(c: dict | None) -> str:
    if not c:
        return "-"
    s = f"tp{c['tp']} cp{c['cp']} pp{c['pp']} dp{c['dp']}"
    if c.get("ep", 1) > 1:
        s += f" ep{c['ep']}"
    s += f" {c['schedule']}" + (f"/v{c['vpp']}" if c.get("vpp", 1) > 1 else "")
    s += f" z{c['zero']}"
    return s


def sensitivity_table(g: SensitivityGrid):
    """A rich table: one row per bandwidth, one column per latency; each cell the speedup, the
    config's step and the best layout."""
    from rich.table import Table

    t = Table(title=f"Sensitivity to tier {g.tier} '{g.tier_name}' (speedup of the best layout "
                    f"over \\[config]; config step; best layout)",
              title_justify="left", box=None, pad_edge=False, show_lines=True)
    t.add_column("bandwidth", no_wrap=True, justify="right")
    for lat in g.latency_us:
        t.add_column(f"latency {_lat_label(lat)}")
    for i, b in enumerate(g.bandwidth_GBps):
        cells = []
        for j in range(len(g.latency_us)):
            s = g.speedup[i, j]
            head = (f"{s:.2f}x" if math.isfinite(s) else "no layout fits"
                    if not math.isfinite(g.best_step_s[i, j]) else "-")
            c = g.config_step_s[i, j]
            cs = f"config {c:.2f} s" if math.isfinite(c) else "config not valid"
            cells.append(f"{head}\n{cs}\n"
                         f"{_layout_short(g.best_layout[i][j])}")
        t.add_row(_bw_label(b), *cells)
    return t


def write_csv(g: SensitivityGrid, path: str | Path) -> Path:
    """One row per cell (:meth:`SensitivityGrid.records`); empty fields where none applies."""
    path = Path(path)
    rows = g.records()
    with open(path, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(rows[0]))
        w.writeheader()
        for r in rows:
            w.writerow({k: ("" if v is None else v) for k, v in r.items()})
    return path


def plot_sensitivity(g: SensitivityGrid, path: str | Path) -> Path:
    """Heat map of the speedup (rows: bandwidth, columns: latency), each cell annotated with
    the speedup and the best layout's degrees."""
    from .plots import _plt

    plt = _plt()
    nb, nl = g.speedup.shape
    fig, ax = plt.subplots(figsize=(2.3 * nl + 2.5, 1.1 * nb + 2.0))
    data = np.ma.masked_invalid(g.speedup)
    im = ax.imshow(data, cmap="viridis", origin="lower", aspect="auto")
    fig.colorbar(im, ax=ax, label="speedup of best layout over [config] (x)")
    ax.set_xticks(range(nl), [_lat_label(x) for x in g.latency_us])
    ax.set_yticks(range(nb), [_bw_label(x) for x in g.bandwidth_GBps])
    ax.set_xlabel(f"tier '{g.tier_name}' latency (one way)")
    ax.set_ylabel(f"tier '{g.tier_name}' bandwidth (GB/s per GPU)")
    finite = g.speedup[np.isfinite(g.speedup)]
    mid = float(finite.min() + finite.max()) / 2 if finite.size else 0.0
    for i in range(nb):
        for j in range(nl):
            s = g.speedup[i, j]
            c = g.best_layout[i][j]
            if not math.isfinite(s):
                txt = "-" if math.isfinite(g.best_step_s[i, j]) else "no layout\nfits"
                color = "black"
            else:
                txt = f"{s:.2f}x\n" + (f"tp{c['tp']} pp{c['pp']}\ncp{c['cp']} z{c['zero']}"
                                       if c else "")
                color = "white" if s < mid else "black"
            ax.text(j, i, txt, ha="center", va="center", fontsize=8, color=color)
    ax.set_title(f"{g.scenario_name}\nspeedup of the best layout over [config] vs "
                 f"'{g.tier_name}' link (base {_bw_label(g.base_bandwidth_GBps)}, "
                 f"{_lat_label(g.base_latency_us)})", fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return Path(path)


def explore_sensitivity(scenario, out_dir: str | Path, console, enabled: bool | None,
                        time_budget_s: float) -> dict[str, Path]:
    """``explore``'s hook. ``enabled``: True runs the grid, False skips it, None (default)
    runs it when the scenario has >= 2 tiers and a ``[config]`` and the grid's estimated time
    fits ``time_budget_s`` (else one line says why it was skipped). Writes
    ``sensitivity.png`` and ``sensitivity.csv`` into ``out_dir`` and prints the table."""
    if enabled is False:
        return {}
    if scenario.cluster.sites is not None:
        console.print("sensitivity grid skipped: a site graph's links differ per pair; vary "
                      "them with --set cluster.links[i].bandwidth_GBps / latency_us",
                      soft_wrap=True, markup=False)
        return {}
    if len(scenario.cluster.tiers) < 2 or scenario.config is None:
        if enabled:
            console.print("sensitivity grid skipped: it needs >= 2 network tiers and a "
                          "[config]", soft_wrap=True)
        return {}
    bws, lats = grid_axes(scenario)
    est = estimate_seconds(scenario, len(bws) * len(lats))
    if enabled is None and est > time_budget_s:
        console.print(f"sensitivity grid skipped: ~{est:.0f} s estimated > time budget "
                      f"{time_budget_s:g} s (run with --sensitivity to force)", soft_wrap=True)
        return {}
    from ..spec.errors import ScenarioError

    try:
        g = sensitivity_grid(scenario, bandwidth_GBps=bws, latency_us=lats)
    except ScenarioError as exc:  # a grid value outside a documented range, an invalid config
        console.print(f"sensitivity grid skipped: {exc}", soft_wrap=True, markup=False)
        return {}
    console.print(sensitivity_table(g), soft_wrap=True)
    if not g.config_in_space:
        console.print("note: the \\[config] is not a point of the \\[space]; a speedup below "
                      "1 means the space misses a layout as good as it", soft_wrap=True)
    d = Path(out_dir)
    d.mkdir(parents=True, exist_ok=True)
    return {"sensitivity_plot": plot_sensitivity(g, d / "sensitivity.png"),
            "sensitivity_csv": write_csv(g, d / "sensitivity.csv")}


__all__ = ["DEFAULT_BANDWIDTH_FACTORS", "DEFAULT_LATENCIES_US", "SensitivityGrid",
           "estimate_seconds", "explore_sensitivity", "grid_axes", "outer_tier",
           "plot_sensitivity", "sensitivity_grid", "sensitivity_table", "write_csv"]
