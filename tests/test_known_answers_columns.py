"""Known answers for every LLM output column (``layout.OUTPUT_FIELDS``), by hand.

Each test builds a tiny scenario whose numbers can be followed with pencil and paper, and
derives the expected value from the published formula named in its docstring -- never from
the package's own helper functions, never from a golden file. Every test runs on each loaded
backend (python reference, numba, C), so the ports are held to the hand values too. The
coverage table (which test proves which column) is in ``docs/testing.md``.

The toy machine (``toy_system``) is chosen so that every efficiency curve is flat:
``gemm_half_flops = linear_half_flops = attention_half_seq = 0`` make the achieved GEMM
efficiency exactly ``eff_max = 0.5`` and the fused attention kernel exactly
``attention_efficiency = 0.25`` of the 1e15 FLOP/s peak; memory-bound kernels run at
``hbm_bandwidth x memory_efficiency = 2e12 x 0.5 = 1e12`` B/s; one network tier of 8 GPUs at
``100e9 x 0.8 = 80e9`` B/s per GPU with 1 us latency. The toy model is a 2-layer GPT (GeLU
MLP, multi-head attention): h = 1024, ffn = 4h = 4096, a = 8 heads of d = 128, V = 32000;
sequences of s = 1024 tokens. 16-bit job: 2-byte weights and activations, fp32 gradients
(4 B), mixed-precision Adam (12 B of states), FlashAttention, no dropout.

Shorthands used in the docstrings: ``sbh = 1024 x 1024 = 1,048,576``; one GPU's share of a
layer's FLOPs is the layer's FLOPs over ``t x c`` (TP x CP degree).
"""

from __future__ import annotations

import numpy as np
import pytest

from trainscape import layout as L
from trainscape.backends import evaluate_blocks

GIB = 2.0**30
PEAK = 1e15
GEMM = PEAK * 0.5  # FLOP/s of every GEMM (flat efficiency curve)
ATTN = PEAK * 0.25  # FLOP/s of the fused attention kernel
HBM = 2e12 * 0.5  # B/s of memory-bound kernels
BW0, LAT0 = 100e9 * 0.8, 1e-6  # tier 0: per-GPU bandwidth after efficiency, latency
OVERHEAD = 1e-5  # fixed time per layer per pass
LAYERS, HID, FFN, HEADS, HDIM, VOCAB, SEQ = 2, 1024, 4096, 8, 128, 32000, 1024
SBH = SEQ * HID


def toy_system(gpus=8, tiers=((8, 100e9, 1e-6, 0.8, 1.0),), usd_per_gpu_hour=0.0, power_w=0.0,
               tp_exposed=0.0, tp_slowdown=0.0, cp_slowdown=0.0):
    sys = np.zeros(L.N_SYS)
    sys[L.SYS_GPUS] = gpus
    sys[L.SYS_N_TIERS] = len(tiers)
    sys[L.SYS_PEAK_FLOPS] = PEAK
    sys[L.SYS_HBM_BYTES] = 80e9
    sys[L.SYS_HBM_BANDWIDTH] = 2e12
    sys[L.SYS_HBM_RESERVE_BYTES] = 1e9
    sys[L.SYS_GEMM_EFFICIENCY_MAX] = 0.5
    sys[L.SYS_GEMM_HALF_FLOPS] = 0.0
    sys[L.SYS_ATTENTION_EFFICIENCY] = 0.25
    sys[L.SYS_MEMORY_EFFICIENCY] = 0.5
    sys[L.SYS_LAYER_OVERHEAD_S] = OVERHEAD
    sys[L.SYS_LINEAR_PEAK_FLOPS] = PEAK
    sys[L.SYS_LINEAR_EFFICIENCY_MAX] = 0.5
    sys[L.SYS_LINEAR_HALF_FLOPS] = 0.0
    sys[L.SYS_TP_OVERLAP_EXPOSED] = tp_exposed
    sys[L.SYS_TP_OVERLAP_SLOWDOWN] = tp_slowdown
    sys[L.SYS_CP_OVERLAP_SLOWDOWN] = cp_slowdown
    sys[L.SYS_ATTENTION_HALF_SEQ] = 0.0
    sys[L.SYS_USD_PER_GPU_S] = usd_per_gpu_hour / 3600.0
    sys[L.SYS_POWER_W] = power_w
    for i, t in enumerate(tiers):
        base = L.SYS_TIER_BASE + i * L.N_TIER
        sys[base:base + len(t)] = t
    return sys


def toy_model():
    mdl = np.zeros(L.N_MODEL)
    mdl[[L.MDL_LAYERS, L.MDL_HIDDEN, L.MDL_FFN_HIDDEN, L.MDL_HEADS, L.MDL_KV_HEADS,
         L.MDL_HEAD_DIM, L.MDL_VOCAB]] = (LAYERS, HID, FFN, HEADS, HEADS, HDIM, VOCAB)
    return mdl


def toy_job(batch=16):
    j = np.zeros(L.N_JOB)
    j[L.JOB_SEQ_LEN] = SEQ
    j[L.JOB_GLOBAL_BATCH] = batch
    j[L.JOB_ACTIVATION_BYTES] = 2
    j[L.JOB_PARAM_BYTES] = 2
    j[L.JOB_LINEAR_PARAM_COMM_BYTES] = 2
    j[L.JOB_ZERO3_SHARD_PARAM_BYTES] = 2  # a 16-bit shard beside the master (megatron-core)
    j[L.JOB_GRAD_BYTES] = 4
    j[L.JOB_OPTIMIZER_BYTES] = 12
    j[L.JOB_OPTIMIZER_TRAFFIC_BYTES] = 16
    j[L.JOB_COMM_BYTES] = 2
    j[L.JOB_GRAD_COMM_BYTES] = 4
    j[L.JOB_FLASH_ATTENTION] = 1
    j[L.JOB_DISPATCH_BYTES] = 2
    j[L.JOB_COMBINE_BYTES] = 2
    j[L.JOB_DROPOUT] = 0
    j[L.JOB_LINEAR_INPUT_BYTES] = 2
    j[L.JOB_LOGITS_EXTRA_BYTES] = 4
    j[L.JOB_SYNC_INNER_STEPS] = 1
    j[L.JOB_SYNC_OUTER_BYTES] = 4
    j[L.JOB_SYNC_FRAGMENTS] = 1  # plain DiLoCo: one fragment, no overlap (Streaming DiLoCo off)
    j[L.JOB_SYNC_OVERLAP_STEPS] = 0
    return j


def config(**kw):
    cfg = np.zeros((L.N_CFG, 1), dtype=np.int32)
    values = dict(tp=1, cp=1, pp=1, dp=1, ep=1, mbs=1, vpp=1, schedule=L.SCHED_1F1B,
                  recompute=L.RECOMPUTE_NONE, zero=0, sp=0, order=0, tp_overlap=0, dp_overlap=0)
    values.update(kw)
    for k, v in values.items():
        cfg[L.CONFIG_FIELDS.index(k), 0] = v
    return cfg


def run(backend, sys, mdl, job, cfg):
    out = evaluate_blocks(sys, mdl, job, cfg, backend=backend)
    return {name: out[k, 0] for k, name in enumerate(L.OUTPUT_FIELDS)}


def close(got, want, rel=1e-9):
    assert got == pytest.approx(want, rel=rel, abs=0.0)


# ---------------------------------------------------------------------------------------------
# Scenario A: TP 2 (with SP) x DP 4 on one node of 8, ZeRO-1, no pipeline, m = 4
# ---------------------------------------------------------------------------------------------

# Per-microbatch (b = 1) times of one GPU, TP 2 (the hand derivation of scenario A):
#   Q, K, V, output projection: 8 s h^2 = 8.589934592e9 FLOPs (Narayanan et al. SC'21 §5.1),
#     / t = 4.294967296e9 at 5e14 FLOP/s                              -> 8.589934592e-6 s
#   GeLU MLP: 2 matrices, 2 s h ffn x 2 = 16 s h^2 = 1.7179869184e10, / t -> 1.7179869184e-5 s
#   attention core 4 s^2 h = 4.294967296e9 (full square), / t, causal FlashAttention runs half
#     (FlashAttention-2 §3.1.1): 1.073741824e9 at 2.5e14               -> 4.294967296e-6 s
#   memory-bound kernels touch the stored activations once forward, twice backward. Stored per
#     layer (Korthikanti et al. 2022 Table 2 with SP, sbh/t x 34, less the two 1-byte dropout
#     masks without dropout -> 32 sbh/t, scores replaced by FlashAttention's fp32 LSE 4 a s/t):
#     32 x 1,048,576 / 2 + 4 x 8 x 1024 / 2 = 16,777,216 + 16,384 = 16,793,600 B -> 1.67936e-5 s
#   embedding (first stage): read + write b s h 2-byte rows = 4,194,304 B        -> 4.194304e-6 s
#   output layer: 2 s h V = 6.7108864e10 FLOPs, / t                   -> 6.7108864e-5 s
#   cross-entropy sweep over b s V / t logits at 2 + 4 (fp32 copy) bytes = 98,304,000 B
#                                                                    -> 9.8304e-5 s
# F = layers (proj + mlp + core + mem + overhead) + embed + logits + ce
# B = layers (proj + mlp + 2.5 core + 2 mem + overhead) + embed + logits + ce  (FA-2 bwd 2.5x)
# W = layers (proj + mlp) + logits                           (Qi et al. 2024 §2: W = F's GEMMs)
T_PROJ_2 = 8 * SBH * HID / 2 / GEMM
T_MLP_2 = 16 * SBH * HID / 2 / GEMM
T_CORE_2 = 4 * SEQ * SEQ * HID / 2 / 2 / ATTN
T_MEM_2 = (32 * SBH / 2 + 4 * HEADS * SEQ / 2) / HBM
T_EMBED = 2 * 2 * SBH / HBM
T_LOGITS_2 = 2 * SBH * VOCAB / 2 / GEMM
T_CE_2 = SEQ * VOCAB / 2 * (2 + 4) / HBM


def test_scenario_a_hand_numbers_are_what_the_docstring_says():
    # the shorthands above, written out once, so a typo in an expression shows here
    assert T_PROJ_2 == pytest.approx(8.589934592e-6, rel=1e-15)
    assert T_MLP_2 == pytest.approx(1.7179869184e-5, rel=1e-15)
    assert T_CORE_2 == pytest.approx(4.294967296e-6, rel=1e-15)
    assert T_MEM_2 == pytest.approx(1.67936e-5, rel=1e-15)
    assert T_EMBED == pytest.approx(4.194304e-6, rel=1e-15)
    assert T_LOGITS_2 == pytest.approx(6.7108864e-5, rel=1e-15)
    assert T_CE_2 == pytest.approx(9.8304e-5, rel=1e-15)


def _scenario_a_f_b_w():
    f = LAYERS * (T_PROJ_2 + T_MLP_2 + T_CORE_2 + T_MEM_2 + OVERHEAD) + T_EMBED + T_LOGITS_2 \
        + T_CE_2
    b = LAYERS * (T_PROJ_2 + T_MLP_2 + 2.5 * T_CORE_2 + 2 * T_MEM_2 + OVERHEAD) + T_EMBED \
        + T_LOGITS_2 + T_CE_2
    w = LAYERS * (T_PROJ_2 + T_MLP_2) + T_LOGITS_2
    return f, b, w


# TP traffic of one layer pass with SP (Korthikanti et al. §4.2.2): 2 all-gathers + 2
# reduce-scatters of the b s h activations (2 B): 2,097,152 B each; a ring of 2 ranks in the
# node (nccl-tests busBw factor (n-1)/n): 1 us + 0.5 x 2,097,152 / 80e9 = 1.41072e-5 s.
T_TP_COLL = LAT0 + 0.5 * 2 * SBH / BW0
# parameters per GPU: per layer 4 h^2 (Q, K, V, O) + 2 h (two norms) + 8 h^2 (GeLU MLP) =
# 12,584,960; 2 layers + input embedding + untied output layer (2 V h = 65,536,000) =
# 90,705,920, over TP 2: 45,352,960
P_GPU_A = (LAYERS * (12 * HID * HID + 2 * HID) + 2 * VOCAB * HID) / 2
# ZeRO-1 (Rajbhandari et al. 2020 §5): reduce-scatter the fp32 gradients and all-gather the
# bf16 weights over the DP group of 4 (stride 2 after TP, inside the node): ring of 4,
# 3 latencies + 3/4 of the buffer: 4 B x P = 181,411,840 B and 2 B x P = 90,705,920 B
T_RS_A = 3 * LAT0 + 0.75 * 4 * P_GPU_A / BW0
T_AG_A = 3 * LAT0 + 0.75 * 2 * P_GPU_A / BW0


def scenario_a(backend, **kw):
    sysk = {k: kw.pop(k) for k in list(kw) if k in ("usd_per_gpu_hour", "power_w", "tp_exposed",
                                                     "tp_slowdown")}
    cfg = dict(tp=2, dp=4, sp=1, zero=1)
    cfg.update(kw)
    return run(backend, toy_system(**sysk), toy_model(), toy_job(16), config(**cfg))


def test_scenario_a_time_columns(backend):
    """Compute, TP and DP communication, optimizer step, step time and rates of scenario A.

    compute = m (F + B + W) with m = 16 / (4 x 1) = 4 microbatches (numbers above);
    tp_comm = m x (forward + backward) x layers x 4 collectives x 1.41072e-5 s;
    dp_comm = reduce-scatter + all-gather, no overlap: 3e-6 + 0.75 x 181,411,840 / 80e9 =
    1.703736e-3 s and 3e-6 + 0.75 x 90,705,920 / 80e9 = 8.53368e-4 s;
    optimizer: Adam streams 16 B per parameter of its ZeRO-1 shard P / 4 = 11,338,240 at 1e12
    B/s = 1.8141184e-4 s; no pipeline, context or expert parallelism: those columns are 0.
    The step is the sum; tokens/s = 16 x 1024 / step."""
    r = scenario_a(backend)
    f, b, w = _scenario_a_f_b_w()
    m = 4
    compute = m * (f + b + w)
    tp = m * 2 * LAYERS * 4 * T_TP_COLL
    assert T_RS_A == pytest.approx(1.703736e-3, rel=1e-15)
    assert T_AG_A == pytest.approx(8.53368e-4, rel=1e-15)
    optimizer = P_GPU_A / 4 * 16 / HBM
    assert optimizer == pytest.approx(1.8141184e-4, rel=1e-15)
    step = compute + tp + T_RS_A + T_AG_A + optimizer
    assert r["status"] == L.STATUS_OK and r["feasible"] == 1.0
    assert r["microbatches"] == 4.0
    close(r["compute_s"], compute)
    close(r["tp_comm_s"], tp)
    close(r["dp_comm_s"], T_RS_A + T_AG_A)
    close(r["optimizer_s"], optimizer)
    assert r["cp_comm_s"] == 0.0 and r["ep_comm_s"] == 0.0
    assert r["pp_comm_s"] == 0.0 and r["bubble_s"] == 0.0
    close(r["step_time_s"], step)
    close(r["tokens_per_s"], 16 * 1024 / step)


def test_scenario_a_step_overhead_is_paid_once_a_step(backend):
    """The training loop's fixed host-side cost (``system.step_overhead_s``, 25 ms here) is
    the ``overhead_s`` column and adds to the step once, whatever the microbatch count: with 4
    or 16 microbatches every other column is what it is without it, and the step is longer by
    exactly 25 ms; tokens/s and the cost columns follow the longer step."""
    for batch in (16, 64):
        sys = toy_system()
        base = run(backend, sys, toy_model(), toy_job(batch), config(tp=2, dp=4, sp=1, zero=1))
        sys[L.SYS_STEP_OVERHEAD_S] = 0.025
        r = run(backend, sys, toy_model(), toy_job(batch), config(tp=2, dp=4, sp=1, zero=1))
        assert base["overhead_s"] == 0.0
        close(r["overhead_s"], 0.025)
        close(r["step_time_s"], base["step_time_s"] + 0.025)
        close(r["tokens_per_s"], batch * SEQ / (base["step_time_s"] + 0.025))
        for name in L.BREAKDOWN_FIELDS + L.MEMORY_FIELDS + ("microbatches", "memory_gib"):
            if name != "overhead_s":
                assert r[name] == base[name], name
        assert sum(r[name] for name in L.BREAKDOWN_FIELDS) == pytest.approx(r["step_time_s"],
                                                                           rel=1e-12)


def test_scenario_a_flops_and_mfu(backend):
    """Model FLOPs (Narayanan et al. SC'21 eq. 3 without recomputation; PaLM App. B for MFU):
    3 x [layers (8 s h^2 + 4 s^2 h + 16 s h^2) + 2 s h V] per sequence
    = 3 x [2 x 3.0064771072e10 + 6.7108864e10] = 3.81715218432e11, x 16 sequences
    = 6.107443494912e12. Hardware FLOPs count what runs: the causal FlashAttention core is half
    the square forward (2.147483648e9 per layer) and its backward 2.5x the forward (FA-2 §3.2)
    instead of 2x: per sequence 3 x [2 x (8.589934592e9 + 2.147483648e9 + 1.7179869184e10)
    + 6.7108864e10] + 0.5 x 2 x 2.147483648e9. MFU = model FLOPs / (step x 8 GPUs x 1e15);
    TFLOP/s per GPU = FLOPs / (step x 8) / 1e12."""
    r = scenario_a(backend)
    model = 16 * 3 * (LAYERS * (8 * SBH * HID + 4 * SEQ * SBH + 16 * SBH * HID)
                      + 2 * SBH * VOCAB)
    assert model == 6.107443494912e12
    core_exec = 2 * SEQ * SBH  # half of 4 s^2 h
    hw = 16 * (3 * (LAYERS * (8 * SBH * HID + core_exec + 16 * SBH * HID) + 2 * SBH * VOCAB)
               + 0.5 * LAYERS * core_exec)
    step = r["step_time_s"]
    close(r["mfu"], model / (step * 8 * PEAK))
    close(r["model_tflops_per_gpu"], model / (step * 8) / 1e12)
    close(r["hw_tflops_per_gpu"], hw / (step * 8) / 1e12)


def test_scenario_a_memory_columns(backend):
    """Memory per GPU (ZeRO paper §5 accounting, Rajbhandari et al. 2020), ZeRO-1 over DP 4:
    weights 2 B x 45,352,960 = 90,705,920 B; fp32 gradients 4 B x P (not sharded by ZeRO-1)
    = 181,411,840 B; Adam states 12 B x P / 4 = 136,058,880 B; activations of one microbatch in
    flight (no pipeline), 2 layers x 16,793,600 B = 33,587,200 B; logits b s V / t at 2 + 4 B =
    98,304,000 B; the reserve 1e9 B. The total is their sum; under 80e9 B: feasible."""
    r = scenario_a(backend)
    parts = {"mem_weights_gib": 2 * P_GPU_A, "mem_grads_gib": 4 * P_GPU_A,
             "mem_optimizer_gib": 12 * P_GPU_A / 4,
             "mem_activations_gib": LAYERS * (32 * SBH / 2 + 4 * HEADS * SEQ / 2),
             "mem_logits_gib": SEQ * VOCAB / 2 * 6, "mem_reserve_gib": 1e9}
    assert parts["mem_weights_gib"] == 90_705_920
    assert parts["mem_activations_gib"] == 33_587_200
    assert parts["mem_logits_gib"] == 98_304_000
    for name, nbytes in parts.items():
        close(r[name], nbytes / GIB)
    close(r["memory_gib"], sum(parts.values()) / GIB)


def test_scenario_a_cost_and_energy(backend):
    """$2.50 per GPU-hour and 700 W per GPU: cost per step = step x 8 GPUs x 2.5 / 3600 (the
    cloud GPU-hour accounting), tokens per dollar = 16,384 tokens / that, tokens per joule =
    16,384 / (step x 8 x 700 W). Without a price or a power: 0, not infinity."""
    priced = scenario_a(backend, usd_per_gpu_hour=2.5, power_w=700.0)
    f, b, w = _scenario_a_f_b_w()
    step = 4 * (f + b + w) + 4 * 2 * LAYERS * 4 * T_TP_COLL + T_RS_A + T_AG_A \
        + P_GPU_A / 4 * 16 / HBM
    cost = step * 8 * 2.5 / 3600
    close(priced["step_time_s"], step)
    close(priced["cost_per_step_usd"], cost)
    close(priced["tokens_per_usd"], 16384 / cost)
    close(priced["tokens_per_joule"], 16384 / (step * 8 * 700.0))
    free = scenario_a(backend)
    assert free["cost_per_step_usd"] == 0.0
    assert free["tokens_per_usd"] == 0.0 and free["tokens_per_joule"] == 0.0


def test_scenario_a_overlap_exposed_versus_hidden(backend):
    """TP overlap (Wang et al. ASPLOS'23 decomposition; TE userbuffers) with an unhidable
    fraction f = 0.25 and a GEMM slowdown sigma = 0.1 while overlapped, per pass:
    max(f C, C - W) + sigma min((1 - f) C, W) with C = 2 layers x 4 x 1.41072e-5 = 1.128576e-4 s
    and W = the pass's GEMMs, 2 (T_proj + T_mlp) = 5.1539607552e-5 s: C - W > f C and
    (1 - f) C > W, so C - W + sigma W. DP overlap (ZeRO-1): the gradient reduce-scatter hides
    behind the last microbatch's B + W, the weight all-gather behind the next F (both the
    stage times with their exposed TP traffic): max(0, RS - (B + W)) + max(0, AG - F)."""
    r = scenario_a(backend, tp_overlap=1, dp_overlap=1, tp_exposed=0.25, tp_slowdown=0.1)
    f, b, w = _scenario_a_f_b_w()
    c = LAYERS * 4 * T_TP_COLL
    window = LAYERS * (T_PROJ_2 + T_MLP_2)
    assert c - window > 0.25 * c and 0.75 * c > window
    tp_pass = c - window + 0.1 * window
    close(r["tp_comm_s"], 4 * 2 * tp_pass)
    f_stage, b_stage = f + tp_pass, b + tp_pass
    dp = max(0.0, T_RS_A - (b_stage + w)) + max(0.0, T_AG_A - f_stage)
    assert 0.0 < dp < T_RS_A + T_AG_A  # partly hidden
    close(r["dp_comm_s"], dp)
    close(r["compute_s"], 4 * (f + b + w))


def test_scenario_a_out_of_memory_is_costed_not_feasible(backend):
    """The same layout on a GPU with 1.5e9 B of HBM: the 1e9 B reserve plus ~0.54e9 B of
    weights, gradients, optimizer states, activations and logits do not fit: status
    out_of_memory, feasible 0, the step time still the hand value."""
    sys = toy_system()
    sys[L.SYS_HBM_BYTES] = 1.5e9
    r = run(backend, sys, toy_model(), toy_job(16), config(tp=2, dp=4, sp=1, zero=1))
    assert r["status"] == L.STATUS_OUT_OF_MEMORY and r["feasible"] == 0.0
    f, b, w = _scenario_a_f_b_w()
    close(r["step_time_s"], 4 * (f + b + w) + 4 * 2 * LAYERS * 4 * T_TP_COLL + T_RS_A + T_AG_A
          + P_GPU_A / 4 * 16 / HBM)


# ---------------------------------------------------------------------------------------------
# Scenario B: a pipeline of 2 stages, 1F1B, one layer per stage, m = 4
# ---------------------------------------------------------------------------------------------

# TP 1: every GPU runs the whole layer (times of scenario A x 2)
T_PROJ_1 = 8 * SBH * HID / GEMM  # 1.7179869184e-5 s
T_MLP_1 = 16 * SBH * HID / GEMM  # 3.4359738368e-5 s
T_CORE_1 = 4 * SEQ * SEQ * HID / 2 / ATTN  # 8.589934592e-6 s
T_MEM_1 = (32 * SBH + 4 * HEADS * SEQ) / HBM  # 33,587,200 B -> 3.35872e-5 s
T_LOGITS_1 = 2 * SBH * VOCAB / GEMM  # 1.34217728e-4 s
T_CE_1 = SEQ * VOCAB * (2 + 4) / HBM  # 196,608,000 B -> 1.96608e-4 s


def _last_stage_f_b_w(layers=1):
    """F, B, W of a stage holding ``layers`` layers, the output layer and the loss, TP 1."""
    f = layers * (T_PROJ_1 + T_MLP_1 + T_CORE_1 + T_MEM_1 + OVERHEAD) + T_LOGITS_1 + T_CE_1
    b = layers * (T_PROJ_1 + T_MLP_1 + 2.5 * T_CORE_1 + 2 * T_MEM_1 + OVERHEAD) + T_LOGITS_1 \
        + T_CE_1
    w = layers * (T_PROJ_1 + T_MLP_1) + T_LOGITS_1
    return f, b, w


def test_scenario_b_pipeline_bubble_transfers_and_memory(backend):
    """PP 2 on one node, 1F1B, 2 layers: one per stage. The last stage (layer + output layer
    + cross-entropy) is slower than the first (layer + embedding) and sets the pace.

    bubble = (p - 1)(F + B + W) (Narayanan et al. SC'21 §2.1, PipeDream-Flush);
    compute = m (F + B + W), m = 4;
    pp_comm: every transfer on 1F1B's critical path (Megatron-LM's blocking
    send_forward_recv_backward / send_backward_recv_forward, no compute hides one). Rank 0
    runs F0 F1 B0 F2 B1 F3 B2 B3, rank 1 F0 B0 F1 B1 F2 B2 F3 B3; the path is F0 -> (t) ->
    rank 1 F0 B0 -> (t) -> rank 0 B0 F2 -> (t) -> rank 1 F2 B2 F3 B3 -> (t) -> rank 0 B3:
    4 transfers of 1 us + b s h x 2 B / 80e9 = 2.72144e-5 s (the fill and drain, 2, plus the
    loop through rank 0 that F2 waits on);
    optimizer (ZeRO 0): 16 B per parameter of the device, 12,584,960 (layer) + 32,768,000
    (output layer) = 45,352,960 (the first device holds the embedding instead: as many).
    Memory (1F1B, Megatron-LM warm-up p - r - 1): the first device keeps 2 microbatches of its
    layer (67,174,400 B), the last 1 (33,587,200 B) plus the logits, 1024 x 32000 x 6 B =
    196,608,000 B: the last device is the largest and is reported."""
    r = run(backend, toy_system(gpus=2), toy_model(), toy_job(4), config(pp=2))
    f, b, w = _last_stage_f_b_w()
    transfer = LAT0 + 2 * SBH / BW0
    assert transfer == pytest.approx(2.72144e-5, rel=1e-15)
    assert transfer < f
    p_dev = 12 * HID * HID + 2 * HID + VOCAB * HID
    assert p_dev == 45_352_960
    close(r["compute_s"], 4 * (f + b + w))
    close(r["bubble_s"], f + b + w)
    close(r["pp_comm_s"], 4 * transfer)
    close(r["optimizer_s"], p_dev * 16 / HBM)
    close(r["step_time_s"], 4 * (f + b + w) + (f + b + w) + 4 * transfer + p_dev * 16 / HBM)
    close(r["mem_activations_gib"], 33_587_200 / GIB)
    close(r["mem_logits_gib"], 196_608_000 / GIB)
    close(r["mem_weights_gib"], 2 * p_dev / GIB)
    close(r["memory_gib"], (18 * p_dev + 33_587_200 + 196_608_000 + 1e9) / GIB)


def test_scenario_b_slow_boundary_stalls_the_steady_state(backend):
    """The same pipeline with its two stages in two nodes of one GPU joined by a 1 GB/s,
    1 ms link: a transfer takes 1e-3 + 2,097,152 / 1e9 = 3.097152e-3 s, longer than the
    F = 4.3454247e-4 s of the last stage. 1F1B's blocking p2p exposes the same 4 transfers as
    on the fast link (the path of scenario B: fill, drain and the loop F2 waits on), whatever
    their length against the compute: pp_comm = 4 t."""
    sys = toy_system(gpus=2, tiers=((1, 100e9, 1e-6, 0.8, 1.0), (2, 1e9, 1e-3, 1.0, 1.0)))
    r = run(backend, sys, toy_model(), toy_job(4), config(pp=2))
    f, b, w = _last_stage_f_b_w()
    t = 1e-3 + 2 * SBH / 1e9
    assert t > f and b + w > f
    close(r["pp_comm_s"], 4 * t)
    close(r["bubble_s"], f + b + w)


# ---------------------------------------------------------------------------------------------
# Scenario C: context parallelism 2 (ring attention), m = 2
# ---------------------------------------------------------------------------------------------


def test_scenario_c_context_parallel_ring_and_gradient_all_reduce(backend):
    """CP 2 on one node, 2 sequences, ZeRO 0. Each rank holds s / 2 = 512 tokens; one ring step
    moves the K and V blocks of its tokens, 2 x 512 x 8 heads x 128 x 2 B = 2,097,152 B:
    step = 1 us + 2,097,152 / 80e9 = 2.72144e-5 s. The attention core on a rank is
    4 s^2 h / 2 = 2.147483648e9 FLOPs, half executed causal: T_core = 4.294967296e-6 s; each of
    the cp steps computes T_core / cp (load-balanced causal split).
    Forward per layer (TE AttnFuncWithCPAndKVP2P): (cp - 1) overlapped transfers,
    max(0, step - T_core/2) + sigma min(step, T_core/2) with the P2P slowdown sigma = 0.1;
    backward: (cp - 1) x [2 step against 2.5 T_core / 2] + the final dK/dV hop, one step.
    cp_comm = m x layers x (forward + backward).
    DP gradients (ZeRO 0) are all-reduced over the CP x DP = 2 ranks: a ring of 2 (cheaper
    than the tree), 2 latencies + 2 (n-1)/n x 4 B x 90,705,920 parameters / 80e9."""
    sys = toy_system(gpus=2, cp_slowdown=0.1)
    r = run(backend, sys, toy_model(), toy_job(2), config(cp=2))
    step = LAT0 + 2 * 512 * HEADS * HDIM * 2 / BW0
    t_core = 4 * SEQ * SEQ * HID / 2 / 2 / ATTN
    assert step == pytest.approx(2.72144e-5, rel=1e-15)
    assert t_core == pytest.approx(4.294967296e-6, rel=1e-15)
    wf, wb = t_core / 2, 2.5 * t_core / 2
    fwd = (step - wf) + 0.1 * wf
    bwd = (2 * step - wb) + 0.1 * wb + step
    close(r["cp_comm_s"], 2 * LAYERS * (fwd + bwd))
    p_all = LAYERS * (12 * HID * HID + 2 * HID) + 2 * VOCAB * HID
    close(r["dp_comm_s"], 2 * LAT0 + 4 * p_all / BW0)
    assert r["tp_comm_s"] == 0.0 and r["pp_comm_s"] == 0.0


# ---------------------------------------------------------------------------------------------
# Scenario D: data parallelism across two sites -- cross-site synchronisation (job.sync)
# ---------------------------------------------------------------------------------------------

SITES = ((8, 100e9, 1e-6, 0.8, 1.0), (2, 10e9, 1e-3, 1.0, 1.0))
P_ALL = LAYERS * (12 * HID * HID + 2 * HID) + 2 * VOCAB * HID  # 90,705,920


def _sync_run(backend, strategy, inner_steps=1):
    j = toy_job(16)
    j[L.JOB_SYNC_STRATEGY] = strategy
    j[L.JOB_SYNC_INNER_STEPS] = inner_steps
    j[L.JOB_SYNC_OUTER_BYTES] = 4
    return run(backend, toy_system(gpus=16, tiers=SITES), toy_model(), j,
               config(dp=16, zero=1))


def test_scenario_d_diloco_and_delayed_cross_site_sync(backend):
    """DP 16 over 2 sites of one 8-GPU node each (site link 10 GB/s, 1 ms), ZeRO-1, m = 1.
    Under a non-synchronous strategy each site reduce-scatters the fp32 gradients and
    all-gathers the bf16 weights inside itself -- a ring of 8 in the node: 7 latencies +
    7/8 x buffer / 80e9 with buffers 4 B x P and 2 B x P, P = 90,705,920 -- and the sites
    exchange fp32 outer traffic over their link: a ring all-reduce of 2 on each member's shard
    P x 4 B / 8: 2 x 1 ms + 2 (2-1)/2 x 45,352,960 B / 10e9 = 6.535296e-3 s.
    DiLoCo (Douillard et al. 2023, Algorithm 1) with H = 4 blocks on that every 4th step:
    1/4 of it per step. Delayed reduction hides it under the step's compute (1-stale update,
    PipeDream-2BW): only max(0, cross - compute) with compute = F + B + W (TP 1, the whole
    model and the embedding on one GPU, m = 1).
    Optimizer states shard over the 8 members of a site only; DiLoCo adds its fp32 outer copy
    and momentum (4 + 4 B): (12 + 8) x P / 8 bytes; the optimizer step streams 16 B x P / 8."""
    inside = (7 * LAT0 + 7 / 8 * 4 * P_ALL / BW0) + (7 * LAT0 + 7 / 8 * 2 * P_ALL / BW0)
    cross = 2 * 1e-3 + P_ALL * 4 / 8 / 10e9
    assert cross == pytest.approx(6.535296e-3, rel=1e-15)
    dil = _sync_run(backend, L.SYNC_DILOCO, 4)
    close(dil["dp_comm_s"], inside + cross / 4)
    close(dil["mem_optimizer_gib"], 20 * P_ALL / 8 / GIB)
    close(dil["optimizer_s"], 16 * P_ALL / 8 / HBM)
    delayed = _sync_run(backend, L.SYNC_DELAYED)
    f, b, w = _last_stage_f_b_w(layers=LAYERS)
    compute = (f + T_EMBED) + (b + T_EMBED) + w  # one device: the embedding in F and in B
    assert cross > compute
    close(delayed["compute_s"], compute)
    close(delayed["dp_comm_s"], inside + (cross - compute))
    close(delayed["mem_optimizer_gib"], 12 * P_ALL / 8 / GIB)


# ---------------------------------------------------------------------------------------------
# Scenario A under the other ZeRO stages and full recomputation
# ---------------------------------------------------------------------------------------------


def test_scenario_a_zero0_all_reduce_overlapped_with_the_last_backward(backend):
    """ZeRO 0, DP overlap: the fp32 gradients (4 B x 45,352,960 = 181,411,840 B) are
    all-reduced over the DP group of 4 in the node -- a ring, 2 (n-1) latencies + 2 (n-1)/n of
    the buffer (cheaper here than the double binary tree, 2 log2(4) latencies + 2 x the
    buffer) -- behind the last microbatch's B + W (PyTorch DDP bucketed overlap): exposed
    max(0, AR - (B + W)). Memory: no sharding, Adam's 12 B per parameter all on the GPU."""
    r = scenario_a(backend, zero=0, dp_overlap=1)
    f, b, w = _scenario_a_f_b_w()
    nbytes = 4 * P_GPU_A
    ring = 2 * 3 * LAT0 + 2 * 3 / 4 * nbytes / BW0
    tree = 2 * 2 * LAT0 + 2 * nbytes / BW0
    assert ring < tree
    tp_pass = LAYERS * 4 * T_TP_COLL
    close(r["dp_comm_s"], ring - (b + tp_pass + w))
    close(r["mem_optimizer_gib"], 12 * P_GPU_A / GIB)
    close(r["optimizer_s"], 16 * P_GPU_A / HBM)


def test_scenario_a_fsdp_gathers_and_reduces_per_layer_unit(backend):
    """ZeRO-3 / FSDP, no overlap (Zhao et al., PyTorch FSDP, VLDB 2023 §3.2-3.3): one unit per
    transformer layer (2 units; the embedding and output layer are spread over them), each
    all-gathers its weights for the forward and again for the backward and reduce-scatters
    its gradients, every microbatch: m x units x (2 AG_u + RS_u) with rings of 4 on P / 2 of
    the parameters: AG_u = 3 us + 0.75 x 2 B x P / 2 / 80e9, RS_u the same at 4 B. Weights,
    gradients and optimizer states are all sharded over DP 4; the weights also hold the
    gathered units in flight, the one computed and the one prefetched -- both of the device's
    two units, all of P at 2 B."""
    r = scenario_a(backend, zero=3)
    ag_u = 3 * LAT0 + 0.75 * 2 * P_GPU_A / 2 / BW0
    rs_u = 3 * LAT0 + 0.75 * 4 * P_GPU_A / 2 / BW0
    close(r["dp_comm_s"], 4 * 2 * (2 * ag_u + rs_u))
    close(r["mem_weights_gib"], (2 * P_GPU_A / 4 + 2 * P_GPU_A) / GIB)
    close(r["mem_grads_gib"], 4 * P_GPU_A / 4 / GIB)
    close(r["mem_optimizer_gib"], 12 * P_GPU_A / 4 / GIB)


def test_scenario_a_full_recompute(backend):
    """Full recomputation (Korthikanti et al. §5; Narayanan et al. SC'21 eq. 3's 4th forward):
    the backward re-runs each layer's forward -- GEMMs, attention core, memory-bound kernels
    and the per-layer overhead, not the embedding or the output layer -- and its TP
    collectives (one more forward pass of TP traffic); a layer keeps only its input, b s h x
    2 B / t with SP = 1,048,576 B, and the backward holds the one layer it rebuilds whole
    (Chen et al. 2016 §4): its 16,793,600 B without recompute (test_scenario_a_memory_columns)
    less that input; hardware FLOPs add one forward of the layers (executed attention: half the
    square), not of the logits."""
    r = scenario_a(backend, recompute=L.RECOMPUTE_FULL)
    f, b, w = _scenario_a_f_b_w()
    redo = LAYERS * (T_PROJ_2 + T_MLP_2 + T_CORE_2 + T_MEM_2 + OVERHEAD)
    close(r["compute_s"], 4 * (f + b + redo + w))
    close(r["tp_comm_s"], 4 * 3 * LAYERS * 4 * T_TP_COLL)
    whole = 32 * SBH / 2 + 4 * HEADS * SEQ / 2
    assert whole == 16_793_600
    close(r["mem_activations_gib"], (LAYERS * 2 * SBH / 2 + whole - 2 * SBH / 2) / GIB)
    core_exec = 2 * SEQ * SBH
    layer_fwd = 8 * SBH * HID + core_exec + 16 * SBH * HID
    hw = 16 * (3 * (LAYERS * layer_fwd + 2 * SBH * VOCAB) + 0.5 * LAYERS * core_exec
               + LAYERS * layer_fwd)
    close(r["hw_tflops_per_gpu"], hw / (r["step_time_s"] * 8) / 1e12)


# ---------------------------------------------------------------------------------------------
# Scenario E: a mixture-of-experts toy, EP 4 = DP 4
# ---------------------------------------------------------------------------------------------


def test_scenario_e_moe_compute_all_to_all_and_expert_memory(backend):
    """Both layers MoE: 4 experts of ffn 1024 (GeLU), top-2, no shared expert; EP 4 = DP 4 on
    a node of 4 GPUs, TP 1, 8 sequences: m = 2. Per microbatch and MoE layer on one GPU:
    router 2 s h E = 8,388,608 FLOPs (Switch Transformer) -> 1.6777216e-8 s; the routed
    experts 2 copies x 2 matrices x 2 s h 1024 = 8,589,934,592 FLOPs -> 1.7179869184e-5 s
    (balanced routing: each rank runs the same FLOPs); stored activations (Korthikanti §4.1,
    no dropout, FlashAttention): attention 2 sbh (QKV input) + 6 sbh (Q, K, V) + 2 sbh (proj
    input) + 4 a s = 10,518,528 B, the MoE block's input 2 sbh + per copy (fc1 input 2 sbh,
    fc1 output and fc2 input 2 x 2 s 1024) = 14,680,064 B, two norms 4 sbh: 29,392,896 B.
    All-to-all (GShard; Megatron-Core alltoall dispatcher): each rank sends its 1024 tokens x
    2 copies x h = 2,097,152 elements at 2 B, 3/4 of them to the 3 peers: 1 us +
    0.75 x 4,194,304 / 80e9 = 4.03216e-5 s, a dispatch and a combine per layer forward and
    again backward. Parameters: per MoE layer 4 h^2 + 2 h + h E (router) = 4,200,448 dense
    (replicated over the 4 ranks, all-reduced: ring of 4 at 4 B) and one whole expert,
    2 h 1024 = 2,097,152 (expert DP 1: no reduction); plus both embeddings."""
    mdl = toy_model()
    mdl[[L.MDL_EXPERTS, L.MDL_TOP_K, L.MDL_EXPERT_FFN_HIDDEN, L.MDL_MOE_EVERY]] = (4, 2, 1024, 1)
    r = run(backend, toy_system(gpus=4, tiers=((4, 100e9, 1e-6, 0.8, 1.0),)), mdl, toy_job(8),
            config(dp=4, ep=4))
    t_router = 2 * SBH * 4 / GEMM
    t_expert = 2 * 2 * 2 * SBH * 1024 / GEMM
    assert t_router == pytest.approx(1.6777216e-8, rel=1e-15)
    mem = 10_518_528 + 14_680_064 + 4 * SBH
    assert 2 * SBH + 6 * SBH + 2 * SBH + 4 * HEADS * SEQ == 10_518_528
    assert 2 * SBH + 2 * (2 * SBH + 2 * 2 * SEQ * 1024) == 14_680_064
    t_mem = mem / HBM
    f = LAYERS * (T_PROJ_1 + t_router + t_expert + T_CORE_1 + t_mem + OVERHEAD) + T_EMBED \
        + T_LOGITS_1 + T_CE_1
    b = LAYERS * (T_PROJ_1 + t_router + t_expert + 2.5 * T_CORE_1 + 2 * t_mem + OVERHEAD) \
        + T_EMBED + T_LOGITS_1 + T_CE_1
    w = LAYERS * (T_PROJ_1 + t_router + t_expert) + T_LOGITS_1
    close(r["compute_s"], 2 * (f + b + w))
    a2a = LAT0 + 0.75 * 1024 * 2 * HID * 2 / BW0
    assert a2a == pytest.approx(4.03216e-5, rel=1e-15)
    close(r["ep_comm_s"], 2 * 2 * LAYERS * 2 * a2a)
    dense = LAYERS * (4 * HID * HID + 2 * HID + 4 * HID) + 2 * VOCAB * HID
    expert = LAYERS * 2 * HID * 1024
    assert (dense, expert) == (73_936_896, 4_194_304)
    close(r["dp_comm_s"], 2 * 3 * LAT0 + 2 * 3 / 4 * 4 * dense / BW0)
    close(r["mem_weights_gib"], 2 * (dense + expert) / GIB)
    close(r["mem_optimizer_gib"], 12 * (dense + expert) / GIB)
    close(r["mem_activations_gib"], LAYERS * mem / GIB)
    model = 8 * 3 * (LAYERS * (8 * SBH * HID + 4 * SEQ * SBH + 2 * SBH * 4
                               + 2 * 2 * 2 * SBH * 1024) + 2 * SBH * VOCAB)
    close(r["model_tflops_per_gpu"], model / (r["step_time_s"] * 4) / 1e12)
    # hardware FLOPs: the causal FlashAttention core runs half the square, its backward 2.5x
    core_exec = 2 * SEQ * SBH
    hw = 8 * (3 * (LAYERS * (8 * SBH * HID + core_exec + 2 * SBH * 4 + 2 * 2 * 2 * SBH * 1024)
                   + 2 * SBH * VOCAB) + 0.5 * LAYERS * core_exec)
    close(r["hw_tflops_per_gpu"], hw / (r["step_time_s"] * 4) / 1e12)


# ---------------------------------------------------------------------------------------------
# Scenario B variants: GPipe memory, interleaved transfers; scenario A with ZeRO-Offload
# ---------------------------------------------------------------------------------------------


def test_scenario_b_gpipe_keeps_every_microbatch(backend):
    """GPipe (Huang et al. 2019) runs all m = 4 forwards before the backwards: every device
    keeps 4 microbatches of its layer (4 x 33,587,200 B); the last adds the logits
    (196,608,000 B) and is reported. The bubble is 1F1B's, (p - 1)(F + B + W)."""
    r = run(backend, toy_system(gpus=2), toy_model(), toy_job(4),
            config(pp=2, schedule=L.SCHED_GPIPE))
    f, b, w = _last_stage_f_b_w()
    close(r["mem_activations_gib"], 4 * 33_587_200 / GIB)
    close(r["mem_logits_gib"], 196_608_000 / GIB)
    close(r["bubble_s"], f + b + w)


def test_scenario_b_interleaved_transfers_and_bubble(backend):
    """A 4-layer toy on PP 2 with v = 2 virtual stages (Narayanan et al. SC'21 §2.2): each
    device holds 2 layers in 2 chunks; the last device's pass is 2 layers + output layer +
    cross-entropy. Bubble (p - 1)(F + B + W) / v. Fill and drain cross the pv - 1 = 3
    chunk boundaries each way (every one a device boundary): 2 (v route + (v - 1) t_top) =
    6 transfers of 2.72144e-5 s; the steady state hides every transfer behind
    min(F, B + W) / v."""
    mdl = toy_model()
    mdl[L.MDL_LAYERS] = 4
    r = run(backend, toy_system(gpus=2), mdl, toy_job(4),
            config(pp=2, vpp=2, schedule=L.SCHED_INTERLEAVED))
    f, b, w = _last_stage_f_b_w(layers=2)
    t = LAT0 + 2 * SBH / BW0
    assert t < f / 2
    close(r["pp_comm_s"], 6 * t)
    close(r["bubble_s"], (f + b + w) / 2)
    close(r["compute_s"], 4 * (f + b + w))


def test_scenario_a_zero_offload_optimizer(backend):
    """ZeRO-Offload (Ren et al., USENIX ATC 2021, §4.1-4.2), no overlap: the GPU's ZeRO-1
    shard of P / 4 = 11,338,240 parameters sends its fp32 gradients to the host over a
    50 GB/s link (4 B each), the CPU's Adam streams 16 B per parameter at 100 GB/s of host
    memory, and the bf16 weights (2 B) come back: (4 + 2) x P/4 / 50e9 + 16 x P/4 / 100e9.
    No optimizer state stays in HBM."""
    sys = toy_system()
    sys[L.SYS_HOST_LINK_BANDWIDTH] = 50e9
    sys[L.SYS_HOST_MEMORY_BANDWIDTH] = 100e9
    j = toy_job(16)
    j[L.JOB_OFFLOAD_OPTIMIZER] = 1
    r = run(backend, sys, toy_model(), j, config(tp=2, dp=4, sp=1, zero=1))
    shard = P_GPU_A / 4
    close(r["optimizer_s"], 6 * shard / 50e9 + 16 * shard / 100e9)
    assert r["mem_optimizer_gib"] == 0.0
    close(r["mem_weights_gib"], 2 * P_GPU_A / GIB)


def test_scenario_a_fp8_linear_layers(backend):
    """Scenario A as an FP8 job the way Transformer Engine runs it: only the linear layers
    (QKV, proj, fc1, fc2) at a 2e15 FLOP/s FP8 peak (x 0.5 flat efficiency: half the bf16
    GEMM time), attention, the output layer and memory-bound kernels unchanged, plus the casts
    of their inputs at 3 B of HBM traffic per element. Per layer on one GPU (t = 2, SP):
    forward casts QKV's and fc1's b s h / t = 524,288 inputs, proj's b s a d / t = 524,288 and
    fc2's b s ffn / t = 2,097,152: 3,670,016 elements; backward casts the output gradients,
    QKV's 1,572,864, proj's and fc2's 524,288 each, fc1's 2,097,152: 4,718,592 elements.
    The saved linear inputs are FP8 (1 B): per layer (Korthikanti §4.1 terms, SP over 2)
    attention (QKV input 1 sbh + Q, K, V 6 sbh + proj input 1 sbh + 4 a s) / 2 = 4,210,688 B,
    MLP (fc1 input 1 sbh + fc1 output 2 s ffn + fc2 input 1 s ffn) / 2 = (1,048,576 +
    8,388,608 + 4,194,304) / 2 = 6,815,744 B, norms 2,097,152 B: 13,123,584 B.
    TE also caches FP8 copies (2 B) of the 12,582,912 linear weights per GPU."""
    sys = toy_system()
    sys[L.SYS_LINEAR_PEAK_FLOPS] = 2e15
    j = toy_job(16)
    j[L.JOB_LINEAR_CAST_BYTES] = 3
    j[L.JOB_LINEAR_INPUT_BYTES] = 1
    j[L.JOB_FP8_WEIGHT_CACHE_BYTES] = 2
    r = run(backend, sys, toy_model(), j, config(tp=2, dp=4, sp=1, zero=1))
    proj, mlp = T_PROJ_2 / 2, T_MLP_2 / 2
    cast_f = 3_670_016 * 3 / HBM
    cast_b = 4_718_592 * 3 / HBM
    assert 2 * 524_288 + 524_288 + 2_097_152 == 3_670_016
    assert 1_572_864 + 2 * 524_288 + 2_097_152 == 4_718_592
    f = LAYERS * (proj + mlp + T_CORE_2 + T_MEM_2 + cast_f + OVERHEAD) + T_EMBED + T_LOGITS_2 \
        + T_CE_2
    b = LAYERS * (proj + mlp + 2.5 * T_CORE_2 + 2 * T_MEM_2 + cast_b + OVERHEAD) + T_EMBED \
        + T_LOGITS_2 + T_CE_2
    w = LAYERS * (proj + mlp) + T_LOGITS_2
    close(r["compute_s"], 4 * (f + b + w))
    assert 4_210_688 + 6_815_744 + 2 * SBH == 13_123_584
    close(r["mem_activations_gib"], LAYERS * 13_123_584 / GIB)
    lin = LAYERS * 12 * HID * HID / 2
    assert lin == 12_582_912
    close(r["mem_weights_gib"], (2 * P_GPU_A + 2 * lin) / GIB)



def test_scenario_a_fp8_param_gather_halves_the_linear_weights_all_gather(backend):
    """Scenario A with FP8 parameters (``job.fp8_param_gather``; Megatron-LM
    ``--fp8-param-gather``: the distributed optimizer all-gathers the linear layers' weights
    as their FP8 bytes, the embeddings, output layer and norms stay 16-bit): of the
    45,352,960 weights per GPU the 12,582,912 linear ones (QKV, proj, fc1, fc2 of 2 layers
    over TP 2) travel at 1 B and the other 32,770,048 at 2 B: 78,123,008 B instead of
    90,705,920 (ratio 0.86127...). ZeRO-1 all-gather over the ring of 4: 3 us + 0.75 x
    78,123,008 / 80e9 = 7.35403...e-4 s; the fp32 gradients' reduce-scatter is unchanged.
    ZeRO-3: each of the 2 units gathers half of it twice per microbatch."""
    j = toy_job(16)
    j[L.JOB_LINEAR_PARAM_COMM_BYTES] = 1
    lin = LAYERS * 12 * HID * HID / 2
    assert lin == 12_582_912 and P_GPU_A - lin == 32_770_048
    ag_bytes = lin * 1 + (P_GPU_A - lin) * 2
    assert ag_bytes == 78_123_008
    t_ag = 3 * LAT0 + 0.75 * ag_bytes / BW0
    assert (t_ag - 3 * LAT0) / (T_AG_A - 3 * LAT0) == pytest.approx(78_123_008 / 90_705_920,
                                                                  rel=1e-15)
    base = run(backend, toy_system(), toy_model(), toy_job(16),
               config(tp=2, dp=4, sp=1, zero=1))
    r = run(backend, toy_system(), toy_model(), j, config(tp=2, dp=4, sp=1, zero=1))
    close(base["dp_comm_s"], T_RS_A + T_AG_A)
    close(r["dp_comm_s"], T_RS_A + t_ag)
    close(r["step_time_s"] - base["step_time_s"], t_ag - T_AG_A, rel=1e-6)
    # ZeRO-3 / FSDP: m x units x (2 AG_u + RS_u), AG_u on half the gathered bytes
    r3 = run(backend, toy_system(), toy_model(), j, config(tp=2, dp=4, sp=1, zero=3))
    ag_u = 3 * LAT0 + 0.75 * ag_bytes / 2 / BW0
    rs_u = 3 * LAT0 + 0.75 * 4 * P_GPU_A / 2 / BW0
    close(r3["dp_comm_s"], 4 * 2 * (2 * ag_u + rs_u))
    # a tier whose comm_dtype is 1 byte sends every weight as 1 byte either way (the same
    # ring bytes); the quantize / dequantize codec (collectives.codec_time, 2 x elements x
    # (elem_bytes + 1) B of HBM traffic) reads the narrower mean width, so FP8 parameters
    # still gather faster
    sys1 = toy_system(tiers=((8, 100e9, 1e-6, 0.8, 1.0, 0.0, 0.0, 1.0),))
    b1 = run(backend, sys1, toy_model(), toy_job(16), config(tp=2, dp=4, sp=1, zero=1))
    r1 = run(backend, sys1, toy_model(), j, config(tp=2, dp=4, sp=1, zero=1))
    assert r1["dp_comm_s"] < b1["dp_comm_s"]


# ---------------------------------------------------------------------------------------------
# Scenario F: 3D parallelism (TP 2 x DP 2 x PP 2); scenario G: DP across two nodes
# ---------------------------------------------------------------------------------------------


def test_scenario_f_3d_parallel_bubble_includes_the_stage_communication(backend):
    """TP 2 (SP) x DP 2 x PP 2 on one node, order tp-cp-ep-dp-pp (TP stride 1, DP 2, PP 4),
    8 sequences: m = 4. The last stage (1 layer + output layer + loss, TP 2) sets the pace;
    its F and B each carry one layer pass of TP traffic, 4 x 1.41072e-5 s, and the 1F1B bubble
    is (p - 1) x that stage's F + B + W *with* the exposed communication (Narayanan et al.
    SC'21 §2.1: the bubble idles for whole stage passes). The stage boundary moves the
    microbatch's activations split over the TP ranks (Megatron's scatter/gather
    optimisation, SC'21 §4.1): b s h x 2 B / 2 = 1,048,576 B -> 1 us + 1,048,576 / 80e9 =
    1.41072e-5 s, 4 times on 1F1B's critical path with p = 2, m = 4 (blocking p2p: fill,
    drain and the loop the third forward waits on, as in scenario B). ZeRO-1 over DP 2: rings
    of 2 on the stage's
    P = (12,584,960 + 32,768,000) / 2 = 22,676,480 parameters per GPU."""
    r = run(backend, toy_system(gpus=8), toy_model(), toy_job(8),
            config(tp=2, pp=2, dp=2, sp=1, zero=1))
    f = T_PROJ_2 + T_MLP_2 + T_CORE_2 + T_MEM_2 + OVERHEAD + T_LOGITS_2 + T_CE_2
    b = T_PROJ_2 + T_MLP_2 + 2.5 * T_CORE_2 + 2 * T_MEM_2 + OVERHEAD + T_LOGITS_2 + T_CE_2
    w = T_PROJ_2 + T_MLP_2 + T_LOGITS_2
    tp_pass = 4 * T_TP_COLL
    t = LAT0 + SBH * 2 / 2 / BW0
    assert t == pytest.approx(1.41072e-5, rel=1e-15)
    p = (12 * HID * HID + 2 * HID + VOCAB * HID) / 2
    assert p == 22_676_480
    close(r["compute_s"], 4 * (f + b + w))
    close(r["tp_comm_s"], 4 * 2 * tp_pass)
    close(r["bubble_s"], f + tp_pass + b + tp_pass + w)
    close(r["pp_comm_s"], 4 * t)
    close(r["dp_comm_s"], (LAT0 + 0.5 * 4 * p / BW0) + (LAT0 + 0.5 * 2 * p / BW0))
    close(r["optimizer_s"], p / 2 * 16 / HBM)


def test_scenario_g_data_parallel_all_reduce_over_two_tiers(backend):
    """DP 16 over 2 nodes of 8 (node 80 GB/s, 1 us; fabric 10 GB/s, 10 us), ZeRO 0, m = 1: the
    fp32 gradients of all P = 90,705,920 parameters, 362,823,680 B, all-reduced the cheapest of
    three ways (NCCL's choice): hierarchical (ASTRA-sim; ring of 8 in the node on the whole
    buffer, ring of 2 across on 1/8 of it), flat ring over 16 at the fabric, double binary
    tree at the fabric. The hierarchical one wins."""
    sys = toy_system(gpus=16, tiers=((8, 100e9, 1e-6, 0.8, 1.0), (2, 10e9, 1e-5, 1.0, 1.0)))
    r = run(backend, sys, toy_model(), toy_job(16), config(dp=16))
    nbytes = 4 * P_ALL
    hier = (2 * 7 * LAT0 + 2 * 7 / 8 * nbytes / BW0) + (2 * 1 * 1e-5 + nbytes / 8 / 10e9)
    ring = 2 * 15 * 1e-5 + 2 * 15 / 16 * nbytes / 10e9
    tree = 2 * 4 * 1e-5 + 2 * nbytes / 10e9
    assert hier < min(ring, tree)
    close(r["dp_comm_s"], hier)
