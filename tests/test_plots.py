"""Every report plot renders from each example scenario (matplotlib Agg) with what a reader
needs: a title naming the scenario, labelled axes with units, a legend that covers no data
(outside the axes), the Pareto plot's cloud of feasible points, front and the scenario's
[config]; the orders plot's axis starts near the fastest; the HTML report embeds the plots."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import trainscape
from trainscape import layout as L
from trainscape.explore import plots
from trainscape.explore.report import write_report
from trainscape.explore.sweep import run_sweep

EXAMPLES = sorted(Path(__file__).resolve().parents[1].glob("examples/*.toml"))


@pytest.fixture(scope="module", params=EXAMPLES, ids=lambda p: p.stem)
def swept(request):
    sc = trainscape.load(request.param)
    return sc, run_sweep(sc, top=10, backend="numba", workers=1)


def _capture(monkeypatch):
    """Keep each figure open long enough to inspect it (savefig still writes the file)."""
    import matplotlib.pyplot as plt

    figs = []
    real_close = plt.close
    monkeypatch.setattr(plt, "close", lambda fig=None: figs.append(fig))
    return figs, real_close


def test_report_writes_every_plot_and_the_html(swept, tmp_path):
    sc, res = swept
    paths = write_report(res, tmp_path, sc)
    for key in ("pareto_plot", "breakdown_plot", "orders_plot"):
        p = paths[key]
        assert p.stat().st_size > 10_000
        assert p.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    html = paths["html"].read_text()
    assert html.count("data:image/png;base64,") == 3
    captions = paths["captions"].read_text()
    assert "pareto.png" in captions and "orders.png" in captions and "MFU" in captions


def test_pareto_plot_draws_cloud_front_and_config(swept, tmp_path, monkeypatch):
    sc, res = swept
    figs, close = _capture(monkeypatch)
    plots.plot_pareto(res, tmp_path / "p.png", 80.0, sc)
    ax = figs[0].axes[0]
    assert sc.name in ax.get_title()
    assert "GiB" in ax.get_xlabel() and "(s)" in ax.get_ylabel()
    labels = [t.get_text() for t in ax.get_legend().get_texts()]
    assert any("feasible configurations" in t for t in labels)
    assert any(t.startswith("Pareto front") for t in labels)
    assert any("scenario's [config]" in t for t in labels)
    # the cloud holds every feasible configuration of these small spaces
    mem, step, sampled = plots.feasible_cloud(sc)
    cloud = [c for c in ax.collections if c.get_label().endswith("feasible configurations")][0]
    assert len(cloud.get_offsets()) == len(mem) >= res.feasible > 0 and not sampled
    # the front is drawn through its points (a line whose vertices are exactly the points)
    line = ax.get_lines()[0]
    front = res.front.out
    assert np.allclose(line.get_xdata(), front[L.OUT_MEMORY_GIB]) and len(line.get_xdata()) == front.shape[1]
    # the legend sits outside the axes: it covers no data
    fig = figs[0]
    fig.canvas.draw()
    lb = ax.get_legend().get_window_extent()
    assert lb.x0 >= ax.get_window_extent().x1
    close(fig)


def test_orders_axis_starts_near_the_fastest(swept, tmp_path, monkeypatch):
    sc, res = swept
    figs, close = _capture(monkeypatch)
    plots.plot_orders(res, tmp_path / "o.png")
    ax = figs[0].axes[0]
    best = res.by_order.out[L.OUT_STEP_TIME_S].min()
    lo, hi = ax.get_xlim()
    assert 0 < lo < best < hi
    assert sc.name in ax.get_title() and "(s" in ax.get_xlabel()
    close(figs[0])


def test_breakdown_legend_beside_bars_and_readable_ticks(swept, tmp_path, monkeypatch):
    sc, res = swept
    figs, close = _capture(monkeypatch)
    plots.plot_breakdown(res, tmp_path / "b.png")
    fig = figs[0]
    ax = fig.axes[0]
    fig.canvas.draw()
    assert ax.get_legend().get_window_extent().x0 >= ax.get_window_extent().x1
    assert min(t.get_fontsize() for t in ax.get_xticklabels()) >= 8
    assert "seconds" in ax.get_ylabel() and sc.name in ax.get_title()
    # the legend names the terms as the terminal report does, in their short form
    from trainscape.report import TERM_LABELS

    short = {pair[1] for pair in TERM_LABELS.values()}
    labels = [t.get_text() for t in ax.get_legend().get_texts()]
    assert labels and set(labels) <= short
    close(fig)


def test_dlrm_rank_plot_keeps_step_level_figures_apart(tmp_path, monkeypatch):
    """The DLRM plot from the 8-GPU Criteo example: per-rank bars on one axes, the plan's step
    and the lower bound (step-level) on their own axes, never a line across the rank bars."""
    from click.testing import CliRunner

    from trainscape.cli import main

    figs, close = _capture(monkeypatch)
    ex = Path(__file__).resolve().parents[1] / "examples" / "dlrm" / "criteo_1tb_8gpu.toml"
    out = tmp_path / "load.png"
    r = CliRunner().invoke(main, ["shard", str(ex), "--method", "greedy", "--plot", str(out)])
    assert r.exit_code == 0, r.output
    assert out.stat().st_size > 10_000
    ranks, step_level = figs[-1].axes
    assert len(ranks.patches) == 3 * 8 and not ranks.get_lines()  # 3 stacked parts x 8 ranks
    assert "ms" in ranks.get_ylabel() and "ms" in step_level.get_ylabel()
    assert len(step_level.patches) == 2
    close(figs[-1])
