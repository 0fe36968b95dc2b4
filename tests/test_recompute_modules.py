"""Megatron-Core recompute modules beside selective recompute (job.recompute_modules):
"layernorm" discards the two norms' outputs, "moe_act" the experts' activation-function outputs,
and the backward re-runs those memory-bound kernels; "mlp", "moe" and "shared_experts"
checkpoint whole blocks, whose backward re-runs their GEMMs (and, for "moe", the all-to-alls)
(model.llm.recompute_module_savings, recompute_module_redo_bytes, recompute_modules_time,
recompute_module_gemm_time, recompute_module_tp_replay, recompute_module_redo_flops)."""

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
DENSE_FFN = 4 * H


def savings(t, sp, act, lin, layernorm=False, moe_act=False, mlp=False, moe=False,
            shared_experts=False, shared=0.0, swiglu=True, dropout=False):
    return llm.recompute_module_savings(S, B, H, DENSE_FFN, FFN, TOP_K, shared, swiglu, t, sp,
                                        act, lin, dropout, layernorm, moe_act, mlp, moe,
                                        shared_experts)


def redo(t, sp, act, layernorm=False, moe_act=False, mlp=False, moe=False,
         shared_experts=False, shared=0.0, swiglu=True):
    return llm.recompute_module_redo_bytes(S, B, H, DENSE_FFN, FFN, TOP_K, shared, swiglu, t, sp,
                                           act, False, layernorm, moe_act, mlp, moe,
                                           shared_experts)


def test_savings_by_hand_in_a_16_bit_job():
    # layernorm: the QKV and fc1 inputs (the norm outputs, saved as themselves) of a dense
    # layer; the QKV input and the router input of an MoE layer; 2 bytes each, split with SP
    dense, moe = savings(8.0, True, 2.0, 2.0, layernorm=True)
    assert dense == 2 * 2 * S * B * H / 8 and moe == 2 * 2 * S * B * H / 8
    # without SP the norm outputs are whole on every TP rank
    dense, _ = savings(8.0, False, 2.0, 2.0, layernorm=True)
    assert dense == 2 * 2 * S * B * H
    # moe_act: every routed (and shared) copy's fc2 input, split over TP
    dense, moe = savings(2.0, True, 2.0, 2.0, moe_act=True, shared=1.0)
    assert dense == 0.0 and moe == (TOP_K + 1) * 2 * S * B * FFN / 2


def test_fp8_linear_inputs_keep_their_own_copies():
    # Transformer Engine saves the FP8 cast of a linear layer's input, not the 16-bit tensor:
    # dropping the norm or activation output frees only the router's (16-bit GEMM) input
    dense, moe = savings(1.0, False, 2.0, 1.0, layernorm=True, moe_act=True)
    assert dense == 0.0 and moe == 2 * S * B * H


def test_block_checkpoints_free_their_blocks():
    # mlp: the whole dense MLP block of mlp_activation_bytes (SwiGLU: input 2sbh, fc1 output
    # 2 x 2sb*ffn, fc2 input 2sb*ffn), split with SP
    dense, moe = savings(2.0, True, 2.0, 2.0, mlp=True)
    assert moe == 0.0
    assert dense == pytest.approx((2 * S * B * H + 3 * 2 * S * B * DENSE_FFN) / 2)
    # with layernorm too, the fc1 input (the norm output) is not freed twice
    both, _ = savings(2.0, True, 2.0, 2.0, mlp=True, layernorm=True)
    assert both == pytest.approx(dense + 2 * S * B * H / 2)
    # moe: every routed and shared copy (dispatched input, fc1 output, fc2 input); the router
    # input is the checkpoint's own input and stays; moe_act adds nothing beside it
    copy = (2 * S * B * H + 3 * 2 * S * B * FFN) / 2
    _, moe = savings(2.0, True, 2.0, 2.0, moe=True, shared=1.0)
    assert moe == pytest.approx((TOP_K + 1) * copy)
    assert savings(2.0, True, 2.0, 2.0, moe=True, moe_act=True, shared=1.0)[1] == moe
    # shared_experts: the shared copy only, less its fc2 input where moe_act frees it already
    _, sh = savings(2.0, True, 2.0, 2.0, shared_experts=True, shared=1.0)
    assert sh == pytest.approx(copy)
    _, sh_act = savings(2.0, True, 2.0, 2.0, shared_experts=True, moe_act=True, shared=1.0)
    assert sh_act == pytest.approx(copy + TOP_K * 2 * S * B * FFN / 2)


def test_redo_bytes_by_hand():
    # two norms read and write s*b*h each; SwiGLU reads the 2*ffn-wide fc1 output, writes ffn
    dense, moe = redo(1.0, False, 2.0, layernorm=True, moe_act=True)
    assert dense == 2 * 2 * 2 * S * B * H
    assert moe == dense + TOP_K * 3 * 2 * S * B * FFN
    assert redo(1.0, False, 2.0, moe_act=True, swiglu=False)[1] == TOP_K * 2 * 2 * S * B * FFN
    # a re-run block touches its stored activations once, at 16 bits
    assert redo(1.0, False, 2.0, mlp=True)[0] == pytest.approx(
        llm.mlp_activation_bytes(S, B, H, DENSE_FFN, True, 1.0, False, 2.0, False, 2.0))
    assert redo(1.0, False, 2.0, moe=True, moe_act=True)[1] == pytest.approx(
        llm.moe_activation_bytes(S, B, H, FFN, TOP_K, 0.0, True, 1.0, False, 2.0, False, 2.0))


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


def selective_with_and_without(backend, *modules):
    """The MoE blocks under selective recompute on ``backend``: ``(sys, mdl, job, job with
    the recompute-module flags ``modules`` set, output without, output with)``."""
    sys, mdl, j = moe_blocks()
    cfg = one_config(dp=8, ep=8, recompute=L.RECOMPUTE_SELECTIVE)
    j2 = j.copy()
    for field in modules:
        j2[field] = 1.0
    return (sys, mdl, j, j2, evaluate_blocks(sys, mdl, j, cfg, backend=backend)[:, 0],
            evaluate_blocks(sys, mdl, j2, cfg, backend=backend)[:, 0])


@pytest.mark.parametrize("backend", ["python", "c", "numba"])
def test_selective_with_modules_saves_memory_and_costs_backward_time(backend):
    sys, mdl, j, j2, plain, mods = selective_with_and_without(
        backend, L.JOB_RECOMPUTE_LAYERNORM, L.JOB_RECOMPUTE_MOE_ACT)
    # pp = 1: one microbatch in flight, every layer on the device
    saved = llm.recompute_module_savings(4096.0, 1.0, 2880.0, 2880.0, 2880.0, 4.0, 0.0, True,
                                         1.0, False, 2.0, 2.0, False, True, True, False, False,
                                         False)[1]
    assert plain[L.OUT_MEMORY_GIB] - mods[L.OUT_MEMORY_GIB] == pytest.approx(
        8 * saved / 2**30, rel=1e-9)
    redo_b = llm.recompute_module_redo_bytes(4096.0, 1.0, 2880.0, 2880.0, 2880.0, 4.0, 0.0,
                                             True, 1.0, False, 2.0, False, True, True, False,
                                             False, False)[1]
    t_redo = llm.memory_bound_time(sys, 8 * redo_b)  # 8 layers, 1 microbatch (8 / dp 8)
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
    j = pack_job(load_scenario(BASE, ['job.recompute_modules=["mlp", "moe", "shared_experts"]']))
    assert (j[L.JOB_RECOMPUTE_MLP], j[L.JOB_RECOMPUTE_MOE],
            j[L.JOB_RECOMPUTE_SHARED_EXPERTS]) == (1.0, 1.0, 1.0)
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
    for field in (L.JOB_RECOMPUTE_MLP, L.JOB_RECOMPUTE_MOE, L.JOB_RECOMPUTE_SHARED_EXPERTS):
        k = job()
        k[field] = 1.0
        assert not selective_is_none(k)


@pytest.mark.parametrize("backend", ["python", "c", "numba"])
def test_the_moe_module_frees_the_block_and_replays_its_gemms_and_all_to_alls(backend):
    _, _, _, _, plain, mods = selective_with_and_without(backend, L.JOB_RECOMPUTE_MOE)
    saved = llm.recompute_module_savings(4096.0, 1.0, 2880.0, 2880.0, 2880.0, 4.0, 0.0, True,
                                         1.0, False, 2.0, 2.0, False, False, False, False, True,
                                         False)[1]
    assert saved > 0
    assert plain[L.OUT_MEMORY_GIB] - mods[L.OUT_MEMORY_GIB] == pytest.approx(
        8 * saved / 2**30, rel=1e-9)
    # the backward re-runs the router and experts: more compute, at most a full forward more
    assert mods[L.OUT_COMPUTE_S] > plain[L.OUT_COMPUTE_S]
    # ... and the dispatch and combine once more: the EP time grows by half
    assert mods[L.OUT_EP_COMM_S] == pytest.approx(1.5 * plain[L.OUT_EP_COMM_S], rel=1e-9)
    assert plain[L.OUT_EP_COMM_S] > 0
    # hardware FLOPs count the re-run experts; model FLOPs do not
    assert mods[L.OUT_HW_TFLOPS_PER_GPU] * mods[L.OUT_STEP_TIME_S] > \
        plain[L.OUT_HW_TFLOPS_PER_GPU] * plain[L.OUT_STEP_TIME_S]
    assert mods[L.OUT_MODEL_TFLOPS_PER_GPU] * mods[L.OUT_STEP_TIME_S] == pytest.approx(
        plain[L.OUT_MODEL_TFLOPS_PER_GPU] * plain[L.OUT_STEP_TIME_S], rel=1e-9)


@pytest.mark.parametrize("backend", ["python", "c", "numba"])
def test_the_mlp_module_re_runs_the_dense_mlp_gemms(backend):
    sys = system([NODE, FABRIC], gpus=8)
    mdl = gpt_model(layers=4)
    j = job(seq=2048, batch=8)
    cfg = one_config(dp=8, recompute=L.RECOMPUTE_SELECTIVE)
    plain = evaluate_blocks(sys, mdl, j, cfg, backend=backend)[:, 0]
    j2 = j.copy()
    j2[L.JOB_RECOMPUTE_MLP] = 1.0
    mods = evaluate_blocks(sys, mdl, j2, cfg, backend=backend)[:, 0]
    row = llm.row_terms(sys, mdl, j2, cfg, 0)
    extra = llm.recompute_modules_time(sys, mdl, j2, row)
    # one microbatch per device (8 / dp 8): the backward grows by exactly the redo time, the
    # dense MLP GEMMs being part of it
    assert mods[L.OUT_COMPUTE_S] - plain[L.OUT_COMPUTE_S] == pytest.approx(extra, rel=1e-9)
    gemm = llm.recompute_module_gemm_time(sys, mdl, j2, row)
    assert 0 < gemm < extra
    assert gemm == pytest.approx(4 * llm.linear_gemm_time(
        sys, llm.mlp_flops(1.0, 2048.0, mdl[L.MDL_HIDDEN], mdl[L.MDL_FFN_HIDDEN], False), 2.0))
    assert mods[L.OUT_MEM_ACTIVATIONS_GIB] < plain[L.OUT_MEM_ACTIVATIONS_GIB]


def test_tp_replay_share_by_hand():
    j = job()
    row = [0.0] * 64
    row[llm.ROW_DENSE_LAYERS], row[llm.ROW_MOE_LAYERS], row[llm.ROW_STAGE_LAYERS] = 3.0, 1.0, 4.0
    assert llm.recompute_module_tp_replay(j, row) == 0.0
    j[L.JOB_RECOMPUTE_MLP] = 1.0
    assert llm.recompute_module_tp_replay(j, row) == 0.5 * 3 / 4
    j[L.JOB_RECOMPUTE_MOE] = 1.0
    assert llm.recompute_module_tp_replay(j, row) == 0.5
    # a stage without transformer layers replays nothing (no 0 / 0)
    row[llm.ROW_DENSE_LAYERS] = row[llm.ROW_MOE_LAYERS] = row[llm.ROW_STAGE_LAYERS] = 0.0
    assert llm.recompute_module_tp_replay(j, row) == 0.0
