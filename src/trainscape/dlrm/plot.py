"""Per-rank load plot: stacked forward / backward lookups and all-to-all per rank (Agg).

The step-level figures (this plan's step time, the lower bound over every plan) are not
per-rank quantities, so they are not drawn across the per-rank bars: they get their own panel
on the right, on the same time unit."""

from __future__ import annotations

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402


def plot_rank_load(per_rank: dict, path: str, title: str = "",
                   lower_bound_s: float | None = None, step_time_s: float | None = None):
    """Write a stacked bar chart of each rank's lookup (fwd, bwd) and all-to-all time, in ms
    per step; beside it, the step-level panel: ``step_time_s`` of this plan and
    ``lower_bound_s`` (the bound on the step of any plan), when given."""
    lf = np.asarray(per_rank["lookup_fwd_s"]) * 1e3
    lb = np.asarray(per_rank["lookup_bwd_s"]) * 1e3
    a2a = np.asarray(per_rank["a2a_s"]) * 1e3
    x = np.arange(len(lf))
    step_level = [(n, v) for n, v in (("this plan's\nstep", step_time_s),
                                      ("lower bound\n(any plan)", lower_bound_s))
                  if v is not None]
    width = max(6.0, min(24.0, 0.12 * len(lf) + 4)) + (2.0 if step_level else 0.0)
    if step_level:
        fig, (ax, ax2) = plt.subplots(1, 2, figsize=(width, 4.5),
                                      gridspec_kw={"width_ratios": [max(3, len(lf) // 8), 1]})
    else:
        fig, ax = plt.subplots(figsize=(width, 4.5))
    ax.bar(x, lf, label="lookup fwd (compute)", color="#4c72b0", width=0.9)
    ax.bar(x, lb, bottom=lf, label="lookup bwd + update (compute)", color="#55a868", width=0.9)
    ax.bar(x, a2a, bottom=lf + lb, label="all-to-all (communication)", color="#dd8452",
           width=0.9)
    ax.set_xlabel("rank", fontsize=10)
    ax.set_ylabel("embedding time per rank (ms per step)", fontsize=10)
    ax.set_title("per-rank embedding load", fontsize=10)
    ax.legend(fontsize=8, loc="upper center", bbox_to_anchor=(0.5, -0.15), ncol=3)
    ax.grid(axis="y", alpha=0.3)
    if step_level:
        ax2.bar(range(len(step_level)), [v * 1e3 for _, v in step_level],
                color=["#8172b3", "#8c8c8c"][:len(step_level)], width=0.6)
        ax2.set_xticks(range(len(step_level)))
        ax2.set_xticklabels([n for n, _ in step_level], fontsize=8)
        ax2.set_ylabel("whole step (ms)", fontsize=10)
        ax2.set_title("step level", fontsize=10)
        ax2.grid(axis="y", alpha=0.3)
    fig.suptitle(title or "per-rank embedding load", fontsize=11)
    fig.savefig(path, dpi=110, bbox_inches="tight")
    plt.close(fig)
    return path
