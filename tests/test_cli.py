"""The command line: ``trainscape evaluate``."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from trainscape import layout as L
from trainscape.cli import main

SRC = Path(__file__).resolve().parent.parent / "src"


def run(*args: str):
    return CliRunner().invoke(main, list(args))


def test_json_prints_every_output_field(example_path):
    res = run("evaluate", str(example_path), "--json")
    assert res.exit_code == 0, res.output
    data = json.loads(res.stdout)
    for name in L.OUTPUT_FIELDS:
        assert name in data, name
    assert data["status"] in L.STATUS
    assert set(data["config"]) == set(L.CONFIG_FIELDS)
    assert data["scenario"]


def test_gpt_breakdown_adds_up_to_step_time(gpt_example):
    data = json.loads(run("evaluate", str(gpt_example), "--json").stdout)
    total = sum(data[k] for k in L.BREAKDOWN_FIELDS)
    assert data["step_time_s"] > 0
    assert total == pytest.approx(data["step_time_s"], rel=1e-9)


def test_table_output(gpt_example):
    res = run("evaluate", str(gpt_example))
    assert res.exit_code == 0, res.output
    for text in ("step time", "tokens/s", "MFU", "pipeline bubble", "memory per GPU",
                 "optimizer states", "TFLOP/s"):
        assert text in res.stdout, text


def test_config_option_replaces_the_config(gpt_example):
    res = run("evaluate", str(gpt_example), "--config", "tp=4,pp=16,schedule=zb-h1", "--json")
    assert res.exit_code == 0, res.output
    cfg = json.loads(res.stdout)["config"]
    assert (cfg["tp"], cfg["pp"], cfg["dp"], cfg["schedule"]) == (4, 16, 24, "zb-h1")


def test_set_option_overrides_fields(gpt_example):
    base = json.loads(run("evaluate", str(gpt_example), "--json").stdout)
    res = run("evaluate", str(gpt_example), "--json", "--set", "job.global_batch=3072",
              "--set", "cluster.tiers[1].bandwidth_GBps=50")
    assert res.exit_code == 0, res.output
    data = json.loads(res.stdout)
    assert data["microbatches"] == 2 * base["microbatches"]


@pytest.mark.parametrize("args,path", [
    (["--set", "config.tp=64", "--set", "config.dp=3"], "config.tp"),
    (["--set", "cluster.tiers[1].bandwdith=3"], "cluster.tiers[1].bandwdith"),
    (["--set", "config.schedule=1f2b"], "config.schedule"),
    (["--config", "tp=8,pp=8,dp=7"], "config.dp"),
    (["--config", "tp"], "--config"),
    (["--set", "nope"], "--set"),
    (["--set", 'job.expert_bias="loop"'], "job.expert_bias"),
    (["--set", "model.expert_bias=true"], "model.expert_bias"),  # a dense model
])
def test_bad_input_exits_2_with_one_line(gpt_example, args, path):
    res = run("evaluate", str(gpt_example), *args)
    assert res.exit_code == 2, res.output
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1, res.stderr
    assert lines[0].startswith(f"Error: {path}: "), lines[0]
    assert res.stdout == ""


def test_missing_file_exits_2(tmp_path):
    res = run("evaluate", str(tmp_path / "none.toml"))
    assert res.exit_code == 2
    assert res.stderr.strip() == f"Error: {tmp_path / 'none.toml'}: file not found"


def test_toml_syntax_error_exits_2(tmp_path):
    path = tmp_path / "bad.toml"
    path.write_text("[model]\npreset = \n")
    res = run("evaluate", str(path))
    assert res.exit_code == 2
    assert len(res.stderr.strip().splitlines()) == 1 and "line 2" in res.stderr


def test_subprocess_json_and_error(gpt_example, tmp_path):
    env = dict(os.environ, PYTHONPATH=str(SRC) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    ok = subprocess.run([sys.executable, "-m", "trainscape", "evaluate", str(gpt_example),
                         "--json"], capture_output=True, text=True, env=env, timeout=120)
    assert ok.returncode == 0, ok.stderr
    assert set(L.OUTPUT_FIELDS) <= set(json.loads(ok.stdout))
    bad = subprocess.run([sys.executable, "-m", "trainscape", "evaluate", str(gpt_example),
                          "--set", "job.dtype=fp4"], capture_output=True, text=True, env=env,
                         timeout=120)
    assert bad.returncode == 2
    assert bad.stderr.strip().startswith("Error: job.dtype: ")
    assert len(bad.stderr.strip().splitlines()) == 1


def test_commands_are_discovered():
    res = run("--help")
    assert res.exit_code == 0 and "evaluate" in res.stdout


def test_evaluate_says_how_the_pipeline_holds_the_model():
    path = Path(__file__).resolve().parent.parent / "examples" / "deepseek-v3-mtp-h100.toml"
    res = run("evaluate", str(path))
    assert res.exit_code == 0, res.output
    assert ("pipeline: first device 7 layers (3 dense) + embedding, middle devices up to 8, "
            "last device 6 + 1 MTP block + loss") in " ".join(res.output.split())
    data = json.loads(run("evaluate", str(path), "--json").stdout)
    assert data["pipeline_split"]["last"] == 6 and data["pipeline_split"]["mtp_layers"] == 1
    assert data["pipeline_split"]["first_dense"] == 3.0
    no_pp = json.loads(run("evaluate", str(path), "--json", "--config", "tp=2,pp=1,ep=64").stdout)
    assert no_pp["pipeline_split"] is None
