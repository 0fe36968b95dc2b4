"""Megatron-Core's eager expert-bias add (job.expert_bias = "eager"): a model whose experts carry
biases (GPT-OSS) has each MoE layer add its routed experts' second-projection bias one local
expert at a time in PyTorch, a few small ops per expert forward and backward, each costing the
larger of its bytes at the streaming bandwidth and the host's time to issue it
(model.llm.eager_op_time, eager_expert_bias_forward_time / _backward_time)."""

from __future__ import annotations

import pytest

from trainscape import layout as L
from trainscape import presets
from trainscape.backends import evaluate_blocks
from trainscape.model import llm
from trainscape.spec import ScenarioError, load_scenario, pack
from trainscape.spec.pack import eager_expert_bias

from test_model_known_answers import FABRIC, NODE, job, moe_model, one_config, system

BW = 3e12 * 0.9  # the test system's HBM bandwidth at a streaming efficiency of 0.9


def _sys(host_us):
    sys = system([NODE, FABRIC], gpus=64)
    sys[L.SYS_STREAM_MEMORY_EFFICIENCY] = 0.9
    sys[L.SYS_HOST_OP_S] = host_us * 1e-6
    return sys


def test_an_eager_op_costs_the_larger_of_its_bytes_and_the_host():
    sys = _sys(10.0)
    assert llm.eager_op_time(sys, 0.0) == sys[L.SYS_HOST_OP_S]
    assert llm.eager_op_time(sys, 1e6) == sys[L.SYS_HOST_OP_S]  # 0.37 us of bytes: host-bound
    assert llm.eager_op_time(sys, 1e9) == pytest.approx(1e9 / BW)  # 370 us: bandwidth-bound


@pytest.mark.parametrize("experts", [1.0, 16.0])
def test_small_experts_are_host_bound_op_by_op(experts):
    # a few routed elements per expert: every kernel waits for the host, 2 L + 2 of them
    # forward (b * p and t + b * p per expert, the cat, the cast) and 6 L + 3 backward
    sys = _sys(10.0)
    assert llm.eager_expert_bias_forward_time(sys, 1e3, experts) == pytest.approx(
        (2 * experts + 2) * 10e-6)
    assert llm.eager_expert_bias_backward_time(sys, 1e3, experts) == pytest.approx(
        (6 * experts + 3) * 10e-6)


def test_large_experts_move_28_bytes_forward_and_40_backward_per_element():
    # with no host cost every op runs at the streaming bandwidth: 4 + 10 per expert, 8 + 6
    # over all forward; 6 + 6 + 2 x (8 + 4) per expert, 6 + 4 over all backward
    sys = _sys(0.0)
    e = 4e9
    assert llm.eager_expert_bias_forward_time(sys, e, 8.0) == pytest.approx(28 * e / BW)
    assert llm.eager_expert_bias_backward_time(sys, e, 8.0) == pytest.approx(40 * e / BW)
    assert llm.eager_expert_bias_forward_time(sys, 0.0, 8.0) == 0.0
    assert llm.eager_expert_bias_elements(2.0, 4096.0, 4.0, 2880.0, 2.0) == 2 * 4096 * 4 * 2880 / 2


@pytest.mark.parametrize("recompute,modules,forwards",
                         [(L.RECOMPUTE_NONE, False, 1.0), (L.RECOMPUTE_FULL, False, 2.0),
                          (L.RECOMPUTE_SELECTIVE, True, 2.0)])
def test_the_bias_add_costs_its_forward_and_backward_per_moe_layer(backend, recompute, modules,
                                                                     forwards):
    sys = _sys(10.0)
    mdl = moe_model()  # 4 MoE layers, 64 experts, top 8 of 4096 wide
    seq, batch, ep = 2048, 64, 8
    j = job(seq=seq, batch=batch)
    if modules:
        j[L.JOB_RECOMPUTE_MOE] = 1.0  # the re-run MoE block adds its bias again
    cfg = one_config(dp=64, ep=ep, recompute=recompute)
    fused = evaluate_blocks(sys, mdl, j, cfg, backend=backend)[:, 0]
    j2 = j.copy()
    j2[L.JOB_EAGER_EXPERT_BIAS] = 1.0
    eager = evaluate_blocks(sys, mdl, j2, cfg, backend=backend)[:, 0]
    assert fused[L.OUT_STATUS] == eager[L.OUT_STATUS] == L.STATUS_OK
    elements = llm.eager_expert_bias_elements(1.0, seq, 8.0, 4096.0, 1.0)
    f = llm.eager_expert_bias_forward_time(sys, elements, 64.0 / ep)
    b = llm.eager_expert_bias_backward_time(sys, elements, 64.0 / ep)
    # one microbatch per device (64 sequences over 64 ranks), 4 MoE layers; a recomputed
    # forward adds the forward again
    expected = 4 * (forwards * f + b)
    assert eager[L.OUT_COMPUTE_S] - fused[L.OUT_COMPUTE_S] == pytest.approx(expected, rel=1e-9)
    # only time: memory and FLOPs as before
    assert eager[L.OUT_MEMORY_GIB] == fused[L.OUT_MEMORY_GIB]
    assert eager[L.OUT_MFU] < fused[L.OUT_MFU]


def test_a_dense_model_pays_nothing_for_the_flag(backend):
    sys = _sys(10.0)
    mdl = moe_model()
    mdl[L.MDL_EXPERTS] = mdl[L.MDL_TOP_K] = mdl[L.MDL_EXPERT_FFN_HIDDEN] = 0
    mdl[L.MDL_MOE_EVERY] = 0
    j = job()
    j2 = j.copy()
    j2[L.JOB_EAGER_EXPERT_BIAS] = 1.0
    cfg = one_config(dp=64)
    a = evaluate_blocks(sys, mdl, j, cfg, backend=backend)[:, 0]
    b = evaluate_blocks(sys, mdl, j2, cfg, backend=backend)[:, 0]
    assert a[L.OUT_STEP_TIME_S] == b[L.OUT_STEP_TIME_S]


def test_the_stack_decides_unless_the_job_says():
    assert eager_expert_bias(True, "megatron-core") == 1.0
    for stack in ("pytorch-fsdp", "jax-xla", "megatron-lm"):
        assert eager_expert_bias(True, stack) == 0.0
    assert eager_expert_bias(True, "megatron-core", "fused") == 0.0
    assert eager_expert_bias(True, "pytorch-fsdp", "eager") == 1.0
    # no bias, nothing to add, whatever the setting
    assert eager_expert_bias(False, "megatron-core", "eager") == 0.0


SCENARIO = {"model": {"preset": "gpt-oss-120b"},
            "job": {"seq_len": 4096, "global_batch": 64, "dtype": "bf16"},
            "cluster": {"gpu": "h100-sxm-80gb", "gpus": 64,
                        "tiers": [{"name": "node", "size": 8, "bandwidth_GBps": 450,
                                   "latency_us": 2},
                                  {"name": "fabric", "size": 8, "bandwidth_GBps": 50,
                                   "latency_us": 10}]}}


def test_scenario_fields_pack_and_validate():
    sys, mdl, jb = pack(load_scenario(SCENARIO))
    assert jb[L.JOB_EAGER_EXPERT_BIAS] == 1.0  # GPT-OSS on Megatron-Core
    assert sys[L.SYS_HOST_OP_S] == pytest.approx(10e-6)
    fsdp = {**SCENARIO, "job": {**SCENARIO["job"], "stack": "pytorch-fsdp"}}
    assert pack(load_scenario(fsdp))[2][L.JOB_EAGER_EXPERT_BIAS] == 0.0
    fused = {**SCENARIO, "job": {**SCENARIO["job"], "expert_bias": "fused"}}
    assert pack(load_scenario(fused))[2][L.JOB_EAGER_EXPERT_BIAS] == 0.0
    # a Grace host issues ops slower (TE issue #2053), an own GPU table may say its host's
    grace = {**SCENARIO, "cluster": {**SCENARIO["cluster"], "gpu": "gb200"}}
    assert pack(load_scenario(grace))[0][L.SYS_HOST_OP_S] == pytest.approx(27.5e-6)
    assert presets.gpu("gb200")["host_op_us"] == 27.5
    with pytest.raises(ScenarioError, match="job.expert_bias"):
        load_scenario({**SCENARIO, "job": {**SCENARIO["job"], "expert_bias": "packed"}})
    with pytest.raises(ScenarioError, match="host_op_us"):
        load_scenario({**SCENARIO, "cluster": {**SCENARIO["cluster"], "gpu": {
            "preset": "h100-sxm-80gb", "host_op_us": -1.0}}})


def test_expert_bias_needs_experts():
    dense = {"preset": "llama3-8b", "expert_bias": True}
    with pytest.raises(ScenarioError, match="model.expert_bias") as err:
        load_scenario({**SCENARIO, "model": dense})
    assert "false" in str(err.value)


def test_gpt_oss_rows_read_the_expert_bias_from_the_preset():
    from trainscape.calibration import published as P

    notes: list[str] = []
    row = {"model": "gpt-oss-120b", "layers": "36", "hidden": "2880", "ffn_hidden": "2880",
           "heads": "64", "kv_heads": "8", "vocab": "201088", "mlp": "swiglu",
           "experts": "128", "top_k": "4", "expert_ffn": "2880"}
    assert P.model_of(row, notes)["expert_bias"] is True
    qwen = {**row, "model": "qwen3-30b-a3b", "hidden": "2048", "expert_ffn": "768",
            "top_k": "8", "heads": "32", "kv_heads": "4"}
    assert "expert_bias" not in P.model_of(qwen, notes)

