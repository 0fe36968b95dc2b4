"""Activation offload to host memory (``job.offload_activations``): known answers by hand.

Megatron-Core ``--cpu-offloading --cpu-offloading-num-layers N`` through Transformer Engine's
``get_cpu_offload_context`` (double-buffered: a layer's saved activations copied out beside the
next layer's forward and prefetched a layer ahead of the backward), and Calculon (Isaev et al.,
SC'23: offload overhead ``max(0, transfer - compute)`` per block and pass). The toy machine and
scenario A (TP 2 with SP x DP 4, ZeRO-1, no pipeline, m = 4 microbatches of b = 1) are those of
``test_known_answers_columns`` and derived there; one layer saves
``A = 32 sbh / t + 4 a s / t = 16,793,600`` bytes per microbatch (Korthikanti et al. 2022
Table 2 with SP and FlashAttention, no dropout masks).
"""

from __future__ import annotations

import copy
import json
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

import trainscape
from backend_fixture import backend  # noqa: F401
from test_known_answers_columns import (GIB, HEADS, SBH, SEQ, T_AG_A, T_RS_A, T_TP_COLL,
                                        P_GPU_A, HBM, LAYERS, _scenario_a_f_b_w, close, config,
                                        run, toy_job, toy_model, toy_system)
from trainscape import layout as L
from trainscape.cli import main
from trainscape.model import llm
from trainscape.spec import ScenarioError

ROOT = Path(__file__).resolve().parents[1]
GPT3 = ROOT / "examples" / "gpt3-175b-a100.toml"
A = 32 * SBH / 2 + 4 * HEADS * SEQ / 2  # one layer's saved bytes, one microbatch, scenario A


def _offload_job(share):
    j = toy_job(16)
    j[L.JOB_OFFLOAD_ACTIVATIONS] = share
    return j


def _offload_system(link):
    s = toy_system()
    s[L.SYS_HOST_LINK_BANDWIDTH] = link
    return s


def test_layer_bytes_are_what_the_docstring_says():
    assert A == 16_793_600


def test_exposed_forward_copy_hidden_backward_copy(backend):  # noqa: F811
    """Scenario A with every layer offloaded (share 1) over a 110 GB/s host link: each
    microbatch copies its 2 layers' activations out, 2 A = 33,587,200 B, in 3.0534e-4 s, and
    the same bytes back. The forward's compute F = 2.833e-4 s (test_known_answers_columns'
    derivation) is shorter: 3.0534e-4 - F is exposed per microbatch; the backward's B + W =
    4.48e-4 s hides the reload. offload_s = m x (2 A / 110e9 - F) with m = 4; no pipeline, so
    no bubble, and the step is scenario A's step plus offload_s."""
    f, b, w = _scenario_a_f_b_w()
    t = 2 * A / 110e9
    assert f < t < b + w  # the premise of the hand derivation
    r = run(backend, _offload_system(110e9), toy_model(), _offload_job(1.0),
            config(tp=2, dp=4, sp=1, zero=1))
    offload = 4 * (t - f)
    step = 4 * (f + b + w) + 4 * 2 * LAYERS * 4 * T_TP_COLL + T_RS_A + T_AG_A \
        + P_GPU_A / 4 * 16 / HBM
    close(r["offload_s"], offload)
    close(r["step_time_s"], step + offload)
    assert r["bubble_s"] == 0.0
    close(r["compute_s"], 4 * (f + b + w))  # the compute itself is unchanged
    # share 1: nothing stays but the double buffer, 2 layers of one microbatch = 2 A
    close(r["mem_activations_gib"], 2 * A / GIB)


def test_both_copies_exposed_on_a_slow_link(backend):  # noqa: F811
    """The same at 20 GB/s: 2 A / 20e9 = 1.67936e-3 s outlasts both F and B + W, so per
    microbatch (t - F) + (t - (B + W)) is exposed, m = 4 times."""
    f, b, w = _scenario_a_f_b_w()
    t = 2 * A / 20e9
    assert t > b + w > f
    r = run(backend, _offload_system(20e9), toy_model(), _offload_job(1.0),
            config(tp=2, dp=4, sp=1, zero=1))
    close(r["offload_s"], 4 * ((t - f) + (t - (b + w))))


def test_half_the_layers_fit_under_the_compute(backend):  # noqa: F811
    """Share 0.5 at 110 GB/s: one layer's A = 16,793,600 B take 1.5267e-4 s < F: fully hidden
    (offload_s 0, the step unchanged); HBM keeps half the activations plus the double buffer,
    A + 2 A = 3 A -- more than the 2 A without offload: with one microbatch of two layers in
    flight the buffer costs more than the offload saves."""
    f, _, _ = _scenario_a_f_b_w()
    assert A / 110e9 < f
    on = run(backend, _offload_system(110e9), toy_model(), _offload_job(0.5),
             config(tp=2, dp=4, sp=1, zero=1))
    off = run(backend, _offload_system(110e9), toy_model(), _offload_job(0.0),
              config(tp=2, dp=4, sp=1, zero=1))
    assert on["offload_s"] == 0.0
    assert on["step_time_s"] == off["step_time_s"]
    close(on["mem_activations_gib"], 3 * A / GIB)
    close(off["mem_activations_gib"], 2 * A / GIB)


@pytest.mark.parametrize("share, kept", [(0.0, 8.0), (0.25, 6.0 + 2.0), (0.5, 4.0 + 2.0),
                                         (1.0, 0.0 + 2.0)])
def test_memory_of_an_eight_layer_stage(backend, share, kept):  # noqa: F811
    """Eight layers on one device (no pipeline, one microbatch in flight): 8 A stored without
    offload; with a share s offloaded, 8 A (1 - s) stay plus the double buffer 2 A:
    s = 0.25 -> 6 A + 2 A, 0.5 -> 4 A + 2 A, 1 -> 2 A (Calculon's tier-1 requirement with
    activation offload keeps only the blocks in flight)."""
    mdl = toy_model()
    mdl[L.MDL_LAYERS] = 8
    r = run(backend, _offload_system(110e9), mdl, _offload_job(share),
            config(tp=2, dp=4, sp=1, zero=1))
    close(r["mem_activations_gib"], kept * A / GIB)


def test_the_double_buffer_holds_the_largest_layer():
    """The buffer slot is the largest layer the stage holds: a stage of dense layers only takes
    the dense layer's bytes, one with MoE layers the larger of the two, none: 0."""
    assert llm.largest_layer_activation_bytes(3.0, 0.0, 5.0, 9.0) == 5.0
    assert llm.largest_layer_activation_bytes(3.0, 1.0, 5.0, 9.0) == 9.0
    assert llm.largest_layer_activation_bytes(0.0, 2.0, 5.0, 9.0) == 9.0
    assert llm.largest_layer_activation_bytes(3.0, 1.0, 5.0, 4.0) == 5.0
    assert llm.largest_layer_activation_bytes(0.0, 0.0, 5.0, 9.0) == 0.0


# ---- the scenario edge ------------------------------------------------------------------------

def test_share_outside_zero_to_one_is_refused():
    for bad in ("1.5", "-0.1", "nan"):
        with pytest.raises(ScenarioError) as e:
            trainscape.load(GPT3, overrides=["cluster.host_to_device_GBps=32",
                                             f"job.offload_activations={bad}"])
        assert str(e.value).startswith("job.offload_activations"), str(e.value)


def test_offload_needs_the_host_link():
    with pytest.raises(ScenarioError) as e:
        trainscape.load(GPT3, overrides=["job.offload_activations=0.5"])
    assert str(e.value).startswith("cluster.host_to_device_GBps")
    res = CliRunner().invoke(main, ["evaluate", str(GPT3), "--set",
                                    "job.offload_activations=0.5"])
    assert res.exit_code == 2
    assert "cluster.host_to_device_GBps" in res.output
    assert "Traceback" not in res.output


# ---- the measured example (docs/offload.md) ---------------------------------------------------

_LAYOUT = "tp=8,pp=8,mbs=8,schedule=interleaved,vpp=3,recompute=none,zero=1,sp=true"


def _gpt3(share, layout=_LAYOUT):
    res = CliRunner().invoke(main, ["evaluate", str(GPT3), "--config", layout, "--set",
                                    "cluster.host_to_device_GBps=32", "--set",
                                    f"job.offload_activations={share}", "--json"])
    assert res.exit_code == 0, res.output
    return json.loads(res.stdout)


def test_gpt3_layout_fits_only_with_activation_offload():
    """GPT-3 175B on the A100 example (80 GB), TP 8 x PP 8 interleaved (3 chunks) with SP, 8
    sequences per microbatch without recomputation: out of memory as it is and with a quarter
    of the layers offloaded; with half of them in host memory it fits, and at PCIe Gen4 x16
    (32 GB/s per direction) their copies hide under the compute: offload_s 0 and the same step
    time -- faster than the same layout with full recomputation, which fits without offload."""
    base, quarter, half = _gpt3(0.0), _gpt3(0.25), _gpt3(0.5)
    full = _gpt3(0.0, _LAYOUT.replace("recompute=none", "recompute=full"))
    assert base["status"] == "out_of_memory" and quarter["status"] == "out_of_memory"
    assert half["status"] == "ok" and full["status"] == "ok"
    assert half["mem_activations_gib"] < quarter["mem_activations_gib"] \
        < base["mem_activations_gib"]
    assert half["offload_s"] == 0.0
    assert half["step_time_s"] == base["step_time_s"] < full["step_time_s"]
    # a slower host link exposes the copies: the breakdown still sums to the step
    slow = CliRunner().invoke(main, ["evaluate", str(GPT3), "--config", _LAYOUT, "--set",
                                     "cluster.host_to_device_GBps=4", "--set",
                                     "job.offload_activations=0.5", "--json"])
    slow = json.loads(slow.stdout)
    assert slow["offload_s"] > 0.0 and slow["step_time_s"] > half["step_time_s"]
    assert slow["step_time_s"] == pytest.approx(sum(slow[k] for k in L.BREAKDOWN_FIELDS),
                                                rel=1e-12)


def test_offload_is_a_space_axis():
    """``"job.offload_activations" = [0.0, 1.0]`` in [space] through the co-design path: one
    best layout per point, each costed with its own share."""
    from _explore_common import SMALL
    from trainscape.explore.hardware import run_codesign

    raw = copy.deepcopy(SMALL)
    raw["space"]["job.offload_activations"] = [0.0, 1.0]
    raw["cluster"]["host_to_device_GBps"] = 64.0
    res = run_codesign(trainscape.load(raw), top=3, backend="numba", workers=1)
    assert [p.values["job.offload_activations"] for p in res.points] == [0.0, 1.0]
    off, on = res.results[0].top.out, res.results[1].top.out
    assert (off[L.OUT_OFFLOAD_S] == 0).all()
    assert on.shape[1] > 0 and (on[L.OUT_OFFLOAD_S] >= 0).all()


@pytest.mark.parametrize("value", [1.5, -0.25, float("nan")])
def test_a_raw_job_block_with_a_bad_share_is_invalid_not_a_lie(backend, value):  # noqa: F811
    """A job block that skipped the validator (the C library, another program) with a share
    outside 0..1 would store a negative activation memory and call it a fit; the kernel flags
    the column invalid (code 30) in every backend instead."""
    j = _offload_job(value)
    cfg = config(tp=2, dp=4, sp=1, zero=1)
    assert llm.config_error(_offload_system(110e9), toy_model(), j, cfg, 0) \
        == llm.OFFLOAD_SETTINGS_ERROR
    r = run(backend, _offload_system(110e9), toy_model(), j, cfg)
    assert r["status"] == L.STATUS_INVALID_CONFIG and r["feasible"] == 0.0


def test_sweep_kernels_agree_with_the_reference_under_offload():
    """The sweep kernels (csrc/sweep.c and the numba explore kernel, each with its own staged
    reuse of the model) find the same top layouts with every layer offloaded over a slow link
    (4 GB/s: the copies are exposed), and their rows equal the reference's evaluation of the
    same configurations in every output column."""
    from _explore_common import SMALL
    from trainscape.backends import available_backends
    from trainscape.explore.sweep import run_sweep
    from trainscape.spec import pack

    raw = copy.deepcopy(SMALL)
    raw["job"]["offload_activations"] = 1.0
    raw["cluster"]["host_to_device_GBps"] = 4.0
    sc = trainscape.load(raw)
    avail = available_backends()
    backends = [b for b in ("c", "numba") if avail[b][0]]
    results = [run_sweep(sc, top=8, backend=b, workers=2) for b in backends]
    sys_, mdl, job = pack(sc)
    for res in results:
        assert np.array_equal(res.top.index, results[0].top.index)
        assert (res.top.out[L.OUT_OFFLOAD_S] > 0).any()
        ref = trainscape.evaluate_columns(sys_, mdl, job, res.top.cfg, backend="python")
        np.testing.assert_allclose(res.top.out, ref, rtol=1e-12, atol=0)
