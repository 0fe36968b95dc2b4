"""Known answers: the model's closed forms against the formulas of the literature."""

import math

import numpy as np
import pytest

from trainscape import layout as L
from trainscape.model import collectives as C
from trainscape.model import llm
from trainscape.model.reference import evaluate_batch


def system(tiers, gpus=64, peak=1e15):
    """A system block with the given tiers as (size, bandwidth B/s, latency s, eff, oversub)."""
    sys = np.zeros(L.N_SYS)
    sys[L.SYS_GPUS] = gpus
    sys[L.SYS_N_TIERS] = len(tiers)
    sys[L.SYS_PEAK_FLOPS] = peak
    sys[L.SYS_HBM_BYTES] = 80e9
    sys[L.SYS_HBM_BANDWIDTH] = 3e12
    sys[L.SYS_HBM_RESERVE_BYTES] = 2e9
    sys[L.SYS_GEMM_EFFICIENCY_MAX] = 0.8
    sys[L.SYS_GEMM_HALF_FLOPS] = 1e9
    sys[L.SYS_ATTENTION_EFFICIENCY] = 0.5
    sys[L.SYS_MEMORY_EFFICIENCY] = 0.8
    # a 16-bit job: the linear layers on the same curve; ideal TP / CP overlap unless a test
    # sets the overlap fields
    sys[L.SYS_LINEAR_PEAK_FLOPS] = peak
    sys[L.SYS_LINEAR_EFFICIENCY_MAX] = 0.8
    sys[L.SYS_LINEAR_HALF_FLOPS] = 1e9
    for i, t in enumerate(tiers):
        sys[L.SYS_TIER_BASE + i * L.N_TIER : L.SYS_TIER_BASE + i * L.N_TIER + len(t)] = t
    return sys


NODE = (8, 400e9, 2e-6, 0.9, 1.0)
FABRIC = (64, 50e9, 10e-6, 0.8, 1.0)
REGION = (2, 50e9, 2e-3, 0.8, 8.0)


# ---------------------------------------------------------------------------------------------
# Collectives
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("n", [2, 4, 8])
def test_ring_all_reduce_inside_a_node_is_the_bandwidth_optimal_closed_form(n):
    sys = system([NODE, FABRIC], gpus=512)
    nbytes = 4e9  # large: bandwidth-bound, the ring wins over the tree
    bw = 400e9 * 0.9
    expected = 2 * (n - 1) * 2e-6 + 2 * (n - 1) / n * nbytes / bw
    assert C.all_reduce_time(sys, nbytes, n, 1, 1, 1, 1, 1) == pytest.approx(expected, rel=1e-12)


def test_tree_wins_for_small_messages_over_many_ranks():
    sys = system([NODE, FABRIC], gpus=512)
    n, nbytes = 512, 1e3
    lat, bw = 10e-6, 50e9 * 0.8
    tree = 2 * math.ceil(math.log2(n)) * lat + 2 * nbytes / bw
    got = C.all_reduce_time(sys, nbytes, n, 1, 1, 1, 1, 1)
    assert got == pytest.approx(tree, rel=1e-12)
    assert got < 2 * (n - 1) * lat  # far below the ring's latency alone


def test_hierarchical_all_reduce_over_two_tiers():
    # 32 ranks = 8 per node x 4 nodes: reduce-scatter in the node, all-reduce of 1/8 across
    # nodes, all-gather back (ASTRA-sim hierarchical; 2D all-reduce)
    sys = system([NODE, FABRIC], gpus=512)
    nbytes = 1e9
    bw0, bw1 = 400e9 * 0.9, 50e9 * 0.8
    inner = 2 * 7 * 2e-6 + 2 * 7 / 8 * nbytes / bw0
    outer = 2 * 3 * 10e-6 + 2 * 3 / 4 * (nbytes / 8) / bw1
    flat = 2 * 31 * 10e-6 + 2 * 31 / 32 * nbytes / bw1
    got = C.all_reduce_time(sys, nbytes, 32, 1, 1, 1, 1, 1)
    assert got == pytest.approx(inner + outer, rel=1e-12)
    assert got < flat


def test_strided_group_crosses_nodes_and_pays_the_fabric():
    # 8 ranks 8 apart: one per node, so the whole ring runs over the fabric
    sys = system([NODE, FABRIC], gpus=512)
    nbytes = 1e9
    expected = 2 * 7 * 10e-6 + 2 * 7 / 8 * nbytes / (50e9 * 0.8)
    assert C.all_reduce_time(sys, nbytes, 8, 8, 1, 1, 1, 1) == pytest.approx(expected, rel=1e-12)


def test_all_gather_and_reduce_scatter_move_n_minus_1_over_n():
    sys = system([NODE, FABRIC], gpus=512)
    nbytes = 2e9
    expected = 7 * 2e-6 + 7 / 8 * nbytes / (400e9 * 0.9)
    assert C.all_gather_time(sys, nbytes, 8, 1, 1, 1, 1, 1) == pytest.approx(expected, rel=1e-12)
    assert C.reduce_scatter_time(sys, nbytes, 8, 1, 1, 1, 1, 1) == pytest.approx(expected, rel=1e-12)


def test_oversubscribed_region_tier_divides_the_bandwidth():
    # two buildings, 8:1 oversubscribed: the pair exchange crossing it gets 1/8 of the link
    sys = system([NODE, FABRIC, REGION], gpus=1024)
    nbytes = 1e9
    expected = 2e-3 + nbytes / (50e9 * 0.8 / 8)
    assert C.p2p_time(sys, nbytes, 2, 512, 1, 1, 1, 1) == pytest.approx(expected, rel=1e-12)


def test_balanced_all_to_all_over_two_tiers():
    # 16 ranks over 2 nodes: 7/16 of the buffer on NVLink, 8/16 over the NIC; the NIC is slower
    sys = system([NODE, FABRIC], gpus=512)
    nbytes = 1e9
    nic = 8 / 16 * nbytes / (50e9 * 0.8)
    nvl = 7 / 16 * nbytes / (400e9 * 0.9)
    assert C.all_to_all_time(sys, nbytes, 16, 1, 1, 1, 1, 1) == pytest.approx(
        10e-6 + max(nic, nvl), rel=1e-12
    )


def test_group_of_one_costs_nothing():
    sys = system([NODE, FABRIC], gpus=512)
    for f in (C.all_reduce_time, C.all_gather_time, C.all_to_all_time, C.p2p_time):
        assert f(sys, 1e9, 1, 1, 1, 1, 1, 1) == 0.0


# ---------------------------------------------------------------------------------------------
# Activation memory: Korthikanti et al. 2022, Table 2 (2-byte activations, no FlashAttention)
# ---------------------------------------------------------------------------------------------

S, B, H, A, T = 2048, 1, 12288, 96, 8


def act(t, sp, recompute, dropout=True):
    return llm.layer_activation_bytes(
        S, B, H, A, A, H // A, 4 * H, False, t, sp, recompute, False, 2.0, dropout, 2.0
    )


def test_korthikanti_no_parallelism():
    assert act(1, False, L.RECOMPUTE_NONE) == pytest.approx(S * B * H * (34 + 5 * A * S / H))


def test_korthikanti_tensor_parallel():
    expected = S * B * H * (10 + 24 / T + 5 * A * S / (H * T))
    assert act(T, False, L.RECOMPUTE_NONE) == pytest.approx(expected)


def test_korthikanti_tensor_and_sequence_parallel():
    expected = S * B * H / T * (34 + 5 * A * S / H)
    assert act(T, True, L.RECOMPUTE_NONE) == pytest.approx(expected)


def test_korthikanti_selective_recompute():
    assert act(T, False, L.RECOMPUTE_SELECTIVE) == pytest.approx(S * B * H * (10 + 24 / T))
    assert act(T, True, L.RECOMPUTE_SELECTIVE) == pytest.approx(34 * S * B * H / T)


def test_korthikanti_full_recompute():
    assert act(T, False, L.RECOMPUTE_FULL) == pytest.approx(2 * S * B * H)
    assert act(T, True, L.RECOMPUTE_FULL) == pytest.approx(2 * S * B * H / T)


def test_flash_attention_stores_no_scores():
    with_scores = act(T, True, L.RECOMPUTE_NONE)
    flash = llm.layer_activation_bytes(S, B, H, A, A, H // A, 4 * H, False, T, True,
                                       L.RECOMPUTE_NONE, True, 2.0, True, 2.0)
    assert flash == pytest.approx(34 * S * B * H / T + 4 * A * S * B / T)
    assert flash < with_scores


# ---------------------------------------------------------------------------------------------
# FLOPs: Narayanan et al. SC'21 eq. (3)
# ---------------------------------------------------------------------------------------------


def gpt_model(layers=96, h=12288, heads=96, vocab=51200):
    mdl = np.zeros(L.N_MODEL)
    mdl[L.MDL_LAYERS] = layers
    mdl[L.MDL_HIDDEN] = h
    mdl[L.MDL_FFN_HIDDEN] = 4 * h
    mdl[L.MDL_HEADS] = heads
    mdl[L.MDL_KV_HEADS] = heads
    mdl[L.MDL_HEAD_DIM] = h // heads
    mdl[L.MDL_VOCAB] = vocab
    return mdl


@pytest.mark.parametrize("layers,h,heads,s", [(96, 12288, 96, 2048), (24, 2304, 24, 2048),
                                               (128, 25600, 160, 4096)])
def test_model_flops_equal_megatron_formula(layers, h, heads, s):
    mdl = gpt_model(layers, h, heads)
    batch = 512
    ours = llm.model_flops_per_sequence(mdl, s) * batch
    assert ours == pytest.approx(llm.megatron_flops_per_iteration(batch, s, layers, h, 51200, False),
                                 rel=1e-12)
    # with full recomputation one more forward of every layer (not the logits) runs
    fwd_layer = llm.attention_projection_flops(1, s, h, heads, heads, h // heads) \
        + llm.attention_core_flops(1, s, heads, h // heads) + llm.mlp_flops(1, s, h, 4 * h, False)
    assert ours + batch * layers * fwd_layer == pytest.approx(
        llm.megatron_flops_per_iteration(batch, s, layers, h, 51200, True), rel=1e-12)


# ---------------------------------------------------------------------------------------------
# Pipeline bubble through the whole model
# ---------------------------------------------------------------------------------------------


def one_config(**kw):
    cfg = np.zeros((L.N_CFG, 1), dtype=np.int32)
    defaults = dict(tp=1, cp=1, pp=1, dp=1, ep=1, mbs=1, vpp=1, schedule=L.SCHED_1F1B,
                    recompute=L.RECOMPUTE_NONE, zero=0, sp=0, order=0, tp_overlap=0, dp_overlap=0)
    defaults.update(kw)
    for k, v in defaults.items():
        cfg[L.CONFIG_FIELDS.index(k), 0] = v
    return cfg


def job(seq=2048, batch=64):
    j = np.zeros(L.N_JOB)
    j[L.JOB_SEQ_LEN] = seq
    j[L.JOB_GLOBAL_BATCH] = batch
    j[L.JOB_ACTIVATION_BYTES] = 2
    j[L.JOB_PARAM_BYTES] = 2
    j[L.JOB_LINEAR_PARAM_COMM_BYTES] = 2
    j[L.JOB_ZERO3_SHARD_PARAM_BYTES] = 2  # a 16-bit shard beside the master (megatron-core)
    j[L.JOB_GRAD_BYTES] = 4
    j[L.JOB_OPTIMIZER_BYTES] = 12
    j[L.JOB_OPTIMIZER_TRAFFIC_BYTES] = 30
    j[L.JOB_COMM_BYTES] = 2
    j[L.JOB_GRAD_COMM_BYTES] = 4
    j[L.JOB_FLASH_ATTENTION] = 1
    j[L.JOB_DISPATCH_BYTES] = 2
    j[L.JOB_COMBINE_BYTES] = 2
    j[L.JOB_DROPOUT] = 1
    j[L.JOB_LINEAR_INPUT_BYTES] = 2
    j[L.JOB_LOGITS_EXTRA_BYTES] = 4  # Megatron's fp32 copy of the logits
    return j


@pytest.mark.parametrize("pp,batch", [(4, 16), (8, 64), (2, 3)])
def test_1f1b_bubble_is_p_minus_1_over_m_of_the_ideal(pp, batch):
    sys = system([NODE, FABRIC], gpus=pp)
    mdl = gpt_model(layers=48, h=4096, heads=32)
    out = evaluate_batch(sys, mdl, job(batch=batch), one_config(pp=pp))
    m = batch
    ratio = out[L.OUT_BUBBLE_S, 0] / out[L.OUT_COMPUTE_S, 0]
    assert ratio == pytest.approx((pp - 1) / m, rel=1e-12)


@pytest.mark.parametrize("pp,vpp,batch", [(4, 2, 16), (8, 3, 64), (4, 4, 8)])
def test_interleaved_bubble_is_p_minus_1_over_v_m(pp, vpp, batch):
    sys = system([NODE, FABRIC], gpus=pp)
    mdl = gpt_model(layers=96, h=4096, heads=32)
    out = evaluate_batch(sys, mdl, job(batch=batch),
                         one_config(pp=pp, vpp=vpp, schedule=L.SCHED_INTERLEAVED))
    ratio = out[L.OUT_BUBBLE_S, 0] / out[L.OUT_COMPUTE_S, 0]
    assert ratio == pytest.approx((pp - 1) / (vpp * batch), rel=1e-12)


def test_breakdown_adds_up_and_memory_parts_add_up():
    sys = system([NODE, FABRIC], gpus=64)
    mdl = gpt_model(layers=32, h=4096, heads=32)
    out = evaluate_batch(sys, mdl, job(batch=64),
                         one_config(tp=4, pp=4, dp=4, sp=1, zero=1, tp_overlap=1, dp_overlap=1))
    col = out[:, 0]
    assert col[L.OUT_STATUS] == L.STATUS_OK
    total = sum(col[L.OUTPUT_FIELDS.index(f)] for f in L.BREAKDOWN_FIELDS)
    assert total == pytest.approx(col[L.OUT_STEP_TIME_S], rel=1e-12)
    mem = sum(col[L.OUTPUT_FIELDS.index(f)] for f in L.MEMORY_FIELDS)
    assert mem == pytest.approx(col[L.OUT_MEMORY_GIB], rel=1e-12)
    assert col[L.OUT_TOKENS_PER_S] == pytest.approx(64 * 2048 / col[L.OUT_STEP_TIME_S])


def test_invalid_config_is_flagged_not_nan():
    sys = system([NODE, FABRIC], gpus=64)
    mdl = gpt_model(layers=32, h=4096, heads=32)
    out = evaluate_batch(sys, mdl, job(batch=64), one_config(tp=3, pp=4, dp=4))
    col = out[:, 0]
    assert col[L.OUT_STATUS] == L.STATUS_INVALID_CONFIG
    assert col[L.OUT_FEASIBLE] == 0.0
    assert not np.isnan(col).any()


def test_too_big_for_memory_is_infeasible_but_costed():
    """GPT-3 175B (GeLU MLP) at TP 8, PP 1, DP 1, ZeRO 0, by hand:

    per layer 4h^2 (Q, K, V, output projection; MHA) + 8h^2 (two h x 4h MLP matrices) + 2h
    (two norm scales) = 12h^2 + 2h = 1,811,963,904 for h = 12288; 96 layers =
    173,948,534,784; input embedding and untied output projection 2 x 51200 x 12288 =
    1,258,291,200 (one stage holds both); total 175,206,825,984, over TP 8:
    21,900,853,248 per GPU. Weights 2 B each (BF16) = 43,801,706,496 B, gradients 4 B (FP32)
    = 87,603,412,992 B, Adam states 12 B (FP32 master, m, v; no ZeRO sharding at DP 1) =
    262,810,238,976 B; the reserve is the system's 2e9 B. Each term exact, and the total over
    the 80e9 B of HBM: out of memory, still costed."""
    sys = system([NODE, FABRIC], gpus=8)
    mdl = gpt_model(layers=96, h=12288, heads=96)  # 175B on 8 GPUs
    out = evaluate_batch(sys, mdl, job(batch=8), one_config(tp=8))
    col = out[:, 0]
    gib = 2.0**30
    per_gpu = (96 * (12 * 12288**2 + 2 * 12288) + 2 * 51200 * 12288) / 8
    assert per_gpu == 21_900_853_248
    assert col[L.OUT_MEM_WEIGHTS_GIB] == pytest.approx(2 * per_gpu / gib, rel=1e-12)
    assert col[L.OUT_MEM_GRADS_GIB] == pytest.approx(4 * per_gpu / gib, rel=1e-12)
    assert col[L.OUT_MEM_OPTIMIZER_GIB] == pytest.approx(12 * per_gpu / gib, rel=1e-12)
    assert col[L.OUT_MEM_RESERVE_GIB] == pytest.approx(2e9 / gib, rel=1e-12)
    assert col[L.OUT_MEMORY_GIB] > 18 * per_gpu / gib  # plus activations and logits
    assert col[L.OUT_STATUS] == L.STATUS_OUT_OF_MEMORY
    assert col[L.OUT_FEASIBLE] == 0.0
    assert np.isfinite(col[L.OUT_STEP_TIME_S])


def test_huge_degrees_do_not_wrap_int32(backend):
    # dp * mbs = 2**32 overflows int32: validity must be judged in 64 bits by every backend
    from trainscape.backends import evaluate_blocks

    sys = system([NODE, FABRIC, (4096, 50e9, 1e-3, 0.8, 1.0)], gpus=65536)
    mdl = gpt_model(layers=32, h=4096, heads=32)
    cfg = one_config(dp=65536, mbs=65536)
    out = evaluate_blocks(sys, mdl, job(batch=2**31 - 1), cfg, backend=backend)
    assert out[L.OUT_STATUS, 0] == L.STATUS_INVALID_CONFIG  # batch not divisible by dp * mbs
    assert not np.isnan(out[:, 0]).any()


def test_flash_attention_runs_half_the_causal_square_unfused_runs_all_of_it():
    sys = system([NODE, FABRIC])
    core = llm.attention_core_flops(1, 4096, 32, 128)
    assert llm.executed_attention_core_flops(core, True) == 0.5 * core
    assert llm.executed_attention_core_flops(core, False) == core
    # fused: a fixed fraction of peak; unfused: two batched GEMMs on the GEMM efficiency curve
    assert llm.attention_core_time(sys, core, True, 4096, 128) == pytest.approx(core / (1e15 * 0.5))
    eff = 0.8 * (core / 2) / (core / 2 + 1e9)
    assert llm.attention_core_time(sys, core, False, 4096, 128) == pytest.approx(core / (1e15 * eff))


def test_selective_recompute_is_free_and_useless_with_flash_attention(backend):
    # the design space drops "selective" when FlashAttention is on: this is why
    from trainscape.backends import evaluate_blocks

    sys = system([NODE, FABRIC], gpus=64)
    mdl = gpt_model(layers=32, h=4096, heads=32)
    cfgs = np.concatenate([one_config(tp=4, pp=4, dp=4, sp=1, recompute=r)
                           for r in (L.RECOMPUTE_NONE, L.RECOMPUTE_SELECTIVE)], axis=1)
    flash = evaluate_blocks(sys, mdl, job(batch=64), cfgs, backend=backend)
    assert np.array_equal(flash[:, 0], flash[:, 1])
    j = job(batch=64)
    j[L.JOB_FLASH_ATTENTION] = 0
    unfused = evaluate_blocks(sys, mdl, j, cfgs, backend=backend)
    assert unfused[L.OUT_MEM_ACTIVATIONS_GIB, 1] < unfused[L.OUT_MEM_ACTIVATIONS_GIB, 0]
    assert unfused[L.OUT_STEP_TIME_S, 1] > unfused[L.OUT_STEP_TIME_S, 0]


def test_full_recompute_holds_one_rebuilt_layer_beside_the_checkpoints(backend):
    """Chen et al. 2016 (arXiv 1604.06174) §4: with every layer checkpointed the backward
    rebuilds one layer at a time, whose activations live beside the stored inputs. GPT-style
    32 layers at TP 8 with SP, no pipeline (one microbatch in flight): full recompute keeps
    31 checkpoints of ``2sbh/t`` bytes (Korthikanti et al. Table 2) and one layer whole --
    exactly what no recompute keeps of one layer; block recompute of 4 layers of 32 keeps its
    share and no more (its 28 plain layers, freed first, are each as large as the rebuilt
    one)."""
    from trainscape.backends import evaluate_blocks

    s, h, t, layers = 2048, 4096, 8, 32
    sys = system([NODE, FABRIC], gpus=8)
    mdl = gpt_model(layers=layers, h=h, heads=32)
    cfgs = np.concatenate([one_config(tp=t, sp=1, recompute=r)
                           for r in (L.RECOMPUTE_NONE, L.RECOMPUTE_FULL)], axis=1)
    out = evaluate_blocks(sys, mdl, job(seq=s, batch=4), cfgs, backend=backend)
    gib = 2.0**30
    whole = out[L.OUT_MEM_ACTIVATIONS_GIB, 0] * gib / layers  # one layer, no recompute
    checkpoint = 2.0 * s * h / t
    assert out[L.OUT_MEM_ACTIVATIONS_GIB, 1] * gib == pytest.approx(
        (layers - 1) * checkpoint + whole, rel=1e-12)
    j = job(seq=s, batch=4)
    j[L.JOB_RECOMPUTE_LAYERS] = 4
    block = evaluate_blocks(sys, mdl, j, np.ascontiguousarray(cfgs[:, 1:]), backend=backend)
    share = 4 / layers
    assert block[L.OUT_MEM_ACTIVATIONS_GIB, 0] * gib == pytest.approx(
        layers * (share * checkpoint + (1 - share) * whole), rel=1e-12)


def test_recompute_working_set_is_the_largest_layer_kind_a_stage_holds():
    ws = llm.recompute_working_set
    assert ws(4.0, 0.0, 10.0, 30.0) == 10.0  # dense layers only
    assert ws(0.0, 4.0, 10.0, 30.0) == 30.0  # MoE layers only
    assert ws(1.0, 3.0, 10.0, 30.0) == 30.0
    assert ws(1.0, 3.0, 50.0, 30.0) == 50.0
    assert ws(0.0, 0.0, 10.0, 30.0) == 0.0  # a stage of embedding or loss only


# ---------------------------------------------------------------------------------------------
# MoE all-to-all: FP8 dispatch / BF16 combine and node-limited routing (DeepSeek-V3,
# arXiv 2412.19437, §2.1.2 and §3.3.2)
# ---------------------------------------------------------------------------------------------


def test_node_limited_all_to_all_caps_the_copies_that_leave_a_node():
    # DeepSeek-V3's layout: EP 64 over 8 nodes of 8 GPUs, top-8 routing, at most 4 nodes.
    # Uniform routing sends 8 * 56/64 = 7 copies of a token off its node; the limit keeps 4.
    sys = system([NODE, FABRIC], gpus=512)
    nbytes = 1e9
    nvl = 7 / 64 * nbytes / (400e9 * 0.9)
    nic_free = 56 / 64 * nbytes / (50e9 * 0.8)
    assert C.node_limited_share(8, 4, 64, 8) == pytest.approx(4 / 7, rel=1e-15)
    got = C.routed_all_to_all_time(sys, nbytes, 8, 4, 64, 1, 1, 1, 1, 1)
    assert got == pytest.approx(10e-6 + max(nvl, nic_free * 4 / 7), rel=1e-12)
    # no limit, or a limit the routing never reaches: the plain all-to-all
    plain = C.all_to_all_time(sys, nbytes, 64, 1, 1, 1, 1, 1)
    assert plain == pytest.approx(10e-6 + max(nvl, nic_free), rel=1e-12)
    for limit in (0, 7, 8):
        assert C.routed_all_to_all_time(sys, nbytes, 8, limit, 64, 1, 1, 1, 1, 1) == plain
    # inside one node nothing leaves it: the limit changes nothing
    assert C.routed_all_to_all_time(sys, nbytes, 8, 1, 8, 1, 1, 1, 1, 1) == \
        C.all_to_all_time(sys, nbytes, 8, 1, 1, 1, 1, 1)


def moe_model(max_route_nodes=0):
    mdl = gpt_model(layers=4, h=4096, heads=32)
    mdl[L.MDL_SWIGLU] = 1
    mdl[L.MDL_EXPERTS] = 64
    mdl[L.MDL_TOP_K] = 8
    mdl[L.MDL_EXPERT_FFN_HIDDEN] = 1024
    mdl[L.MDL_MOE_EVERY] = 1
    mdl[L.MDL_MAX_ROUTE_NODES] = max_route_nodes
    return mdl


@pytest.mark.parametrize("limit", [0, 4])
def test_ep_comm_is_fp8_dispatch_plus_bf16_combine_forward_and_backward(backend, limit):
    from trainscape.backends import evaluate_blocks
    from trainscape.spec.pack import moe_combine_bytes, moe_dispatch_bytes

    sys = system([NODE, FABRIC], gpus=64)
    seq, batch = 4096, 128
    j = job(seq=seq, batch=batch)
    j[L.JOB_DISPATCH_BYTES] = moe_dispatch_bytes("fp8")
    j[L.JOB_COMBINE_BYTES] = moe_combine_bytes("bf16")
    assert (j[L.JOB_DISPATCH_BYTES], j[L.JOB_COMBINE_BYTES]) == (1 + 4 / 128, 2.0)
    cfg = one_config(dp=64, ep=64, mbs=1)  # order 0: EP innermost, ranks 0..63 on 8 nodes
    out = evaluate_blocks(sys, moe_model(limit), j, cfg, backend=backend)
    assert out[L.OUT_STATUS, 0] != L.STATUS_INVALID_CONFIG

    share = 4 / 7 if limit else 1.0
    copies = seq * 8 * 4096  # tokens x top_k x hidden elements per rank and direction

    def a2a(width):
        nbytes = copies * width
        return 10e-6 + max(7 / 64 * nbytes / (400e9 * 0.9),
                           56 / 64 * nbytes * share / (50e9 * 0.8))

    microbatches = batch / 64
    # per MoE layer: forward dispatch (fp8) + combine (bf16); backward the same pair (the
    # combine's gradient goes the dispatch way in fp8, the dispatch's the combine way in bf16)
    expected = microbatches * 4 * 2 * (a2a(1 + 4 / 128) + a2a(2.0))
    assert out[L.OUT_EP_COMM_S, 0] == pytest.approx(expected, rel=1e-9)


def test_fp8_dispatch_halves_the_dispatch_and_node_limit_cuts_the_fabric(backend):
    from trainscape.backends import evaluate_blocks

    sys = system([NODE, FABRIC], gpus=64)
    cfg = one_config(dp=64, ep=64, mbs=1)
    j16 = job(seq=4096, batch=128)
    j8 = j16.copy()
    j8[L.JOB_DISPATCH_BYTES] = 1 + 4 / 128
    ep = {}
    for key, (mdl, j) in {"bf16": (moe_model(), j16), "fp8": (moe_model(), j8),
                          "fp8-4nodes": (moe_model(4), j8)}.items():
        ep[key] = evaluate_blocks(sys, mdl, j, cfg, backend=backend)[L.OUT_EP_COMM_S, 0]
    assert ep["fp8-4nodes"] < ep["fp8"] < ep["bf16"]
    # fabric-bound: time is affine in the bytes, so the byte ratio shows in the variable part
    lat = 128 / 64 * 4 * 2 * 2 * 10e-6
    assert (ep["fp8"] - lat) / (ep["bf16"] - lat) == pytest.approx((1.03125 + 2) / 4, rel=1e-9)
    assert (ep["fp8-4nodes"] - lat) / (ep["fp8"] - lat) == pytest.approx(4 / 7, rel=1e-9)


# ---------------------------------------------------------------------------------------------
# Dropout: no masks stored without it (Korthikanti et al. §4.1 count 1-byte masks)
# ---------------------------------------------------------------------------------------------


def test_without_dropout_no_masks_and_unfused_scores_keep_only_the_softmax():
    # Korthikanti's 34 sbh = 32 sbh of 2-byte tensors + 2 sbh of masks (attention output and MLP
    # output dropout); 5as^2b = softmax output (2) + mask (1) + dropout output (2): without
    # dropout only the softmax output (2as^2b) is the input of the PV product
    assert act(1, False, L.RECOMPUTE_NONE, dropout=False) == pytest.approx(
        S * B * H * (32 + 2 * A * S / H))
    assert act(T, True, L.RECOMPUTE_NONE, dropout=False) == pytest.approx(
        S * B * H / T * (32 + 2 * A * S / H))
    assert act(T, True, L.RECOMPUTE_SELECTIVE, dropout=False) == pytest.approx(32 * S * B * H / T)
    # full recomputation keeps the layer input only, dropout or not
    assert act(T, True, L.RECOMPUTE_FULL, dropout=False) == act(T, True, L.RECOMPUTE_FULL)


def test_dropout_off_shrinks_activations_and_memory_bound_time_in_every_backend(backend):
    from trainscape.backends import evaluate_blocks

    sys = system([NODE, FABRIC], gpus=8)
    mdl = gpt_model(layers=8, h=4096, heads=32)
    cfg = one_config(tp=8, sp=1)
    j1 = job(batch=8)
    j0 = job(batch=8)
    j0[L.JOB_DROPOUT] = 0
    on = evaluate_blocks(sys, mdl, j1, cfg, backend=backend)
    off = evaluate_blocks(sys, mdl, j0, cfg, backend=backend)
    s, h = 2048, 4096
    # FlashAttention, TP = SP = 8, no pipeline: 8 layers x one microbatch, 2 masks of sbh/t less
    per_layer = llm.layer_activation_bytes(s, 1, h, 32, 32, 128, 4 * h, False, 8, True,
                                           L.RECOMPUTE_NONE, True, 2.0, False, 2.0)
    assert off[L.OUT_MEM_ACTIVATIONS_GIB, 0] * llm.GIB == pytest.approx(8 * per_layer, rel=1e-9)
    assert (on[L.OUT_MEM_ACTIVATIONS_GIB, 0] - off[L.OUT_MEM_ACTIVATIONS_GIB, 0]) * llm.GIB \
        == pytest.approx(8 * 2 * s * h / 8, rel=1e-9)
    assert off[L.OUT_COMPUTE_S, 0] < on[L.OUT_COMPUTE_S, 0]


# ---------------------------------------------------------------------------------------------
# Uneven pipelines: the slowest stage sets the pace, the largest stage the memory
# ---------------------------------------------------------------------------------------------


def llama405b():
    mdl = np.zeros(L.N_MODEL)
    mdl[[L.MDL_LAYERS, L.MDL_HIDDEN, L.MDL_FFN_HIDDEN, L.MDL_HEADS, L.MDL_KV_HEADS,
         L.MDL_HEAD_DIM, L.MDL_VOCAB, L.MDL_SWIGLU]] = (126, 16384, 53248, 128, 8, 128, 128256, 1)
    return mdl


def test_126_layers_on_pp16_are_valid_and_fewer_layers_than_chunks_are_not(backend):
    from trainscape.backends import evaluate_blocks

    sys = system([NODE, FABRIC], gpus=128)
    j = job(seq=8192, batch=64)
    ok = evaluate_blocks(sys, llama405b(), j, one_config(tp=8, pp=16, schedule=L.SCHED_1F1B),
                         backend=backend)
    assert ok[L.OUT_STATUS, 0] in (L.STATUS_OK, L.STATUS_OUT_OF_MEMORY)
    # 16 x 8 = 128 chunks > 126 layers: impossible without edge layers ...
    cfg = one_config(tp=8, pp=16, vpp=8, schedule=L.SCHED_INTERLEAVED)
    bad = evaluate_blocks(sys, llama405b(), j, cfg, backend=backend)
    assert bad[L.OUT_STATUS, 0] == L.STATUS_INVALID_CONFIG
    assert llm.config_error(sys, llama405b(), j, cfg, 0) == 19
    # ... possible when the embedding and the loss count as a layer each (126 + 2 = 128)
    j[L.JOB_PIPELINE_EDGE_LAYERS] = 1
    assert llm.config_error(sys, llama405b(), j, cfg, 0) == 0


def test_uneven_split_costs_the_slowest_stage(backend):
    """126 layers on 16 stages: the busiest device holds ceil(126/16) = 8 layers, so the
    per-microbatch compute equals that of 128 layers on 16 stages (8 per device) without the
    two extra layers' FLOPs in the model FLOPs."""
    from trainscape.backends import evaluate_blocks

    sys = system([NODE, FABRIC], gpus=128)
    j = job(seq=8192, batch=64)
    cfg = one_config(tp=8, pp=16, schedule=L.SCHED_1F1B)
    m126 = llama405b()
    m128 = llama405b()
    m128[L.MDL_LAYERS] = 128
    a = evaluate_blocks(sys, m126, j, cfg, backend=backend)
    b = evaluate_blocks(sys, m128, j, cfg, backend=backend)
    assert a[L.OUT_COMPUTE_S, 0] == pytest.approx(b[L.OUT_COMPUTE_S, 0], rel=1e-12)
    assert a[L.OUT_BUBBLE_S, 0] == pytest.approx(b[L.OUT_BUBBLE_S, 0], rel=1e-12)
    assert a[L.OUT_MEMORY_GIB, 0] == pytest.approx(b[L.OUT_MEMORY_GIB, 0], rel=1e-12)


def test_edge_layers_move_the_slowest_stage_to_the_middle():
    """Llama 3 405B, PP16, 1F1B, one layer fewer on the first and last stage (arXiv 2407.21783
    §3.3.2): first 7 layers + embedding, middle 8, last 7 + output GEMM + cross-entropy. The
    slowest stage is a middle one: F + B + W of 8 plain layers."""
    sys = system([NODE, FABRIC], gpus=128)
    j = job(seq=8192, batch=64)
    j[L.JOB_PIPELINE_EDGE_LAYERS] = 1
    cfg = one_config(tp=8, pp=16, schedule=L.SCHED_1F1B)
    mdl = llama405b()
    row = llm.row_terms(sys, mdl, j, cfg, 0)
    assert row[llm.ROW_STAGE_LAYERS] == 8
    # no logits GEMM in the middle stage: W is the layers' GEMMs alone
    assert row[llm.ROW_W_COMPUTE] == row[llm.ROW_GEMM_F]
    j[L.JOB_PIPELINE_EDGE_LAYERS] = 0
    row0 = llm.row_terms(sys, mdl, j, cfg, 0)
    # without edge layers the last stage (8 layers + logits) is the slowest
    assert row0[llm.ROW_STAGE_LAYERS] == 8
    assert row0[llm.ROW_W_COMPUTE] > row0[llm.ROW_GEMM_F]
    assert row[llm.ROW_F_COMPUTE] < row0[llm.ROW_F_COMPUTE]


def test_memory_is_the_largest_stage_first_stage_under_1f1b():
    """1F1B: the first stage keeps p microbatches in flight, the last one (with the logits)
    only one (Megatron-LM schedules.py: warm-up p - rank - 1). Memory = the first stage's."""
    sys = system([NODE, FABRIC], gpus=16)
    mdl = gpt_model(layers=32, h=4096, heads=32)
    j = job(seq=2048, batch=64)
    cfg = one_config(tp=1, pp=16, dp=1, schedule=L.SCHED_1F1B)
    out = evaluate_batch(sys, mdl, j, cfg)
    act_layer = llm.layer_activation_bytes(2048, 1, 4096, 32, 32, 128, 4 * 4096, False, 1, False,
                                           L.RECOMPUTE_NONE, True, 2.0, True, 2.0)
    assert out[L.OUT_MEM_ACTIVATIONS_GIB, 0] * llm.GIB == pytest.approx(2 * 16 * act_layer,
                                                                         rel=1e-12)
    assert out[L.OUT_MEM_LOGITS_GIB, 0] == 0.0  # the first stage holds no logits
    params = (2 * llm.attention_params(4096, 32, 32, 128) / 1.0
              + 2 * llm.mlp_params(4096, 4 * 4096, False) + llm.embedding_params(51200, 4096))
    assert out[L.OUT_MEM_WEIGHTS_GIB, 0] * llm.GIB == pytest.approx(2 * params, rel=1e-12)


def test_interleaved_first_stage_holds_p_plus_p_minus_1_over_v(backend):
    """Interleaved, p = 4, v = 2, m = 8 (Megatron-LM warm-up 2(p-1) + (v-1)p chunk forwards,
    + 1): the first stage keeps p + (p-1)/v = 5.5 microbatches of its 8 layers, the last
    p - (p-1)/v = 2.5 plus the logits; the first one's memory is reported."""
    from trainscape.backends import evaluate_blocks

    sys = system([NODE, FABRIC], gpus=4)
    mdl = gpt_model(layers=32, h=4096, heads=32)
    j = job(seq=2048, batch=8)
    cfg = one_config(tp=1, pp=4, dp=1, vpp=2, schedule=L.SCHED_INTERLEAVED)
    out = evaluate_blocks(sys, mdl, j, cfg, backend=backend)
    act_layer = llm.layer_activation_bytes(2048, 1, 4096, 32, 32, 128, 4 * 4096, False, 1, False,
                                           L.RECOMPUTE_NONE, True, 2.0, True, 2.0)
    assert out[L.OUT_MEM_ACTIVATIONS_GIB, 0] * llm.GIB == pytest.approx(8 * 5.5 * act_layer,
                                                                         rel=1e-9)
    assert out[L.OUT_MEM_LOGITS_GIB, 0] == 0.0


def test_v_schedules_keep_embedding_loss_and_logits_on_the_first_device(backend):
    """ZB-V places the last chunk back on device 0 (Qi et al. §4): device 0 holds the
    embedding, the output layer and the logits, and 2k layers fewer."""
    from trainscape.backends import evaluate_blocks

    sys = system([NODE, FABRIC], gpus=4)
    mdl = gpt_model(layers=32, h=4096, heads=32)
    j = job(seq=2048, batch=16)
    j[L.JOB_PIPELINE_EDGE_LAYERS] = 1
    cfg = one_config(tp=1, pp=4, dp=1, schedule=L.SCHED_ZB_V)
    out = evaluate_blocks(sys, mdl, j, cfg, backend=backend)
    # (32 + 2) / 4 -> 9 on the busiest device; device 0: 9 - 2 = 7 layers + embedding + output
    first, middle, last, loss_first = llm.pipeline_stages(mdl, j, L.SCHED_ZB_V, 4, 1)
    assert (first, middle, last, loss_first) == (7, 9, 7, True)
    logits = llm.logits_memory_bytes(1, 2048, 51200, 1, 2.0, 4.0)
    weights_first = (7 * (llm.attention_params(4096, 32, 32, 128)
                          + llm.mlp_params(4096, 4 * 4096, False))
                     + 2 * llm.embedding_params(51200, 4096)) * 2.0
    weights_mid = 9 * (llm.attention_params(4096, 32, 32, 128)
                       + llm.mlp_params(4096, 4 * 4096, False)) * 2.0
    act_layer = llm.layer_activation_bytes(2048, 1, 4096, 32, 32, 128, 4 * 4096, False, 1, False,
                                           L.RECOMPUTE_NONE, True, 2.0, True, 2.0)
    per_param = 2.0 + 4.0 + 12.0  # weights, fp32 gradients, Adam states (ZeRO 0)
    first_total = weights_first / 2.0 * per_param + 7 * 4 * act_layer + logits
    mid_total = weights_mid / 2.0 * per_param + 9 * 4 * act_layer  # ZB-V: p in flight everywhere
    assert mid_total > first_total  # two more layers' activations outweigh embedding + logits
    assert out[L.OUT_MEM_LOGITS_GIB, 0] == 0.0
    assert out[L.OUT_MEM_WEIGHTS_GIB, 0] * llm.GIB == pytest.approx(weights_mid, rel=1e-12)
    assert out[L.OUT_MEM_ACTIVATIONS_GIB, 0] * llm.GIB == pytest.approx(9 * 4 * act_layer,
                                                                         rel=1e-9)
    # without edge layers every device holds 8: device 0 (embedding, output, logits) is largest
    j[L.JOB_PIPELINE_EDGE_LAYERS] = 0
    out = evaluate_blocks(sys, mdl, j, cfg, backend=backend)
    assert out[L.OUT_MEM_LOGITS_GIB, 0] * llm.GIB == pytest.approx(logits, rel=1e-12)
    weights0 = (8 * (llm.attention_params(4096, 32, 32, 128) + llm.mlp_params(4096, 4 * 4096, False))
                + 2 * llm.embedding_params(51200, 4096)) * 2.0
    assert out[L.OUT_MEM_WEIGHTS_GIB, 0] * llm.GIB == pytest.approx(weights0, rel=1e-12)


# ---------------------------------------------------------------------------------------------
# ZeRO-3 / FSDP: collectives per FSDP unit (Zhao et al., PyTorch FSDP, VLDB 2023 §3.2-3.3)
# ---------------------------------------------------------------------------------------------


def staged(sys, mdl, j, cfg):
    """The reference's row, order and recompute stages of configuration column 0."""
    row = llm.row_terms(sys, mdl, j, cfg, 0)
    ordt = llm.order_terms(sys, mdl, j, row, cfg[L.CFG_ORDER, 0])
    rect = llm.recompute_terms(sys, mdl, j, row, ordt, cfg[L.CFG_RECOMPUTE, 0])
    return row, ordt, rect


def fsdp_dp_comm(backend, sys, mdl, j, cfg):
    from trainscape.backends import evaluate_blocks

    out = evaluate_blocks(sys, mdl, j, cfg, backend=backend)
    assert out[L.OUT_STATUS, 0] in (L.STATUS_OK, L.STATUS_OUT_OF_MEMORY)
    return out[L.OUT_DP_COMM_S, 0]


@pytest.mark.parametrize("layers,pp,dp", [(1, 1, 64), (4, 4, 16)])
@pytest.mark.parametrize("dp_overlap", [0, 1])
def test_fsdp_with_one_unit_is_the_bulk_formula(backend, layers, pp, dp, dp_overlap):
    # one layer per device: one FSDP unit, whose collectives are ZeRO-1/2's bulk ones
    sys = system([NODE, FABRIC], gpus=64)
    mdl = gpt_model(layers=layers, h=256, heads=4, vocab=1024)
    j = job(seq=1024, batch=64)
    cfg = one_config(pp=pp, dp=dp, zero=3, dp_overlap=dp_overlap)
    row, ordt, rect = staged(sys, mdl, j, cfg)
    assert llm.fsdp_units(row) == 1.0
    rs, ag = llm.data_parallel_comm(sys, j, row, ordt, 1)
    assert llm.data_parallel_comm(sys, j, row, ordt, 3) == (rs, ag)
    window = rect[llm.REC_F_STAGE] + rect[llm.REC_B_STAGE] + rect[llm.REC_W_STAGE]
    bulk = row[llm.ROW_M] * llm.exposed(2.0 * ag + rs, window, dp_overlap == 1)
    # communication-bound: what is left after overlap exceeds one all-gather, so the exposed
    # first gather adds nothing here
    assert 2.0 * ag + rs - window > ag
    got = fsdp_dp_comm(backend, sys, mdl, j, cfg)
    if backend == "python":
        assert got == bulk
    else:
        assert got == pytest.approx(bulk, rel=1e-12)


@pytest.mark.parametrize("dp_overlap", [0, 1])
def test_fsdp_latency_dominated_pays_three_collective_latencies_per_unit(backend, dp_overlap):
    # a tiny model of 64 layers, FSDP over 64 ranks on 8 nodes: every unit's all-gather (x2)
    # and reduce-scatter pays the hierarchical collective's latency, (8-1) hops of 2 us in
    # the node plus (8-1) of 10 us across nodes; the bandwidth terms sum to the bulk ones
    sys = system([NODE, FABRIC], gpus=64)
    mdl = gpt_model(layers=64, h=256, heads=4, vocab=1024)
    j = job(seq=1024, batch=64)
    cfg = one_config(dp=64, zero=3, dp_overlap=dp_overlap)
    row, ordt, rect = staged(sys, mdl, j, cfg)
    units, m = llm.fsdp_units(row), row[llm.ROW_M]
    assert units == 64.0
    latency = 7 * 2e-6 + 7 * 10e-6
    rs, ag = llm.data_parallel_comm(sys, j, row, ordt, 1)
    rs_u, ag_u = llm.data_parallel_comm(sys, j, row, ordt, 3)
    # one unit's collective: the latency plus 1/units of the bulk collective's bandwidth term
    assert ag_u == pytest.approx(latency + (ag - latency) / units, rel=1e-9)
    assert rs_u == pytest.approx(latency + (rs - latency) / units, rel=1e-9)
    assert ag_u < 1.2 * latency  # latency-dominated
    got = fsdp_dp_comm(backend, sys, mdl, j, cfg)
    no_overlap = m * units * (2.0 * ag_u + rs_u)
    # units - 1 more units than the bulk collectives, three latencies each
    assert no_overlap - m * (2.0 * ag + rs) == pytest.approx(m * (units - 1) * 3 * latency,
                                                             rel=1e-9)
    window = rect[llm.REC_F_STAGE] + rect[llm.REC_B_STAGE] + rect[llm.REC_W_STAGE]
    want = no_overlap - m * window if dp_overlap else no_overlap
    assert got == pytest.approx(want, rel=1e-12)
    assert got > 5 * m * (2.0 * ag + rs)  # ~units x the bulk collectives' latency


@pytest.mark.parametrize("dp_overlap", [0, 1])
def test_fsdp_kept_unsharded_under_a_pipeline(backend, dp_overlap):
    # torchtitan's FSDP2 under PP (job.fsdp_pp_unsharded): a stage's weights stay gathered
    # from the first microbatch's forward to the last backward, its gradients accumulate
    # unsharded; one all-gather and one reduce-scatter per unit a step, not per microbatch
    from trainscape.backends import evaluate_blocks

    sys = system([NODE, FABRIC], gpus=64)
    mdl = gpt_model(layers=16, h=1024, heads=8, vocab=1024)
    plain = job(seq=1024, batch=64)
    keep = plain.copy()
    keep[L.JOB_FSDP_PP_UNSHARDED] = 1.0
    cfg = one_config(pp=4, dp=16, zero=3, dp_overlap=dp_overlap)
    row, ordt, rect = staged(sys, mdl, keep, cfg)
    units, m = llm.fsdp_units(row), row[llm.ROW_M]
    assert units == 4.0 and m == 4.0 and llm.fsdp_keeps_unsharded(keep, row)
    rs_u, ag_u = llm.data_parallel_comm(sys, keep, row, ordt, 3)
    window = rect[llm.REC_F_STAGE] + rect[llm.REC_B_STAGE] + rect[llm.REC_W_STAGE]
    want = llm.fsdp_exposed(ag_u, units * (ag_u + rs_u), window, dp_overlap == 1)
    assert fsdp_dp_comm(backend, sys, mdl, keep, cfg) == pytest.approx(want, rel=1e-12)
    assert fsdp_dp_comm(backend, sys, mdl, plain, cfg) == pytest.approx(
        m * llm.fsdp_exposed(ag_u, units * (2.0 * ag_u + rs_u), window, dp_overlap == 1),
        rel=1e-12)
    # memory: every unit gathered (16-bit) and the gradients unsharded (fp32) on the busiest
    # stage, instead of two units and a 1/16 gradient shard
    out_k = evaluate_blocks(sys, mdl, keep, cfg, backend=backend)[:, 0]
    out_p = evaluate_blocks(sys, mdl, plain, cfg, backend=backend)[:, 0]
    grads_p = out_p[L.OUT_MEM_GRADS_GIB]
    assert out_k[L.OUT_MEM_GRADS_GIB] == pytest.approx(16 * grads_p, rel=1e-12)
    gib = 2.0 ** 30
    stage_params = grads_p * gib * 16 / 4.0  # the gradient shard is 1/16 of them, fp32
    gathered_k = stage_params * 2.0
    gathered_p = llm.zero3_gather_bytes(keep, stage_params, stage_params, 4.0, False)
    assert (out_k[L.OUT_MEM_WEIGHTS_GIB] - out_p[L.OUT_MEM_WEIGHTS_GIB]) * gib == \
        pytest.approx(gathered_k - gathered_p, rel=1e-9)
    # without a pipeline nothing changes
    flat = one_config(pp=1, dp=64, zero=3, dp_overlap=dp_overlap)
    np.testing.assert_array_equal(evaluate_blocks(sys, mdl, keep, flat, backend=backend),
                                  evaluate_blocks(sys, mdl, plain, flat, backend=backend))


def test_fsdp_overlapped_never_hides_the_first_units_all_gather(backend):
    # compute-bound: 32 layers of h = 4096 on 8 ranks in one node. The bulk formula hid all
    # of it; per unit the first all-gather of every microbatch stays exposed
    sys = system([NODE, FABRIC], gpus=8)
    mdl = gpt_model(layers=32, h=4096, heads=32)
    j = job(seq=4096, batch=32)
    cfg = one_config(dp=8, mbs=2, zero=3, dp_overlap=1)
    row, ordt, rect = staged(sys, mdl, j, cfg)
    units, m = llm.fsdp_units(row), row[llm.ROW_M]
    assert (units, m) == (32.0, 2.0)
    rs_u, ag_u = llm.data_parallel_comm(sys, j, row, ordt, 3)
    window = rect[llm.REC_F_STAGE] + rect[llm.REC_B_STAGE] + rect[llm.REC_W_STAGE]
    assert units * (2.0 * ag_u + rs_u) < window
    got = fsdp_dp_comm(backend, sys, mdl, j, cfg)
    assert got > 0.0
    if backend == "python":
        assert got == m * ag_u
    else:
        assert got == pytest.approx(m * ag_u, rel=1e-12)


@pytest.mark.parametrize("layers,h,dp,batch", [(1, 256, 64, 64), (64, 256, 64, 64),
                                               (32, 4096, 8, 16), (32, 4096, 64, 64),
                                               (7, 1024, 16, 32)])
def test_fsdp_overlapped_is_at_least_one_unit_all_gather_per_microbatch(backend, layers, h, dp,
                                                                        batch):
    sys = system([NODE, FABRIC], gpus=dp)
    mdl = gpt_model(layers=layers, h=h, heads=h // 64, vocab=1024)
    j = job(seq=1024, batch=batch)
    cfg = one_config(dp=dp, zero=3, dp_overlap=1)
    row, ordt, _ = staged(sys, mdl, j, cfg)
    _, ag_u = llm.data_parallel_comm(sys, j, row, ordt, 3)
    off = fsdp_dp_comm(backend, sys, mdl, j, one_config(dp=dp, zero=3, dp_overlap=0))
    got = fsdp_dp_comm(backend, sys, mdl, j, cfg)
    assert got >= row[llm.ROW_M] * ag_u * (1.0 - 1e-12)
    assert got <= off


# The same configurations costed by the model before FSDP units (a42d9ed), with the stock GPU
# constants: dp_comm_s and step time, bit for bit, for every ZeRO stage below 3, with and without
# overlap. The 1F1B step times (gpt3, mixtral) then moved by exactly their pp_comm_s change when
# 1F1B's steady-state transfers became exposed (pipeline.p2p_steady_crossings_1f1b; gpt3 PP 16,
# m = 64: 30 -> 148 transfers; mixtral PP 4, m = 32: 6 -> 52), nothing else moving.
ZERO_BELOW_3_BEFORE = {
    "gpt3-175b-a100.toml": (
        dict(tp=4, cp=1, pp=16, dp=24, ep=1, mbs=1, vpp=1, schedule=1, recompute=0, sp=1,
             order=16, tp_overlap=1),
        [(0, 0, "0x1.16b58c0f4f718p-1", "0x1.72253e00c1d6bp+3"),
         (0, 1, "0x1.cf7d30dac068ap-2", "0x1.6f35cec6a2e2ep+3"),
         (1, 0, "0x1.a224f38eab96cp-2", "0x1.6c5a09adfb033p+3"),
         (1, 1, "0x1.150a3cea39bcbp-2", "0x1.67f133f8d7746p+3"),
         (2, 0, "0x1.a224f38eab96cp-2", "0x1.6c5a09adfb033p+3"),
         (2, 1, "0x1.150a3cea39bcbp-2", "0x1.67f133f8d7746p+3")]),
    "llama3-405b-2bldg.toml": (
        dict(tp=8, cp=1, pp=16, dp=128, ep=1, mbs=1, vpp=2, schedule=2, recompute=0, sp=1,
             order=4, tp_overlap=1),
        [(0, 0, "0x1.4296da3437493p-1", "0x1.7d96cf0a5864ap+2"),
         (0, 1, "0x1.ed52b156d63c2p-2", "0x1.74191ed93edf4p+2"),
         (1, 0, "0x1.e45e45cc72ae6p-2", "0x1.71863aac4d7c1p+2"),
         (1, 1, "0x1.ff23f4402216fp-3", "0x1.633975f18761ep+2"),
         (2, 0, "0x1.e45e45cc72ae6p-2", "0x1.71863aac4d7c1p+2"),
         (2, 1, "0x1.ff23f4402216fp-3", "0x1.633975f18761ep+2")]),
    "mixtral-8x7b-moe.toml": (
        dict(tp=2, cp=1, pp=4, dp=32, ep=8, mbs=1, vpp=1, schedule=1, recompute=1, sp=1,
             order=0, tp_overlap=1),
        [(0, 0, "0x1.d0031123938b5p-4", "0x1.59b36a4bdc054p+1"),
         (0, 1, "0x1.11599f2df9343p-4", "0x1.53be1ebc2f328p+1"),
         (1, 0, "0x1.5c510c5b62980p-4", "0x1.551fcbc59b568p+1"),
         (1, 1, "0x1.88ad535cdda76p-7", "0x1.4bc5f0b61d1f6p+1"),
         (2, 0, "0x1.5c510c5b62980p-4", "0x1.551fcbc59b568p+1"),
         (2, 1, "0x1.88ad535cdda76p-7", "0x1.4bc5f0b61d1f6p+1")]),
}


@pytest.mark.parametrize("scenario", sorted(ZERO_BELOW_3_BEFORE))
def test_zero_below_3_is_unchanged_by_fsdp_units(scenario):
    from pathlib import Path

    import trainscape
    from trainscape.spec import pack

    base, cases = ZERO_BELOW_3_BEFORE[scenario]
    # stock GPU constants: a refit of calibrated.toml must not move these pinned values
    sys, mdl, j = pack(trainscape.load(Path(__file__).resolve().parents[1] / "examples"
                                       / scenario, overrides=["cluster.gpu.calibrated=false"]))
    # the pins predate Megatron-Core's gradient buckets (model.llm.bucketed_exposed): without a
    # bucket limit the data-parallel terms are the ones they were taken from
    j[L.JOB_DP_BUCKET_MIN_PARAMS] = j[L.JOB_DP_BUCKET_PARAMS_PER_RANK] = 0.0
    for zero, dp_overlap, dp_hex, step_hex in cases:
        cfg = one_config(**base, zero=zero, dp_overlap=dp_overlap)
        out = evaluate_batch(sys, mdl, j, cfg)
        assert out[L.OUT_DP_COMM_S, 0] == float.fromhex(dp_hex), (zero, dp_overlap)
        assert out[L.OUT_STEP_TIME_S, 0] == float.fromhex(step_hex), (zero, dp_overlap)


# ---------------------------------------------------------------------------------------------
# Named-dot recompute policies (MaxText remat_policy through
# jax.checkpoint_policies.save_only_these_names): which GEMM outputs are kept, which re-run
# ---------------------------------------------------------------------------------------------

# Llama-3-8B-like layer: s, b, h, a, a_kv, d, ffn, t
LS, LB, LH, LA, LKV, LD, LFFN, LT = 8192, 1, 4096, 32, 8, 128, 14336, 8
NAMED = (L.RECOMPUTE_DOTS, L.RECOMPUTE_DOTS_NO_MLP_IN, L.RECOMPUTE_DOTS_ATTN,
         L.RECOMPUTE_QKV_PROJ)


def llama_layer_bytes(rc, sp=True):
    return llm.layer_activation_bytes(LS, LB, LH, LA, LKV, LD, LFFN, True, LT, sp, rc, True,
                                      2.0, False, 1.0)


def test_named_dot_policies_keep_their_tensors_llama_layer():
    sb = LS * LB
    inp = 2 * sb * LH  # layer input
    qkv = 2 * sb * (LA * LD + 2 * LKV * LD)  # query_proj, key_proj, value_proj
    out = 2 * sb * LH  # out_proj
    fc1 = 2 * sb * 2 * LFFN  # mlpwi_0 + mlpwi_1 (SwiGLU)
    fc2 = 2 * sb * LH  # mlpwo
    want = {
        L.RECOMPUTE_DOTS: inp + qkv + out + fc1 + fc2,
        L.RECOMPUTE_DOTS_NO_MLP_IN: inp + qkv + out + fc2,  # save_dot_except_mlpwi
        L.RECOMPUTE_DOTS_ATTN: inp + qkv + out,  # save_dot_except_mlp
        L.RECOMPUTE_QKV_PROJ: inp + qkv,  # save_qkv_proj
    }
    for rc, w in want.items():
        assert llama_layer_bytes(rc) == pytest.approx(w / LT, rel=1e-12), L.RECOMPUTE[rc]
    # without SP the layer input and the row-parallel outputs (out_proj, mlpwo) are replicated
    assert llama_layer_bytes(L.RECOMPUTE_DOTS_NO_MLP_IN, sp=False) == pytest.approx(
        inp + out + fc2 + qkv / LT, rel=1e-12)
    assert llama_layer_bytes(L.RECOMPUTE_QKV_PROJ, sp=False) == pytest.approx(
        inp + qkv / LT, rel=1e-12)
    # strictly fewer bytes down the list, all above full recomputation
    sizes = [llama_layer_bytes(rc) for rc in NAMED]
    assert sizes == sorted(sizes, reverse=True) and len(set(sizes)) == 4
    assert sizes[-1] > llama_layer_bytes(L.RECOMPUTE_FULL)
    # "dots" unchanged by the table: exactly the sum of its per-tensor functions
    assert llama_layer_bytes(L.RECOMPUTE_DOTS) == llm.dots_layer_bytes(
        llm.dots_attention_bytes(LS, LB, LH, LA, LKV, LD, LT, True, 2.0, 1.0, 1.0),
        llm.dots_mlp_bytes(LS, LB, LH, LFFN, True, LT, True, 2.0, 1.0, 1.0),
        LS, LB, LH, LT, True, 2.0)


def test_named_dot_policies_moe_drop_the_expert_outputs_keep_the_dispatched_input():
    s, b, h, a, effn, k, shared, t = 4096, 2, 2048, 16, 1024, 6, 2, 4
    sbh = s * b * h

    def moe(rc):
        return llm.moe_layer_activation_bytes(s, b, h, a, a, h // a, effn, k, shared, True, t,
                                              True, rc, True, 2.0, True, 1.0)

    copies = k + shared
    inp, qkv, out = 2 * sbh, 2 * 3 * sbh, 2 * sbh
    disp, fc1, fc2 = 2 * sbh, 2 * 2 * s * b * effn, 2 * sbh
    assert moe(L.RECOMPUTE_DOTS_NO_MLP_IN) == pytest.approx(
        (inp + qkv + out + copies * (disp + fc2)) / t, rel=1e-12)
    assert moe(L.RECOMPUTE_DOTS_ATTN) == pytest.approx(
        (inp + qkv + out + copies * disp) / t, rel=1e-12)
    assert moe(L.RECOMPUTE_QKV_PROJ) == pytest.approx((inp + qkv + copies * disp) / t,
                                                      rel=1e-12)
    assert moe(L.RECOMPUTE_DOTS) - moe(L.RECOMPUTE_DOTS_NO_MLP_IN) == pytest.approx(
        copies * fc1 / t, rel=1e-12)


def named_llama_model(layers=4):
    mdl = gpt_model(layers=layers, h=LH, heads=LA, vocab=32000)
    mdl[L.MDL_KV_HEADS] = LKV
    mdl[L.MDL_FFN_HIDDEN] = LFFN
    mdl[L.MDL_SWIGLU] = 1
    return mdl


def named_rec(sys, mdl, jb, rc, **kw):
    cfg = one_config(**kw)
    row = llm.row_terms(sys, mdl, jb, cfg, 0)
    ordt = llm.order_terms(sys, mdl, jb, row, cfg[L.CFG_ORDER, 0])
    return llm.recompute_terms(sys, mdl, jb, row, ordt, rc), row[llm.ROW_M]


def llama_gemm_case(tp, layers=4, seq=4096, batch=8):
    """A Llama-shaped stack on 8 GPUs at TP ``tp`` (SP with TP) and its per-microbatch forward
    GEMM times: ``(sys, mdl, job, config kwargs, t_attn, t_mlp)``."""
    sys = system([NODE, FABRIC], gpus=8)
    mdl = named_llama_model(layers)
    jb = job(seq=seq, batch=batch)
    kw = dict(tp=tp, dp=8 // tp, sp=1 if tp > 1 else 0)
    t_attn = layers * llm.linear_gemm_time(
        sys, llm.attention_projection_flops(1, seq, LH, LA, LKV, LD) / tp, 2.0)
    t_mlp = layers * llm.linear_gemm_time(sys, llm.mlp_flops(1, seq, LH, LFFN, True) / tp, 2.0)
    return sys, mdl, jb, kw, t_attn, t_mlp


@pytest.mark.parametrize("tp", [1, 4])
def test_named_dot_policies_rerun_the_dropped_gemms_llama(tp):
    # backward extra over "dots" = the dropped GEMMs' forward time: fc1 is 2 of SwiGLU's 3
    # matrices; the output projection is a d / (2 a d + 2 a_kv d) = 4096 / 10240 of the
    # attention projections' FLOPs
    layers, seq, batch = 4, 4096, 8
    sys, mdl, jb, kw, t_attn, t_mlp = llama_gemm_case(tp, layers, seq, batch)
    rec = {rc: named_rec(sys, mdl, jb, rc, **kw)[0] for rc in NAMED}
    m = named_rec(sys, mdl, jb, L.RECOMPUTE_DOTS, **kw)[1]
    # compute per microbatch (F + B + W, no communication)
    dots_b = rec[L.RECOMPUTE_DOTS][llm.REC_COMPUTE] / m
    out_share = 4096 / 10240
    extra = {L.RECOMPUTE_DOTS_NO_MLP_IN: 2 / 3 * t_mlp,
             L.RECOMPUTE_DOTS_ATTN: t_mlp,
             L.RECOMPUTE_QKV_PROJ: out_share * t_attn + t_mlp}
    for rc, want in extra.items():
        assert rec[rc][llm.REC_COMPUTE] / m - dots_b == pytest.approx(want, rel=1e-9)
        # forward and weight-gradient passes unchanged
        assert rec[rc][llm.REC_F_STAGE] == rec[L.RECOMPUTE_DOTS][llm.REC_F_STAGE]
        assert rec[rc][llm.REC_W_STAGE] == rec[L.RECOMPUTE_DOTS][llm.REC_W_STAGE]
    # hardware FLOPs: + the re-run GEMMs' FLOPs of every layer, every microbatch
    attn_f = layers * llm.attention_projection_flops(1, seq, LH, LA, LKV, LD)
    mlp_f = layers * llm.mlp_flops(1, seq, LH, LFFN, True)
    flops_extra = {L.RECOMPUTE_DOTS_NO_MLP_IN: 2 / 3 * mlp_f,
                   L.RECOMPUTE_DOTS_ATTN: mlp_f,
                   L.RECOMPUTE_QKV_PROJ: out_share * attn_f + mlp_f}
    for rc, want in flops_extra.items():
        got = rec[rc][llm.REC_HW_FLOPS] - rec[L.RECOMPUTE_DOTS][llm.REC_HW_FLOPS]
        assert got == pytest.approx(want * batch, rel=1e-9)
    # between "dots" (no GEMM re-run) and full recomputation (every GEMM, the pass overhead)
    full_b = named_rec(sys, mdl, jb, L.RECOMPUTE_FULL, **kw)[0][llm.REC_B_STAGE]
    assert rec[L.RECOMPUTE_DOTS][llm.REC_B_STAGE] < rec[L.RECOMPUTE_QKV_PROJ][llm.REC_B_STAGE] \
        < full_b


def test_named_dot_policies_in_every_backend(backend):
    from trainscape.backends import evaluate_blocks

    sys = system([NODE, FABRIC], gpus=8)
    mdl = named_llama_model(8)
    jb = job(seq=8192, batch=16)
    outs = {rc: evaluate_blocks(sys, mdl, jb, one_config(tp=8, sp=1, recompute=rc),
                                backend=backend)
            for rc in NAMED + (L.RECOMPUTE_FULL,)}
    mem = [outs[rc][L.OUT_MEM_ACTIVATIONS_GIB, 0] for rc in NAMED]
    step = [outs[rc][L.OUT_STEP_TIME_S, 0] for rc in NAMED]
    assert mem == sorted(mem, reverse=True) and len(set(mem)) == 4
    assert step == sorted(step) and len(set(step)) == 4
    assert step[-1] < outs[L.RECOMPUTE_FULL][L.OUT_STEP_TIME_S, 0]
    # TP with SP, no overlap: "dots" pays one pass forward and one backward; the named subsets
    # replay the collectives around their re-run GEMMs, a quarter pass each (fc1's input
    # all-gather; + fc2's reduce-scatter; + the output projection's reduce-scatter)
    tp_dots = outs[L.RECOMPUTE_DOTS][L.OUT_TP_COMM_S, 0]
    assert tp_dots > 0.0
    for rc, quarters in ((L.RECOMPUTE_DOTS_NO_MLP_IN, 1), (L.RECOMPUTE_DOTS_ATTN, 2),
                         (L.RECOMPUTE_QKV_PROJ, 3)):
        assert outs[rc][L.OUT_TP_COMM_S, 0] / tp_dots == pytest.approx(
            (2 + quarters / 4) / 2, rel=1e-12), L.RECOMPUTE[rc]


def test_named_dot_policies_tp_replay_without_sp():
    # two all-reduces per layer pass, after the output projection and after fc2: fc1's re-run
    # needs none, fc2's one, the output projection's the other
    assert llm.named_dots_tp_replay(L.RECOMPUTE_DOTS, False, True, 0.5) == 0.0
    assert llm.named_dots_tp_replay(L.RECOMPUTE_DOTS, True, True, 0.5) == 0.0
    assert llm.named_dots_tp_replay(L.RECOMPUTE_DOTS_NO_MLP_IN, False, True, 0.5) == 0.0
    assert llm.named_dots_tp_replay(L.RECOMPUTE_DOTS_ATTN, False, True, 0.5) == 0.5
    assert llm.named_dots_tp_replay(L.RECOMPUTE_QKV_PROJ, False, True, 0.5) == 1.0
    sys = system([NODE, FABRIC], gpus=8)
    mdl = named_llama_model(4)
    jb = job(seq=4096, batch=8)
    rec = {rc: named_rec(sys, mdl, jb, rc, tp=8, sp=0)[0] for rc in NAMED}
    tp_dots = rec[L.RECOMPUTE_DOTS][llm.REC_TP_COMM]
    assert tp_dots > 0.0
    for rc, halves in ((L.RECOMPUTE_DOTS_NO_MLP_IN, 0), (L.RECOMPUTE_DOTS_ATTN, 1),
                       (L.RECOMPUTE_QKV_PROJ, 2)):
        assert rec[rc][llm.REC_TP_COMM] / tp_dots == pytest.approx((2 + halves / 2) / 2,
                                                                    rel=1e-12)


def test_named_dot_policies_are_appended_recompute_values():
    from trainscape.spec.pack import encode_value

    assert L.RECOMPUTE[:4] == ("none", "selective", "full", "dots")  # codes keep their values
    for name in ("dots_no_mlp_in", "dots_attn", "qkv_proj", "op_selective"):
        assert encode_value("recompute", name) == L.RECOMPUTE.index(name) > L.RECOMPUTE_DOTS
    q, kv = 4096.0, 1024.0
    assert llm.named_dots_policy(L.RECOMPUTE_DOTS, q, kv, True) == (1.0, 1.0, 1.0, 1.0)
    assert llm.named_dots_policy(L.RECOMPUTE_DOTS_NO_MLP_IN, q, kv, True) == (1.0, 1.0, 0.0, 1.0)
    assert llm.named_dots_policy(L.RECOMPUTE_DOTS_ATTN, q, kv, True) == (1.0, 1.0, 0.0, 0.0)
    assert llm.named_dots_policy(L.RECOMPUTE_QKV_PROJ, q, kv, True) == (1.0, 0.0, 0.0, 0.0)


# ---------------------------------------------------------------------------------------------
# torchtitan's per-op selective activation checkpointing ("op_selective")
# ---------------------------------------------------------------------------------------------


def test_op_selective_drops_every_second_matmul_of_a_llama_block():
    # matmuls in order wq, wk, wv, wo, w1, w3, w2; the even ones (wk, wo, w3) are not saved:
    # Q and V of Q/K/V (4096 + 1024 of 4096 + 2 x 1024), w1 of SwiGLU's fc1, all of fc2
    q, kv = 4096.0, 1024.0
    assert llm.named_dots_policy(L.RECOMPUTE_OP_SELECTIVE, q, kv, True) == (5 / 6, 0.0, 0.5, 1.0)
    # a GeLU MLP: w1 is the 5th matmul (kept), w2's output is read by no backward
    assert llm.named_dots_policy(L.RECOMPUTE_OP_SELECTIVE, q, kv, False) == (5 / 6, 0.0, 1.0,
                                                                             1.0)
    # the re-run share of the attention projections: wk (a_kv d) and wo (a d) of 2 a d + 2 a_kv d
    assert llm.named_dots_gemm_redo(1.0, 0.0, q, kv, True, L.RECOMPUTE_OP_SELECTIVE) \
        == pytest.approx((kv + q) / (2 * q + 2 * kv), rel=1e-15)
    # of the SwiGLU MLP: w3, one of three matrices
    assert llm.named_dots_gemm_redo(0.0, 1.0, q, kv, True, L.RECOMPUTE_OP_SELECTIVE) \
        == pytest.approx(1 / 3, rel=1e-15)
    assert llm.named_dots_core_saved(L.RECOMPUTE_OP_SELECTIVE, True)
    assert not llm.named_dots_core_saved(L.RECOMPUTE_OP_SELECTIVE, False)  # unfused: re-run
    assert not llm.named_dots_core_saved(L.RECOMPUTE_DOTS, True)
    # TP with SP: the all-gathers in front of wk and w3 are replayed, the reduce-scatters saved
    assert llm.named_dots_tp_replay(L.RECOMPUTE_OP_SELECTIVE, True, True, 0.5) == 0.5
    assert llm.named_dots_tp_replay(L.RECOMPUTE_OP_SELECTIVE, True, False, 0.5) == 0.25
    assert llm.named_dots_tp_replay(L.RECOMPUTE_OP_SELECTIVE, False, True, 0.5) == 0.5


def test_op_selective_layer_memory_by_hand():
    # Llama 3 8B shape, s 8192, b 1, bf16, TP 8 with SP: the block input, Q and V, the attention
    # output and its fp32 log-sum-exp, w1's output, fc2's output and the output projection's
    # reduce-scattered output -- each split over the 8 ranks
    s, b, h, a, kv, d, ffn, t = LS, LB, LH, LA, LKV, LD, LFFN, LT
    want = 2 * s * b * (h + (a * d + kv * d) + a * d + ffn + h + h) + 4 * s * b * a
    assert llama_layer_bytes(L.RECOMPUTE_OP_SELECTIVE) == pytest.approx(want / t, rel=1e-12)
    # without TP no reduce-scatter; without a fused attention kernel the core is re-run and
    # its output not kept
    one = llm.layer_activation_bytes(s, b, h, a, kv, d, ffn, True, 1.0, False,
                                     L.RECOMPUTE_OP_SELECTIVE, True, 2.0, False, 1.0)
    assert one == pytest.approx(2 * s * b * (h + (a * d + kv * d) + a * d + ffn + h)
                                + 4 * s * b * a, rel=1e-12)
    unfused = llm.layer_activation_bytes(s, b, h, a, kv, d, ffn, True, 1.0, False,
                                         L.RECOMPUTE_OP_SELECTIVE, False, 2.0, False, 1.0)
    assert unfused == pytest.approx(2 * s * b * (h + (a * d + kv * d) + ffn + h), rel=1e-12)
    # between "dots" (every GEMM output) and full recomputation
    assert llama_layer_bytes(L.RECOMPUTE_FULL) < llama_layer_bytes(L.RECOMPUTE_OP_SELECTIVE) \
        < llama_layer_bytes(L.RECOMPUTE_DOTS)


@pytest.mark.parametrize("tp", [1, 4])
def test_op_selective_reruns_wk_wo_w3_but_not_the_attention(tp):
    layers, seq, batch = 4, 4096, 8
    sys, mdl, jb, kw, t_attn, t_mlp = llama_gemm_case(tp, layers, seq, batch)
    op, m = named_rec(sys, mdl, jb, L.RECOMPUTE_OP_SELECTIVE, **kw)
    dots = named_rec(sys, mdl, jb, L.RECOMPUTE_DOTS, **kw)[0]
    row = llm.row_terms(sys, mdl, jb, one_config(**kw), 0)
    q, kv = LA * LD, LKV * LD
    # over "dots": + wk, wo and w3 forward, - the attention core "dots" re-runs
    want = (kv + q) / (2 * q + 2 * kv) * t_attn + t_mlp / 3 - row[llm.ROW_CORE_F]
    assert (op[llm.REC_COMPUTE] - dots[llm.REC_COMPUTE]) / m == pytest.approx(want, rel=1e-9)
    assert op[llm.REC_F_STAGE] == dots[llm.REC_F_STAGE]
    # hardware FLOPs: the re-run GEMMs, no attention core
    attn_f = layers * llm.attention_projection_flops(1, seq, LH, LA, LKV, LD)
    mlp_f = layers * llm.mlp_flops(1, seq, LH, LFFN, True)
    none = named_rec(sys, mdl, jb, L.RECOMPUTE_NONE, **kw)[0]
    assert op[llm.REC_HW_FLOPS] - none[llm.REC_HW_FLOPS] == pytest.approx(
        ((kv + q) / (2 * q + 2 * kv) * attn_f + mlp_f / 3) * batch, rel=1e-9)


def test_op_selective_in_every_backend(backend):
    from trainscape.backends import evaluate_blocks

    sys = system([NODE, FABRIC], gpus=8)
    mdl = named_llama_model(8)
    jb = job(seq=8192, batch=16)
    for kw in (dict(tp=8, sp=1), dict(tp=1, dp=8, sp=0)):
        cfg = one_config(recompute=L.RECOMPUTE_OP_SELECTIVE, **kw)
        got = evaluate_blocks(sys, mdl, jb, cfg, backend=backend)
        want = evaluate_batch(sys, mdl, jb, cfg)
        assert got[L.OUT_STATUS, 0] == L.STATUS_OK
        np.testing.assert_allclose(got, want, rtol=1e-12, atol=0.0)
        dots = evaluate_blocks(sys, mdl, jb, one_config(recompute=L.RECOMPUTE_DOTS, **kw),
                               backend=backend)
        assert got[L.OUT_MEM_ACTIVATIONS_GIB, 0] < dots[L.OUT_MEM_ACTIVATIONS_GIB, 0]


# ---------------------------------------------------------------------------------------------
# MoE parallel folding (Liu et al. 2025, arXiv 2504.14960; Megatron-Core expert TP 1)
# ---------------------------------------------------------------------------------------------


def qwen3_like(layers=8):
    """Qwen3-235B-A22B's MoE shape (h 4096, 64 heads of 128, 4 KV heads, 128 experts, top-8,
    expert FFN 1536, SwiGLU, every layer MoE), ``layers`` deep."""
    mdl = gpt_model(layers=layers, h=4096, heads=64, vocab=151936)
    mdl[L.MDL_KV_HEADS] = 4
    mdl[L.MDL_HEAD_DIM] = 128
    mdl[L.MDL_SWIGLU] = 1
    mdl[L.MDL_EXPERTS] = 128
    mdl[L.MDL_TOP_K] = 8
    mdl[L.MDL_EXPERT_FFN_HIDDEN] = 1536
    mdl[L.MDL_MOE_EVERY] = 1
    return mdl


def test_folding_is_valid_only_when_ep_divides_tp_times_dp():
    sys = system([NODE, FABRIC], gpus=256)
    j = job(seq=4096, batch=512)
    mdl = qwen3_like()
    # the NeMo Qwen3-235B-A22B layout: TP 2, PP 8, DP 16, EP 32 (ETP 1)
    assert llm.config_error(sys, mdl, j, one_config(tp=2, pp=8, dp=16, ep=32), 0) == 0
    assert llm.config_error(sys, mdl, j, one_config(tp=2, pp=8, dp=16, ep=64), 0) == 20
    assert llm.config_error_message(20) == (
        "ep", "must divide dp, or tp*dp with expert TP 1 (MoE parallel folding)")
    assert not llm.moe_folded(2.0, 16.0, 16.0) and llm.moe_folded(2.0, 16.0, 32.0)


def test_folded_qwen3_layout_whole_experts_per_gpu_and_expert_dp_degree():
    sys = system([NODE, FABRIC], gpus=256)
    j = job(seq=4096, batch=512)
    mdl = qwen3_like(layers=16)  # 2 MoE layers per stage
    expert_mlp = 3 * 4096 * 1536  # SwiGLU: gate, up, down
    folded = llm.row_terms(sys, mdl, j, one_config(tp=2, pp=8, dp=16, ep=32), 0)
    # 128 / 32 = 4 whole experts per MoE layer, not split over TP; expert DP 2 * 16 / 32 = 1
    assert folded[llm.ROW_EXPERT_PARAMS] == 2 * 4 * expert_mlp
    assert folded[llm.ROW_DPX] == 1.0
    # unfolded (ep | dp): 8 experts per layer at the attention's TP 2, expert DP 16 / 16
    plain = llm.row_terms(sys, mdl, j, one_config(tp=2, pp=8, dp=16, ep=16), 0)
    assert plain[llm.ROW_EXPERT_PARAMS] == 2 * 8 * expert_mlp / 2
    # TP 4, DP 8, EP 16: expert DP 4 * 8 / 16 = 2 (times CP 2 for the gradient reduction)
    sys128 = system([NODE, FABRIC], gpus=128)
    row = llm.row_terms(sys128, mdl, j, one_config(tp=4, cp=2, pp=2, dp=8, ep=16), 0)
    assert row[llm.ROW_DPX] == 2.0
    assert row[llm.ROW_EXPERT_PARAMS] == 8 * 8 * expert_mlp


def test_folded_ep_group_spans_the_tp_and_dp_ranks():
    # TP inner (stride 1), DP stride 2: EP 32 = the 2 TP ranks x 16 DP ranks, no expert DP left
    assert llm.folded_ep_groups(2.0, 1.0, 16.0, 2.0, 32.0) == (2.0, 1.0, 16.0, 2.0,
                                                                1.0, 2.0, 1.0, 32.0)
    # TP 4 inner, DP 8, EP 16: the 4 TP ranks x 4 DP ranks; expert DP: the other 2 DP ranks
    assert llm.folded_ep_groups(4.0, 1.0, 8.0, 4.0, 16.0) == (4.0, 1.0, 4.0, 4.0,
                                                               1.0, 4.0, 2.0, 16.0)
    # DP inner: TP 4 at stride 8 (outer), DP 8 inner, EP 16: 8 DP ranks x 2 TP ranks
    assert llm.folded_ep_groups(4.0, 8.0, 8.0, 1.0, 16.0) == (8.0, 1.0, 2.0, 8.0,
                                                               1.0, 8.0, 2.0, 16.0)
    # gcd split: TP 4, DP 3, EP 6 -> 2 TP ranks x 3 DP ranks; expert DP 2 over TP
    assert llm.folded_ep_groups(4.0, 1.0, 3.0, 4.0, 6.0) == (2.0, 1.0, 3.0, 4.0,
                                                              2.0, 2.0, 1.0, 12.0)


@pytest.mark.parametrize("sp", [1, 0])
def test_folded_all_to_all_over_32_ranks_of_tp_and_dp(backend, sp):
    from trainscape.backends import evaluate_blocks

    sys = system([NODE, FABRIC], gpus=256)
    seq, batch = 4096, 512
    j = job(seq=seq, batch=batch)
    # order 0 (tp-cp-ep-dp-pp): the stage's 32 TP x DP ranks are consecutive, 4 nodes of 8
    cfg = one_config(tp=2, pp=8, dp=16, ep=32, mbs=1, sp=sp)
    out = evaluate_blocks(sys, qwen3_like(layers=8), j, cfg, backend=backend)
    assert out[L.OUT_STATUS, 0] != L.STATUS_INVALID_CONFIG
    # each rank dispatches its b s / tp tokens, top-8 copies of h = 4096, BF16 both ways
    nbytes = seq / 2 * 8 * 4096 * 2.0
    a2a = 10e-6 + max(7 / 32 * nbytes / (400e9 * 0.9), 24 / 32 * nbytes / (50e9 * 0.8))
    pair = 2 * a2a
    if not sp:
        # without SP every TP rank holds all tokens: the combined output is all-gathered over
        # TP (2 ranks in a node, ring)
        pair += 2e-6 + 0.5 * seq * 4096 * 2.0 / (400e9 * 0.9)
    microbatches = batch / 16
    # one MoE layer per stage; forward and backward each one pair
    assert out[L.OUT_EP_COMM_S, 0] == pytest.approx(microbatches * 2 * pair, rel=1e-9)


def test_a_fused_cross_entropy_keeps_no_fp32_copy_of_the_logits(backend):
    """Logits memory of the last stage, by hand: b s V / t logits in bf16 (2 bytes) plus, with
    Megatron's vocabulary-parallel cross-entropy, their fp32 copy (4 bytes): 6 bytes a logit;
    with a fused kernel (flash-attn's cross-entropy) the gradient it writes beside them in bf16
    (2 bytes): 4 bytes a logit. GPT-like model, vocab 51200, seq 2048, mbs 2, TP 2, PP 1."""
    from trainscape.backends import evaluate_blocks
    from trainscape.spec.pack import logits_extra_bytes

    assert logits_extra_bytes("fp32", 2.0) == 4.0
    assert logits_extra_bytes("fused", 2.0) == 2.0
    # PyTorch's uncompiled F.cross_entropy(logits.float()): the fp32 copy and the fp32
    # log-softmax it saves, 8 bytes a logit beside the bf16 logits: 10 in all
    assert logits_extra_bytes("upcast", 2.0) == 8.0
    sys, mdl = system([NODE], gpus=2), gpt_model(layers=4)
    cfg = one_config(tp=2, pp=1, dp=1, mbs=2)
    gib = {}
    for extra in (4.0, 2.0, 8.0):
        j = job(seq=2048, batch=2)
        j[L.JOB_LOGITS_EXTRA_BYTES] = extra
        out = evaluate_blocks(sys, mdl, j, cfg, backend=backend)
        gib[extra] = out[L.OUT_MEM_LOGITS_GIB, 0]
    logits = 2 * 2048 * 51200 / 2
    assert gib[4.0] == pytest.approx(logits * 6 / 2**30, rel=1e-12)
    assert gib[2.0] == pytest.approx(logits * 4 / 2**30, rel=1e-12)
    assert gib[8.0] == pytest.approx(logits * 10 / 2**30, rel=1e-12)


_LLAMA = str(__import__("pathlib").Path(__file__).resolve().parents[1]
             / "examples" / "llama3-405b-2bldg.toml")
_MIXTRAL = str(__import__("pathlib").Path(__file__).resolve().parents[1]
               / "examples" / "mixtral-8x7b-moe.toml")


def test_cost_and_energy_columns_known_answer():
    """Cost per step = step x GPUs x price per GPU-hour / 3600; tokens per dollar = tokens per
    step / that; tokens per joule = tokens per step / (step x GPUs x power). For the Llama 3
    example on 16,384 H100 at the preset's $12.29 per GPU-hour and 700 W: closed forms from the
    result's own step time (the model's time is tested elsewhere), and the per-tier cost adds
    to the GPU's price."""
    import trainscape

    sc = trainscape.load(_LLAMA)
    r = trainscape.evaluate(sc, backend="python")
    step, gpus, tokens = r.step_time_s, 16384, 2048 * 8192
    assert r.cost_per_step_usd == pytest.approx(step * gpus * 12.29 / 3600, rel=1e-12)
    assert r.tokens_per_usd == pytest.approx(tokens / (step * gpus * 12.29 / 3600), rel=1e-12)
    assert r.tokens_per_joule == pytest.approx(tokens / (step * gpus * 700.0), rel=1e-12)
    tiered = trainscape.load(_LLAMA,
                             overrides=["cluster.tiers[1].cost_per_gpu_hour_usd=0.71",
                                        "cluster.gpu.power_w=0"])
    r2 = trainscape.evaluate(tiered, backend="python")
    assert r2.step_time_s == step
    assert r2.cost_per_step_usd == pytest.approx(step * gpus * 13.0 / 3600, rel=1e-12)
    assert r2.tokens_per_joule == 0.0  # no power given: 0, never an infinity


def test_no_price_gives_zero_cost_columns():
    import trainscape

    sc = trainscape.load(_LLAMA,
                         overrides=["cluster.gpu.price_per_hour_usd=0"])
    r = trainscape.evaluate(sc, backend="python")
    assert r.cost_per_step_usd == 0.0 and r.tokens_per_usd == 0.0


def test_offload_optimizer_known_answer():
    """ZeRO-Offload of the Mixtral example (DGX H100 preset: PCIe Gen5 64 GB/s, 76.8 GB/s of
    host DRAM per GPU): the GPU keeps no optimizer state, and the optimizer term becomes
    down + cpu + up with down = P x grad bytes / link (hidden behind the backward when it fits
    there: max(0, down - window)), cpu = P x optimizer traffic / host memory bandwidth,
    up = P x param bytes / link, for the P parameters whose step this GPU runs. P is read from
    the GPU step the offload replaces: optimizer_s = P x traffic / (HBM bandwidth x memory
    efficiency); the rest of the step is unchanged."""
    import trainscape
    from trainscape.spec import pack

    base = trainscape.load(_MIXTRAL, overrides=["config.dp_overlap=false"])
    off = trainscape.load(_MIXTRAL, overrides=["config.dp_overlap=false",
                                           "job.offload_optimizer=true"])
    a = trainscape.evaluate(base, backend="python")
    b = trainscape.evaluate(off, backend="python")
    sys_, _, job = pack(base)
    traffic = job[L.JOB_OPTIMIZER_TRAFFIC_BYTES]
    p = a.optimizer_s * sys_[L.SYS_HBM_BANDWIDTH] * sys_[L.SYS_MEMORY_EFFICIENCY] / traffic
    down = p * job[L.JOB_GRAD_COMM_BYTES] / 64e9
    up = p * job[L.JOB_PARAM_BYTES] / 64e9
    cpu = p * traffic / 76.8e9
    assert b.optimizer_s == pytest.approx(down + cpu + up, rel=1e-9)  # no overlap here
    assert b.mem_optimizer_gib == 0.0 and a.mem_optimizer_gib > 0.0
    assert b.step_time_s - b.optimizer_s == pytest.approx(a.step_time_s - a.optimizer_s,
                                                         rel=1e-12)
    assert b.memory_gib < a.memory_gib


def test_offload_needs_the_host_bandwidths():
    import trainscape
    from trainscape.spec import ScenarioError

    with pytest.raises(ScenarioError) as e:
        trainscape.load(_LLAMA, overrides=["job.offload_optimizer=true"])
    assert str(e.value).startswith("cluster.host_to_device_GBps")


def test_fp8_sequence_parallel_gathers_move_the_fp8_copy(backend):
    # TE's LayerNormLinear gathers the FP8 ln_out and the backward the FP8 grad_output; the
    # reduce-scatters stay 16-bit: a TP 8 pass of an FP8 job moves 2 x 1 + 2 x 2 bytes per
    # element where a BF16 job moves 4 x 2
    from trainscape.backends import evaluate_blocks

    sys = system([NODE, FABRIC], gpus=8)
    mdl = gpt_model(layers=4, h=4096, heads=32)
    cfg = one_config(tp=8, sp=1)
    bf16, fp8 = job(batch=8), job(batch=8)
    fp8[L.JOB_TP_GATHER_BYTES] = 1.0
    assert llm.tp_gather_bytes(bf16) == 2.0 and llm.tp_gather_bytes(fp8) == 1.0
    assert llm.tp_gather_share(bf16) == 0.5 and llm.tp_gather_share(fp8) == pytest.approx(1 / 3)
    # never wider than the activation traffic
    wide = job(batch=8)
    wide[L.JOB_TP_GATHER_BYTES] = 4.0
    assert llm.tp_gather_bytes(wide) == 2.0
    out_bf16 = evaluate_blocks(sys, mdl, bf16, cfg, backend=backend)
    out_fp8 = evaluate_blocks(sys, mdl, fp8, cfg, backend=backend)
    elems = 1 * 2048 * 4096
    ag1 = C.all_gather_time(sys, elems * 1.0, 8, 1, 1, 1, 1, 1)
    ag2 = C.all_gather_time(sys, elems * 2.0, 8, 1, 1, 1, 1, 1)
    passes = 8 * 2 * 4  # microbatches x (forward, backward) x layers
    assert out_bf16[L.OUT_TP_COMM_S, 0] == pytest.approx(passes * 4 * ag2, rel=1e-12)
    assert out_fp8[L.OUT_TP_COMM_S, 0] == pytest.approx(passes * 2 * (ag1 + ag2), rel=1e-12)
    # without SP the all-reduces stay in the activation dtype
    no_sp = one_config(tp=8)
    assert evaluate_blocks(sys, mdl, fp8, no_sp, backend=backend)[L.OUT_TP_COMM_S, 0] == \
        pytest.approx(evaluate_blocks(sys, mdl, bf16, no_sp, backend=backend)[L.OUT_TP_COMM_S, 0],
                      rel=1e-12)


def test_dim1_tp_collectives_copy_their_buffer_once(backend):
    # PyTorch's functional collectives gather and scatter along dim 0: a Shard(1) sequence
    # (torchtitan's [batch, seq, hidden] TP) is concatenated after each all-gather and before
    # each reduce-scatter, one read and one write of the whole buffer per collective
    from trainscape.backends import evaluate_blocks

    sys = system([NODE, FABRIC], gpus=8)
    mdl = gpt_model(layers=4, h=4096, heads=32)
    plain, copy = job(batch=8), job(batch=8)
    copy[L.JOB_TP_SEQUENCE_COPY] = 1.0
    elems = 1 * 2048 * 4096
    m, layers = 8, 4

    def tp_s(j, **kw):
        return evaluate_blocks(sys, mdl, j, one_config(tp=8, sp=1, **kw),
                               backend=backend)[L.OUT_TP_COMM_S, 0]

    # a pass: 2 all-gathers + 2 reduce-scatters of 2-byte elements, each copied (2 x bytes)
    pass_copy = llm.streaming_time(sys, 2 * 4 * 2 * elems)
    assert tp_s(copy) - tp_s(plain) == pytest.approx(m * 2 * layers * pass_copy, rel=1e-9)
    # full recompute re-runs the forward's collectives, and their copies
    full = {"recompute": L.RECOMPUTE_FULL}
    assert tp_s(copy, **full) - tp_s(plain, **full) == \
        pytest.approx(m * 3 * layers * pass_copy, rel=1e-9)
    # AsyncTP fuses all but the backward's two reduce-scatters: their copies alone remain
    ov = {"tp_overlap": 1}
    assert tp_s(copy, **ov) - tp_s(plain, **ov) == \
        pytest.approx(m * layers * llm.streaming_time(sys, 2 * 2 * 2 * elems), rel=1e-9)
    # FP8 gathers copy their FP8 bytes: 2 x 1 + 2 x 2 bytes an element, twice
    copy8, plain8 = job(batch=8), job(batch=8)
    copy8[L.JOB_TP_SEQUENCE_COPY] = 1.0
    copy8[L.JOB_TP_GATHER_BYTES] = plain8[L.JOB_TP_GATHER_BYTES] = 1.0
    assert tp_s(copy8) - tp_s(plain8) == \
        pytest.approx(m * 2 * layers * llm.streaming_time(sys, 2 * (2 * 1 + 2 * 2) * elems),
                      rel=1e-9)
    # all-reduces (no SP) and Megatron's [seq, batch, hidden] collectives copy nothing
    no_sp = one_config(tp=8)
    assert evaluate_blocks(sys, mdl, copy, no_sp, backend=backend)[L.OUT_TP_COMM_S, 0] == \
        evaluate_blocks(sys, mdl, plain, no_sp, backend=backend)[L.OUT_TP_COMM_S, 0]
    assert llm.tp_sequence_copy_bytes(plain, 1.0, 1.0, True, 8.0, False) == (0.0, 0.0)
    assert llm.tp_sequence_copy_bytes(copy, 1.0, 1.0, True, 1.0, False) == (0.0, 0.0)


def test_pack_tp_sequence_copy_follows_the_stack():
    from trainscape.spec.pack import tp_sequence_copy

    assert tp_sequence_copy("pytorch-fsdp") == 1.0
    for stack in ("megatron-core", "megatron-lm", "jax-xla"):
        assert tp_sequence_copy(stack) == 0.0
    # a job that says so overrides its stack either way
    assert tp_sequence_copy("pytorch-fsdp", False) == 0.0
    assert tp_sequence_copy("megatron-core", True) == 1.0


def test_tp_sequence_copy_is_a_scenario_setting():
    import trainscape
    from trainscape.spec import ScenarioError, pack

    base = ["job.stack=pytorch-fsdp", "config.tp=8", "config.sp=true"]
    on = trainscape.load(_LLAMA, overrides=base)
    off = trainscape.load(_LLAMA, overrides=base + ["job.tp_sequence_copy=false"])
    assert pack(on)[2][L.JOB_TP_SEQUENCE_COPY] == 1.0
    assert pack(off)[2][L.JOB_TP_SEQUENCE_COPY] == 0.0
    # the copies cost TP time, nothing else
    a, b = trainscape.evaluate(on), trainscape.evaluate(off)
    assert a.tp_comm_s > b.tp_comm_s and a.compute_s == b.compute_s
    with pytest.raises(ScenarioError) as e:
        trainscape.load(_LLAMA, overrides=["job.tp_sequence_copy=sometimes"])
    assert str(e.value).startswith("job.tp_sequence_copy")


@pytest.mark.parametrize("shared", [0, 1])
def test_grouped_expert_gemm_pays_one_kernel_per_projection(backend, shared):
    # Transformer Engine's GroupedLinear runs a GEMM per local expert and projection, each with
    # the linear curve's fixed cost (half / (peak x eff_max) a GEMM); a grouped kernel
    # (AutoModel's grouped_gemm, torchtitan's torch._grouped_mm) pays it once per projection
    from trainscape.backends import evaluate_blocks

    sys = system([NODE, FABRIC], gpus=64)
    mdl = moe_model()
    mdl[L.MDL_SHARED_EXPERTS] = shared
    per_expert, grouped = job(batch=128), job(batch=128)
    grouped[L.JOB_GROUPED_EXPERT_GEMM] = 1.0
    fixed = 1e9 / (1e15 * 0.8)  # linear_half_flops / (peak x linear_efficiency_max)
    m, layers = 2, 4  # 128 sequences over DP 64

    def compute(j, ep=1):
        out = evaluate_blocks(sys, mdl, j, one_config(dp=64, ep=ep), backend=backend)
        assert out[L.OUT_STATUS, 0] != L.STATUS_INVALID_CONFIG
        return out[L.OUT_COMPUTE_S, 0]

    # EP 1: 64 local experts, 2 x (64 + shared) GEMMs against 2 x (1 + shared); the forward,
    # input-gradient and weight-gradient passes each run the experts' GEMMs once
    kernels = 2 * (64 + shared) - 2 * (1 + shared)
    assert compute(per_expert) - compute(grouped) == \
        pytest.approx(m * 3 * layers * kernels * fixed, rel=1e-9)
    # EP 64: one local expert, the same two GEMMs (plus the shared experts') either way
    assert compute(per_expert, ep=64) == pytest.approx(compute(grouped, ep=64), rel=1e-12)
    assert llm.expert_gemm_count(per_expert, 64.0, shared) == 2 * (64 + shared)
    assert llm.expert_gemm_count(grouped, 64.0, shared) == 2 * (1 + shared)


def test_pack_expert_gemm_follows_the_stack():
    from trainscape.spec.pack import grouped_expert_gemm

    for stack in ("pytorch-fsdp", "jax-xla"):
        assert grouped_expert_gemm(stack) == 1.0
    for stack in ("megatron-core", "megatron-lm"):
        assert grouped_expert_gemm(stack) == 0.0
    # a job that says so overrides its stack either way
    assert grouped_expert_gemm("pytorch-fsdp", "per_expert") == 0.0
    assert grouped_expert_gemm("megatron-core", "grouped") == 1.0


def test_expert_gemm_is_a_scenario_setting():
    import trainscape
    from trainscape.spec import ScenarioError, pack

    # EP 1: each GPU runs all 8 experts of a layer
    te = trainscape.load(_MIXTRAL, overrides=["config.ep=1"])
    gmm = trainscape.load(_MIXTRAL, overrides=["config.ep=1", "job.expert_gemm=grouped"])
    assert pack(te)[2][L.JOB_GROUPED_EXPERT_GEMM] == 0.0
    assert pack(gmm)[2][L.JOB_GROUPED_EXPERT_GEMM] == 1.0
    # fewer kernels: less compute time, nothing else changes
    a, b = trainscape.evaluate(te), trainscape.evaluate(gmm)
    assert b.compute_s < a.compute_s and b.memory_gib == a.memory_gib
    assert b.ep_comm_s == a.ep_comm_s
    with pytest.raises(ScenarioError) as e:
        trainscape.load(_MIXTRAL, overrides=["job.expert_gemm=fused"])
    assert str(e.value).startswith("job.expert_gemm")


def test_a_replayed_all_gather_weighs_its_own_bytes():
    # op_selective replays the all-gathers in front of wk and w3: in an FP8 job they carry a
    # third of the pass's bytes (1 of 1 + 2 per pair), so the two of them a third
    assert llm.named_dots_tp_replay(L.RECOMPUTE_OP_SELECTIVE, True, True, 1 / 3) == \
        pytest.approx(1 / 3)
    # "qkv_proj" re-runs out proj, fc1, fc2: the fc1 all-gather and both reduce-scatters
    assert llm.named_dots_tp_replay(L.RECOMPUTE_QKV_PROJ, True, False, 1 / 3) == \
        pytest.approx(0.5 * (1 / 3 + 2 * 2 / 3))


def test_full_recompute_share_counts_the_first_layers_of_each_chunk():
    # Megatron's block method: N layers of each model chunk; 0 or N >= a chunk's layers: all
    job = np.zeros(L.N_JOB)
    share = llm.full_recompute_share
    assert share(job, 32.0, L.SCHEDULES.index("1f1b"), 4.0, 1.0) == 1.0
    job[L.JOB_RECOMPUTE_LAYERS] = 5.0
    assert share(job, 32.0, L.SCHEDULES.index("1f1b"), 4.0, 1.0) == 5.0 / 32.0
    # interleaved: 4 chunks of 8 layers on the device, 5 of each checkpointed
    assert share(job, 32.0, L.SCHEDULES.index("interleaved"), 4.0, 4.0) == 5.0 / 8.0
    # ... but without a pipeline the one device is one chunk, whatever the schedule says
    assert share(job, 32.0, L.SCHEDULES.index("interleaved"), 1.0, 4.0) == 5.0 / 32.0
    # ZB-V holds two chunks a device
    assert share(job, 8.0, L.SCHEDULES.index("zb-v"), 4.0, 1.0) == 1.0
    job[L.JOB_RECOMPUTE_LAYERS] = 3.0
    assert share(job, 8.0, L.SCHEDULES.index("zb-v"), 4.0, 1.0) == 3.0 / 4.0


def test_block_recompute_costs_its_share_of_full_recompute():
    """Llama 3 405B on PP 16 x VP 2 (4 layers a chunk on the costed device): checkpointing one
    layer of each chunk adds a quarter of what full recompute adds to the compute and the TP
    time, and keeps a quarter of what it saves in activations; checkpointing a chunk's 4 layers
    is full recompute."""
    import trainscape

    def run(*overrides):
        sc = trainscape.load(_LLAMA, overrides=list(overrides))
        return trainscape.evaluate(sc, backend="python")

    none = run("config.recompute=none")
    full = run("config.recompute=full")
    one = run("config.recompute=full", "job.recompute_layers=1")
    four = run("config.recompute=full", "job.recompute_layers=4")
    for field in ("compute_s", "tp_comm_s"):
        added = getattr(full, field) - getattr(none, field)
        assert added > 0.0
        assert getattr(one, field) - getattr(none, field) == pytest.approx(0.25 * added,
                                                                           rel=1e-12)
    # full recompute also holds the one layer its backward rebuilds, block recompute does not
    # (test_full_recompute_holds_one_rebuilt_layer_beside_the_checkpoints): a dense layer's
    # bytes without recompute less its checkpoint, one microbatch
    from trainscape.spec import pack

    sc = trainscape.load(_LLAMA, overrides=["config.recompute=full"])
    _, mdl, jb = pack(sc)
    c = sc.config
    kept, saved_ckpt = (llm.layer_activations(mdl, jb, jb[L.JOB_SEQ_LEN] / c.cp, c.mbs, c.tp,
                                              c.sp, rc, llm.linear_input_saved_bytes(jb))[0]
                        for rc in (L.RECOMPUTE_NONE, L.RECOMPUTE_FULL))
    rebuilt = (kept - saved_ckpt) / 2.0**30
    saved = none.mem_activations_gib - (full.mem_activations_gib - rebuilt)
    assert none.mem_activations_gib - one.mem_activations_gib == pytest.approx(0.25 * saved,
                                                                             rel=1e-12)
    assert (four.step_time_s, four.memory_gib) == (full.step_time_s, full.memory_gib)
    # without full recompute the setting changes nothing
    assert run("config.recompute=none", "job.recompute_layers=1").step_time_s == none.step_time_s


def test_recompute_layers_is_validated_against_the_model():
    import trainscape
    from trainscape.spec import ScenarioError

    for bad in ("-1", "127", "two"):
        with pytest.raises(ScenarioError) as e:
            trainscape.load(_LLAMA, overrides=[f"job.recompute_layers={bad}"])
        assert str(e.value).startswith("job.recompute_layers")


# ---------------------------------------------------------------------------------------------
# Sliding-window attention
# ---------------------------------------------------------------------------------------------


def test_window_pair_share_is_the_band_of_the_causal_triangle():
    # GPT-OSS's 128-token window at 4K: 2x - x^2 with x = 1/32
    assert llm.window_pair_share(4096, 128) == 2 / 32 - 1 / 32**2
    # the continuous band against the exact count: sum_i min(i, w) over s (s + 1) / 2 pairs
    s, w = 4096, 1000
    exact = (w * s - w * (w - 1) / 2) / (s * (s + 1) / 2)
    assert llm.window_pair_share(s, w) == pytest.approx(exact, rel=2 / w)
    # no window, or one spanning the sequence: the whole triangle
    assert llm.window_pair_share(4096, 0) == 1.0
    assert llm.window_pair_share(4096, 4096) == 1.0
    assert llm.window_pair_share(4096, 8192) == 1.0


@pytest.mark.parametrize("layers,window,every,expected", [
    (36, 128, 2, 18),     # GPT-OSS 120B: windowed and full layers alternate
    (34, 1024, 6, 29),    # Gemma 3 4B: one full layer in six (layers 6, 12, ..., 30)
    (32, 4096, 0, 32),    # Mistral 7B: every layer windowed
    (32, 0, 0, 0),        # no window
])
def test_windowed_layer_count(layers, window, every, expected):
    assert llm.windowed_layer_count(layers, window, every) == expected


def test_windowed_attention_core_closed_form():
    sys = system([NODE, FABRIC])
    sys[L.SYS_ATTENTION_HALF_SEQ] = 200.0
    mdl = gpt_model(layers=36, h=2880, heads=64)
    mdl[L.MDL_ATTENTION_WINDOW] = 128
    seq = 4096
    core = llm.executed_attention_core_flops(llm.attention_core_flops(1, seq, 64, 64), True)
    t_full = llm.attention_core_time(sys, core, True, seq, 64)
    # every layer windowed: the band's FLOPs over K/V loops of 128 keys
    core_w, t_w = llm.windowed_attention_core(sys, core, t_full, True, seq, seq, mdl)
    share = llm.window_pair_share(seq, 128)
    assert core_w == pytest.approx(core * share, rel=1e-15)
    assert t_w == pytest.approx(core * share / (1e15 * 0.5 * 128 / (128 + 200.0)), rel=1e-12)
    # alternating (GPT-OSS): the average layer is halfway
    mdl[L.MDL_FULL_ATTENTION_EVERY] = 2
    core_h, t_h = llm.windowed_attention_core(sys, core, t_full, True, seq, seq, mdl)
    assert core_h == pytest.approx((core + core_w) / 2, rel=1e-15)
    assert t_h == pytest.approx((t_full + t_w) / 2, rel=1e-15)
    # unfused attention computes the whole square and masks it: no saving
    assert llm.windowed_attention_core(sys, core, t_full, False, seq, seq, mdl) == (core, t_full)


def _windowed(mdl, window, every):
    out = mdl.copy()
    out[L.MDL_ATTENTION_WINDOW] = window
    out[L.MDL_FULL_ATTENTION_EVERY] = every
    return out


def test_a_window_saves_attention_time_in_proportion_to_the_windowed_layers(backend):
    from trainscape.backends import evaluate_blocks

    sys = system([NODE, FABRIC], gpus=8)
    sys[L.SYS_ATTENTION_HALF_SEQ] = 200.0
    mdl = gpt_model(layers=8, h=2048, heads=16)
    j = job(seq=8192, batch=8)
    cfg = one_config(dp=8)
    full, all_w, half_w, wide, unfused, unfused_w = (
        evaluate_blocks(sys, m, jb, cfg, backend=backend)[:, 0]
        for m, jb in ((mdl, j), (_windowed(mdl, 512, 0), j), (_windowed(mdl, 512, 2), j),
                      (_windowed(mdl, 8192, 0), j),
                      (mdl, _unfused(j)), (_windowed(mdl, 512, 0), _unfused(j))))
    assert all_w[L.OUT_STATUS] == L.STATUS_OK
    saved = full[L.OUT_COMPUTE_S] - all_w[L.OUT_COMPUTE_S]
    assert saved > 0.0
    # half the layers windowed saves half the time and half the hardware FLOPs
    assert full[L.OUT_COMPUTE_S] - half_w[L.OUT_COMPUTE_S] == pytest.approx(saved / 2, rel=1e-9)
    assert full[L.OUT_HW_TFLOPS_PER_GPU] * full[L.OUT_STEP_TIME_S] - half_w[
        L.OUT_HW_TFLOPS_PER_GPU] * half_w[L.OUT_STEP_TIME_S] == pytest.approx(
        (full[L.OUT_HW_TFLOPS_PER_GPU] * full[L.OUT_STEP_TIME_S]
         - all_w[L.OUT_HW_TFLOPS_PER_GPU] * all_w[L.OUT_STEP_TIME_S]) / 2, rel=1e-9)
    # model FLOPs (the MFU numerator) keep the full-square convention
    assert all_w[L.OUT_MODEL_TFLOPS_PER_GPU] * all_w[L.OUT_STEP_TIME_S] == pytest.approx(
        full[L.OUT_MODEL_TFLOPS_PER_GPU] * full[L.OUT_STEP_TIME_S], rel=1e-12)
    # a window spanning the sequence, or unfused attention: nothing changes
    np.testing.assert_array_equal(wide, full)
    np.testing.assert_array_equal(unfused_w, unfused)


def _unfused(j):
    out = j.copy()
    out[L.JOB_FLASH_ATTENTION] = 0
    return out


# ---------------------------------------------------------------------------------------------
# Attention efficiency by head width
# ---------------------------------------------------------------------------------------------


def test_head_dim_efficiency_is_the_exponentials_share_relative_to_128():
    sys = system([NODE, FABRIC])
    # no constant: no dependence on the head dim
    for d in (32, 64, 128, 192):
        assert llm.attention_head_dim_efficiency(sys, d) == 1.0
    sys[L.SYS_ATTENTION_HEAD_DIM_HALF] = 36.2
    assert llm.attention_head_dim_efficiency(sys, 128) == pytest.approx(1.0, rel=1e-15)
    # GPT-OSS's 64-wide heads: (64 / 100.2) / (128 / 164.2)
    assert llm.attention_head_dim_efficiency(sys, 64) == pytest.approx(
        (64 / 100.2) / (128 / 164.2), rel=1e-14)
    # Nemotron-4 340B's 192-wide heads run faster per FLOP, never past the matmul bound
    wide = llm.attention_head_dim_efficiency(sys, 192)
    assert 1.0 < wide < 164.2 / 128
    # the fused kernel's time divides by it; unfused attention stays on the GEMM curve
    core = 1e12
    assert llm.attention_core_time(sys, core, True, 4096, 64) == pytest.approx(
        llm.attention_core_time(sys, core, True, 4096, 128)
        / llm.attention_head_dim_efficiency(sys, 64), rel=1e-14)
    assert llm.attention_core_time(sys, core, False, 4096, 64) == llm.gemm_time(sys, core, 2.0)


def test_a_faster_exponential_unit_speeds_128_wide_heads_by_the_serialized_scores_ratio():
    # Blackwell -> Blackwell Ultra: c = 73.1 -> 34.2 (twice the exponentials at the same matmul
    # rate): (128 + 73.1) / (128 + 34.2)
    assert llm.exponential_rate_attention_ratio(73.1, 34.2) == pytest.approx(
        201.1 / 162.2, rel=1e-14)
    assert llm.exponential_rate_attention_ratio(50.0, 50.0) == 1.0
    # the same ratio as the matmul-bound shares d / (d + c) of the two parts at d = 128
    share = lambda c: 128 / (128 + c)  # noqa: E731
    assert llm.exponential_rate_attention_ratio(73.1, 34.2) == pytest.approx(
        share(34.2) / share(73.1), rel=1e-14)
    # and no faster than the matmul bound allows: at c -> 0 the gain is (128 + c_from) / 128
    assert llm.exponential_rate_attention_ratio(73.1, 0.0) == pytest.approx(201.1 / 128)


def test_head_dim_half_presets_follow_the_exponential_rate_rule():
    from trainscape import presets

    # c = P / (7 E): FlashAttention-3's 989 TFLOPS of matmul against 3.9 of exponentials on
    # H100; on A100 2048 tensor FLOPs per SM per clock against 16 exponentials
    assert presets.gpu("h100-sxm-80gb")["attention_head_dim_half"] == pytest.approx(
        989 / (7 * 3.9), abs=0.05)
    assert presets.gpu("a100-sxm-80gb")["attention_head_dim_half"] == pytest.approx(
        2048 / (7 * 16), abs=0.05)
    # Blackwell: twice Hopper's tensor rate per SM and clock, the same exponential units
    assert presets.gpu("b200")["attention_head_dim_half"] == pytest.approx(
        8192 / (7 * 16), abs=0.05)
    # Blackwell Ultra: the same tensor rate, 10.7 against B200's 5 TeraExponentials/s
    for name in ("b300", "gb300"):
        assert presets.gpu(name)["attention_head_dim_half"] == pytest.approx(
            8192 / (7 * 16) * 5 / 10.7, abs=0.05)


# ---------------------------------------------------------------------------------------------
# Multi-token prediction (DeepSeek-V3 arXiv 2412.19437 §2.2; Megatron-Core MTP)
# ---------------------------------------------------------------------------------------------


def dense_mtp_model(layers=32, mtp=0):
    mdl = gpt_model(layers=layers, h=4096, heads=32, vocab=128000)
    mdl[L.MDL_MTP_LAYERS] = mtp
    return mdl


def test_mtp_model_flops_are_megatrons_one_more_layer_projection_and_logits(backend):
    """Megatron-LM num_floating_point_operations with mtp_num_layers D: D more layers of the
    last layer's kind, D projections 2h -> h with three norms (2h^2 + 3h per token) and D more
    passes through the output head, all times 3 (forward and backward)."""
    from trainscape.backends import evaluate_blocks

    s, h, v, batch = 2048, 4096, 128000, 64
    base, mtp = dense_mtp_model(mtp=0), dense_mtp_model(mtp=1)
    one_layer = (llm.attention_projection_flops(1, s, h, 32, 32, 128)
                 + llm.attention_core_flops(1, s, 32, 128) + llm.mlp_flops(1, s, h, 4 * h, False))
    extra = 3 * (one_layer + 2 * s * (2 * h * h + 3 * h) + 2 * s * h * v)
    assert (llm.model_flops_per_sequence(mtp, s) - llm.model_flops_per_sequence(base, s)
            == pytest.approx(extra, rel=1e-12))
    sys = system([NODE, FABRIC], gpus=8)
    cfg = one_config(tp=1, pp=4, dp=2, schedule=L.SCHED_1F1B)
    a = evaluate_blocks(sys, base, job(seq=s, batch=batch), cfg, backend=backend)
    b = evaluate_blocks(sys, mtp, job(seq=s, batch=batch), cfg, backend=backend)
    # model TFLOP/s per GPU = model FLOPs / step / GPUs: the ratio at equal step times
    ratio = (b[L.OUT_MODEL_TFLOPS_PER_GPU, 0] * b[L.OUT_STEP_TIME_S, 0]) \
        / (a[L.OUT_MODEL_TFLOPS_PER_GPU, 0] * a[L.OUT_STEP_TIME_S, 0])
    assert ratio == pytest.approx(llm.model_flops_per_sequence(mtp, s)
                                  / llm.model_flops_per_sequence(base, s), rel=1e-9)


def test_mtp_block_kind_follows_the_last_layer():
    mdl = moe_model()
    mdl[L.MDL_MTP_LAYERS] = 1
    mdl[L.MDL_MOE_EVERY] = 1
    assert llm.mtp_moe_blocks(mdl) == 1  # DeepSeek-V3: every layer routed, the MTP block too
    mdl[L.MDL_MOE_EVERY] = 2
    mdl[L.MDL_LAYERS] = 61
    assert llm.mtp_moe_blocks(mdl) == 0  # layers 2, 4, ..., 60 routed: the 61st is dense
    mdl[L.MDL_LAYERS] = 60
    assert llm.mtp_moe_blocks(mdl) == 1
    assert llm.mtp_moe_blocks(dense_mtp_model(mtp=2)) == 0


def test_mtp_block_runs_on_the_last_stage_with_its_own_head_pass():
    """PP 4 over 32 layers, one MTP block: the last device runs 8 layers + the MTP block's
    layer (9 stage layers, as a 36-layer model's device does) and, beyond that model's last
    stage, one more output GEMM, cross-entropy, embedding lookup and 2h -> h projection."""
    sys = system([NODE, FABRIC], gpus=8)
    j = job(seq=2048, batch=64)
    cfg = one_config(tp=1, pp=4, dp=2, schedule=L.SCHED_1F1B)
    row = llm.row_terms(sys, dense_mtp_model(layers=32, mtp=1), j, cfg, 0)
    ref = llm.row_terms(sys, dense_mtp_model(layers=36, mtp=0), j, cfg, 0)
    assert row[llm.ROW_STAGE_LAYERS] == 9 == ref[llm.ROW_STAGE_LAYERS]
    b, s, h, v = 1, 2048, 4096, 128000
    head = (llm.gemm_time(sys, llm.logits_flops(b, s, h, v), 1.0)
            + llm.linear_gemm_time(sys, llm.mtp_projection_flops(b, s, h), 1.0))
    loss = (llm.cross_entropy_time(sys, b, s, v, 1, 2, 4)
            + llm.embedding_time(sys, b, s, h, 2))
    assert row[llm.ROW_F_COMPUTE] - ref[llm.ROW_F_COMPUTE] == pytest.approx(head + loss,
                                                                            rel=1e-9)
    assert row[llm.ROW_W_COMPUTE] - ref[llm.ROW_W_COMPUTE] == pytest.approx(head, rel=1e-9)
    # the blocks' projections and norms, and the embedding the last stage now holds
    assert llm.mtp_stage_params(dense_mtp_model(mtp=1), v * h, False) == 2 * h * h + 3 * h + v * h
    assert llm.mtp_stage_params(dense_mtp_model(mtp=1), v * h, True) == 2 * h * h + 3 * h
    assert llm.mtp_stage_params(dense_mtp_model(mtp=0), v * h, False) == 0


def test_mtp_keeps_a_second_set_of_logits_and_the_projection_input(backend):
    """No pipeline: the one device holds the logits of the model and of the MTP block, and the
    block's 2h-wide projection input (sequence-split under SP)."""
    from trainscape.backends import evaluate_blocks

    sys = system([NODE, FABRIC], gpus=8)
    j = job(seq=2048, batch=64)
    cfg = one_config(tp=2, pp=1, dp=4, sp=1)
    a = evaluate_blocks(sys, dense_mtp_model(mtp=0), j, cfg, backend=backend)
    b = evaluate_blocks(sys, dense_mtp_model(mtp=1), j, cfg, backend=backend)
    proj_input = 2 * 1 * 2048 * 4096 * 2 / 2
    assert b[L.OUT_MEM_LOGITS_GIB, 0] * llm.GIB == pytest.approx(
        2 * a[L.OUT_MEM_LOGITS_GIB, 0] * llm.GIB + proj_input, rel=1e-12)


def test_stated_stage_layers_cost_as_the_split_they_state(backend):
    """Llama 3 405B on PP 16: stating 7 layers on the first and the last stage costs exactly
    what the edge rule's one-layer-fewer split does (7, 8 x 14, 7); stating them for a V
    schedule, whose ends share device 0, is an invalid configuration (code 31) everywhere."""
    from trainscape.backends import evaluate_blocks

    sys = system([NODE, FABRIC], gpus=128)
    cfg = one_config(tp=8, pp=16, schedule=L.SCHED_1F1B)
    edge, stated = job(seq=8192, batch=64), job(seq=8192, batch=64)
    edge[L.JOB_PIPELINE_EDGE_LAYERS] = 1
    stated[L.JOB_PIPELINE_FIRST_STAGE_LAYERS] = 7
    stated[L.JOB_PIPELINE_LAST_STAGE_LAYERS] = 7
    a = evaluate_blocks(sys, llama405b(), edge, cfg, backend=backend)
    b = evaluate_blocks(sys, llama405b(), stated, cfg, backend=backend)
    np.testing.assert_array_equal(a[:, 0], b[:, 0])
    zbv = one_config(tp=8, pp=16, schedule=L.SCHED_ZB_V)
    out = evaluate_blocks(sys, llama405b(), stated, zbv, backend=backend)
    assert out[L.OUT_STATUS, 0] == L.STATUS_INVALID_CONFIG
    assert llm.config_error(sys, llama405b(), stated, zbv, 0) == llm.STAGE_LAYERS_ERROR
    assert llm.config_error_message(llm.STAGE_LAYERS_ERROR)[0] == "pp"
