"""A progress bar for long commands: a rich bar on stderr when it is wanted (a terminal, no
``--json``), nothing at all otherwise -- the same behaviour as ``sweep``'s bar
(:class:`trainscape.explore.sweep._Progress`). Usable as a ``progress(done, total)`` callback.
rich is imported only when the bar is shown, so ``import trainscape`` stays light."""

from __future__ import annotations

import sys


def stderr_is_terminal() -> bool:
    return sys.stderr.isatty()


def wanted(as_json: bool = False, flag: bool | None = None) -> bool:
    """Show a bar? ``flag`` (``--progress/--no-progress``) wins; else only on a terminal and
    never with ``--json`` (machine output stays clean)."""
    if flag is not None:
        return flag
    return not as_json and stderr_is_terminal()


class Bar:
    """``with Bar(enabled, "validate", "rows") as bar: work(progress=bar)``: ``bar(done, total)``
    moves the bar; the bar stops (and stays on screen) when the block ends, also on Ctrl-C."""

    def __init__(self, enabled: bool, label: str, unit: str):
        self.enabled = enabled
        self.label = label
        self.unit = unit
        self._bar = None
        self._task = None

    def __enter__(self) -> "Bar":
        if self.enabled:
            from rich.console import Console
            from rich.progress import (BarColumn, Progress, TextColumn, TimeElapsedColumn,
                                       TimeRemainingColumn)

            self._bar = Progress(
                TextColumn(self.label), BarColumn(),
                TextColumn("{task.completed:,.0f}/{task.total:,.0f} " + self.unit),
                TimeElapsedColumn(), TextColumn("left"), TimeRemainingColumn(),
                console=Console(stderr=True), transient=False)
            self._bar.start()
        return self

    def __call__(self, done: int, total: int) -> None:
        if self._bar is None:
            return
        if self._task is None:
            self._task = self._bar.add_task(self.label, total=total, completed=done)
        else:
            self._bar.update(self._task, completed=done, total=total)

    def __exit__(self, *exc) -> None:
        if self._bar is not None:
            self._bar.stop()
            self._bar = None
