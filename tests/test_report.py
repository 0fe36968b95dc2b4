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
