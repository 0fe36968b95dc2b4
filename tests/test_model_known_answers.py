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
        sys[L.SYS_TIER_BASE + i * L.N_TIER : L.SYS_TIER_BASE + (i + 1) * L.N_TIER] = t
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


def act(t, sp, recompute):
    return llm.layer_activation_bytes(
        S, B, H, A, A, H // A, 4 * H, False, t, sp, recompute, False, 2.0
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
                                       L.RECOMPUTE_NONE, True, 2.0)
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
    j[L.JOB_GRAD_BYTES] = 4
    j[L.JOB_OPTIMIZER_BYTES] = 12
    j[L.JOB_OPTIMIZER_TRAFFIC_BYTES] = 30
    j[L.JOB_COMM_BYTES] = 2
    j[L.JOB_GRAD_COMM_BYTES] = 4
    j[L.JOB_FLASH_ATTENTION] = 1
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
    sys = system([NODE, FABRIC], gpus=8)
    mdl = gpt_model(layers=96, h=12288, heads=96)  # 175B on 8 GPUs
    out = evaluate_batch(sys, mdl, job(batch=8), one_config(tp=8))
    col = out[:, 0]
    assert col[L.OUT_STATUS] == L.STATUS_OUT_OF_MEMORY
    assert col[L.OUT_FEASIBLE] == 0.0
    assert col[L.OUT_MEMORY_GIB] > 80
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
    assert llm.attention_core_time(sys, core, True, 4096) == pytest.approx(core / (1e15 * 0.5))
    eff = 0.8 * (core / 2) / (core / 2 + 1e9)
    assert llm.attention_core_time(sys, core, False, 4096) == pytest.approx(core / (1e15 * eff))


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
