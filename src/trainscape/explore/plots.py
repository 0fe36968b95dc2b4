"""The report's plots (matplotlib, Agg backend), each readable at a glance: a title that says
what and for which scenario, units on both axes, legends that cover no data, and a caption
(:data:`CAPTIONS`) the report prints beside it.

* :func:`plot_pareto` -- step time vs memory per GPU: every feasible configuration (all of a
  small space, else a uniform sample, drawn as a density of points), the Pareto front as its
  points joined in order (no staircase through corners no layout reaches), the top
  configurations, and the scenario's own ``[config]``.
* :func:`plot_breakdown` -- the step-time breakdown of the top configurations, legend beside
  the bars.
* :func:`plot_orders` -- the best step time per placement order as a dot plot on an axis that
  starts near the fastest (dots, not bars, since the axis does not start at 0), each labelled
  with its distance from the best.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from .. import layout as L
from ..report import TERM_LABELS

#: Colors of the breakdown terms (as before: one per ``layout.BREAKDOWN_FIELDS``).
BREAKDOWN_COLORS = ("#4c72b0", "#dd8452", "#55a868", "#c44e52", "#8172b3", "#937860",
                    "#da8bc3", "#8c8c8c", "#ccb974", "#64b5cd")
#: Largest number of configurations drawn in the Pareto plot's cloud (a uniform sample above).
CLOUD_MAX = 20_000

CAPTIONS = {
    "pareto": "pareto.png: each grey dot is a feasible configuration (all of them, or a uniform "
              "sample when the space is larger than {cloud:,}); red dots are the Pareto front "
              "(no configuration is both faster and needs less memory), linked in order by a "
              "thin line that only guides the eye; blue crosses are the top configurations by "
              "the objective; the star is the scenario's own [config]; the dashed line is the "
              "HBM per GPU (memory includes the reserve).",
    "breakdown": "breakdown.png: what each of the top configurations spends its step on, in "
                 "seconds (the stacked terms add up to the step time; DP comm is the part not "
                 "hidden by overlap).",
    "orders": "orders.png: the best step time reached with each placement order (dimensions "
              "innermost first), fastest at the top, with the gap to the fastest; the axis "
              "starts near the fastest so the differences show.",
}


def _plt():
    import matplotlib

    matplotlib.use("Agg", force=True)
    import matplotlib.pyplot as plt

    return plt


def feasible_cloud(scenario, space=None, limit: int = CLOUD_MAX, seed: int = 0):
    """``(memory_gib, step_s, sampled)`` of the feasible configurations of the scenario's
    space: all of them when it has at most ``limit``, else a uniform sample of ``limit``."""
    from ..backends import evaluate_blocks
    from ..space import design_space
    from ..spec.pack import pack

    space = space if space is not None else design_space(scenario)
    if space.size == 0:
        return np.zeros(0), np.zeros(0), False
    sampled = space.size > limit
    cfg = space.sample(limit, seed=seed) if sampled else space.enumerate(0, space.size)
    out = evaluate_blocks(*pack(scenario), cfg)
    ok = out[L.OUT_FEASIBLE] == 1.0
    return out[L.OUT_MEMORY_GIB, ok], out[L.OUT_STEP_TIME_S, ok], sampled


def scenario_point(scenario):
    """``(memory_gib, step_s, feasible)`` of the scenario's ``[config]``, or None."""
    if scenario is None or scenario.config is None:
        return None
    from ..api import evaluate

    try:
        r = evaluate(scenario)
    except Exception:  # noqa: BLE001 -- a plot never fails over its optional marker
        return None
    if not np.isfinite(r.step_time_s):
        return None
    return r.memory_gib, r.step_time_s, r.feasible


def plot_pareto(res, path: Path, hbm_gib: float | None = None, scenario=None,
                cloud=None) -> Path:
    """Step time vs memory per GPU (see the module doc). ``cloud``: ``(mem, step, sampled)``
    (default: :func:`feasible_cloud` of ``scenario`` when given)."""
    plt = _plt()
    fig, ax = plt.subplots(figsize=(8, 5.5), dpi=120)
    if cloud is None and scenario is not None:
        cloud = feasible_cloud(scenario)
    if cloud is not None and len(cloud[0]):
        mem, step, sampled = cloud
        what = (f"feasible configurations (uniform sample of {CLOUD_MAX:,})" if sampled
                else f"all {len(mem):,} feasible configurations")
        ax.scatter(mem, step, s=4, color="#9a9a9a", alpha=0.25, linewidths=0, label=what,
                   zorder=1, rasterized=True)
    f = res.front.out
    if f.shape[1]:
        ax.plot(f[L.OUT_MEMORY_GIB], f[L.OUT_STEP_TIME_S], "-", color="#c44e52", lw=0.8,
                alpha=0.6, zorder=2)
        ax.scatter(f[L.OUT_MEMORY_GIB], f[L.OUT_STEP_TIME_S], color="#c44e52", s=26, zorder=3,
                   label=f"Pareto front ({f.shape[1]} configurations)")
    t = res.top.out
    if t.shape[1]:
        ax.scatter(t[L.OUT_MEMORY_GIB], t[L.OUT_STEP_TIME_S], marker="x", s=36,
                   color="#4c72b0", zorder=4, label=f"top {t.shape[1]} by {res.objective}")
    pt = scenario_point(scenario)
    if pt is not None:
        ax.scatter([pt[0]], [pt[1]], marker="*", s=180, color="#f2b701", edgecolors="black",
                   linewidths=0.6, zorder=5,
                   label="scenario's [config]" + ("" if pt[2] else " (does not fit)"))
    if hbm_gib:
        ax.axvline(hbm_gib, color="#555555", ls="--", lw=1, zorder=1,
                   label=f"HBM per GPU {hbm_gib:.0f} GiB")
    ax.set_xlabel("memory per GPU (GiB, reserve included)", fontsize=11)
    ax.set_ylabel("step time (s)", fontsize=11)
    ax.tick_params(labelsize=10)
    ax.set_title(f"Step time vs memory per GPU\n{res.scenario_name}", fontsize=11)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0)
    fig.savefig(path, bbox_inches="tight")
    plt.close(fig)
    return path


def _short_cfg(r) -> str:
    sched = r["schedule"] + (f"/v{r['vpp']}" if r["vpp"] > 1 else "")
    return (f"tp{r['tp']} cp{r['cp']}\npp{r['pp']} dp{r['dp']}"
            + (f" ep{r['ep']}" if r["ep"] > 1 else "") + f"\n{sched}\n{r['order']}")


def plot_breakdown(res, path: Path, limit: int = 10) -> Path:
    """Stacked bars of the step-time breakdown of the top configurations (legend to the right
    of the axes, tick labels at a readable size)."""
    plt = _plt()
    recs = res.top.records()[:limit]
    fig, ax = plt.subplots(figsize=(max(7.0, 1.05 * len(recs) + 3.5), 5.5), dpi=120)
    x = np.arange(len(recs))
    bottom = np.zeros(len(recs))
    for name, color in zip(L.BREAKDOWN_FIELDS, BREAKDOWN_COLORS):
        vals = np.array([r[name] for r in recs])
        if not (vals > 0).any():
            continue  # a term no configuration pays: no empty legend entry
        ax.bar(x, vals, bottom=bottom, color=color, label=TERM_LABELS[name][1], width=0.7)
        bottom += vals
    ax.set_xticks(x)
    ax.set_xticklabels([f"#{i + 1}\n{_short_cfg(r)}" for i, r in enumerate(recs)], fontsize=8)
    ax.tick_params(axis="y", labelsize=10)
    ax.set_ylabel("seconds per step", fontsize=11)
    ax.set_title(f"Step-time breakdown of the top {len(recs)} by {res.objective}\n"
                 f"{res.scenario_name}", fontsize=11)
    ax.legend(fontsize=9, loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0,
              title="term", title_fontsize=9)
    ax.grid(axis="y", alpha=0.3)
    fig.savefig(path, bbox_inches="tight")
    plt.close(fig)
    return path


def plot_orders(res, path: Path, limit: int = 30) -> Path:
    """Best step time per placement order, fastest first: dots on an axis from just below the
    fastest, each labelled ``+x.x %`` from the fastest."""
    plt = _plt()
    recs = res.by_order.records()[:limit]
    fig, ax = plt.subplots(figsize=(8.5, max(3.2, 0.3 * len(recs) + 1.5)), dpi=120)
    y = np.arange(len(recs))
    vals = np.array([r["step_time_s"] for r in recs])
    if len(vals):
        best = vals.min()
        ax.hlines(y, best, vals, color="#55a868", lw=2, alpha=0.6)
        ax.plot(vals, y, "o", color="#55a868", ms=6)
        span = max(vals.max() - best, best * 0.01)
        ax.set_xlim(best - 0.05 * span, vals.max() + 0.25 * span)
        for yi, v in zip(y, vals):
            ax.annotate(f"+{(v / best - 1) * 100:.1f} %" if v > best else "fastest",
                        (v, yi), textcoords="offset points", xytext=(6, -3), fontsize=8)
    ax.set_yticks(y)
    ax.set_yticklabels([f"{r['order']}  (tp{r['tp']} cp{r['cp']} pp{r['pp']} dp{r['dp']}"
                        + (f" ep{r['ep']}" if r["ep"] > 1 else "") + ")" for r in recs],
                       fontsize=8)
    ax.invert_yaxis()
    ax.tick_params(axis="x", labelsize=10)
    ax.set_xlabel("best step time with this order (s; the axis does not start at 0)",
                  fontsize=10)
    n = len(res.by_order)
    ax.set_title("Best step time per placement order (innermost first)"
                 + (f", fastest {len(recs)} of {n}" if n > len(recs) else "")
                 + f"\n{res.scenario_name}", fontsize=11)
    ax.grid(axis="x", alpha=0.3)
    fig.savefig(path, bbox_inches="tight")
    plt.close(fig)
    return path


__all__ = ["CAPTIONS", "CLOUD_MAX", "feasible_cloud", "plot_breakdown", "plot_orders",
           "plot_pareto", "scenario_point"]
