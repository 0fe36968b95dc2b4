"""GPUs under a board power limit (cluster.gpu.power_limit_w): the sustained clock falls as
(limit / power_w) ** (1 / power_clock_exponent) (model.power), every tensor-core rate with it,
and the energy per step counts the limit."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from trainscape import api, presets
from trainscape import layout as L
from trainscape.cli import main
from trainscape.model.power import drawn_power_w, power_limited_clock_fraction
from trainscape.spec import ScenarioError, load_scenario, pack_system

from test_spec import BASE, base


def test_clock_fraction_by_hand():
    assert power_limited_clock_fraction(500.0, 700.0, 3.31) == pytest.approx((5 / 7) ** (1 / 3.31))
    # the cube law: an eighth of the power, half the clock
    assert power_limited_clock_fraction(100.0, 800.0, 3.0) == pytest.approx(0.5)
    # no limit, or one at or above the rating, never binds
    assert power_limited_clock_fraction(0.0, 700.0, 3.0) == 1.0
    assert power_limited_clock_fraction(700.0, 700.0, 3.0) == 1.0
    assert power_limited_clock_fraction(800.0, 700.0, 3.0) == 1.0


def test_the_h100_exponent_reproduces_the_nvl_rating():
    # the datasheet pair the exponent is derived from: H100 NVL (400 W, same 132-SM die) is
    # rated 835.5 dense BF16 TFLOP/s against the SXM5's 989.4 at 700 W
    g = presets.gpu("h100-sxm-80gb", calibrated=False)
    frac = power_limited_clock_fraction(400.0, g["power_w"], g["power_clock_exponent"])
    assert g["peak_tflops"]["bf16"] * frac == pytest.approx(835.5, rel=0.002)


def test_drawn_power():
    assert drawn_power_w(700.0, 0.0) == 700.0
    assert drawn_power_w(700.0, 500.0) == 500.0
    assert drawn_power_w(700.0, 700.0) == 700.0


def limited(limit=None, exponent=None) -> list[str]:
    sets = ["cluster.gpu.power_w=800"]
    if limit is not None:
        sets.append(f"cluster.gpu.power_limit_w={limit}")
    if exponent is not None:
        sets.append(f"cluster.gpu.power_clock_exponent={exponent}")
    return sets


def test_packed_peaks_and_power_follow_the_limit():
    full = pack_system(load_scenario(BASE, limited()))
    capped = pack_system(load_scenario(BASE, limited(100, 3)))
    assert capped[L.SYS_PEAK_FLOPS] == pytest.approx(0.5 * full[L.SYS_PEAK_FLOPS])
    assert capped[L.SYS_LINEAR_PEAK_FLOPS] == pytest.approx(0.5 * full[L.SYS_LINEAR_PEAK_FLOPS])
    # HBM and links keep their clocks
    assert capped[L.SYS_HBM_BANDWIDTH] == full[L.SYS_HBM_BANDWIDTH]
    assert full[L.SYS_POWER_W] == 800.0 and capped[L.SYS_POWER_W] == 100.0
    # MFU's peak is the rated one either way
    assert capped[L.SYS_MFU_PEAK_FLOPS] == full[L.SYS_MFU_PEAK_FLOPS] == full[L.SYS_PEAK_FLOPS]


@pytest.mark.parametrize("backend", ["python", "numba", "c"])
def test_a_limit_slows_compute_and_saves_energy(backend):
    full = api.evaluate(load_scenario(BASE, limited()), backend=backend)
    capped = api.evaluate(load_scenario(BASE, limited(400, 3)), backend=backend)
    full, capped = full.to_dict(), capped.to_dict()
    assert capped["compute_s"] > full["compute_s"]
    # the tensor-core work slows by the clock at most (memory-bound kernels and the fixed
    # per-layer cost keep their speed)
    assert capped["compute_s"] <= full["compute_s"] / 0.5 ** (1 / 3) * (1 + 1e-9)
    # MFU is quoted against the rated peak: it falls with the step time, not with the clock
    assert capped["mfu"] == pytest.approx(full["mfu"] * full["step_time_s"]
                                          / capped["step_time_s"], rel=1e-9)
    joules = lambda r: r["step_time_s"] * BASE["cluster"]["gpus"]  # noqa: E731
    assert capped["tokens_per_joule"] == pytest.approx(
        full["tokens_per_joule"] * joules(full) * 800 / (joules(capped) * 400), rel=1e-9)


@pytest.mark.parametrize("sets, fragment", [
    (["cluster.gpu.power_limit_w=500"], "needs power_w"),
    (limited(900), "must not exceed power_w"),
    (limited(0), "power_limit_w"),
    (limited(500, 0.5), "power_clock_exponent"),
])
def test_bad_limits_name_the_field(sets, fragment):
    with pytest.raises(ScenarioError, match=r"cluster\.gpu\.power_(limit_w|clock_exponent)") \
            as err:
        load_scenario(BASE, sets)
    assert fragment in str(err.value)


def test_a_bad_limit_exits_2_naming_the_field(tmp_path):
    path = tmp_path / "s.json"
    path.write_text(json.dumps(BASE))
    result = CliRunner().invoke(main, ["evaluate", str(path), "--set",
                                       "cluster.gpu.power_w=700", "--set",
                                       "cluster.gpu.power_limit_w=750"])
    assert result.exit_code == 2
    assert "cluster.gpu.power_limit_w" in result.output and "Traceback" not in result.output


def test_grand_teton_preset_takes_the_h100_fit_at_its_500_w_limit():
    g = presets.gpu("h100-hbm2e-96gb", dtype="bf16")
    h = presets.gpu("h100-sxm-80gb", dtype="bf16")
    assert g["power_limit_w"] == 500.0 and g["power_w"] == 700.0
    for key in ("gemm_efficiency_max", "attention_efficiency", "layer_overhead_us"):
        assert g[key] == h[key], key  # the copied H100 fit
    raw = base()
    raw["cluster"] = {"preset": "dgx-h100-superpod", "gpus": 64,
                      "gpu": {"preset": "h100-hbm2e-96gb"}}
    sys = pack_system(load_scenario(raw))
    assert sys[L.SYS_PEAK_FLOPS] == pytest.approx(989.4e12 * (500 / 700) ** (1 / 3.31))
    assert sys[L.SYS_HBM_BANDWIDTH] == 2400e9 and sys[L.SYS_POWER_W] == 500.0
    # the limit can be raised to the board's rating, which removes the derating
    sys = pack_system(load_scenario(raw, ["cluster.gpu.power_limit_w=700"]))
    assert sys[L.SYS_PEAK_FLOPS] == pytest.approx(989.4e12)


def test_a_site_of_power_limited_gpus_paces_the_cluster():
    from trainscape.spec.sites import paced_gpu

    sc = load_scenario(BASE, limited(400, 3))
    fast = sc.cluster.gpu.model_copy(update={"power_limit_w": None})
    slow = sc.cluster.gpu
    sites = [type("Site", (), {"gpus": 32})(), type("Site", (), {"gpus": 32})()]
    fake = type("Sc", (), {"cluster": type("C", (), {"sites": sites})(), "job": sc.job})()
    paced = paced_gpu(fake, [fast, slow])
    assert paced.power_limit_w is None
    assert paced.peak_for("bf16") == pytest.approx(slow.peak_for("bf16"))
    assert paced.power_w == pytest.approx((800 + 400) / 2)
