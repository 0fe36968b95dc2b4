"""Accuracy plots: the model against published runs (matplotlib, Agg backend).

One figure, two panels, read together:

* **parity** -- predicted against published step time on log-log axes, one colour per group
  (a calibration source, or a transfer source on one GPU), the ±5 % and ±10 % bands around
  the diagonal. Filled circles are rows the fit saw, diamonds held-out rows, hollow circles
  rows that are shown but not counted (an older release of a repeated layout); a red cross
  marks a published layout the model calls out of memory (drawn at the step it would take).
* **error per group** -- every row's error (predicted / published step time − 1, negative:
  the model is optimistic) on one line per group, the median of its counted rows as a black
  bar, and beside it median and worst |error| over those rows and their count: the figures
  ``trainscape validate`` prints (:func:`trainscape.calibration.summarize`). Errors beyond ±:data:`ERROR_CLIP` % are drawn at the edge
  as arrows labelled with their value, so one wild row does not squash the rest.

Rows without a prediction (an invalid layout) cannot be drawn; the figure lists them under
the panels. Used by ``trainscape validate --plot`` and ``scripts/transfer_check.py --plot``.
"""

from __future__ import annotations

import os
from typing import Callable

#: File types the figure can be written as (by the path's suffix).
PLOT_SUFFIXES = (".png", ".svg", ".pdf")
#: Errors beyond this many percent are drawn at the edge of the error panel, labelled.
ERROR_CLIP = 60.0
#: Rows without a prediction listed under the figure before "and N more".
MAX_LISTED = 6


def _plt():
    import matplotlib

    matplotlib.use("Agg", force=True)
    import matplotlib.pyplot as plt

    return plt


def plot_path_problem(path) -> str | None:
    """Why the figure cannot be written to ``path`` -- a suffix not in :data:`PLOT_SUFFIXES`, or
    a directory that does not exist -- or None. The CLI and the transfer script ask before any
    work, and each reports it its own way (exit 2 naming ``--plot``)."""
    if not str(path).lower().endswith(PLOT_SUFFIXES):
        return f"{str(path)!r} has an unsupported suffix (allowed: {', '.join(PLOT_SUFFIXES)})"
    parent = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(parent):
        return (f"{str(path)!r}: directory {parent!r} does not exist (allowed: a file in an "
                "existing directory)")
    return None


def _marker(r, holdout: bool) -> tuple[str, bool]:
    """(matplotlib marker, filled) of a result: hollow when not counted, a diamond when held
    out of the fit (``holdout``: the rows come from the fitted set and say so)."""
    if not r.counted:
        return "o", False
    return ("D" if holdout and r.holdout else "o"), True


def _palette(n: int) -> list:
    """``n`` colours dark enough for the group labels: matplotlib's tab10, then Dark2, then
    again."""
    plt = _plt()
    base = list(plt.get_cmap("tab10").colors) + list(plt.get_cmap("Dark2").colors)
    return [base[i % len(base)] for i in range(n)]


def plot_accuracy(results: list, path, title: str,
                  group_of: Callable[[object], str] | None = None,
                  median_target: float = 5.0, worst_target: float = 10.0,
                  fitted: bool = True) -> dict[str, dict]:
    """Write the figure (see the module doc) of ``results`` (:class:`trainscape.calibration.
    Result`, grouped by ``group_of``, default their ``group``) to ``path``.
    ``median_target`` / ``worst_target``: the bands drawn, in percent. ``fitted``: the rows
    are the calibration set's, some fitted and some held out (drawn apart); False for rows the
    fit never saw, all drawn alike. Returns :func:`trainscape.calibration.summarize` of the
    results by the same groups: the figures printed on the plot. ValueError where
    :func:`plot_path_problem` finds one, or for no rows."""
    from . import summarize

    problem = plot_path_problem(path)
    if problem is not None:
        raise ValueError(problem)
    if not results:
        raise ValueError("no rows to plot")
    group_of = group_of or (lambda r: r.group)
    stats = summarize(results, group_of)
    groups = list(stats)
    plt = _plt()
    colour = dict(zip(groups, _palette(len(groups))))

    height = max(5.5, 0.42 * len(groups) + 2.2)
    fig, (ax, ax2) = plt.subplots(1, 2, figsize=(15, height), dpi=110,
                                  gridspec_kw={"width_ratios": [1.0, 1.15]})
    drawn = [r for r in results if r.predicted_step_s is not None]
    missing = [r for r in results if r.predicted_step_s is None]

    # ---- parity panel -------------------------------------------------------------------------
    if drawn:
        lo = min(min(r.published_step_s, r.predicted_step_s) for r in drawn) / 1.3
        hi = max(max(r.published_step_s, r.predicted_step_s) for r in drawn) * 1.3
        diag = [lo, hi]
        ax.fill_between(diag, [lo * (1 - worst_target / 100), hi * (1 - worst_target / 100)],
                        [lo * (1 + worst_target / 100), hi * (1 + worst_target / 100)],
                        color="#f2e3a6", alpha=0.6, lw=0,
                        label=f"±{worst_target:g} % (worst-row target)")
        ax.fill_between(diag, [lo * (1 - median_target / 100), hi * (1 - median_target / 100)],
                        [lo * (1 + median_target / 100), hi * (1 + median_target / 100)],
                        color="#b9dfb0", alpha=0.8, lw=0,
                        label=f"±{median_target:g} % (median target)")
        ax.plot(diag, diag, color="black", lw=0.8)
        for r in drawn:
            marker, filled = _marker(r, fitted)
            c = colour[group_of(r)]
            ax.scatter([r.published_step_s], [r.predicted_step_s], marker=marker, s=26,
                       facecolors=c if filled else "none", edgecolors=c, linewidths=0.9,
                       alpha=0.85, zorder=3)
            if not r.feasible:
                ax.scatter([r.published_step_s], [r.predicted_step_s], marker="x", s=70,
                           color="#d62728", linewidths=1.6, zorder=4)
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlim(lo, hi)
        ax.set_ylim(lo, hi)
    # legend: the row kinds (the groups are named on the error panel, in the same colours)
    kinds = ((("fitted row", "o", True), ("held-out row", "D", True)) if fitted
             else (("counted row", "o", True),))
    for label, marker, filled in kinds + (("shown, not counted", "o", False),):
        col = "#555555"
        ax.scatter([], [], marker=marker, s=26, facecolors=col if filled else "none",
                   edgecolors=col, label=label)
    ax.scatter([], [], marker="x", s=70, color="#d62728", linewidths=1.6,
               label="published layout the model calls infeasible")
    ax.set_xlabel("published step time (s, log)")
    ax.set_ylabel("predicted step time (s, log)")
    ax.set_title("predicted vs published step time", fontsize=10)
    ax.grid(True, which="major", color="#dddddd", lw=0.6)
    ax.legend(loc="upper left", fontsize=8, framealpha=0.9)

    # ---- error panel --------------------------------------------------------------------------
    n = len(groups)
    ax2.axvspan(-worst_target, worst_target, color="#f2e3a6", alpha=0.6, lw=0)
    ax2.axvspan(-median_target, median_target, color="#b9dfb0", alpha=0.8, lw=0)
    ax2.axvline(0.0, color="black", lw=0.8)
    for gi, g in enumerate(groups):
        y = n - 1 - gi  # first group at the top
        errs = [r for r in drawn if group_of(r) == g]
        for k, r in enumerate(errs):
            jitter = (k % 7 - 3) * 0.06
            e = 100.0 * r.error
            marker, filled = _marker(r, fitted)
            c = colour[g]
            if abs(e) > ERROR_CLIP:
                edge = ERROR_CLIP if e > 0 else -ERROR_CLIP
                ax2.scatter([edge], [y + jitter], marker=">" if e > 0 else "<", s=40,
                            color=c, zorder=3)
                ax2.annotate(f"{e:+.0f} %", (edge, y + jitter),
                             xytext=(-4 if e > 0 else 4, 5), textcoords="offset points",
                             ha="right" if e > 0 else "left", fontsize=7, color=c)
            else:
                ax2.scatter([e], [y + jitter], marker=marker, s=22,
                            facecolors=c if filled else "none", edgecolors=c, linewidths=0.9,
                            alpha=0.85, zorder=3)
            if not r.feasible:
                ax2.scatter([max(-ERROR_CLIP, min(ERROR_CLIP, e))], [y + jitter], marker="x",
                            s=60, color="#d62728", linewidths=1.5, zorder=4)
        s = stats[g]
        if s["median_error"] is not None:
            ax2.plot([100.0 * s["median_error"]] * 2, [y - 0.32, y + 0.32], color="black",
                     lw=2.2, zorder=5)
            text = (f"{100.0 * s['median_abs_error']:.1f} / {100.0 * s['worst_abs_error']:.1f} %"
                    f"  (n={s['counted']}"
                    + (f", {s['failed']} infeasible" if s["failed"] else "") + ")")
        else:
            text = f"no prediction (n={s['rows']})"
        ax2.annotate(text, (1.0, y), xycoords=("axes fraction", "data"), xytext=(6, -3),
                     textcoords="offset points", fontsize=8, color=colour[g],
                     annotation_clip=False)
    ax2.set_yticks(range(n))
    ax2.set_yticklabels(list(reversed(groups)), fontsize=8)
    for label, g in zip(ax2.get_yticklabels(), reversed(groups)):
        label.set_color(colour[g])
    ax2.set_ylim(-0.7, n - 0.3)
    ax2.set_xlim(-ERROR_CLIP * 1.08, ERROR_CLIP * 1.08)
    ax2.set_xlabel("error = predicted / published step time − 1 (%, negative: model optimistic)")
    ax2.set_title("error per row; black bar: median of the counted rows; right: median / worst "
                  "|error|", fontsize=10)
    ax2.grid(True, axis="x", color="#dddddd", lw=0.6)

    fig.suptitle(title, fontsize=12)
    if missing:
        names = ", ".join(f"{r.case} ({r.status})" for r in missing[:MAX_LISTED])
        more = f" and {len(missing) - MAX_LISTED} more" if len(missing) > MAX_LISTED else ""
        fig.text(0.01, 0.005, f"not drawn, no prediction: {names}{more}", fontsize=8,
                 color="#d62728")
    fig.tight_layout(rect=(0, 0.03 if missing else 0, 0.93, 0.96))
    fig.savefig(path)
    plt.close(fig)
    return stats
