"""Property tests of the reliability contract (issue 14): hypothesis generates invalid and
extreme LLM and DLRM scenarios (1 to 3 fields of an example replaced by out-of-range,
non-finite, subnormal, past-int32, wrongly typed values, or deleted) and command lines with
fuzzed options; every run must end in exit 2 with one located message, or exit 0 with finite
output (``fuzzkit.check_result``). ``scripts/fuzz.py --minutes N`` runs the same strategies
for longer and saves failures under ``tests/fuzz_regressions/``, which
``test_saved_regressions`` replays.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings

sys.path.insert(0, str(Path(__file__).resolve().parent))
import fuzzkit as F  # noqa: E402

LLM, DLRM, CLI = F.strategies()
_SETTINGS = settings(suppress_health_check=[HealthCheck.too_slow,
                                            HealthCheck.function_scoped_fixture])


@_SETTINGS
@given(LLM)
def test_fuzzed_llm_scenarios_keep_the_contract(case):
    code, out, err, violation = F.run_case(case)
    assert violation is None, (violation, err[-300:])


@_SETTINGS
@given(DLRM)
def test_fuzzed_dlrm_scenarios_keep_the_contract(case):
    code, out, err, violation = F.run_case(case)
    assert violation is None, (violation, err[-300:])


@_SETTINGS
@given(CLI)
def test_fuzzed_command_lines_keep_the_contract(case):
    code, out, err, violation = F.run_case(case, timeout=60)
    assert violation is None, (case["command"], violation, err[-300:])


@_SETTINGS
@given(F.runs_strategy())
def test_fuzzed_runs_files_keep_the_contract(case):
    code, out, err, violation = F.run_case(case)
    assert violation is None, (case["runs"][-400:], violation, err[-300:])


REGRESSIONS = sorted(F.REGRESSIONS.glob("*.json")) if F.REGRESSIONS.exists() else []


@pytest.mark.skipif(not REGRESSIONS, reason="no saved fuzz regressions")
@pytest.mark.parametrize("path", REGRESSIONS, ids=[p.stem for p in REGRESSIONS])
def test_saved_regressions(path):
    """Every case the long fuzzer once found broken (tests/fuzz_regressions/) stays fixed."""
    case = json.loads(path.read_text())["case"]
    code, out, err, violation = F.run_case(case)
    assert violation is None, (violation, err[-300:])
