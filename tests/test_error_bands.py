"""Error bands: how far the model was from published runs no fit saw, per GPU preset, stack and
model kind (``trainscape.calibration.bands``, ``scripts/error_bands.py``, ``trainscape
evaluate``)."""

from __future__ import annotations

import json
import math

import pytest
from click.testing import CliRunner

import _scripts
import trainscape
from trainscape import presets
from trainscape.api import error_band
from trainscape.calibration import bands
from trainscape.cli import main


def test_shipped_bands_are_what_the_script_writes(monkeypatch):
    # the file must follow the model, the fit and the runs: a change to any of them that moves
    # a band without rerunning scripts/error_bands.py fails here
    script = _scripts.load_script(monkeypatch, "error_bands")
    backend = "c" if trainscape.available_backends()["c"][0] else "python"
    fresh = script.bands_of(script.never_fitted_results(backend))
    assert json.loads(script.OUT.read_text()) == fresh


def test_band_stats_are_the_median_and_inclusive_deciles():
    errors = [i / 100 for i in range(-5, 6)]  # -5 % .. +5 %
    stats = bands.band_stats(errors)
    assert stats == {"median": 0.0, "p10": -0.04, "p90": 0.04, "median_abs": 0.03}
    # a non-finite error is not evidence; fewer than MIN_ROWS finite ones give no band
    assert bands.band_stats(errors + [math.nan]) == stats
    assert bands.band_stats(errors[:bands.MIN_ROWS - 1]) is None


def test_the_step_interval_inverts_the_error():
    band = bands.ErrorBand(gpu="g", stack="s", kind="dense", rows=10, infeasible=0, median=0.0,
                           p10=-0.2, p90=0.25, median_abs=0.1, sources=("x",))
    # predicted = published * (1 + e): a run 20 % slower than predicted erred by -1/6
    low, high = band.step_interval(10.0)
    assert low == pytest.approx(8.0) and high == pytest.approx(12.5)
    assert band.as_dict(10.0)["step_time_high_s"] == pytest.approx(12.5)
    assert "step_time_low_s" not in band.as_dict(math.nan)


def test_every_shipped_band_has_enough_runs_and_ordered_percentiles():
    shipped = bands.load_bands()
    assert shipped
    for (gpu, stack, kind), band in shipped.items():
        assert band.rows >= bands.MIN_ROWS, (gpu, stack, kind)
        assert band.p10 <= band.median <= band.p90, (gpu, stack, kind)
        assert gpu in presets.names("gpu") and band.sources and kind in bands.KINDS
    # the groups too small for a band keep their count, median and range, and never shadow one
    for thin in bands._shipped()["thin"]:
        key = (thin["gpu"], thin["stack"], thin["kind"])
        assert 0 < thin["rows"] < bands.MIN_ROWS and key not in shipped, key
        assert thin["low"] <= thin["median"] <= thin["high"], key


def test_thin_stats_are_the_median_and_the_range():
    assert bands.thin_stats([0.05, -0.1, 0.02, math.nan]) == \
        {"median": 0.02, "low": -0.1, "high": 0.05}
    assert bands.thin_stats([math.inf]) is None


def test_model_kind():
    assert bands.model_kind(0) == "dense" and bands.model_kind(8) == "moe"


def test_evaluate_shows_the_band_of_the_gpu_and_stack(moe_example):
    sc = trainscape.load(moe_example)
    result = trainscape.evaluate(sc)
    out = error_band(sc, result)
    band = bands.error_band("h100-sxm-80gb", "megatron-core", "moe")
    assert band is not None and out["band"]["rows"] == band.rows and out["band"]["kind"] == "moe"
    assert out["band"]["step_time_low_s"] == pytest.approx(result.step_time_s / (1 + band.p90))
    assert out["band"]["step_time_high_s"] == pytest.approx(result.step_time_s / (1 + band.p10))

    res = CliRunner().invoke(main, ["evaluate", str(moe_example)])
    assert res.exit_code == 0, res.output
    assert "published runs of moe models on h100-sxm-80gb with megatron-core that no fit saw" \
        in " ".join(res.output.split())
    res = CliRunner().invoke(main, ["evaluate", str(moe_example), "--json"])
    assert res.exit_code == 0, res.output
    data = json.loads(res.stdout)
    assert data["error_band"]["band"]["gpu"] == "h100-sxm-80gb"
    assert data["error_band"]["band"]["step_time_low_s"] < data["step_time_s"] \
        < data["error_band"]["band"]["step_time_high_s"]


def test_a_band_follows_the_stack(examples_dir):
    dense = examples_dir / "llama3-8b-block-recompute.toml"  # Llama 3 8B on H100
    fsdp = trainscape.load(dense, ["job.stack=pytorch-fsdp"])
    assert error_band(fsdp)["band"]["stack"] == "pytorch-fsdp"
    # JAX on H100: DGX Cloud's held-out MaxText rows and MaxText's own A3 table (stop 43)
    jax = trainscape.load(dense, ["job.stack=jax-xla"])
    assert error_band(jax)["band"]["stack"] == "jax-xla"


def test_a_band_follows_the_model_kind(examples_dir, moe_example):
    # a dense and an MoE model on the same GPU preset and stack are judged by their own runs:
    # the expert terms erred in ways the dense runs do not show
    dense = error_band(trainscape.load(examples_dir / "llama3-8b-block-recompute.toml"))["band"]
    moe = error_band(trainscape.load(moe_example))["band"]
    assert (dense["gpu"], dense["stack"]) == (moe["gpu"], moe["stack"])
    assert dense["kind"] == "dense" and moe["kind"] == "moe"
    assert dense["rows"] == bands.error_band(dense["gpu"], dense["stack"], "dense").rows
    assert moe["rows"] == bands.error_band(moe["gpu"], moe["stack"], "moe").rows
    assert (dense["p10_error"], dense["p90_error"]) != (moe["p10_error"], moe["p90_error"])


def test_too_few_runs_of_a_kind_are_quoted_not_banded(monkeypatch, examples_dir):
    sc = trainscape.load(examples_dir / "llama3-8b-block-recompute.toml")
    gpu, stack = sc.cluster.gpu.preset, sc.job.stack
    thin = {"gpu": gpu, "stack": stack, "kind": "dense", "rows": 5, "infeasible": 0,
            "median": -0.031, "low": -0.12, "high": 0.04, "sources": ["x"]}
    monkeypatch.setattr(bands, "_shipped", lambda: {"bands": [], "thin": [thin]})
    out = error_band(sc)
    assert out["band"] is None
    assert out["text"] == (f"no error band: fewer than {bands.MIN_ROWS} published runs of dense "
                           f"models on {gpu} with {stack} that no fit saw (5: the model's step "
                           "time erred by -3.1 % at the median, from -12.0 % to +4.0 %)")
    # the other kind's band never stands in for a missing one
    moe_band = {**thin, "kind": "moe", "rows": 9, "p10": -0.2, "p90": 0.1, "median_abs": 0.05}
    monkeypatch.setattr(bands, "_shipped", lambda: {"bands": [moe_band], "thin": []})
    out = error_band(sc)
    assert out["band"] is None and "(5:" not in out["text"]


@pytest.mark.parametrize("overrides, why", [
    (["cluster.gpu.gemm_efficiency_max=0.7"], "cluster.gpu.gemm_efficiency_max differs"),
    (["cluster.gpu.calibrated=false"], "calibrated = false"),
    (["job.stack=megatron-lm"],
     "fewer than 8 published runs of moe models on h100-sxm-80gb with megatron-lm"),
])
def test_no_band_where_no_published_runs_checked_the_model(moe_example, overrides, why):
    out = error_band(trainscape.load(moe_example, overrides))
    assert out["band"] is None and why in out["text"]


def test_no_band_for_a_gpu_of_ones_own(moe_example):
    from trainscape.spec.models import PRESET_META_KEYS

    gpu = presets.resolve_gpu("h100-sxm-80gb", dtype="bf16", stack="megatron-core")
    for key in PRESET_META_KEYS:
        gpu.pop(key, None)
    raw = json.loads(trainscape.load(moe_example).model_dump_json(exclude_none=True))
    raw["cluster"]["gpu"] = {k: v for k, v in gpu.items() if k not in ("preset", "name")}
    out = error_band(trainscape.load(raw))
    assert out["band"] is None and "not a preset" in out["text"]


def test_an_invalid_configuration_gets_the_band_without_an_interval(moe_example):
    sc = trainscape.load(moe_example)
    result = trainscape.evaluate(sc)
    invalid = type(result)(**{**result.__dict__, "status": "invalid_config"})
    out = error_band(sc, invalid)
    assert out["band"] is not None and "step_time_low_s" not in out["band"]


def test_sweep_reports_the_band_around_its_best_layout(moe_example):
    # a planner reading a sweep's answer gets the same band evaluate gives, its interval drawn
    # around the best layout found
    res = CliRunner().invoke(main, ["sweep", str(moe_example), "--json"])
    assert res.exit_code == 0, res.output
    data = json.loads(res.stdout)
    band = data["error_band"]["band"]
    best = data["top"][0]["step_time_s"]
    assert band["kind"] == "moe" and band["gpu"] == "h100-sxm-80gb"
    assert band["step_time_low_s"] == pytest.approx(best / (1 + band["p90_error"]))
    assert band["step_time_high_s"] == pytest.approx(best / (1 + band["p10_error"]))
    text = CliRunner().invoke(main, ["sweep", str(moe_example)]).output
    assert "accuracy (best layout):" in text


def test_no_sweep_band_where_each_hardware_point_differs(examples_dir):
    import types

    from trainscape.explore.report import accuracy

    # the co-design example sweeps hardware axes: each point would need a band of its own
    sc = trainscape.load(examples_dir / "codesign-405b-scaleup-vs-scaleout.toml")
    assert accuracy(types.SimpleNamespace(top=[object()]), sc) is None
    # nothing feasible: nothing to draw an interval around
    assert accuracy(types.SimpleNamespace(top=[]), trainscape.load(
        examples_dir / "mixtral-8x7b-moe.toml")) is None
