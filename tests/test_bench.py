"""The throughput bench (``trainscape bench`` / ``bench/throughput.py``) reports what it says:
configs/s per loaded backend on one thread and on all cores, with and without the memo-free
chunking. Rates are not asserted (machines are shared); their presence and shape are."""

from __future__ import annotations

import json
import math

from click.testing import CliRunner

from trainscape.cli import bench as bench_cli
from trainscape.backends import available_backends

LOADED = [b for b, (ok, _) in available_backends().items() if ok]


def _check(res):
    assert sorted(res) == sorted(LOADED)
    for rates in res.values():
        assert set(rates) == {"1", "all"}
        assert all(math.isfinite(r) and r > 0 for r in rates.values())


def test_measure_reports_every_loaded_backend_with_and_without_memo():
    for memo in (True, False):
        _check(bench_cli.measure(n=20_000, python_n=20, min_time=0.01, repeat=1, memo=memo))


def test_independent_processes_yardstick_is_measured_and_shown():
    native = [b for b in LOADED if b != "python"]
    res = bench_cli.measure(n=20_000, python_n=20, min_time=0.01, repeat=1, backends=native[:1],
                            independent=True)
    rates = res[native[0]]
    assert set(rates) == {"1", "all", "procs"}
    assert all(math.isfinite(r) and r > 0 for r in rates.values())
    table = bench_cli.format_table({**res, "python": {"1": 1.0e4, "all": 1.0e4}}, 20_000, 2)
    line = next(x for x in table.splitlines() if x.startswith(native[0]))
    assert f"{100 * rates['all'] / rates['procs']:.0f}%" in line
    assert "2 processes" in table


def test_no_memo_table_says_how_the_batch_was_cut():
    res = {"c": {"1": 2.0e6, "all": 3.0e6}, "python": {"1": 1.0e4, "all": 1.0e4}}
    table = bench_cli.format_table(res, 20_000, 2, memo=False)
    assert f"in calls of {bench_cli.NO_MEMO_CHUNK:,} (no memo)" in table
    assert "200" in table  # the ratio of c (one thread) to the reference


def test_bench_command_prints_json(monkeypatch):
    monkeypatch.setattr(bench_cli, "measure",
                        lambda **kw: {"python": {"1": 1.0, "all": 1.0}, "kw": kw})
    out = CliRunner().invoke(bench_cli._click_command(), ["--json", "--no-memo", "-n", "100"])
    assert out.exit_code == 0, out.output
    got = json.loads(out.output)
    assert got["kw"]["memo"] is False and got["kw"]["n"] == 100
    assert got["kw"]["independent"] is True
    out = CliRunner().invoke(bench_cli._click_command(), ["--json", "--no-independent"])
    assert json.loads(out.output)["kw"]["independent"] is False
