"""Megatron-Core recompute modules beside selective recompute (job.recompute_modules):
"layernorm" discards the two norms' outputs, "moe_act" the experts' activation-function outputs,
and the backward re-runs those memory-bound kernels (model.llm.recompute_module_savings,
recompute_module_redo_bytes, recompute_modules_time)."""

from __future__ import annotations

import numpy as np
import pytest
from click.testing import CliRunner

from trainscape import layout as L
from trainscape.backends import evaluate_blocks
from trainscape.cli import main
from trainscape.model import llm
from trainscape.spec import ScenarioError, load_scenario, pack_job

from test_model_known_answers import FABRIC, NODE, gpt_model, job, one_config, system
from test_spec import BASE

S, B, H, FFN, TOP_K = 4096.0, 1.0, 2880.0, 2880.0, 4.0


def test_savings_by_hand_in_a_16_bit_job():
    # layernorm: the QKV and fc1 inputs (the norm outputs, saved as themselves) of a dense
    # layer; the QKV input and the router input of an MoE layer; 2 bytes each, split with SP
    dense, moe = llm.recompute_module_savings(S, B, H, FFN, TOP_K, 0.0, 8.0, True, 2.0, 2.0,
                                              True, False)
    assert dense == 2 * 2 * S * B * H / 8 and moe == 2 * 2 * S * B * H / 8
    # without SP the norm outputs are whole on every TP rank
    dense, _ = llm.recompute_module_savings(S, B, H, FFN, TOP_K, 0.0, 8.0, False, 2.0, 2.0,
                                            True, False)
    assert dense == 2 * 2 * S * B * H
    # moe_act: every routed (and shared) copy's fc2 input, split over TP
    dense, moe = llm.recompute_module_savings(S, B, H, FFN, TOP_K, 1.0, 2.0, True, 2.0, 2.0,
                                              False, True)
    assert dense == 0.0 and moe == (TOP_K + 1) * 2 * S * B * FFN / 2


def test_fp8_linear_inputs_keep_their_own_copies():
    # Transformer Engine saves the FP8 cast of a linear layer's input, not the 16-bit tensor:
    # dropping the norm or activation output frees only the router's (16-bit GEMM) input
    dense, moe = llm.recompute_module_savings(S, B, H, FFN, TOP_K, 0.0, 1.0, False, 2.0, 1.0,
                                              True, True)
    assert dense == 0.0 and moe == 2 * S * B * H


def test_redo_bytes_by_hand():
    # two norms read and write s*b*h each; SwiGLU reads the 2*ffn-wide fc1 output, writes ffn
    dense, moe = llm.recompute_module_redo_bytes(S, B, H, FFN, TOP_K, 0.0, True, 1.0, False,
                                                 2.0, True, True)
    assert dense == 2 * 2 * 2 * S * B * H
    assert moe == dense + TOP_K * 3 * 2 * S * B * FFN
    assert llm.recompute_module_redo_bytes(S, B, H, FFN, TOP_K, 0.0, False, 1.0, False, 2.0,
                                           False, True)[1] == TOP_K * 2 * 2 * S * B * FFN


def moe_blocks():
    sys = system([NODE, FABRIC], gpus=8)
    mdl = gpt_model(layers=8, h=2880, heads=64)
    mdl[L.MDL_HEAD_DIM] = 64
    mdl[L.MDL_SWIGLU] = 1
    mdl[L.MDL_FFN_HIDDEN] = 2880
    mdl[L.MDL_EXPERTS], mdl[L.MDL_TOP_K], mdl[L.MDL_EXPERT_FFN_HIDDEN] = 16, 4, 2880
    mdl[L.MDL_MOE_EVERY] = 1
    j = job(seq=4096, batch=8)
    j[L.JOB_DROPOUT] = 0
    return sys, mdl, j


@pytest.mark.parametrize("backend", ["python", "c", "numba"])
def test_selective_with_modules_saves_memory_and_costs_backward_time(backend):
    sys, mdl, j = moe_blocks()
    cfg = one_config(dp=8, ep=8, recompute=L.RECOMPUTE_SELECTIVE)
    plain = evaluate_blocks(sys, mdl, j, cfg, backend=backend)[:, 0]
    j2 = j.copy()
    j2[L.JOB_RECOMPUTE_LAYERNORM] = j2[L.JOB_RECOMPUTE_MOE_ACT] = 1.0
    mods = evaluate_blocks(sys, mdl, j2, cfg, backend=backend)[:, 0]
    # pp = 1: one microbatch in flight, every layer on the device
    saved = llm.recompute_module_savings(4096.0, 1.0, 2880.0, 2880.0, 4.0, 0.0, 1.0, False,
                                         2.0, 2.0, True, True)[1]
    assert plain[L.OUT_MEMORY_GIB] - mods[L.OUT_MEMORY_GIB] == pytest.approx(
        8 * saved / 2**30, rel=1e-9)
    redo = llm.recompute_module_redo_bytes(4096.0, 1.0, 2880.0, 2880.0, 4.0, 0.0, True, 1.0,
                                           False, 2.0, True, True)[1]
    t_redo = llm.memory_bound_time(sys, 8 * redo)  # 8 layers, 1 microbatch (8 / dp 8)
    assert mods[L.OUT_COMPUTE_S] - plain[L.OUT_COMPUTE_S] == pytest.approx(t_redo, rel=1e-9)
    # the modules belong to selective recompute: "none" is unchanged by them
    none = one_config(dp=8, ep=8)
    assert np.array_equal(evaluate_blocks(sys, mdl, j, none, backend=backend),
                          evaluate_blocks(sys, mdl, j2, none, backend=backend))


def test_scenario_field_packs_and_rejects_unknown_modules():
    sc = load_scenario(BASE, ['job.recompute_modules=["layernorm", "moe_act"]'])
    j = pack_job(sc)
    assert j[L.JOB_RECOMPUTE_LAYERNORM] == 1.0 and j[L.JOB_RECOMPUTE_MOE_ACT] == 1.0
    assert pack_job(load_scenario(BASE))[L.JOB_RECOMPUTE_LAYERNORM] == 0.0
    with pytest.raises(ScenarioError, match=r"^job\.recompute_modules"):
        load_scenario(BASE, ['job.recompute_modules=["mla_up_proj"]'])


def test_a_bad_module_name_exits_2_naming_the_field(tmp_path):
    path = tmp_path / "s.json"
    import json

    path.write_text(json.dumps(BASE))
    result = CliRunner().invoke(main, ["evaluate", str(path), "--set",
                                       'job.recompute_modules=["core"]'])
    assert result.exit_code == 2
    assert "job.recompute_modules" in result.output and "Traceback" not in result.output


def test_the_design_space_keeps_selective_when_modules_change_it():
    from trainscape.space.design import selective_is_none

    j = job()
    assert selective_is_none(j)  # FlashAttention: selective stores what none does
    j[L.JOB_RECOMPUTE_MOE_ACT] = 1.0
    assert not selective_is_none(j)
