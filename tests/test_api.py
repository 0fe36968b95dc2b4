"""The Python API: load, evaluate, Result."""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest

import trainscape
from trainscape import layout as L
from trainscape.api import evaluate_columns
from trainscape.spec import ConfigSpec, Scenario, ScenarioError, pack, pack_configs


def test_load_returns_a_scenario(gpt_example):
    sc = trainscape.load(gpt_example)
    assert isinstance(sc, Scenario)
    assert sc.config.tp == 8 and sc.cluster.gpus == 1536


def test_load_applies_overrides(gpt_example):
    sc = trainscape.load(gpt_example, overrides=["job.global_batch=3072",
                                                 "cluster.tiers[1].bandwidth_GBps=50"])
    assert sc.job.global_batch == 3072 and sc.cluster.tiers[1].bandwidth_GBps == 50.0


def test_load_of_a_scenario_with_overrides(gpt_example):
    sc = trainscape.load(gpt_example)
    assert trainscape.load(sc) is sc
    assert trainscape.load(sc, ["job.seq_len=4096"]).job.seq_len == 4096


def test_evaluate_result_has_every_output_field(example_path):
    r = trainscape.evaluate(trainscape.load(example_path))
    for name in L.OUTPUT_FIELDS:
        assert hasattr(r, name), name
    assert r.status in L.STATUS
    assert isinstance(r.feasible, bool) and isinstance(r.microbatches, int)
    d = r.to_dict()
    assert set(d) == set(L.OUTPUT_FIELDS) | {"config", "scenario"}
    assert d["config"]["order"].count("-") == L.N_DIMS - 1
    for name in L.OUTPUT_FIELDS:
        if name not in ("status", "feasible"):
            assert math.isfinite(d[name]), name


def test_breakdown_and_memory_add_up(gpt_example):
    r = trainscape.evaluate(gpt_example)
    assert r.status == "ok"
    assert sum(r.breakdown.values()) == pytest.approx(r.step_time_s, rel=1e-9)
    assert sum(r.memory.values()) == pytest.approx(r.memory_gib, rel=1e-9)
    assert list(r.breakdown) == list(L.BREAKDOWN_FIELDS)


def test_result_is_frozen(gpt_example):
    r = trainscape.evaluate(gpt_example)
    with pytest.raises(dataclasses.FrozenInstanceError):
        r.step_time_s = 0.0


def test_result_matches_the_kernel_columns(gpt_example):
    sc = trainscape.load(gpt_example)
    sys, mdl, job = pack(sc)
    out = evaluate_columns(sys, mdl, job, pack_configs([sc.config]))
    assert out.shape == (L.N_OUT, 1) and out.dtype == np.float64
    r = trainscape.evaluate(sc)
    assert r.step_time_s == out[L.OUT_STEP_TIME_S, 0]
    assert r.mfu == out[L.OUT_MFU, 0]
    assert r.status == L.STATUS[int(out[L.OUT_STATUS, 0])]


def test_evaluate_with_a_given_config(gpt_example):
    sc = trainscape.load(gpt_example)
    r = trainscape.evaluate(sc, {"tp": 8, "pp": 16, "schedule": "1f1b"})
    assert r.config["dp"] == 1536 // (8 * 16) and r.config["pp"] == 16
    assert r.config["schedule"] == "1f1b" and r.config["recompute"] == "none"
    r2 = trainscape.evaluate(sc, ConfigSpec(tp=8, pp=16))
    assert r2.step_time_s == r.step_time_s


def test_evaluate_invalid_config_raises(gpt_example):
    with pytest.raises(ScenarioError) as info:
        trainscape.evaluate(trainscape.load(gpt_example), {"tp": 8, "pp": 8, "dp": 7})
    assert str(info.value).startswith("config.dp: ")
    with pytest.raises(ScenarioError, match=r"^config\.tq: unknown key"):
        trainscape.evaluate(gpt_example, {"tq": 8})


def test_evaluate_without_config(gpt_example):
    raw = trainscape.spec.read_raw(gpt_example)
    del raw["config"]
    with pytest.raises(ScenarioError, match="^config: "):
        trainscape.evaluate(raw)
    assert trainscape.evaluate(raw, {"tp": 8, "pp": 8}).config["dp"] == 24


def test_unknown_backend(gpt_example):
    with pytest.raises(ScenarioError, match="^backend: unknown backend"):
        trainscape.evaluate(gpt_example, backend="fortran")


def test_evaluate_does_not_change_the_scenario(gpt_example):
    sc = trainscape.load(gpt_example)
    before = sc.model_dump()
    trainscape.evaluate(sc, {"tp": 4, "pp": 8})
    assert sc.model_dump() == before


def test_pipeline_split_says_what_each_device_holds():
    """DeepSeek-V3 on the DGX Cloud 25.05 layout: the stated 7 / 8 x 6 / 6 split with the MTP
    block beside the loss; the even split without the stated counts; nothing without a
    pipeline; device 0 holding both ends under ZB-V; a refused configuration."""
    from pathlib import Path

    from trainscape.api import pipeline_split

    path = Path(__file__).resolve().parents[1] / "examples" / "deepseek-v3-mtp-h100.toml"
    sc = trainscape.load(path)
    # the preset's 3 leading dense layers open the first device's 7
    assert pipeline_split(sc) == {"devices": 8, "first": 7, "middle": 8, "last": 6,
                                  "first_dense": 3.0, "middle_dense": 0.0, "last_dense": 0.0,
                                  "mtp_layers": 1, "loss_on_first_device": False}
    even = trainscape.load(path, ["job.pipeline_first_stage_layers=0",
                                  "job.pipeline_last_stage_layers=0"])
    assert pipeline_split(even)["first"] == 8 == pipeline_split(even)["last"]
    assert pipeline_split(sc, {"tp": 2, "pp": 1, "ep": 64}) is None
    v = trainscape.load(path, ["job.pipeline_first_stage_layers=0",
                               "job.pipeline_last_stage_layers=0", "model.mtp_layers=0"])
    zbv = pipeline_split(v, {"tp": 2, "pp": 8, "ep": 64, "schedule": "zb-v"})
    assert zbv["loss_on_first_device"] and zbv["first"] == zbv["last"]
    # a configuration the stated counts cannot run (a V placement) is refused, as evaluate does
    with pytest.raises(ScenarioError, match=r"^config\.pp: job\.pipeline_first/last"):
        pipeline_split(sc, {"tp": 2, "pp": 8, "ep": 64, "schedule": "zb-v"})
