"""The step-time breakdown's labels: one table (``report.TERM_LABELS``) that the terminal
report and the plots both read, covering every breakdown column."""

from __future__ import annotations

from trainscape import layout as L
from trainscape.report import TERM_LABELS


def test_every_breakdown_column_has_a_report_label_and_a_shorter_legend_label():
    assert set(TERM_LABELS) == set(L.BREAKDOWN_FIELDS)
    for long, short in TERM_LABELS.values():
        assert long and short and len(short) <= len(long)
    assert len({long for long, _ in TERM_LABELS.values()}) == len(TERM_LABELS)
    assert len({short for _, short in TERM_LABELS.values()}) == len(TERM_LABELS)


def test_the_memory_table_says_what_full_recompute_holds():
    """Full recompute of every layer holds the layer inputs and the layer being rebuilt
    (model.llm.recompute_working_set); the report says so, and not for block recompute or
    none."""
    from pathlib import Path

    from rich.console import Console

    import trainscape
    from trainscape.report import render_result

    gpt3 = Path(__file__).resolve().parents[1] / "examples" / "gpt3-175b-a100.toml"

    def text(*overrides):
        sc = trainscape.load(gpt3, overrides=list(overrides))
        console = Console(width=200, record=True)
        console.print(render_result(trainscape.evaluate(sc), sc))
        return console.export_text()

    said = "the layer being rebuilt"
    assert said in text("config.recompute=full")
    assert said not in text("config.recompute=full", "job.recompute_layers=2")
    assert said not in text("config.recompute=none")
