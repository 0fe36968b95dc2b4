"""Per-rank load plot: stacked forward / backward lookups and all-to-all per rank (Agg)."""

from __future__ import annotations

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402


def plot_rank_load(per_rank: dict, path: str, title: str = "", lower_bound_s: float | None = None):
    """Write a stacked bar chart of each rank's lookup (fwd, bwd) and all-to-all seconds."""
    lf = np.asarray(per_rank["lookup_fwd_s"]) * 1e3
    lb = np.asarray(per_rank["lookup_bwd_s"]) * 1e3
    a2a = np.asarray(per_rank["a2a_s"]) * 1e3
    x = np.arange(len(lf))
    fig, ax = plt.subplots(figsize=(max(6.0, min(24.0, 0.12 * len(lf) + 4)), 4.0))
    ax.bar(x, lf, label="lookup fwd (compute)", color="#4c72b0", width=0.9)
    ax.bar(x, lb, bottom=lf, label="lookup bwd + update (compute)", color="#55a868", width=0.9)
    ax.bar(x, a2a, bottom=lf + lb, label="all-to-all (communication)", color="#dd8452",
           width=0.9)
    if lower_bound_s is not None:
        ax.axhline(lower_bound_s * 1e3, color="k", ls="--", lw=1, label="lower bound (step)")
    ax.set_xlabel("rank")
    ax.set_ylabel("ms per step")
    ax.set_title(title or "per-rank embedding load")
    ax.legend(fontsize=8, loc="upper right")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path
