"""Command-line option types with documented ranges (the edge for options, as
:mod:`trainscape.spec.ranges` is for scenario fields).

click reports a value outside these as ``Invalid value for '--top': ...`` with exit code 2,
naming the option and the range. ``click.FloatRange`` alone lets ``nan`` through (every
comparison with NaN is false) and ``inf`` through an open upper end: :class:`FiniteFloat`
refuses both.
"""

from __future__ import annotations

import math

import click

from ..spec import ranges as R

#: Largest ``--top`` (best configurations kept per worker and merged): 10^5.
MAX_TOP = 100_000
#: Largest ``--budget`` of a search (distinct configurations evaluated): 10^8.
MAX_BUDGET = 10**8
#: Largest ``--threads``: 4096.
MAX_THREADS = 4096
#: Longest ``--time-budget`` of explore, in seconds: 10^6.
MAX_TIME_BUDGET = R.MAX_SECONDS


class FiniteFloat(click.FloatRange):
    """A FloatRange that also refuses ``nan`` and ``inf``."""

    name = "finite float range"

    def convert(self, value, param, ctx):
        rv = click.FLOAT.convert(value, param, ctx)
        if not math.isfinite(rv):
            self.fail(f"{value!r} is not a finite number (allowed: {self._describe_range()}).",
                      param, ctx)
        return super().convert(rv, param, ctx)


TOP = click.IntRange(1, MAX_TOP)
SEED = click.IntRange(0, R.MAX_SEED)
BUDGET = click.IntRange(1, MAX_BUDGET)
WIDTH = click.IntRange(1, R.MAX_BEAM)
THREADS = click.IntRange(1, MAX_THREADS)
ITERATIONS = click.IntRange(1, R.MAX_ITERATIONS)
TIME_BUDGET = FiniteFloat(0.1, MAX_TIME_BUDGET)
TIME_LIMIT = FiniteFloat(0.0, R.MAX_SECONDS, min_open=True)


def check_suffix(path: str | None, option: str, suffixes: tuple[str, ...]) -> None:
    """``--out plan.xlsx`` where only ``.json`` is written: a bad-parameter error (exit 2)."""
    if path is None:
        return
    low = path.lower()
    if not low.endswith(suffixes):
        raise click.BadParameter(f"{path!r} has an unsupported suffix (allowed: "
                                 f"{', '.join(suffixes)}).", param_hint=f"'{option}'")


class Path(click.Path):
    """click.Path that refuses a NUL byte with a message (``os.stat`` raises ValueError on one,
    which click does not catch; only reachable from Python, argv cannot hold NUL)."""

    def convert(self, value, param, ctx):
        if isinstance(value, str) and "\x00" in value:
            self.fail(f"{value!r} contains a NUL byte (allowed: a file path).", param, ctx)
        return super().convert(value, param, ctx)
