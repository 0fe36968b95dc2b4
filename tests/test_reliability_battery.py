"""A battery of bad and extreme inputs run through the command line (issue 14).

Every case must keep the reliability contract (``fuzzkit.check_result``): exit status 2 with
one ``Error: <where>: <problem>`` line and no traceback, or exit status 0 with a finite answer.
Cases built from a field path also check that the message names that path (or option), so
an error blaming the wrong field fails here. Each class of failure the issue lists has cases
below (tracebacks, lies, hangs, silent acceptance); ``test_battery_size`` keeps the battery at
100 cases or more.
"""

from __future__ import annotations

import json
import math
import os
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
import fuzzkit as F  # noqa: E402

GPT3 = str(F.EXAMPLES / "gpt3-175b-a100.toml")
MIXTRAL = str(F.EXAMPLES / "mixtral-8x7b-moe.toml")

# --------------------------------------------------------------------------------------------
# 1. Every numeric field of an LLM scenario, each with values outside its documented range
# --------------------------------------------------------------------------------------------

FIELDS = (
    "cluster.gpus", "cluster.tiers[0].size", "cluster.tiers[1].bandwidth_GBps",
    "cluster.tiers[1].latency_us", "cluster.tiers[1].efficiency",
    "cluster.tiers[1].oversubscription", "cluster.gpu.hbm_gb", "cluster.gpu.gemm_half_flops",
    "cluster.gpu.peak_tflops.bf16", "cluster.gpu.memory_efficiency",
    "cluster.gpu.attention_half_seq", "cluster.gpu.hbm_bandwidth_GBps", "model.layers",
    "model.hidden", "job.seq_len", "job.global_batch", "config.dp", "config.tp",
    "cluster.gpu.step_overhead_ms",
)
#: values no numeric field accepts (TOML as --set reads it)
BAD = ("-1", "nan", "inf", "-inf", "1e308", "4294967296e300", "\"x\"", "[1]", "{a = 1}")

FIELD_CASES = [(f, v) for f in FIELDS for v in BAD]


@pytest.mark.parametrize("field, value", FIELD_CASES, ids=[f"{f}={v}" for f, v in FIELD_CASES])
def test_bad_field_value_names_the_field(field, value):
    code, out, err, violation = F.run_cli(["evaluate", GPT3, "--set", f"{field}={value}",
                                           "--json"])
    assert violation is None, violation
    assert code == 2, out
    assert err.strip().splitlines()[-1].startswith(f"Error: {field}"), err


# the int32 / subnormal / overflow cases the issue found, each through the command that broke
ISSUE_CASES = [
    (["evaluate", GPT3, "--set", "cluster.tiers[1].bandwidth_GBps=1e308"],
     "cluster.tiers[1].bandwidth_GBps"),
    (["sweep", GPT3, "--set", "cluster.tiers[1].bandwidth_GBps=1e308", "--no-progress"],
     "cluster.tiers[1].bandwidth_GBps"),
    (["evaluate", GPT3, "--config", "dp=4294967296"], "config.dp"),
    (["evaluate", GPT3, "--set", "config.dp=4294967296"], "config.dp"),
    (["evaluate", GPT3, "--set", "cluster.gpu.gemm_half_flops=1e308", "--json"],
     "cluster.gpu.gemm_half_flops"),
    (["evaluate", GPT3, "--set", "cluster.tiers[1].efficiency=1e-310"],
     "cluster.tiers[1].efficiency"),
    (["evaluate", GPT3, "--set", "cluster.tiers[1].efficiency=5e-324", "--json"],
     "cluster.tiers[1].efficiency"),
    (["sweep", GPT3, "--set", "cluster.tiers[1].efficiency=1e-310", "--no-progress"],
     "cluster.tiers[1].efficiency"),
    (["evaluate", GPT3, "--config", "tp=3"], "config.tp"),
    (["evaluate", GPT3, "--config", "tp=x"], "config.tp"),
    (["evaluate", GPT3, "--config", "tp"], "--config"),
    (["evaluate", GPT3, "--set", "cluster.tiers[9].size=1"], "cluster.tiers[9]"),
    (["evaluate", GPT3, "--set", "config.tp=[1]"], "config.tp"),
    (["evaluate", GPT3, "--set", "cluster.tiers=3"], "cluster.tiers"),
    (["evaluate", GPT3, "--set", "space.tp=[0]"], "space.tp[0]"),
    (["evaluate", GPT3, "--set", "a..b=1"], "--set"),
    (["evaluate", GPT3, "--set", "x=" + "[" * 200 + "]" * 200], "--set"),
    (["sweep", GPT3, "--top", "10000000000"], "'--top'"),
    (["sweep", GPT3, "--top", "0"], "'--top'"),
    (["sweep", GPT3, "--top", "1e10"], "'--top'"),
    (["sweep", GPT3, "--threads", "0"], "'--threads'"),
    (["search", GPT3, "--seed", "-1"], "'--seed'"),
    (["search", GPT3, "--seed", "18446744073709551616"], "'--seed'"),
    (["search", GPT3, "--budget", "0"], "'--budget'"),
    (["search", GPT3, "--budget", "1000000000000"], "'--budget'"),
    (["search", GPT3, "--width", "0"], "'--width'"),
    (["explore", GPT3, "--time-budget", "nan"], "'--time-budget'"),
    (["explore", GPT3, "--time-budget", "inf"], "'--time-budget'"),
    (["explore", GPT3, "--time-budget", "-1"], "'--time-budget'"),
    (["explore", GPT3, "--seed", "-1"], "'--seed'"),
    (["sweep", GPT3, "--out", "x.xlsx"], "--out"),
    (["sweep", GPT3, "--objective", "speed"], "--objective"),
]


@pytest.mark.parametrize("args, where", ISSUE_CASES, ids=[" ".join(a[::2])[:60] + w
                                                          for a, w in ISSUE_CASES])
def test_issue_cases_exit_2_naming_the_field(args, where):
    code, out, err, violation = F.run_cli(args)
    assert violation is None, violation
    assert code == 2, out
    last = err.strip().splitlines()[-1]
    assert where in last, last


# --------------------------------------------------------------------------------------------
# 2. Extreme but valid: finite, honest answers (or a located error), never NaN / Infinity
# --------------------------------------------------------------------------------------------

EXTREME_VALID = [
    ("cluster.tiers[1].bandwidth_GBps", "1e7"), ("cluster.tiers[1].bandwidth_GBps", "1e-300"),
    ("cluster.tiers[1].efficiency", "1e-6"), ("cluster.tiers[0].efficiency", "1e-6"),
    ("cluster.tiers[1].latency_us", "1e9"), ("cluster.tiers[1].latency_us", "0"),
    ("cluster.tiers[1].oversubscription", "1e6"), ("cluster.gpu.gemm_half_flops", "1e18"),
    ("cluster.gpu.gemm_half_flops", "0"), ("cluster.gpu.gemm_efficiency_max", "1e-6"),
    ("cluster.gpu.attention_efficiency", "1e-6"), ("cluster.gpu.memory_efficiency", "1e-6"),
    ("cluster.gpu.peak_tflops.bf16", "1e6"), ("cluster.gpu.peak_tflops.bf16", "1e-300"),
    ("cluster.gpu.hbm_bandwidth_GBps", "1e-300"), ("cluster.gpu.hbm_gb", "1e6"),
    ("cluster.gpu.hbm_gb", "1e-300"), ("cluster.gpu.layer_overhead_us", "1e9"),
    ("cluster.gpu.attention_half_seq", "16777216"), ("cluster.gpu.tp_overlap_slowdown", "100"),
    ("cluster.gpu.attention_head_dim_half", "16777216"),
    ("cluster.gpu.step_overhead_ms", "1e6"), ("cluster.gpu.step_overhead_ms", "0"),
    ("job.global_batch", "2147483136"), ("job.global_batch", "24"),
    ("model.vocab", "16777216"), ("job.seq_len", "16777216"),
]


@pytest.mark.parametrize("field, value", EXTREME_VALID,
                         ids=[f"{f}={v}" for f, v in EXTREME_VALID])
def test_extreme_valid_values_give_finite_answers(field, value):
    code, out, err, violation = F.run_cli(["evaluate", GPT3, "--set", f"{field}={value}",
                                           "--json"])
    assert violation is None, violation
    if code == 2:  # a located refusal is honest too (e.g. the config no longer divides)
        assert err.strip().splitlines()[-1].startswith("Error: "), err
        return
    data = json.loads(out)
    assert data["status"] in ("ok", "out_of_memory", "overflow"), data["status"]
    if data["status"] != "overflow":
        assert math.isfinite(data["step_time_s"]) and data["step_time_s"] > 0


# --------------------------------------------------------------------------------------------
# 3. Files: never block, never read unbounded, never a traceback
# --------------------------------------------------------------------------------------------


def _file_cases(tmp: Path) -> list[tuple[str, str]]:
    cases = []
    cases.append((str(tmp / "missing.toml"), "file not found"))
    (tmp / "dir.toml").mkdir()
    cases.append((str(tmp / "dir.toml"), "is a directory"))
    if hasattr(os, "mkfifo"):
        os.mkfifo(tmp / "fifo.toml")
        cases.append((str(tmp / "fifo.toml"), "FIFO"))
    if os.path.exists("/dev/zero"):
        cases.append(("/dev/zero", "not a regular file"))
        cases.append(("/dev/null", "not a regular file"))
    big = tmp / "big.toml"
    with open(big, "wb") as fh:
        fh.truncate(17 * 2**20)  # sparse: 17 MiB of zeros, above the 16 MiB cap
    cases.append((str(big), "too large"))
    (tmp / "bin.toml").write_bytes(b"name = \"\xff\xfe\"\n")
    cases.append((str(tmp / "bin.toml"), "not UTF-8"))
    (tmp / "deep.json").write_text('{"a":' * 100_000 + "1" + "}" * 100_000)
    cases.append((str(tmp / "deep.json"), "nests"))
    (tmp / "deep.toml").write_text("a = " + "[" * 100_000 + "]" * 100_000)
    cases.append((str(tmp / "deep.toml"), "nests"))
    (tmp / "mid.json").write_text('{"a":' * 500 + "1" + "}" * 500)
    cases.append((str(tmp / "mid.json"), "nested too deeply"))
    (tmp / "bad.json").write_text("{")
    cases.append((str(tmp / "bad.json"), "invalid JSON"))
    (tmp / "list.json").write_text("[1, 2]")
    cases.append((str(tmp / "list.json"), "JSON object"))
    (tmp / "bad.toml").write_text("a = = 1")
    cases.append((str(tmp / "bad.toml"), "invalid TOML"))
    (tmp / "empty.toml").write_text("")
    cases.append((str(tmp / "empty.toml"), "model"))
    (tmp / "nan.json").write_text(Path(GPT3).read_text() and json.dumps(
        {**F.llm_base(0), "job": {**F.llm_base(0)["job"], "seq_len": float("nan")}}))
    cases.append((str(tmp / "nan.json"), "job.seq_len"))
    return cases


FILE_CASE_COUNT = 16


def test_file_inputs(tmp_path):
    cases = _file_cases(tmp_path)
    assert len(cases) >= FILE_CASE_COUNT - 3  # (no FIFO or /dev on some systems)
    for path, fragment in cases:
        for cmd in (["evaluate", path], ["sweep", path, "--no-progress"]):
            code, out, err, violation = F.run_cli(cmd, timeout=20)
            assert violation is None, (path, violation)
            assert code == 2, (path, out)
            assert fragment in err, (path, err)


# --------------------------------------------------------------------------------------------
# 4. DLRM scenarios and tables CSVs
# --------------------------------------------------------------------------------------------


def _dlrm_file(tmp: Path, csv_text: str | bytes | None = None, **changes) -> str:
    raw = F.dlrm_base()
    if csv_text is not None:
        csv = tmp / "t.csv"
        if isinstance(csv_text, bytes):
            csv.write_bytes(csv_text)
        else:
            csv.write_text(csv_text)
        raw["model"].pop("tables")
        raw["model"]["tables_csv"] = "t.csv"
    for path, value in changes.items():
        raw = F.set_at(raw, tuple(int(p) if p.isdigit() else p for p in path.split("__")),
                       value)
    return F.write_scenario(raw, str(tmp))


HEAD = "table,rows,dim,multi_hot\n"
CSV_CASES = [
    (HEAD + "a,inf,128,1\n", "line 2 column rows"),
    (HEAD + "a,nan,128,1\n", "line 2 column rows"),
    (HEAD + "a,1.5,128,1\n", "line 2 column rows"),
    (HEAD + "a,-1,128,1\n", "tables[a].rows"),
    (HEAD + "a,1e400,128,1\n", "line 2 column rows"),
    (HEAD + "a,abc,128,1\n", "line 2 column rows"),
    (HEAD + "a,,128,1\n", "line 2 column rows"),
    (HEAD + "a,10,128,nan\n", "line 2 column multi_hot"),
    (HEAD + "a,10,128,inf\n", "line 2 column multi_hot"),
    (HEAD + "# c\na,10,0,1\n", "tables[a].dim"),
    (HEAD + "a,1099511627777,128,1\n", "tables[a].rows"),
    (HEAD + "a,10,128,1\nb,10,128,1.5e6\n", "tables[b].pooling"),
    (b"table,rows,dim,multi_hot\na\xff,10,128,1\n", "not UTF-8"),
    ("", "no header"),
]


@pytest.mark.parametrize("csv_text, where", CSV_CASES, ids=[w for _, w in CSV_CASES])
def test_dlrm_tables_csv(tmp_path, csv_text, where):
    path = _dlrm_file(tmp_path, csv_text)
    code, out, err, violation = F.run_cli(["shard", path, "--method", "greedy"], cwd=tmp_path)
    assert violation is None, violation
    assert code == 2, out
    assert where in err, err


DLRM_FIELD_CASES = [
    ({"cluster__gpus": 2**17, "job__global_batch": 2**20,
      "cluster__tiers": [{"name": "n", "size": 8, "bandwidth_GBps": 450, "latency_us": 3},
                         {"name": "c", "size": 2**14, "bandwidth_GBps": 50, "latency_us": 9}]},
     "cluster.gpus"),
    ({"cluster__tiers": [{"name": "n", "size": 2_000_000_000, "bandwidth_GBps": 450,
                          "latency_us": 3}]}, "cluster.tiers[0].size"),
    ({"model__tables__0__rows": 2**41}, "tables[cat_0].rows"),
    ({"model__tables__0__pooling": float("nan")}, "tables[cat_0].pooling"),
    ({"model__tables__0__dim": 1.5}, "tables[cat_0].dim"),
    ({"model__tables_csv": 5}, "model"),
    ({"job__global_batch": 7}, "job.global_batch"),
    ({"job__dense_efficiency": 1e-310}, "job.dense_efficiency"),
    ({"job__bwd_multiplier": float("inf")}, "job.bwd_multiplier"),
    ({"planner__seed": -1}, "planner.seed"),
    ({"planner__time_limit_s": float("nan")}, "planner.time_limit_s"),
    ({"planner__iterations": 0}, "planner.iterations"),
    ({"cluster__host_to_device_GBps": 1e308}, "cluster.host_to_device_GBps"),
]


@pytest.mark.parametrize("changes, where", DLRM_FIELD_CASES, ids=[w for _, w in DLRM_FIELD_CASES])
def test_dlrm_fields(tmp_path, changes, where):
    path = _dlrm_file(tmp_path, **changes)
    code, out, err, violation = F.run_cli(["shard", path, "--method", "greedy"], cwd=tmp_path)
    assert violation is None, violation
    assert code == 2, out
    assert err.strip().splitlines()[-1].startswith(f"Error: {where}"), err


def test_dlrm_file_paths(tmp_path):
    """The tables CSV as a directory, a FIFO or a missing file: exit 2 naming
    model.tables_csv (a FIFO used to block forever)."""
    (tmp_path / "d").mkdir()
    names = ["d", "missing.csv"]
    if hasattr(os, "mkfifo"):
        os.mkfifo(tmp_path / "f.csv")
        names.append("f.csv")
    for name in names:
        raw = F.dlrm_base()
        raw["model"].pop("tables")
        raw["model"]["tables_csv"] = name
        path = F.write_scenario(raw, str(tmp_path))
        code, out, err, violation = F.run_cli(["shard", path], cwd=tmp_path, timeout=20)
        assert violation is None, (name, violation)
        assert code == 2 and "model.tables_csv" in err, (name, err)


def test_dlrm_infeasible_plan_is_honest_json(tmp_path):
    """A table too big for any single rank (but not for all memory): no plan fits. The JSON
    says so with status out_of_memory and null (not Infinity / NaN) for the infeasible
    baselines and the missing lower bound; this printed Infinity before."""
    path = _dlrm_file(tmp_path, model__tables__4__rows=2**32)
    code, out, err, violation = F.run_cli(["shard", path, "--json", "--method", "greedy"],
                                          cwd=tmp_path)
    assert violation is None, violation
    data = json.loads(out)
    assert data["status"] == "out_of_memory" and not data["feasible"]
    assert data["greedy_baselines_s"] == {"size": None, "lookups": None, "cost": None}
    assert data["gap_to_lower_bound"] is None


SHARD_OPTION_CASES = [
    (["--out", "plan.xlsx"], "'--out'"), (["--plot", "x.jpg"], "'--plot'"),
    (["--iterations", "0"], "'--iterations'"), (["--seed", "-1"], "'--seed'"),
    (["--beam-width", "0"], "'--beam-width'"), (["--time-limit", "nan"], "'--time-limit'"),
    (["--time-limit", "0"], "'--time-limit'"), (["--method", "magic"], "'--method'"),
]


@pytest.mark.parametrize("opts, where", SHARD_OPTION_CASES, ids=[w + o[1] for o, w in
                                                                  SHARD_OPTION_CASES])
def test_shard_options(tmp_path, opts, where):
    path = _dlrm_file(tmp_path)
    code, out, err, violation = F.run_cli(["shard", path, *opts], cwd=tmp_path)
    assert violation is None, violation
    assert code == 2 and where in err.strip().splitlines()[-1], err
    assert not (tmp_path / "plan.xlsx").exists()


def test_planner_time_limit_is_used(tmp_path):
    """``[planner] time_limit_s`` was read but unused: a tiny limit now stops the evolve
    planner after the greedy baselines (reported as time_limited), a generous one does not."""
    path = _dlrm_file(tmp_path, planner={"method": "evolve", "iterations": 2000,
                                         "time_limit_s": 1e-9})
    code, out, err, violation = F.run_cli(["shard", path, "--json"], cwd=tmp_path,
                                          timeout=None)
    assert violation is None and code == 0, (violation, err)
    assert json.loads(out)["time_limited"] is True
    path = _dlrm_file(tmp_path, planner={"method": "evolve", "iterations": 2000,
                                         "time_limit_s": 1e6})
    code, out, err, violation = F.run_cli(["shard", path, "--json"], cwd=tmp_path,
                                          timeout=None)
    assert violation is None and code == 0, (violation, err)
    assert json.loads(out)["time_limited"] is False


# --------------------------------------------------------------------------------------------


def test_battery_size():
    n = (len(FIELD_CASES) + len(ISSUE_CASES) + len(EXTREME_VALID) + FILE_CASE_COUNT * 2
         + len(CSV_CASES) + len(DLRM_FIELD_CASES) + 3 + 1 + len(SHARD_OPTION_CASES) + 2)
    assert n >= 100, n


def test_readme_lists_the_documented_ranges():
    """The README's input-range table is spec/ranges.py's DOCUMENTED, row for row."""
    from trainscape.spec.ranges import DOCUMENTED

    readme = (F.ROOT / "README.md").read_text()
    for field, allowed in DOCUMENTED:
        assert f"| {field} | {allowed} |" in readme, field


def test_space_over_the_tabulation_cap_says_what_to_narrow():
    """A space over the cap on core combinations even after the GPU-count and batch
    constraints have pruned it: one line naming ``space``, that every command tabulates it
    (so suggesting search would be wrong), and the widest axes. (Wide degree lists alone no
    longer reach the cap: tests/test_space_core_enum.py.)"""
    vpp = "[" + ",".join(str(i) for i in range(1, 2001)) + "]"
    ep = "[" + ",".join(str(i) for i in range(1, 1001)) + "]"
    for cmd in ("sweep", "search"):
        code, out, err, violation = F.run_cli([cmd, GPT3, "--set", f"space.vpp={vpp}",
                                               "--set", f"space.ep={ep}", "--set",
                                               "space.tp_overlap=[false,true]"])
        assert violation is None, violation
        last = err.strip().splitlines()[-1]
        assert code == 2 and last.startswith("Error: space: too many combinations"), last
        assert "space.vpp (2000 values)" in last and "space.ep (1000 values)" in last, last


def test_wide_degree_lists_are_searched():
    """Every integer from 1 to 1000 as tp and dp: a plain product of 10^7 core combinations
    the GPU count prunes to a few hundred; search answers from them."""
    many = "[" + ",".join(str(i) for i in range(1, 1001)) + "]"
    code, out, err, violation = F.run_cli(["search", GPT3, "--set", f"space.tp={many}",
                                           "--set", f"space.dp={many}", "--set",
                                           "space.cp=[1,2,3,4,5,6,7,8,9,10]", "--budget", "300",
                                           "--json"])
    assert violation is None, violation
    assert code == 0, err
    import json

    import trainscape

    gpus = trainscape.load(GPT3).cluster.gpus
    top = json.loads(out)["top"]
    assert top and all(r["tp"] * r["cp"] * r["pp"] * r["dp"] == gpus for r in top)


def test_nul_bytes_in_paths(tmp_path):
    """Found by scripts/fuzz.py: a NUL byte in a path option escaped click as a ValueError
    traceback (os.stat). Only reachable in-process (argv cannot hold NUL), still exit 2."""
    for args in (["evaluate", "a\x00b"], ["search", GPT3, "--out", "x\x00.json"],
                 ["shard", "d\x00.toml"]):
        code, out, err, violation = F.run_cli(args)
        assert violation is None and code == 2 and "NUL byte" in err, (args, err)
    raw = F.dlrm_base()
    raw["model"].pop("tables")
    raw["model"]["tables_csv"] = "t\x00.csv"
    path = F.write_scenario(raw, str(tmp_path))
    code, out, err, violation = F.run_cli(["shard", path], cwd=tmp_path)
    assert violation is None and code == 2 and "model.tables_csv" in err, err
