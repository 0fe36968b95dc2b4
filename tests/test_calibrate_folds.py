"""scripts/calibrate.py --cross-validate: the folds split the rows by the hash the shipped
hold-out uses, and a fold's fit leaves out exactly that fold's counted rows."""

from __future__ import annotations

import numpy as np

import _scripts
from trainscape import calibration as cal


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
