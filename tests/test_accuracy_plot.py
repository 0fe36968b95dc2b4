"""The accuracy figure of ``trainscape validate --plot`` (and ``scripts/transfer_check.py
--plot``): what it prints per group is what validate reports, every row kind is drawable, and
bad paths end in exit 2 naming ``--plot`` before any work."""

import statistics

import pytest
from click.testing import CliRunner

from trainscape.calibration import Result, summarize
from trainscape.calibration.plots import ERROR_CLIP, plot_accuracy, plot_path_problem
from trainscape.cli import main

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def _row(group, case, published, predicted, counted=True, holdout=False, status="ok"):
    return Result(source=group, group=group, case=case, gpu="h100-sxm-80gb", dtype="bf16",
                  stack="megatron-core", published_metric="step_time_s",
                  published_value=published, published_step_s=published,
                  predicted_step_s=predicted, status=status, config={}, counted=counted,
                  holdout=holdout)


ROWS = [
    _row("a", "a1", 10.0, 10.3),
    _row("a", "a2", 2.0, 1.9, holdout=True),
    _row("a", "a3", 5.0, 4.0, counted=False),          # shown, not counted
    _row("b", "b1", 1.0, 2.5),                         # +150 %: beyond the clip
    _row("b", "b2", 3.0, 3.3, status="out_of_memory"),
    _row("c", "c1", 4.0, None, status="invalid_config"),
]


def test_group_figures_are_validates_over_counted_rows():
    # the plot prints validate's own summary, here by a grouping of the caller's choice
    stats = summarize(ROWS, lambda r: r.group)
    assert stats == summarize(ROWS)
    assert list(stats) == ["a", "b", "c"]  # order of first appearance
    a = stats["a"]
    # the not-counted a3 (-20 %) is left out of the figures but counted in the rows
    assert (a["rows"], a["counted"], a["failed"]) == (3, 2, 0)
    assert a["median_abs_error"] == pytest.approx(statistics.median([0.03, 0.05]))
    assert a["worst_abs_error"] == pytest.approx(0.05)
    assert a["median_error"] == pytest.approx(statistics.median([0.03, -0.05]))
    b = stats["b"]
    assert (b["counted"], b["failed"]) == (2, 1)  # an OOM row with a prediction still counts
    assert b["worst_abs_error"] == pytest.approx(1.5) and 150.0 > ERROR_CLIP
    c = stats["c"]
    assert (c["counted"], c["failed"], c["median_abs_error"]) == (1, 1, None)
    # another grouping: one group of all rows
    assert summarize(ROWS, lambda r: "all")["all"]["rows"] == len(ROWS)


@pytest.mark.parametrize("suffix", [".png", ".svg", ".pdf"])
def test_every_row_kind_draws(tmp_path, suffix):
    path = tmp_path / f"acc{suffix}"
    stats = plot_accuracy(ROWS, path, "test")
    assert stats == summarize(ROWS)
    data = path.read_bytes()
    assert len(data) > 5000
    if suffix == ".png":
        assert data.startswith(PNG_MAGIC)
    elif suffix == ".pdf":
        assert data.startswith(b"%PDF")
    else:
        assert b"<svg" in data[:2000]


def test_unsupported_suffix_and_no_rows_are_refused(tmp_path):
    with pytest.raises(ValueError, match="unsupported suffix"):
        plot_accuracy(ROWS, tmp_path / "acc.jpg", "test")
    with pytest.raises(ValueError, match="does not exist"):
        plot_accuracy(ROWS, tmp_path / "no" / "acc.png", "test")
    assert plot_path_problem(tmp_path / "acc.svg") is None
    with pytest.raises(ValueError, match="no rows"):
        plot_accuracy([], tmp_path / "acc.png", "test")


def test_validate_writes_the_figure_and_keeps_json_clean(tmp_path):
    path = tmp_path / "validate.png"
    result = CliRunner().invoke(
        main, ["validate", "--json", "--backend", "c", "--source", "megatron_sc21_table1",
               "--plot", str(path)])
    assert result.exit_code == 0, result.output
    assert result.stdout.lstrip().startswith("{")  # the JSON alone on stdout
    assert f"wrote {path}" in result.stderr
    assert path.read_bytes().startswith(PNG_MAGIC)


@pytest.mark.parametrize("arg, words", [
    ("acc.jpg", "unsupported suffix"),
    ("no/such/dir/acc.png", "does not exist"),
])
def test_validate_bad_plot_path_is_exit_2_naming_the_option(tmp_path, monkeypatch, arg, words):
    monkeypatch.chdir(tmp_path)
    result = CliRunner().invoke(main, ["validate", "--backend", "c", "--plot", arg])
    assert result.exit_code == 2, result.output
    assert "--plot" in result.output and words in result.output
    assert "Traceback" not in result.output
