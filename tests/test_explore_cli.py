"""The sweep / search / explore commands: results files, reports with plots, one-line errors."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from trainscape.cli import main
from trainscape.explore.report import read_records

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"
GPT3 = str(EXAMPLES / "gpt3-175b-a100.toml")


@pytest.fixture(scope="module")
def cli():
    return main


def run(cli, *args):
    return CliRunner().invoke(cli, [str(a) for a in args], catch_exceptions=False)


@pytest.mark.parametrize("suffix", [".parquet", ".csv", ".json"])
def test_sweep_writes_results_by_suffix(cli, tmp_path, suffix):
    out = tmp_path / f"res{suffix}"
    r = run(cli, "sweep", GPT3, "--top", 3, "--out", out, "--checkpoint", tmp_path / "ck.npz")
    assert r.exit_code == 0, r.output
    assert f"results written to {out}" in r.output
    recs = read_records(out)
    kinds = [x["kind"] for x in recs]
    assert kinds.count("top") == 3 and "pareto" in kinds
    assert all(x["feasible"] in (True, "True", "true") for x in recs)
    steps = [float(x["step_time_s"]) for x in recs if x["kind"] == "top"]
    assert steps == sorted(steps)


def test_sweep_of_a_big_space_says_how_long_and_what_else(cli, tmp_path, monkeypatch):
    """Above SWEEP_HINT_SIZE the sweep says how long it should take at the documented rate and
    points to search; --json output stays pure JSON."""
    import trainscape
    import trainscape.cli.explore as E
    from trainscape.space import design_space

    size = design_space(trainscape.load(GPT3)).size
    monkeypatch.setattr(E, "SWEEP_HINT_SIZE", size - 1)
    r = run(cli, "sweep", GPT3, "--top", 1, "--threads", 2, "--checkpoint", tmp_path / "a.npz")
    assert r.exit_code == 0, r.output
    minutes = size / (E.SWEEP_RATE_PER_CORE * 2) / 60
    assert f"note: sweeping {size:,} configurations takes about {minutes:,.0f} min on 2 core(s)" \
        in r.output and "`trainscape search`" in r.output
    j = run(cli, "sweep", GPT3, "--top", 1, "--json", "--checkpoint", tmp_path / "b.npz")
    assert j.exit_code == 0 and json.loads(j.output)["space_size"] == size
    monkeypatch.setattr(E, "SWEEP_HINT_SIZE", size)
    q = run(cli, "sweep", GPT3, "--top", 1, "--checkpoint", tmp_path / "c.npz")
    assert "note: sweeping" not in q.output


def test_plain_sweep_and_search_rows_carry_their_hardware(cli, tmp_path):
    """Every row says what it was costed on (the columns co-design uses): the GPU preset and
    count, in the --out file and in --json, for sweep and search alike."""
    out = tmp_path / "r.csv"
    r = run(cli, "sweep", GPT3, "--top", 2, "--out", out, "--checkpoint", tmp_path / "k.npz")
    assert r.exit_code == 0, r.output
    recs = read_records(out)
    assert recs and all(x["cluster.gpu"] == "a100-sxm-80gb" and x["cluster.gpus"] == 1536
                        for x in recs)
    j = run(cli, "search", GPT3, "--budget", 100, "--json")
    doc = json.loads(j.output)
    rows = doc["top"] + doc["pareto"] + doc["best_by_order"]
    assert rows and all(x["cluster.gpu"] == "a100-sxm-80gb" and x["cluster.gpus"] == 1536
                        for x in rows)


def test_sweep_json_and_resume(cli, tmp_path):
    ck = tmp_path / "ck.npz"
    a = run(cli, "sweep", GPT3, "--json", "--checkpoint", ck)
    b = run(cli, "sweep", GPT3, "--json", "--checkpoint", ck, "--resume")
    assert a.exit_code == 0 and b.exit_code == 0, a.output + b.output
    ja, jb = json.loads(a.output), json.loads(b.output)
    assert [x["index"] for x in ja["top"]] == [x["index"] for x in jb["top"]]
    assert ja["evaluated"] == jb["evaluated"] == ja["space_size"]


def test_search_is_reproducible_from_the_command_line(cli):
    args = ("search", GPT3, "--method", "beam", "--seed", 5, "--budget", 150, "--json")
    a, b = run(cli, *args), run(cli, *args)
    assert a.exit_code == 0, a.output
    assert json.loads(a.output)["top"] == json.loads(b.output)["top"]
    e = run(cli, "search", GPT3, "--method", "evolve", "--multi-objective", "--budget", 150)
    assert e.exit_code == 0, e.output
    assert "Pareto front" in e.output


def test_explore_without_argument_writes_plots(cli, tmp_path):
    d = tmp_path / "report"
    r = run(cli, "explore", "--out-dir", d)
    assert r.exit_code == 0, r.output
    assert "built-in" in r.output and f"report written to {d}" in r.output
    for name in ("pareto.png", "breakdown.png", "orders.png"):
        p = d / name
        assert p.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and p.stat().st_size > 5000
        assert str(p) in r.output
    assert len(read_records(d / "results.parquet")) > 0


@pytest.mark.parametrize("args, message", [
    (("sweep", GPT3, "--set", "space.foo=[1]"), "space.foo"),
    (("sweep", GPT3, "--set", "space.tp=[3]"), "space: empty design space"),
    (("sweep", GPT3, "--set", "cluster.gpu.hbm_gb=6"), "space: no feasible configuration"),
    (("search", GPT3, "--set", "cluster.gpu.hbm_gb=6"), "space: no feasible configuration"),
    (("sweep", GPT3, "--out", "x.xlsx"), "--out: unknown results format"),
    (("sweep", GPT3, "--objective", "speed"), "--objective: unknown objective"),
    (("sweep", GPT3, "--top", 0), "'--top': 0 is not in the range 1<=x<=100000"),
    (("explore", "no-such-file.toml"), "no-such-file.toml: file not found"),
])
def test_bad_input_is_one_line_exit_2(cli, args, message, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    r = CliRunner().invoke(cli, [str(a) for a in args])
    assert r.exit_code == 2, r.output
    err_lines = [ln for ln in r.output.splitlines() if ln.startswith("Error:")]
    assert len(err_lines) == 1 and message in err_lines[0], r.output


def test_report_folder_name_keeps_whole_words():
    from types import SimpleNamespace

    from trainscape.explore.main import default_report_dir

    name = "Llama-3-405B-class model on 16K H100 GPUs in two buildings"
    assert default_report_dir(SimpleNamespace(name=name)).name == (
        "llama-3-405b-class-model-on-16k-h100-gpus-in-two-buildings")
    long = " ".join(["wordy"] * 40)
    got = default_report_dir(SimpleNamespace(name=long)).name
    assert len(got) <= 96 and got.endswith("wordy") and got.startswith("wordy-wordy")
