"""Accuracy against published training runs: the bounds fail if the model regresses."""

import json

import pytest
from click.testing import CliRunner

from trainscape import calibration as cal
from trainscape import presets
from trainscape.cli import main
from trainscape.commands.validate import TARGET_MEDIAN, TARGET_WORST


@pytest.fixture(scope="module")
def validated():
    return cal.validate(backend="python")


def test_every_published_row_is_predicted(validated):
    predictions, _ = validated
    rows = {s: len(cal.read_source(s)) for s in cal.SOURCES}
    assert sum(p.case.source == "megatron_sc21_table1" for p in predictions) == rows[
        "megatron_sc21_table1"]
    # Korthikanti's table gives two settings per model
    assert sum(p.case.source == "korthikanti_table5" for p in predictions) == 2 * rows[
        "korthikanti_table5"]
    assert sum(p.case.source == "llama3_table4" for p in predictions) == rows["llama3_table4"]


@pytest.mark.parametrize("source", cal.FITTED_SOURCES)
def test_median_and_worst_error_within_targets(validated, source):
    _, summary = validated
    assert summary[source]["median_abs_error"] <= TARGET_MEDIAN
    assert summary[source]["worst_abs_error"] <= TARGET_WORST


def test_constants_are_per_gpu_type_not_per_row():
    fitted = presets.calibrated_constants(cal.GPU)
    provenance = fitted.pop("provenance")
    assert set(fitted) == set(cal.FITTED_FIELDS)
    assert provenance["rows"] == len(cal.fitted_cases())
    assert {c.source for c in cal.fitted_cases()} == set(cal.FITTED_SOURCES)
    for key, (lo, hi) in cal.FITTED_FIELDS.items():
        assert lo <= fitted[key] <= hi
    # the calibrated preset carries them, each with its provenance as the source
    gpu = presets.gpu(cal.GPU)
    for key in cal.FITTED_FIELDS:
        assert gpu[key] == fitted[key]
        assert "calibrated" in gpu["sources"][key]


def test_published_step_time_follows_megatron_flop_counting():
    case = cal.megatron_cases()[0]  # 1.7B, 32 GPUs, 137 TFLOP/s
    assert case.published_step_s == pytest.approx(case.flops / (137e12 * 32))


def test_validate_command_json_reports_every_row():
    result = CliRunner().invoke(main, ["validate", "--json"])
    assert result.exit_code == 0, result.output
    data = json.loads(result.output)
    assert len(data["rows"]) == len(cal.all_cases())
    for row in data["rows"]:
        assert row["error"] == pytest.approx(row["predicted_step_s"] / row["published_step_s"] - 1)
    assert set(data["summary"]) == set(cal.SOURCES)


def test_validate_command_table():
    result = CliRunner().invoke(main, ["validate"])
    assert result.exit_code == 0, result.output
    assert "median |error|" in result.output and "Megatron" in result.output


def test_presets_command_lists_every_kind():
    result = CliRunner().invoke(main, ["presets", "--json"])
    assert result.exit_code == 0, result.output
    data = json.loads(result.output)
    for kind in presets.KINDS:
        assert {r["id"] for r in data[kind]} == set(presets.names(kind))
    table = CliRunner().invoke(main, ["presets", "gpu"])
    assert table.exit_code == 0 and "h100-sxm-80gb" in table.output


def test_out_of_sample_rows_use_uncalibrated_h100_constants(validated):
    # no constant is fitted to the Llama 3 rows: the H100 preset has no calibrated entry
    assert presets.calibrated_constants("h100-sxm-80gb") == {}
    predictions, summary = validated
    llama = [p for p in predictions if p.case.source == "llama3_table4"]
    assert all(p.step_s > 0 and p.tflops > 0 for p in llama)
    assert summary["llama3_table4"]["rows"] == len(llama)
