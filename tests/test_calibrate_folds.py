"""scripts/calibrate.py --cross-validate: the folds split the rows by the hash the shipped
hold-out uses, and a fold's fit leaves out exactly that fold's counted rows."""

from __future__ import annotations

import re
import sys

import numpy as np
import pytest

import _scripts
from trainscape import calibration as cal
from trainscape import presets


def test_fold_zero_of_five_is_the_shipped_hold_out():
    cases = [r.case for r in cal.Runner().runs] + [c.label for c in cal.legacy.fitted_cases()]
    assert len(cases) > 500
    for case in cases:
        assert (cal.case_fold(case, cal.HOLDOUT_MODULUS) == 0) == cal.is_holdout(case)


def test_a_folds_fit_holds_out_exactly_its_counted_rows(monkeypatch):
    calibrate = _scripts.load_script(monkeypatch, "calibrate")
    runner = cal.Runner()
    gpus = sorted({r.gpu for r in runner.runs} | {cal.legacy.GPU})
    problem = calibrate.Problem(runner, gpus, "c",
                                held_out=lambda case: cal.case_fold(case, 3) == 2)
    results = problem.results(np.array([p.start for p in problem.params]))
    for r in results:
        assert r.holdout == (r.counted and cal.case_fold(r.case, 3) == 2), r.case
    held = [r for r in results if r.holdout]
    fitted = calibrate.fit_rows(results)
    # about a third held out, none of them fitted, and still costed (their error is the report)
    assert 0.25 < len(held) / sum(r.counted for r in results) < 0.42
    assert not {r.case for r in held} & {r.case for r in fitted}
    assert sum(r.error is not None for r in held) >= 0.95 * len(held)


def test_a_bound_refits_a_field_within_it_and_can_add_the_fp8_per_gemm_cost(monkeypatch):
    # calibrate.py --bound: the what-if fits docs/accuracy.md reports (the BF16 per-GEMM cost
    # held to a microbenchmark's range, the FP8 one fitted instead of derived)
    calibrate = _scripts.load_script(monkeypatch, "calibrate")
    bounds = [calibrate.parse_bound("bf16.gemm_half_flops=1e7:1.5e10"),
              calibrate.parse_bound("fp8.fp8_gemm_half_flops = 1e9:1e12")]
    assert bounds == [("bf16", "gemm_half_flops", 1e7, 1.5e10),
                      ("fp8", "fp8_gemm_half_flops", 1e9, 1e12)]
    fields = calibrate.bounded_fields(bounds)
    assert fields["bf16"]["gemm_half_flops"] == (1e7, 1.5e10)
    assert fields["fp8"]["fp8_gemm_half_flops"] == (1e9, 1e12)
    assert "fp8_gemm_half_flops" not in cal.FITTED_FIELDS["fp8"]  # the shipped fit unchanged
    runner = cal.Runner()
    problem = calibrate.Problem(runner, ["h100-sxm-80gb"], "c", fitted_fields=fields)
    by_name = {(p.key, p.name): p for p in problem.params}
    half = by_name[("h100-sxm-80gb:bf16", "gemm_half_flops")]
    assert (half.dec(half.lo), half.dec(half.hi)) == pytest.approx((1e7, 1.5e10))
    fp8_half = by_name[("h100-sxm-80gb:fp8", "fp8_gemm_half_flops")]
    assert fp8_half.log and fp8_half.dec(fp8_half.start) == pytest.approx(8.8e9)
    # the fitted FP8 per-GEMM cost reaches FP8 jobs only
    gpu_c, stack_c = problem.constants(np.array([p.start for p in problem.params]))
    stack = presets.DEFAULT_STACK
    assert "fp8_gemm_half_flops" in problem.overrides(gpu_c, stack_c, "h100-sxm-80gb", "fp8",
                                                      stack)
    assert "fp8_gemm_half_flops" not in problem.overrides(gpu_c, stack_c, "h100-sxm-80gb",
                                                          "bf16", stack)


@pytest.mark.parametrize("text, says", [
    ("gemm_half_flops=1:2", "CLASS.FIELD=LO:HI"),
    ("int8.gemm_half_flops=1:2", "CLASS must be one of bf16, fp8"),
    ("bf16.peak_tflops=1:2", "FIELD must be one of"),
    ("bf16.gemm_half_flops=2:1", "LO < HI"),
    ("bf16.gemm_half_flops=1:inf", "two finite numbers"),
    ("bf16.gemm_half_flops=1", "two finite numbers"),
    ("bf16.attention_efficiency=0:0.5", "LO must be > 0"),
    ("bf16.layer_overhead_us=-5:5", "LO must be >= 0"),
    ("bf16.gemm_efficiency_max=0.5:1.2", "gemm_efficiency_max is at most 1"),
    ("bf16.step_overhead_ms=0:1e7", "step_overhead_ms is at most 1e+06"),
    ("bf16.fp8_gemm_half_flops=1e9:1e12", "CLASS must be fp8"),
])
def test_a_bad_bound_is_refused_naming_what_is_allowed(monkeypatch, text, says):
    calibrate = _scripts.load_script(monkeypatch, "calibrate")
    with pytest.raises(ValueError, match=re.escape(says)):
        calibrate.parse_bound(text)


def test_a_bound_never_writes_the_shipped_constants(monkeypatch, capsys):
    calibrate = _scripts.load_script(monkeypatch, "calibrate")
    monkeypatch.setattr(sys, "argv", ["calibrate.py", "--bound", "bf16.gemm_half_flops=1e7:1e10"])
    with pytest.raises(SystemExit) as exc:
        calibrate.main()
    assert exc.value.code == 2
    assert "--dry-run or --cross-validate" in capsys.readouterr().err


def test_a_left_out_row_is_costed_and_reported_but_not_fitted(monkeypatch):
    # calibrate.py --leave-out: the what-if docs/accuracy.md reports for the publisher's
    # acknowledged Qwen3-30B regression
    calibrate = _scripts.load_script(monkeypatch, "calibrate")
    runner = cal.Runner()
    rule = calibrate.leave_out_rule(["nemo2511_qwen3-30b-a3b_*"], runner)
    assert rule("nemo2511_qwen3-30b-a3b_fp8_16") and not rule("nemo2606_qwen3-30b-a3b_fp8_16")
    problem = calibrate.Problem(runner, ["h100-sxm-80gb"], "c", left_out=rule)
    results = problem.results(np.array([p.start for p in problem.params]))
    fitted = {r.case for r in calibrate.fit_rows(results, problem.left_out)}
    assert "nemo2511_qwen3-30b-a3b_fp8_16" not in fitted
    assert "nemo2606_qwen3-30b-a3b_fp8_16" in fitted or cal.is_holdout(
        "nemo2606_qwen3-30b-a3b_fp8_16")
    left = [r for r in results if r.case == "nemo2511_qwen3-30b-a3b_fp8_16"]
    assert left and left[0].error is not None  # still costed
    splits = calibrate.split_errors([r for r in results if r.group == "nemo_perf_summary"], rule)
    assert splits["left-out"][2] == 1
    assert len(calibrate.fit_rows(results)) == len(fitted) + 1


def test_a_leave_out_matching_nothing_or_without_dry_run_is_refused(monkeypatch, capsys):
    calibrate = _scripts.load_script(monkeypatch, "calibrate")
    with pytest.raises(ValueError, match="no counted row's case id matches"):
        calibrate.leave_out_rule(["no-such-case*"], cal.Runner())
    assert calibrate.leave_out_rule([], cal.Runner()) is None
    for argv in (["--leave-out", "no-such-case*", "--dry-run"],
                 ["--leave-out", "nemo2511_qwen3-30b-a3b_fp8_16"]):
        monkeypatch.setattr(sys, "argv", ["calibrate.py", *argv])
        with pytest.raises(SystemExit) as exc:
            calibrate.main()
        assert exc.value.code == 2
    err = capsys.readouterr().err
    assert "no counted row's case id matches" in err and "--dry-run or --cross-validate" in err


@pytest.mark.parametrize("argv", [["--blackwell-only", "--cross-validate", "5"],
                                  ["--async-tp-only", "--cross-validate", "5"],
                                  ["--async-tp-only", "--blackwell-only"]])
def test_one_fit_mode_at_a_time(monkeypatch, capsys, argv):
    # a single-constant fit must not run silently in place of the cross-validation asked for
    calibrate = _scripts.load_script(monkeypatch, "calibrate")
    monkeypatch.setattr(sys, "argv", ["calibrate.py", *argv, "--dry-run"])
    with pytest.raises(SystemExit) as exc:
        calibrate.main()
    assert exc.value.code == 2
    assert "not allowed with argument" in capsys.readouterr().err
