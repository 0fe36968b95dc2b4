"""``job.attention_kernel``: a fused attention kernel written for an older architecture
(FlashAttention-2, Triton FlashAttention on Hopper) runs at the GPU's
``legacy_attention_fraction`` of ``attention_efficiency`` (FlashAttention-3 paper: 35 % vs 75 % of
H100 peak), and the job's attention time grows by exactly its inverse."""

from __future__ import annotations

import copy

import numpy as np
import pytest
from click.testing import CliRunner

import trainscape
from trainscape import layout as L
from trainscape import presets
from trainscape.cli import main
from trainscape.model.llm import kernel_attention_efficiency
from trainscape.spec import ScenarioError, pack_system

TIERS = [{"name": "node", "size": 8, "bandwidth_GBps": 450.0, "latency_us": 3.0},
         {"name": "fabric", "size": 8, "bandwidth_GBps": 50.0, "latency_us": 10.0}]


def raw(gpu="h100-sxm-80gb", **job):
    return {"model": {"preset": "llama3-8b"},
            "job": {"seq_len": 8192, "global_batch": 64, **job},
            "cluster": {"gpu": gpu, "gpus": 64, "tiers": copy.deepcopy(TIERS)},
            "config": {"tp": 1, "pp": 1, "dp": 64, "mbs": 1, "zero": 3, "recompute": "full"}}


def test_known_answer():
    assert kernel_attention_efficiency(0.6, 0.47, False) == 0.6
    assert kernel_attention_efficiency(0.6, 0.47, True) == pytest.approx(0.282)
    assert kernel_attention_efficiency(0.6, 1.0, True) == 0.6


def test_stock_fraction_cites_the_flashattention3_figure():
    h100 = presets.gpu("h100-sxm-80gb", calibrated=False)
    assert h100["legacy_attention_fraction"] == pytest.approx(0.35 / 0.75, abs=0.005)
    assert "2407.08608" in h100["sources"]["legacy_attention_fraction"]
    # Ampere is what those kernels were written for: nothing to lose there
    for name in ("a100-sxm-40gb", "a100-sxm-80gb"):
        assert presets.gpu(name, calibrated=False)["legacy_attention_fraction"] == 1.0


@pytest.mark.parametrize("gpu", ["h100-sxm-80gb", "a100-sxm-80gb"])
def test_packed_attention_efficiency(gpu):
    native = pack_system(trainscape.load(raw(gpu)))
    legacy = pack_system(trainscape.load(raw(gpu, attention_kernel="legacy")))
    g = trainscape.load(raw(gpu)).cluster.gpu
    assert legacy[L.SYS_ATTENTION_EFFICIENCY] == pytest.approx(
        native[L.SYS_ATTENTION_EFFICIENCY] * g.legacy_attention_fraction)
    # nothing else in the system block moves
    mask = np.ones(L.N_SYS, dtype=bool)
    mask[L.SYS_ATTENTION_EFFICIENCY] = False
    np.testing.assert_array_equal(native[mask], legacy[mask])


def test_legacy_kernel_slows_only_the_attention_time():
    native = trainscape.evaluate(trainscape.load(raw()), backend="python")
    legacy = trainscape.evaluate(trainscape.load(raw(attention_kernel="legacy")),
                                 backend="python")
    assert legacy.step_time_s > native.step_time_s
    # the extra time is the attention core's, scaled by 1/fraction - 1: at most that much of
    # the whole compute, and the same on every backend
    frac = trainscape.load(raw()).cluster.gpu.legacy_attention_fraction
    assert legacy.step_time_s - native.step_time_s < native.step_time_s * (1 / frac - 1)
    for backend in ("c", "numba"):
        other = trainscape.evaluate(trainscape.load(raw(attention_kernel="legacy")),
                                    backend=backend)
        assert other.step_time_s == pytest.approx(legacy.step_time_s, rel=1e-9)


def test_legacy_kernel_needs_fused_attention(tmp_path):
    with pytest.raises(ScenarioError, match=r"^job\.attention_kernel: "):
        trainscape.load(raw(attention_kernel="legacy", flash_attention=False))
    with pytest.raises(ScenarioError, match=r"^job\.attention_kernel: "):
        trainscape.load(raw(attention_kernel="fa2"))
    path = tmp_path / "s.toml"
    path.write_text('[model]\npreset = "llama3-8b"\n[job]\nseq_len = 8192\nglobal_batch = 64\n'
                    'flash_attention = false\nattention_kernel = "legacy"\n[cluster]\n'
                    'gpu = "h100-sxm-80gb"\ngpus = 8\n[[cluster.tiers]]\nname = "node"\n'
                    'size = 8\nbandwidth_GBps = 450.0\nlatency_us = 3.0\n[config]\ntp = 8\n')
    res = CliRunner().invoke(main, ["evaluate", str(path)])
    assert res.exit_code == 2 and "job.attention_kernel" in res.output
