"""Known answers for compute and overlap physics (issue 12, items 2, 3 and 7):

- FP8 as Transformer Engine runs it: only the linear layers at the FP8 peak on their own curve,
  plus the cast traffic and the FP8 weight copies;
- TP overlap that leaves a fraction exposed and slows the overlapped GEMMs; TP groups that span
  nodes pay the slower tier;
- FlashAttention's backward at 2.5x the forward's FLOPs;
- the context-parallel ring's exposed part per step.
"""

import numpy as np
import pytest

from test_model_known_answers import FABRIC, NODE, gpt_model, job, one_config, system
from trainscape import layout as L
from trainscape.model import collectives as C
from trainscape.model import llm
from trainscape.model.reference import evaluate_batch
from trainscape.spec import load_scenario, pack
from trainscape.spec.errors import ScenarioError
from trainscape.spec.pack import fp8_cast_bytes, fp8_weight_cache_bytes


def row_of(sys, mdl, jb, **kw):
    cfg = one_config(**kw)
    assert llm.config_error(sys, mdl, jb, cfg, 0) == 0
    return llm.row_terms(sys, mdl, jb, cfg, 0)


def fp8_system(sys, factor=2.0, eff=0.7, half=2e9):
    out = sys.copy()
    out[L.SYS_LINEAR_PEAK_FLOPS] = sys[L.SYS_PEAK_FLOPS] * factor
    out[L.SYS_LINEAR_EFFICIENCY_MAX] = eff
    out[L.SYS_LINEAR_HALF_FLOPS] = half
    return out


# ---------------------------------------------------------------------------------------------
# A. FP8: linear layers only, cast traffic, weight copies
# ---------------------------------------------------------------------------------------------


def test_linear_gemm_time_is_the_gemm_curve_at_the_linear_constants():
    sys = fp8_system(system([NODE, FABRIC]), factor=2.0, eff=0.7, half=3e9)
    flops, n = 6e12, 4.0
    g = flops / n
    assert llm.linear_gemm_time(sys, flops, n) == pytest.approx(
        flops / (2e15 * 0.7 * g / (g + 3e9)), rel=1e-14)
    # the 16-bit curve is untouched
    assert llm.gemm_time(sys, flops, n) == pytest.approx(flops / (1e15 * 0.8 * g / (g + 1e9)),
                                                         rel=1e-14)


def test_fp8_speeds_up_the_linear_layers_only():
    # no per-GEMM overhead on either curve, same efficiency: the FP8 linear layers take exactly
    # half the time; attention, logits and memory-bound work do not change
    bf16 = system([NODE, FABRIC], gpus=8)
    bf16[L.SYS_GEMM_HALF_FLOPS] = 0.0
    bf16[L.SYS_LINEAR_HALF_FLOPS] = 0.0
    fp8 = fp8_system(bf16, factor=2.0, eff=0.8, half=0.0)
    mdl = gpt_model(layers=8, h=4096, heads=32)
    jb = job(seq=4096, batch=8)
    r16 = row_of(bf16, mdl, jb, tp=8)
    r8 = row_of(fp8, mdl, jb, tp=8)
    assert r8[llm.ROW_GEMM_F] == pytest.approx(r16[llm.ROW_GEMM_F] / 2, rel=1e-13)
    assert r8[llm.ROW_CORE_F] == r16[llm.ROW_CORE_F]
    assert r8[llm.ROW_MEM_F] == r16[llm.ROW_MEM_F]
    # the forward loses half its GEMM time and nothing else (logits included in both)
    saved = r16[llm.ROW_GEMM_F] / 2
    assert r16[llm.ROW_F_COMPUTE] - r8[llm.ROW_F_COMPUTE] == pytest.approx(saved, rel=1e-9)
    assert r16[llm.ROW_W_COMPUTE] - r8[llm.ROW_W_COMPUTE] == pytest.approx(saved, rel=1e-9)
    # so the step speeds up by far less than the 2x of the peaks
    o16 = evaluate_batch(bf16, mdl, jb, one_config(tp=8))
    o8 = evaluate_batch(fp8, mdl, jb, one_config(tp=8))
    speedup = o16[L.OUT_STEP_TIME_S, 0] / o8[L.OUT_STEP_TIME_S, 0]
    assert 1.0 < speedup < 2.0


def test_cast_elements_closed_forms():
    b, s, h, q, kv, ffn, t = 2, 1024, 4096, 4096, 1024, 14336, 4
    # forward: QKV and fc1 read b s h (split by t with SP); proj b s q / t; fc2 b s ffn / t
    assert llm.linear_cast_elements_forward(b, s, h, q, ffn, 1.0, t, False) == \
        2 * b * s * h + b * s * q / t + b * s * ffn / t
    assert llm.linear_cast_elements_forward(b, s, h, q, ffn, 1.0, t, True) == pytest.approx(
        (2 * b * s * h + b * s * q + b * s * ffn) / t, rel=1e-15)
    # backward: QKV's b s (q + 2 kv) / t, proj and fc2 b s h, fc1 b s ffn / t (x2 SwiGLU)
    assert llm.linear_cast_elements_backward(b, s, h, q, kv, ffn, True, 1.0, t, False) == \
        pytest.approx(b * s * (q + 2 * kv) / t + 2 * b * s * h + 2 * b * s * ffn / t, rel=1e-15)
    # an MoE layer: top_k + shared copies of the MLP part
    one = llm.linear_cast_elements_forward(b, s, h, q, ffn, 1.0, t, False)
    three = llm.linear_cast_elements_forward(b, s, h, q, ffn, 3.0, t, False)
    assert three - one == pytest.approx(2 * (b * s * h + b * s * ffn / t), rel=1e-15)


def test_cast_traffic_is_memory_bound_time_forward_and_backward():
    sys = fp8_system(system([NODE, FABRIC], gpus=8))
    mdl = gpt_model(layers=8, h=4096, heads=32)
    plain = job(seq=4096, batch=8)
    cast = plain.copy()
    cast[L.JOB_LINEAR_CAST_BYTES] = 4.0
    r0 = row_of(sys, mdl, plain, tp=8, sp=1)
    r1 = row_of(sys, mdl, cast, tp=8, sp=1)
    b, s, h = 1, 4096, 4096
    hbm = 3e12 * 0.8
    fwd = llm.linear_cast_elements_forward(b, s, h, h, 4 * h, 1.0, 8, True) * 4.0 / hbm
    bwd = llm.linear_cast_elements_backward(b, s, h, h, h, 4 * h, False, 1.0, 8, True) * 4.0 / hbm
    layers = 8
    assert r1[llm.ROW_F_COMPUTE] - r0[llm.ROW_F_COMPUTE] == pytest.approx(layers * fwd, rel=1e-9)
    assert r1[llm.ROW_B_COMPUTE] - r0[llm.ROW_B_COMPUTE] == pytest.approx(layers * bwd, rel=1e-9)
    # a recomputed forward casts again
    assert r1[llm.ROW_MEM_F] - r0[llm.ROW_MEM_F] == pytest.approx(layers * fwd, rel=1e-9)


def test_fp8_weight_copies_add_two_bytes_per_linear_weight():
    sys = system([NODE, FABRIC], gpus=1)
    mdl = gpt_model(layers=4, h=1024, heads=8, vocab=32000)
    plain = job(seq=1024, batch=4)
    cached = plain.copy()
    cached[L.JOB_FP8_WEIGHT_CACHE_BYTES] = 2.0
    o0 = evaluate_batch(sys, mdl, plain, one_config())
    o1 = evaluate_batch(sys, mdl, cached, one_config())
    h = 1024
    linear = 4 * (4 * h * h + 8 * h * h)  # QKV + proj, two 4h MLP matrices; no norms, embedding
    extra = (o1[L.OUT_MEM_WEIGHTS_GIB, 0] - o0[L.OUT_MEM_WEIGHTS_GIB, 0]) * 2**30
    assert extra == pytest.approx(2.0 * linear, rel=1e-9)
    assert o1[L.OUT_STEP_TIME_S, 0] == o0[L.OUT_STEP_TIME_S, 0]


def test_recipe_bytes_are_the_documented_sums():
    assert fp8_cast_bytes(None) == 0.0 and fp8_weight_cache_bytes(None) == 0.0
    assert fp8_cast_bytes("delayed") == 2 + 1 + 1
    assert fp8_cast_bytes("tensorwise") == 2 + 2 + 1 + 1
    assert fp8_cast_bytes("rowwise") == 2 + 2 + 1 + 1
    assert fp8_cast_bytes("blockwise") == 2 + 2 * (1 + 4 / 128)
    assert fp8_cast_bytes("mxfp8") == 2 + 2 * (1 + 1 / 32)
    assert fp8_weight_cache_bytes("delayed") == 2.0
    assert fp8_weight_cache_bytes("mxfp8") == 2 * (1 + 1 / 32)
    # under a compiler the tensorwise amax fuses into the producing kernel: one pass, as a
    # delayed recipe's; rowwise keeps its column-scale pass; TE (Megatron) fuses neither
    for stack in ("pytorch-fsdp", "jax-xla"):
        assert fp8_cast_bytes("tensorwise", stack) == fp8_cast_bytes("delayed", stack) == 4.0
        assert fp8_cast_bytes("rowwise", stack) == 6.0
    assert fp8_cast_bytes("tensorwise", "megatron-core") == 6.0


def test_compiled_stack_tensorwise_cast_reaches_the_packed_job():
    sc = _h100_scenario("fp8", "tensorwise")
    _, _, te = pack(load_scenario(sc))
    sc["job"]["stack"] = "pytorch-fsdp"
    _, _, inductor = pack(load_scenario(sc))
    assert te[L.JOB_LINEAR_CAST_BYTES] == 6.0 and inductor[L.JOB_LINEAR_CAST_BYTES] == 4.0


def _h100_scenario(dtype, recipe=None):
    job_tbl = {"seq_len": 8192, "global_batch": 128, "dtype": dtype}
    if recipe is not None:
        job_tbl["fp8_recipe"] = recipe
    return {"model": {"layers": 32, "hidden": 4096, "ffn_hidden": 14336, "heads": 32,
                      "kv_heads": 8, "vocab": 128256},
            "job": job_tbl,
            # the stock (microbenchmark) constants: the values this file derives
            "cluster": {"gpu": {"preset": "h100-sxm-80gb", "calibrated": False}, "gpus": 8,
                        "tiers": [{"name": "node", "size": 8, "bandwidth_GBps": 450,
                                   "latency_us": 2}]}}


def test_pack_fp8_job_linear_fields_from_the_preset():
    sys, _, jb = pack(load_scenario(_h100_scenario("fp8")))
    assert sys[L.SYS_PEAK_FLOPS] == pytest.approx(989.4e12)
    assert sys[L.SYS_LINEAR_PEAK_FLOPS] == pytest.approx(1978.9e12)
    assert sys[L.SYS_LINEAR_EFFICIENCY_MAX] == 0.709
    assert sys[L.SYS_LINEAR_HALF_FLOPS] == 8.8e9
    assert jb[L.JOB_LINEAR_CAST_BYTES] == 4.0  # TE's default recipe: delayed scaling
    assert jb[L.JOB_FP8_WEIGHT_CACHE_BYTES] == 2.0
    sys16, _, jb16 = pack(load_scenario(_h100_scenario("bf16")))
    assert sys16[L.SYS_LINEAR_PEAK_FLOPS] == sys16[L.SYS_PEAK_FLOPS]
    assert sys16[L.SYS_LINEAR_EFFICIENCY_MAX] == sys16[L.SYS_GEMM_EFFICIENCY_MAX]
    assert sys16[L.SYS_LINEAR_HALF_FLOPS] == sys16[L.SYS_GEMM_HALF_FLOPS]
    assert jb16[L.JOB_LINEAR_CAST_BYTES] == 0.0 and jb16[L.JOB_FP8_WEIGHT_CACHE_BYTES] == 0.0
    _, _, jbm = pack(load_scenario(_h100_scenario("fp8", "mxfp8")))
    assert jbm[L.JOB_LINEAR_CAST_BYTES] == fp8_cast_bytes("mxfp8")


def test_fp8_speedup_on_h100_is_well_below_the_peak_ratio():
    # published FP8/BF16 training speed-ups are 1.16-1.44x, not the 2x of the peaks; the model
    # lands below 2x by construction (attention, logits, norms, casts stay); here: 8B dense, TP=1
    from trainscape.backends import evaluate_blocks

    steps = {}
    for dtype in ("bf16", "fp8"):
        sys, mdl, jb = pack(load_scenario(_h100_scenario(dtype)))
        out = evaluate_blocks(sys, mdl, jb, one_config(dp=8, zero=1), backend="python")
        steps[dtype] = out[L.OUT_STEP_TIME_S, 0]
    speedup = steps["bf16"] / steps["fp8"]
    assert 1.05 < speedup < 1.6


def test_fp8_recipe_on_a_bf16_job_is_an_error_naming_the_field():
    with pytest.raises(ScenarioError) as info:
        load_scenario(_h100_scenario("bf16", "delayed"))
    assert "job.fp8_recipe" in str(info.value)


def test_fp8_job_needs_a_bf16_peak():
    raw = _h100_scenario("fp8")
    raw["cluster"]["gpu"] = {"preset": "h100-sxm-80gb", "peak_tflops": {"fp8": 1978.9}}
    with pytest.raises(ScenarioError) as info:
        load_scenario(raw)
    assert "peak_tflops" in str(info.value)


# ---------------------------------------------------------------------------------------------
# B. TP overlap hides only part, and costs SMs; cross-node TP pays the slower tier
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("comm,window", [(1.0, 3.0), (3.0, 1.0), (2.0, 2.0), (0.0, 1.0)])
def test_ideal_overlap_is_the_old_max_0_comm_minus_window(comm, window):
    assert llm.overlapped_exposed(comm, window, 0.0, 0.0) == llm.exposed(comm, window, True)


def test_overlap_leaves_a_fraction_exposed_and_slows_the_window():
    f, sig = 0.25, 0.1
    # communication shorter than the window: f C exposed, the rest hidden at sigma per second
    assert llm.overlapped_exposed(2.0, 10.0, f, sig) == pytest.approx(0.25 * 2 + 0.1 * 0.75 * 2)
    # longer than the window: C - W exposed, the whole window slowed
    assert llm.overlapped_exposed(10.0, 2.0, f, sig) == pytest.approx(10 - 2 + 0.1 * 2)
    # never below ideal overlap, never above no overlap plus the slowdown
    for c, w in ((1.0, 3.0), (3.0, 1.0), (5.0, 5.0)):
        e = llm.overlapped_exposed(c, w, f, sig)
        assert max(0.0, c - w) <= e <= c + sig * min(c, w)


def test_tp_overlap_in_the_model_uses_the_gpu_fractions():
    sys = system([NODE, FABRIC], gpus=8)
    sys[L.SYS_TP_OVERLAP_EXPOSED] = 0.125
    sys[L.SYS_TP_OVERLAP_SLOWDOWN] = 0.064
    assert llm.tp_exposed(sys, 1.0, 5.0, False) == 1.0
    assert llm.tp_exposed(sys, 1.0, 5.0, True) == pytest.approx(0.125 + 0.064 * 0.875)
    mdl = gpt_model(layers=8, h=4096, heads=32)
    jb = job(seq=4096, batch=8)
    on = evaluate_batch(sys, mdl, jb, one_config(tp=8, sp=1, tp_overlap=1))
    off = evaluate_batch(sys, mdl, jb, one_config(tp=8, sp=1, tp_overlap=0))
    assert 0.0 < on[L.OUT_TP_COMM_S, 0] < off[L.OUT_TP_COMM_S, 0]
    # per microbatch: forward and backward pass, each max(f C, C - W) + sigma min((1 - f) C, W)
    cfg = one_config(tp=8, sp=1, tp_overlap=1)
    row = llm.row_terms(sys, mdl, jb, cfg, 0)
    ordt = llm.order_terms(sys, mdl, jb, row, 0)
    c, w, m = ordt[llm.ORD_TP_PASS], row[llm.ROW_GEMM_F], 8
    per_pass = max(0.125 * c, c - w) + 0.064 * min(0.875 * c, w)
    assert on[L.OUT_TP_COMM_S, 0] == pytest.approx(m * 2 * per_pass, rel=1e-12)
    assert off[L.OUT_TP_COMM_S, 0] == pytest.approx(m * 2 * c, rel=1e-12)


def test_tp_group_spanning_nodes_is_costed_at_the_inter_node_tier():
    # tp = 8 placed outside dp = 8 ("dp-tp-..."): every TP group has one rank per node, so its
    # all-reduces are flat rings over the fabric (stride 8), not NVLink
    sys = system([NODE, FABRIC], gpus=64)
    nbytes = 1 * 4096 * 8192 * 2.0
    fabric_ring = 2 * 7 * 10e-6 + 2 * 7 / 8 * nbytes / (50e9 * 0.8)
    assert llm.tp_layer_comm_time(sys, nbytes, nbytes, False, 8.0, 8.0) == pytest.approx(
        2 * fabric_ring, rel=1e-12)
    nvlink_ring = 2 * 7 * 2e-6 + 2 * 7 / 8 * nbytes / (400e9 * 0.9)
    assert llm.tp_layer_comm_time(sys, nbytes, nbytes, False, 8.0, 1.0) == pytest.approx(
        2 * nvlink_ring, rel=1e-12)
    # through the whole model: the placement decides the stride
    mdl = gpt_model(layers=8, h=8192, heads=64)
    jb = job(seq=4096, batch=64)
    inner = one_config(tp=8, dp=8, order=L.order_from_names(["tp", "cp", "ep", "dp", "pp"]))
    outer = one_config(tp=8, dp=8, order=L.order_from_names(["dp", "tp", "cp", "ep", "pp"]))
    o_in = evaluate_batch(sys, mdl, jb, inner)
    o_out = evaluate_batch(sys, mdl, jb, outer)
    m, layers = 64 / 8, 8
    per_pass = llm.tp_layer_comm_time(sys, nbytes, nbytes, False, 8.0, 8.0)
    assert o_out[L.OUT_TP_COMM_S, 0] == pytest.approx(m * 2 * layers * per_pass, rel=1e-9)
    assert o_out[L.OUT_TP_COMM_S, 0] > 5 * o_in[L.OUT_TP_COMM_S, 0]


def test_tp_group_of_16_over_two_nodes_pays_the_fabric_for_its_outer_step():
    sys = system([NODE, FABRIC], gpus=64)
    nbytes = 1e9
    got = llm.tp_layer_comm_time(sys, nbytes, nbytes, False, 16.0, 1.0)
    assert got == pytest.approx(2 * C.all_reduce_time(sys, nbytes, 16, 1, 1, 1, 1, 1), rel=1e-15)
    # at least the cross-node all-reduce of an eighth of the buffer between the two nodes
    assert got > 2 * (2 * 1 / 2 * nbytes / 8 / (50e9 * 0.8))
    assert got > llm.tp_layer_comm_time(sys, nbytes, nbytes, False, 8.0, 1.0)


# ---------------------------------------------------------------------------------------------
# C. FlashAttention backward: 5 matmuls against the forward's 2
# ---------------------------------------------------------------------------------------------


def test_attention_backward_factor():
    assert llm.attention_backward_factor(True) == 2.5
    assert llm.attention_backward_factor(False) == 2.0


@pytest.mark.parametrize("flash,factor", [(1, 2.5), (0, 2.0)])
def test_backward_charges_the_attention_core_factor_times(flash, factor):
    sys = system([NODE, FABRIC], gpus=8)
    mdl = gpt_model(layers=8, h=4096, heads=32)
    jb = job(seq=8192, batch=8)
    jb[L.JOB_FLASH_ATTENTION] = flash
    r = row_of(sys, mdl, jb, tp=8)
    # backward - forward = (factor - 1) core + one more memory-bound pass (no FP8 casts here)
    assert r[llm.ROW_B_COMPUTE] - r[llm.ROW_F_COMPUTE] == pytest.approx(
        (factor - 1) * r[llm.ROW_CORE_F] + r[llm.ROW_MEM_F], rel=1e-9)


def test_hardware_flops_count_the_recomputed_scores():
    sys = system([NODE, FABRIC], gpus=1)
    mdl = gpt_model(layers=4, h=2048, heads=16)
    jb = job(seq=4096, batch=4)
    cfg = one_config()
    row = llm.row_terms(sys, mdl, jb, cfg, 0)
    ordt = llm.order_terms(sys, mdl, jb, row, 0)
    rect = llm.recompute_terms(sys, mdl, jb, row, ordt, L.RECOMPUTE_NONE)
    extra = 0.5 * 4 * row[llm.ROW_HW_CORE]  # layers x half the executed causal core
    assert rect[llm.REC_HW_FLOPS] == pytest.approx((3 * row[llm.ROW_HW_FWD] + extra) * 4,
                                                   rel=1e-12)


# ---------------------------------------------------------------------------------------------
# D. Context-parallel ring: per-step overlap, the last dK/dV hop exposed
# ---------------------------------------------------------------------------------------------


def cp_system(sig):
    sys = system([NODE, FABRIC], gpus=64)
    sys[L.SYS_CP_OVERLAP_SLOWDOWN] = sig
    return sys


def test_cp_ring_forward_closed_forms():
    cp, attn = 4.0, 8.0  # 2 s of attention per step
    sys = cp_system(0.05)
    # compute-bound steps: only the slowdown of the overlapped attention
    assert llm.cp_ring_exposed_forward(sys, 1.0, attn, cp) == pytest.approx(3 * 0.05 * 1.0)
    # communication-bound steps: (step - attention step) + slowdown x attention step, 3 times
    assert llm.cp_ring_exposed_forward(sys, 5.0, attn, cp) == pytest.approx(3 * (3.0 + 0.05 * 2))
    # no slowdown: the per-step max, not the old whole-ring max(0, ring - attention)
    ideal = cp_system(0.0)
    assert llm.cp_ring_exposed_forward(ideal, 1.0, attn, cp) == 0.0
    assert llm.cp_ring_exposed_forward(ideal, 3.0, attn, cp) == pytest.approx(3 * (3.0 - 2.0))


def test_cp_ring_backward_closed_forms():
    cp, attn_b = 4.0, 20.0  # 5 s per step
    sys = cp_system(0.05)
    # K/V onwards + dK/dV back per step (2 x step), then the last dK/dV hop exposed
    assert llm.cp_ring_exposed_backward(sys, 1.0, attn_b, cp) == pytest.approx(
        3 * 0.05 * 2.0 + 1.0)
    assert llm.cp_ring_exposed_backward(sys, 4.0, attn_b, cp) == pytest.approx(
        3 * (8.0 - 5.0 + 0.05 * 5.0) + 4.0)


def test_cp_comm_in_the_model_is_the_ring_closed_form():
    sys = cp_system(0.03)
    mdl = gpt_model(layers=8, h=4096, heads=32)
    jb = job(seq=32768, batch=8)
    cfg = one_config(cp=8, dp=8)
    row = llm.row_terms(sys, mdl, jb, cfg, 0)
    ordt = llm.order_terms(sys, mdl, jb, row, 0)
    rect = llm.recompute_terms(sys, mdl, jb, row, ordt, L.RECOMPUTE_NONE)
    step, t_core, layers, m = ordt[llm.ORD_CP_STEP], row[llm.ROW_T_CORE], 8, 1
    assert step > 0.0
    fwd = llm.cp_ring_exposed_forward(sys, step, t_core, 8.0)
    bwd = llm.cp_ring_exposed_backward(sys, step, 2.5 * t_core, 8.0)
    assert rect[llm.REC_CP_COMM] == pytest.approx(m * layers * (fwd + bwd), rel=1e-12)
    # the last dK/dV hop alone keeps the ring from ever vanishing
    assert rect[llm.REC_CP_COMM] >= m * layers * step


# ---------------------------------------------------------------------------------------------
# Attention efficiency over the sequence length (FlashAttention-3 Fig. 5 fit)
# ---------------------------------------------------------------------------------------------


def test_attention_sequence_efficiency_closed_form():
    sys = system([NODE, FABRIC])
    assert llm.attention_sequence_efficiency(sys, 4096.0) == 1.0  # half 0: no dependence
    sys[L.SYS_ATTENTION_HALF_SEQ] = 209.0
    assert llm.attention_sequence_efficiency(sys, 209.0) == 0.5
    assert llm.attention_sequence_efficiency(sys, 4096.0) == pytest.approx(4096 / 4305)
    core = 1e12
    assert llm.attention_core_time(sys, core, True, 4096.0, 128.0) == pytest.approx(
        core / (1e15 * 0.5 * 4096 / 4305), rel=1e-14)
    # the unfused path stays on the GEMM curve
    assert llm.attention_core_time(sys, core, False, 512.0, 128.0) == llm.gemm_time(sys, core, 2.0)


def test_fa3_sweep_is_reproduced_by_the_h100_preset_curve():
    # FlashAttention-3 Fig. 5 (H100, head dim 128): TFLOPs/s at 512 .. 16k tokens
    from trainscape import presets

    g = presets.gpu("h100-sxm-80gb", calibrated=False)
    half = g["attention_half_seq"]
    for s, measured in zip((512, 1024, 2048, 4096, 8192, 16384), (467, 565, 625, 638, 646, 648)):
        fitted = 669.26 * s / (s + half)
        assert fitted == pytest.approx(measured, rel=0.03)
    # the preset's long-sequence efficiency is its 4k figure (0.56) lifted by the curve
    assert g["attention_efficiency"] * 4096 / (4096 + half) == pytest.approx(0.56, abs=5e-4)


def test_context_parallelism_shortens_every_attention_kernel():
    # per GPU the attention FLOPs split by cp, but each ring step's kernel loops over seq / cp
    sys = system([NODE, FABRIC], gpus=64)
    sys[L.SYS_ATTENTION_HALF_SEQ] = 209.0
    mdl = gpt_model(layers=8, h=4096, heads=32)
    jb = job(seq=8192, batch=64)
    r1 = row_of(sys, mdl, jb, dp=64)
    r8 = row_of(sys, mdl, jb, cp=8, dp=8)
    eff1 = 8192 / (8192 + 209)
    eff8 = 1024 / (1024 + 209)
    assert r8[llm.ROW_T_CORE] == pytest.approx(r1[llm.ROW_T_CORE] / 8 * eff1 / eff8, rel=1e-12)


# ---------------------------------------------------------------------------------------------
# E. FP8-saved activations: the linear layers' inputs kept as their FP8 copies (TE)
# ---------------------------------------------------------------------------------------------


def llama_model(layers=4, h=4096, heads=32, kv_heads=8, ffn=14336):
    mdl = gpt_model(layers=layers, h=h, heads=heads, vocab=32000)
    mdl[L.MDL_KV_HEADS] = kv_heads
    mdl[L.MDL_FFN_HIDDEN] = ffn
    mdl[L.MDL_SWIGLU] = 1
    return mdl


def test_fp8_saved_linear_inputs_shrink_a_llama_layer_by_exactly_their_share():
    # Llama-3-8B-like layer, TP = SP = 8, FlashAttention, no dropout: the four linear inputs
    # (QKV input sbh, projection input sb·a·d, fc1 input sbh, fc2 input sb·ffn) drop from 2 bytes
    # to 1; Q, K, V, the fc1 output (2·ffn wide) and the norms' inputs stay 2 bytes
    s, b, h, a, kv, d, ffn, t = 8192, 1, 4096, 32, 8, 128, 14336, 8

    def per_layer(lin, rc=L.RECOMPUTE_NONE):
        return llm.layer_activation_bytes(s, b, h, a, kv, d, ffn, True, t, True, rc, True, 2.0,
                                          False, lin)

    share = (s * b * h + s * b * a * d + s * b * h + s * b * ffn) / t
    assert per_layer(2.0) - per_layer(1.0) == pytest.approx(share, rel=1e-12)
    # closed form of what stays: Q, K, V (2 sb(ad + 2 kv d)), fc1 output (2 x 2 sb ffn), two
    # norm inputs (2 x 2 sbh), the log-sum-exp (4 a s b), plus the FP8 linear inputs
    kept16 = 2 * s * b * (a * d + 2 * kv * d) + 2 * 2 * s * b * ffn + 2 * 2 * s * b * h \
        + 4 * a * s * b
    assert per_layer(1.0) == pytest.approx(kept16 / t + share, rel=1e-12)
    # full recomputation keeps the 16-bit layer input only: unchanged
    assert per_layer(1.0, L.RECOMPUTE_FULL) == per_layer(2.0, L.RECOMPUTE_FULL)


def test_fp8_saved_linear_inputs_of_an_moe_block():
    # every routed copy keeps its expert's fc1 input (sbh) and fc2 input (sb·ffn) in FP8; the
    # block input (the router's 16-bit input) and the fc1 outputs stay 16-bit
    s, b, h, effn, k, shared, t = 4096, 2, 2048, 1024, 6, 2, 4
    lo = llm.moe_activation_bytes(s, b, h, effn, k, shared, True, t, True, 2.0, False, 1.0)
    hi = llm.moe_activation_bytes(s, b, h, effn, k, shared, True, t, True, 2.0, False, 2.0)
    assert hi - lo == pytest.approx((k + shared) * (s * b * h + s * b * effn) / t, rel=1e-12)
    assert lo == pytest.approx((2 * s * b * h + (k + shared) * (s * b * h + 2 * 2 * s * b * effn
                                                                 + s * b * effn)) / t, rel=1e-12)


def test_fp8_saved_inputs_shrink_memory_not_time_in_every_backend(backend):
    from trainscape.backends import evaluate_blocks

    sys = fp8_system(system([NODE, FABRIC], gpus=8))
    mdl = llama_model()
    j16 = job(seq=8192, batch=8)
    j16[L.JOB_DROPOUT] = 0
    j16[L.JOB_LINEAR_CAST_BYTES] = 4.0
    j8 = j16.copy()
    j8[L.JOB_LINEAR_INPUT_BYTES] = 1.0
    cfg = one_config(tp=8, sp=1)
    o16 = evaluate_blocks(sys, mdl, j16, cfg, backend=backend)
    o8 = evaluate_blocks(sys, mdl, j8, cfg, backend=backend)
    s, h, a, d, ffn, t = 8192, 4096, 32, 128, 14336, 8
    share = (2 * s * h + s * a * d + s * ffn) / t
    # 4 layers x 1 microbatch in flight (no pipeline)
    drop = (o16[L.OUT_MEM_ACTIVATIONS_GIB, 0] - o8[L.OUT_MEM_ACTIVATIONS_GIB, 0]) * llm.GIB
    assert drop == pytest.approx(4 * share, rel=1e-9)
    # the elementwise kernels still move the 16-bit tensors (the FP8 copies are the casts'
    # output, already costed): every time column is unchanged
    for col in L.BREAKDOWN_FIELDS + ("step_time_s",):
        k = L.OUTPUT_FIELDS.index(col)
        assert o8[k, 0] == o16[k, 0]


def test_pack_saved_linear_input_bytes_per_recipe():
    from trainscape.spec.pack import saved_linear_input_bytes

    _, _, jb = pack(load_scenario(_h100_scenario("fp8")))
    assert jb[L.JOB_LINEAR_INPUT_BYTES] == 1.0
    _, _, jb16 = pack(load_scenario(_h100_scenario("bf16")))
    assert jb16[L.JOB_LINEAR_INPUT_BYTES] == jb16[L.JOB_ACTIVATION_BYTES] == 2.0
    _, _, jbm = pack(load_scenario(_h100_scenario("fp8", "mxfp8")))
    assert jbm[L.JOB_LINEAR_INPUT_BYTES] == 1.0 + 1.0 / 32.0
    assert saved_linear_input_bytes("blockwise", 2) == 1.0 + 4.0 / 128.0
    assert saved_linear_input_bytes(None, 2) == 2.0


def test_pack_tp_gather_bytes_per_recipe():
    # the FP8 copy is what TE and torchao's tensorwise float8 TP gather; torchtitan runs rowwise
    # float8 with 16-bit TP styles, and a 16-bit job gathers at comm_bytes (0)
    from trainscape.spec.pack import tp_gather_bytes

    _, _, jb = pack(load_scenario(_h100_scenario("fp8")))
    assert jb[L.JOB_TP_GATHER_BYTES] == 1.0
    _, _, jbm = pack(load_scenario(_h100_scenario("fp8", "mxfp8")))
    assert jbm[L.JOB_TP_GATHER_BYTES] == 1.0 + 1.0 / 32.0
    _, _, jb16 = pack(load_scenario(_h100_scenario("bf16")))
    assert jb16[L.JOB_TP_GATHER_BYTES] == 0.0
    assert tp_gather_bytes("rowwise", 2) == 0.0 and tp_gather_bytes("tensorwise", 2) == 1.0


# ---------------------------------------------------------------------------------------------
# F. Recompute "dots": keep the linear GEMMs' outputs and the layer input (JAX
#    checkpoint_dots_with_no_batch_dims, MaxText remat_policy "minimal", per-op SAC)
# ---------------------------------------------------------------------------------------------

KS, KB, KH, KA, KT = 2048, 1, 12288, 96, 8  # Korthikanti et al.'s GPT-3 175B shape


def dots_dense(t, sp, flash=False, dropout=True, lin=2.0):
    return llm.layer_activation_bytes(KS, KB, KH, KA, KA, KH // KA, 4 * KH, False, t, sp,
                                      L.RECOMPUTE_DOTS, flash, 2.0, dropout, lin)


def test_dots_keeps_the_layer_input_and_the_gemm_outputs_gpt3():
    sbh = KS * KB * KH
    # input 2sbh, Q K V 6sbh, projection output 2sbh, fc1 output 8sbh, fc2 output 2sbh
    assert dots_dense(1, False) == pytest.approx(20 * sbh, rel=1e-12)
    assert dots_dense(KT, True) == pytest.approx(20 * sbh / KT, rel=1e-12)
    # without SP the input and the two row-parallel outputs are replicated over the TP ranks
    assert dots_dense(KT, False) == pytest.approx(6 * sbh + 14 * sbh / KT, rel=1e-12)
    # no scores, masks or log-sum-exp are kept; FP8 changes nothing (GEMM outputs are 16-bit)
    assert dots_dense(KT, True, flash=True, dropout=False, lin=1.0) == dots_dense(KT, True)
    # between selective (34 sbh / t) and full (2 sbh / t)
    sel = llm.layer_activation_bytes(KS, KB, KH, KA, KA, KH // KA, 4 * KH, False, KT, True,
                                     L.RECOMPUTE_SELECTIVE, False, 2.0, True, 2.0)
    full = llm.layer_activation_bytes(KS, KB, KH, KA, KA, KH // KA, 4 * KH, False, KT, True,
                                      L.RECOMPUTE_FULL, False, 2.0, True, 2.0)
    assert full < dots_dense(KT, True) < sel


def test_dots_llama_swiglu_gqa_closed_form():
    s, b, h, a, kv, d, ffn, t = 8192, 1, 4096, 32, 8, 128, 14336, 8
    got = llm.layer_activation_bytes(s, b, h, a, kv, d, ffn, True, t, True, L.RECOMPUTE_DOTS,
                                     True, 2.0, False, 1.0)
    want = 2 * (s * b * h + s * b * (a * d + 2 * kv * d) + s * b * h + 2 * s * b * ffn
                + s * b * h) / t
    assert got == pytest.approx(want, rel=1e-12)


def test_dots_moe_layer_closed_form():
    s, b, h, a, effn, k, shared, t = 4096, 2, 2048, 16, 1024, 6, 2, 4
    got = llm.moe_layer_activation_bytes(s, b, h, a, a, h // a, effn, k, shared, True, t, True,
                                         L.RECOMPUTE_DOTS, True, 2.0, True, 1.0)
    attn = 2 * (s * b * h + 3 * s * b * h + s * b * h) / t  # input, Q K V, projection output
    per_copy = 2 * (s * b * h + 2 * s * b * effn + s * b * h)  # dispatched in, fc1, fc2 outputs
    assert got == pytest.approx(attn + (k + shared) * per_copy / t, rel=1e-12)


def _rec(sys, mdl, jb, rc, **kw):
    cfg = one_config(**kw)
    row = llm.row_terms(sys, mdl, jb, cfg, 0)
    ordt = llm.order_terms(sys, mdl, jb, row, cfg[L.CFG_ORDER, 0])
    return row, llm.recompute_terms(sys, mdl, jb, row, ordt, rc)


@pytest.mark.parametrize("flash", [0, 1])
def test_dots_backward_reruns_memory_bound_kernels_and_attention_core_not_gemms(flash):
    sys = system([NODE, FABRIC], gpus=1)
    mdl = gpt_model(layers=4, h=2048, heads=16)
    jb = job(seq=4096, batch=4)
    jb[L.JOB_FLASH_ATTENTION] = flash
    row, none = _rec(sys, mdl, jb, L.RECOMPUTE_NONE)
    _, dots = _rec(sys, mdl, jb, L.RECOMPUTE_DOTS)
    _, full = _rec(sys, mdl, jb, L.RECOMPUTE_FULL)
    assert dots[llm.REC_B_STAGE] - none[llm.REC_B_STAGE] == pytest.approx(
        row[llm.ROW_CORE_F] + row[llm.ROW_MEM_F], rel=1e-12)
    assert dots[llm.REC_F_STAGE] == none[llm.REC_F_STAGE]
    assert dots[llm.REC_W_STAGE] == none[llm.REC_W_STAGE]
    # full recomputation also re-runs the GEMMs and pays the pass overhead
    assert full[llm.REC_B_STAGE] - dots[llm.REC_B_STAGE] == pytest.approx(
        row[llm.ROW_GEMM_F] + 4 * sys[L.SYS_LAYER_OVERHEAD_S], rel=1e-9)
    # hardware FLOPs: + the executed attention core of every layer, every microbatch
    assert dots[llm.REC_HW_FLOPS] - none[llm.REC_HW_FLOPS] == pytest.approx(
        4 * row[llm.ROW_HW_CORE] * 4, rel=1e-12)


def test_dots_replays_the_context_parallel_ring_in_every_backend(backend):
    from trainscape.backends import evaluate_blocks

    sys = system([NODE, FABRIC], gpus=8)
    mdl = gpt_model(layers=8, h=4096, heads=32)
    jb = job(seq=16384, batch=8)
    outs = {rc: evaluate_blocks(sys, mdl, jb, one_config(cp=8, recompute=rc), backend=backend)
            for rc in (L.RECOMPUTE_NONE, L.RECOMPUTE_FULL, L.RECOMPUTE_DOTS)}
    cp = L.OUT_CP_COMM_S
    assert outs[L.RECOMPUTE_DOTS][cp, 0] == outs[L.RECOMPUTE_FULL][cp, 0]
    assert outs[L.RECOMPUTE_DOTS][cp, 0] > outs[L.RECOMPUTE_NONE][cp, 0]
    # no TP traffic to replay (tp = 1 here) and no GEMM: faster than full, slower than none
    step = L.OUT_STEP_TIME_S
    assert outs[L.RECOMPUTE_NONE][step, 0] < outs[L.RECOMPUTE_DOTS][step, 0] \
        < outs[L.RECOMPUTE_FULL][step, 0]
    # the memory: 8 layers x the closed form, one microbatch in flight
    s, h = 16384 // 8, 4096
    per_layer = 2 * (s * h + 3 * s * h + s * h + 4 * s * h + s * h)
    assert outs[L.RECOMPUTE_DOTS][L.OUT_MEM_ACTIVATIONS_GIB, 0] * llm.GIB == pytest.approx(
        8 * per_layer, rel=1e-9)


def test_dots_is_a_recompute_value_of_the_spec():
    from trainscape.spec.pack import encode_value

    assert L.RECOMPUTE[:3] == ("none", "selective", "full")  # existing codes keep their values
    assert encode_value("recompute", "dots") == L.RECOMPUTE_DOTS == 3
