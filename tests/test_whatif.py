"""Required bandwidth (trainscape what-if): known answers where the step is affine in 1/B, the
definition (meets the bound at the answer, misses it just below), tiers off the critical path,
and the CLI's contract."""

from __future__ import annotations

import copy
import json

import pytest
from click.testing import CliRunner

import trainscape
from trainscape import layout as L
from trainscape.backends import evaluate_blocks
from trainscape.explore.whatif import required_bandwidth, tier_bandwidth_index
from trainscape.spec import pack, pack_configs

from _explore_common import SMALL

DP_ONLY = {"tp": 8, "cp": 1, "pp": 1, "dp": 4, "mbs": 1, "zero": 0, "dp_overlap": False,
           "recompute": "full"}


def _scenario(**config):
    raw = copy.deepcopy(SMALL)
    raw.pop("space")
    raw["config"] = config or dict(DP_ONLY)
    return trainscape.load(raw)


def _step_with(sc, tier, bandwidth_bytes):
    sys, mdl, job = pack(sc)
    sys[tier_bandwidth_index(tier)] = bandwidth_bytes
    out = evaluate_blocks(sys, mdl, job, pack_configs([sc.config]), backend="python")
    return float(out[L.OUT_STEP_TIME_S, 0])


@pytest.mark.parametrize("x", [1.0, 5.0, 20.0])
def test_dp_all_reduce_across_tier1_known_answer(x):
    """tp 8 fills a node, dp 4 spans four nodes over tier 1, no overlap: the gradient
    all-reduce is the step's only tier-1 term, so step(B) = c + a / B while the algorithm stays
    the same. Then a = (step(B0/2) - step(B0)) * B0 and step(B*) = (1 + x/100) step0 gives
    B* = a / (a / B0 + x/100 * step0)."""
    sc = _scenario()
    b0 = 50e9
    step0 = _step_with(sc, 1, b0)
    a = (_step_with(sc, 1, b0 / 2) - step0) * b0
    assert a > 0
    # affine in 1/B over the range the answer lies in (checked, not assumed)
    assert _step_with(sc, 1, b0 / 4) - step0 == pytest.approx(3 * a / b0, rel=1e-9)
    want = a / (a / b0 + x / 100 * step0)
    got_step0, reqs = required_bandwidth(sc, x, backend="python", rtol=1e-7)
    assert got_step0 == pytest.approx(step0, rel=1e-12)
    assert reqs[1].required_GBps * 1e9 == pytest.approx(want, rel=1e-6)


def test_answer_meets_the_bound_and_just_below_misses_it():
    sc = trainscape.load(_llama())
    x, rtol = 5.0, 1e-4
    step0, reqs = required_bandwidth(sc, x, rtol=rtol)
    bound = step0 * (1 + x / 100)
    assert any(r.required_GBps > 0 for r in reqs)
    for r in reqs:
        if r.required_GBps == 0:
            continue
        assert r.required_GBps < r.bandwidth_GBps
        assert _step_with(sc, r.tier, r.required_GBps * 1e9) <= bound
        assert _step_with(sc, r.tier, r.required_GBps * 1e9 / (1 + 2 * rtol)) > bound


def _llama():
    from pathlib import Path

    return str(Path(__file__).resolve().parents[1] / "examples" / "llama3-405b-2bldg.toml")


def test_a_tier_nothing_crosses_needs_any_bandwidth():
    """8 GPUs in one node of a two-tier cluster: no traffic reaches tier 1."""
    raw = copy.deepcopy(SMALL)
    raw.pop("space")
    raw["cluster"]["gpus"] = 8
    raw["config"] = {"tp": 8, "pp": 1, "dp": 1}
    _, reqs = required_bandwidth(trainscape.load(raw), 5.0)
    assert reqs[1].required_GBps == 0.0
    assert reqs[0].required_GBps > 0.0


def test_larger_allowed_slowdown_needs_less():
    sc = _scenario()
    needs = [required_bandwidth(sc, x)[1][1].required_GBps for x in (1, 5, 25)]
    assert needs[0] > needs[1] > needs[2] > 0


def test_cli_json_and_bad_input(tmp_path):
    from trainscape.cli import main

    r = CliRunner().invoke(main, ["what-if", _llama(), "--slowdown", "5", "--json"])
    assert r.exit_code == 0, r.output
    data = json.loads(r.output)
    assert [t["name"] for t in data["tiers"]] == ["node", "building", "region"]
    r = CliRunner().invoke(main, ["what-if", _llama(), "--slowdown", "0"])
    assert r.exit_code == 2 and "--slowdown" in r.output and "Traceback" not in r.output
    r = CliRunner().invoke(main, ["what-if", _llama(), "--config", "tp=3"])
    assert r.exit_code == 2 and "tp" in r.output
