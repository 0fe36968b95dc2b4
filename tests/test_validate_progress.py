"""``trainscape validate`` on long runs (issue 14, "long work"): a progress bar on a terminal,
nothing when piped or with ``--json``; Ctrl-C ends with exit 130 and one line, no traceback."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

from click.testing import CliRunner

from trainscape import calibration
from trainscape.cli import main

BAR = "rows"  # the bar's counter reads "<done>/<total> rows"


def _n_rows() -> int:
    return len(calibration.Runner().runs) + len(calibration.legacy.fitted_cases())


def test_progress_callback_counts_every_row_once_in_order():
    seen = []
    results, _ = calibration.validate(backend="c", progress=lambda d, t: seen.append((d, t)))
    totals = {t for _, t in seen}
    assert totals == {len(results)}
    assert [d for d, _ in seen] == list(range(len(results) + 1))  # 0, 1, ..., total


def test_no_progress_when_not_a_terminal():
    """CliRunner's stderr is not a terminal: no bar text, on stderr or stdout."""
    res = CliRunner().invoke(main, ["validate", "--backend", "c"])
    assert res.exit_code == 0, res.output
    assert f"/{_n_rows()} {BAR}" not in res.stderr + res.stdout
    assert res.stderr == ""


def test_bar_on_a_terminal_but_not_with_json(monkeypatch):
    """Where stderr is a terminal the bar shows; --json keeps stdout pure JSON and stderr
    empty even there."""
    from trainscape import progress

    monkeypatch.setattr(progress, "stderr_is_terminal", lambda: True)
    n = _n_rows()
    res = CliRunner().invoke(main, ["validate", "--backend", "c"])
    assert res.exit_code == 0, res.output
    assert f"{n}/{n} {BAR}" in res.stderr
    res = CliRunner().invoke(main, ["validate", "--json", "--backend", "c"])
    assert res.exit_code == 0, res.output
    json.loads(res.stdout)
    assert res.stderr == ""
    res = CliRunner().invoke(main, ["validate", "--backend", "c", "--no-progress"])
    assert res.exit_code == 0 and res.stderr == ""


def test_progress_bar_shows_the_row_count_when_asked():
    n = _n_rows()
    res = CliRunner().invoke(main, ["validate", "--backend", "c", "--progress"])
    assert res.exit_code == 0, res.output
    assert f"{n}/{n} {BAR}" in res.stderr
    assert f"/{n} {BAR}" not in res.stdout


def test_progress_is_wanted_on_a_terminal_only(monkeypatch):
    from trainscape import progress

    monkeypatch.setattr(progress, "stderr_is_terminal", lambda: True)
    assert progress.wanted() is True
    assert progress.wanted(as_json=True) is False
    assert progress.wanted(flag=False) is False
    monkeypatch.setattr(progress, "stderr_is_terminal", lambda: False)
    assert progress.wanted() is False
    assert progress.wanted(flag=True) is True


def test_keyboard_interrupt_is_exit_130_with_one_line(monkeypatch):
    real = calibration.Runner.cost
    calls = []

    def cost(self, run, backend=None):
        calls.append(1)
        if len(calls) == 5:
            raise KeyboardInterrupt
        return real(self, run, backend=backend)

    monkeypatch.setattr(calibration.Runner, "cost", cost)
    res = CliRunner().invoke(main, ["validate", "--backend", "c"])
    assert res.exit_code == 130
    lines = res.stderr.strip().splitlines()
    n_legacy = len(calibration.legacy.fitted_cases())
    assert lines == [f"validate: interrupted after {n_legacy + 4} of {_n_rows()} rows "
                     "(nothing written)"]
    assert "Traceback" not in res.output and res.stdout == ""


CHILD = r"""
import sys, time
from trainscape import calibration
from trainscape.cli import main
real = calibration.Runner.cost
marker = sys.argv[1]
def cost(self, run, backend=None):
    open(marker, "w").close()  # the parent may now interrupt
    time.sleep(0.05)
    return real(self, run, backend=backend)
calibration.Runner.cost = cost
sys.argv = ["trainscape", "validate", "--backend", "c"]
main()
"""


def test_sigint_during_validate_exits_130_without_traceback(tmp_path):
    """A real SIGINT (Ctrl-C) to a running ``trainscape validate``, rows slowed down so the
    signal lands mid-run."""
    marker = tmp_path / "started"
    proc = subprocess.Popen([sys.executable, "-c", CHILD, str(marker)], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 120
    while not marker.exists() and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.02)
    assert marker.exists(), proc.communicate()
    os.kill(proc.pid, signal.SIGINT)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, err
    assert "Traceback" not in err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("validate: interrupted after "), err
    assert out == ""
