"""Memory as the recipes really run it (issue 12, item 4): FP8 weights without a 16-bit copy
(``job.fp8_param_gather``), bf16 optimizer states without a master copy
(``job.optimizer_dtype``), and the published layouts they make feasible."""

import copy

import numpy as np
import pytest

from backend_fixture import backend  # noqa: F401
from trainscape import layout as L
from trainscape.backends import evaluate_blocks
from trainscape.calibration import Runner, published
from trainscape.spec import ConfigSpec, load_scenario, pack, pack_configs
from trainscape.spec.errors import ScenarioError
from trainscape.spec.pack import (fp8_linear_weight_extra_bytes, fp8_weight_cache_bytes,
                                  linear_param_comm_bytes, optimizer_state_bytes,
                                  optimizer_traffic_bytes)

GIB = 2.0**30

# a 4-layer dense model small enough to count by hand (MHA, GeLU MLP, untied embeddings)
H, LAYERS, VOCAB = 1024, 4, 32000
SCENARIO = {
    "model": {"layers": LAYERS, "hidden": H, "ffn_hidden": 4 * H, "heads": 8, "vocab": VOCAB,
              "mlp": "gelu"},
    "job": {"seq_len": 1024, "global_batch": 8, "dtype": "fp8"},
    "cluster": {"gpu": {"preset": "h100-sxm-80gb"}, "gpus": 8,
                "tiers": [{"name": "node", "size": 8, "bandwidth_GBps": 450,
                           "latency_us": 2}]},
}


def scenario(**job):
    raw = copy.deepcopy(SCENARIO)
    raw["job"].update(job)
    return load_scenario(raw)


def memory_columns(sc, backend, **config):
    sys_, mdl, job = pack(sc)
    cfg = pack_configs([ConfigSpec(**{"tp": 1, "pp": 1, "dp": 8, **config})], gpus=8)
    return evaluate_blocks(sys_, mdl, job, cfg, backend=backend)[:, 0]


# ---- the per-parameter byte counts --------------------------------------------------------------


def test_fp8_params_hold_the_fp8_copies_instead_of_the_16_bit_weight():
    # FP8 data + the transposed copy (1 + 1 byte) replace the 2-byte bf16 weight: nothing beyond
    # the 2 bytes every weight is counted at, for per-tensor recipes
    for recipe in ("delayed", "tensorwise", "rowwise"):
        assert fp8_linear_weight_extra_bytes(recipe, True, 2) == 0.0
        assert fp8_linear_weight_extra_bytes(recipe, False, 2) == 2.0
    # block scales stay: mxfp8 one E8M0 byte per 32 elements on each copy, 2/32
    assert fp8_linear_weight_extra_bytes("mxfp8", True, 2) == pytest.approx(2 / 32)
    assert fp8_linear_weight_extra_bytes("mxfp8", False, 2) == fp8_weight_cache_bytes("mxfp8")
    assert fp8_linear_weight_extra_bytes(None, False, 2) == 0.0


def test_fp8_params_are_all_gathered_as_fp8():
    # --fp8-param-gather: the linear weights' FP8 bytes (per-tensor scales negligible; mxfp8's
    # E8M0 byte per 32 elements); without it, or without FP8, the 16-bit weight
    for recipe in ("delayed", "tensorwise", "rowwise"):
        assert linear_param_comm_bytes(recipe, True, 2) == 1.0
        assert linear_param_comm_bytes(recipe, False, 2) == 2.0
    assert linear_param_comm_bytes("mxfp8", True, 2) == 1 + 1 / 32
    assert linear_param_comm_bytes("blockwise", True, 2) == pytest.approx(1.0, abs=1e-3)
    assert linear_param_comm_bytes(None, False, 2) == 2.0
    _, _, job = pack(scenario(fp8_param_gather=True))
    assert job[L.JOB_LINEAR_PARAM_COMM_BYTES] == 1.0 and job[L.JOB_PARAM_BYTES] == 2.0
    _, _, job = pack(scenario())
    assert job[L.JOB_LINEAR_PARAM_COMM_BYTES] == 2.0


def test_fp8_param_gather_shrinks_only_the_zero_all_gather(backend):  # noqa: F811
    # ZeRO-1 on DP 8, not overlapped: the weights' all-gather carries the 4 x 12 h^2 linear
    # weights at 1 B instead of 2; the gradients' reduce-scatter, compute and activations are
    # unchanged (the weights' memory: the tests above)
    dp = L.OUTPUT_FIELDS.index("dp_comm_s")
    fp8 = memory_columns(scenario(fp8_param_gather=True), backend, zero=1, dp_overlap=False)
    bf16 = memory_columns(scenario(), backend, zero=1, dp_overlap=False)
    assert fp8[dp] < bf16[dp]
    for name in ("compute_s", "tp_comm_s", "optimizer_s", "mem_activations_gib"):
        k = L.OUTPUT_FIELDS.index(name)
        assert fp8[k] == bf16[k], name
    # without ZeRO the gradients' all-reduce is all there is: no change
    assert memory_columns(scenario(fp8_param_gather=True), backend, zero=0,
                          dp_overlap=False)[dp] == \
        memory_columns(scenario(), backend, zero=0, dp_overlap=False)[dp] > 0.0


def test_bf16_optimizer_states_are_two_moments_and_the_gradient_shard():
    # Apex DistributedFusedAdam, dtype bf16, no store_params: exp_avg 2 + exp_avg_sq 2 + the
    # bucket's grads_shard in grad_sync_dtype (2 for bf16, 4 for fp32); no fp32 master
    assert optimizer_state_bytes("adam", "bf16", "bf16") == 2 + 2 + 2
    assert optimizer_state_bytes("adam", "fp32", "bf16") == 2 + 2 + 4
    assert optimizer_state_bytes("sgd", "bf16", "bf16") == 2 + 2
    # default unchanged: ZeRO's K = 12, + the fp32 main-gradient copy with 16-bit gradients
    assert optimizer_state_bytes("adam", "fp32", "fp32") == 12
    assert optimizer_state_bytes("adam", "bf16", "fp32") == 16
    # the step: read the bf16 gradient 2, read+write m and v 2 x 4, read+write the weight 2 x 2
    assert optimizer_traffic_bytes("adam", "bf16", 2, "bf16") == 2 + 8 + 4
    assert optimizer_traffic_bytes("adam", "fp32", 2, "fp32") == 30


def test_pack_reads_the_job_fields():
    _, _, job = pack(scenario(fp8_param_gather=True))
    assert job[L.JOB_FP8_WEIGHT_CACHE_BYTES] == 0.0
    _, _, job = pack(scenario())
    assert job[L.JOB_FP8_WEIGHT_CACHE_BYTES] == 2.0
    _, _, job = pack(scenario(dtype="bf16", grad_dtype="bf16", optimizer_dtype="bf16"))
    assert job[L.JOB_OPTIMIZER_BYTES] == 6 and job[L.JOB_OPTIMIZER_TRAFFIC_BYTES] == 14
    assert job[L.JOB_GRAD_BYTES] == 2


# ---- known answers through every backend --------------------------------------------------------


def test_fp8_params_weights_are_two_bytes_per_parameter(backend):  # noqa: F811
    """4 layers x (4h^2 attention + 8h^2 MLP + 2h norms) + 2 x 32000 h embeddings, h = 1024:
    4 x 12,584,960 + 65,536,000 = 115,875,840 parameters on every GPU (TP 1, PP 1, no ZeRO-3).
    With TE's FP8 copies beside bf16 weights: 2 bytes each + 2 per linear weight (4 x 12h^2 =
    50,331,648); with FP8 parameters the linear weights hold only their 2 FP8 bytes, so the
    weights are exactly 2 bytes per parameter."""
    params = LAYERS * (12 * H * H + 2 * H) + 2 * VOCAB * H
    linear = LAYERS * 12 * H * H
    assert params == 115_875_840 and linear == 50_331_648
    with_copy = memory_columns(scenario(), backend)
    fp8_only = memory_columns(scenario(fp8_param_gather=True), backend)
    assert with_copy[L.OUT_MEM_WEIGHTS_GIB] == pytest.approx((2 * params + 2 * linear) / GIB,
                                                             rel=1e-12)
    assert fp8_only[L.OUT_MEM_WEIGHTS_GIB] == pytest.approx(2 * params / GIB, rel=1e-12)
    # no other memory moves: gradients, optimizer states, activations
    for col in (L.OUT_MEM_GRADS_GIB, L.OUT_MEM_OPTIMIZER_GIB, L.OUT_MEM_ACTIVATIONS_GIB):
        assert fp8_only[col] == with_copy[col]
    # the step only gains: the weights' all-gather carries 1 byte per linear weight, and its
    # first gradient bucket's share is exposed (Megatron-Core's buckets, model.llm.
    # bucketed_exposed); compute and the gradients' reduce-scatter are the same
    assert fp8_only[L.OUT_COMPUTE_S] == with_copy[L.OUT_COMPUTE_S]
    assert fp8_only[L.OUT_STEP_TIME_S] < with_copy[L.OUT_STEP_TIME_S]


def test_bf16_optimizer_states_known_answer(backend):  # noqa: F811
    """Same model, bf16, ZeRO-1 over DP 8: Adam states of 6 bytes per parameter (bf16 m, v and
    gradient shard) over 8 ranks, against 16 (fp32 master, m, v + fp32 main gradient) over 8."""
    params = LAYERS * (12 * H * H + 2 * H) + 2 * VOCAB * H
    fp32 = memory_columns(scenario(dtype="bf16", grad_dtype="bf16"), backend, zero=1)
    bf16 = memory_columns(scenario(dtype="bf16", grad_dtype="bf16", optimizer_dtype="bf16"),
                          backend, zero=1)
    assert fp32[L.OUT_MEM_OPTIMIZER_GIB] == pytest.approx(16 * params / 8 / GIB, rel=1e-12)
    assert bf16[L.OUT_MEM_OPTIMIZER_GIB] == pytest.approx(6 * params / 8 / GIB, rel=1e-12)
    assert bf16[L.OUT_MEM_WEIGHTS_GIB] == fp32[L.OUT_MEM_WEIGHTS_GIB]
    assert bf16[L.OUT_MEM_GRADS_GIB] == fp32[L.OUT_MEM_GRADS_GIB]
    # less optimizer traffic: 14 instead of 36 bytes per owned parameter
    assert bf16[L.OUT_OPTIMIZER_S] == pytest.approx(fp32[L.OUT_OPTIMIZER_S] * 14 / 36,
                                                    rel=1e-12)


# ---- bad input ----------------------------------------------------------------------------------


@pytest.mark.parametrize("job, path, fragment", [
    ({"dtype": "bf16", "fp8_param_gather": True}, "job.fp8_param_gather", "only for FP8"),
    ({"dtype": "fp16", "optimizer_dtype": "bf16"}, "job.optimizer_dtype", "must be bf16"),
    ({"fp8_param_gather": True, "optimizer_dtype": "bf16"}, "job.optimizer_dtype",
     "need an fp32 one"),
    ({"optimizer_dtype": "fp8"}, "job.optimizer_dtype", ""),
])
def test_bad_combinations_name_the_field(job, path, fragment):
    with pytest.raises(ScenarioError) as info:
        scenario(**job)
    msg = str(info.value)
    assert msg.startswith(path + ": ") and fragment in msg and "\n" not in msg, msg


# ---- the published runs -------------------------------------------------------------------------


def _runs():
    return {r.case: r for r in published.published_runs(("dgxc_benchmarking_h100",
                                                          "nemo_perf_summary_h100"))}


def test_fp8_param_gather_follows_each_release_recipe():
    runs = _runs()
    on = {c for c, r in runs.items() if r.scenario["job"].get("fp8_param_gather")}
    # NeMo 2.0 performance scripts (NeMo >= 25.02) and Megatron-Bridge (25.11+): on
    assert "dgxc_v250501_nemo_llama3.1-405b_fp8_512" in on
    assert "dgxc_v2505_nemo_nemotron4-15b_fp8_16" in on
    assert "nemo2511_qwen3-30b-a3b_fp8_16" in on
    # the NeMo 1.0 GPT-3 yaml sets fp8_params: true
    assert any(c.startswith("dgxc_v24111_nemo_gpt3-175b_fp8") for c in on)
    # NeMo 1.0 Llama / Nemotron yamls (24.09, 24.12) and 16-bit runs: off
    assert not any(c.startswith(("dgxc_v24111_nemo_llama", "dgxc_v2502_nemo_llama",
                                 "dgxc_v24111_nemo_nemotron")) for c in on)
    assert all(runs[c].dtype == "fp8" and runs[c].stack == "megatron-core" for c in on)
    # the 25.09 rows (Megatron-Bridge rc3 / rc4) too: the page's plain H100 numbers ran the
    # per-tensor recipes (its parenthesised ones, not rows here, the 128x128 block recipe)
    assert {c for c in runs if c.startswith("nemo2509_")} <= on
    assert not published.fp8_param_gather_of(
        {"dtype": "fp8", "source": "nemo_perf_summary",
         "fp8_recipe": "128×128 weights, 1×128 activations (parenthesised)"},
        "megatron-core", (25, 9), [])


def test_te_fp8_recipe_is_stated_in_each_row_and_costed_as_delayed():
    runs = _runs()

    def recipe_notes(case):
        return [n for n in runs[case].assumptions if n.startswith("FP8 recipe")]

    # 25.11 prints current scaling; 26.02+ print none and ran Megatron-Bridge's CS configs
    for case in ("nemo2511_llama3-70b_fp8_64", "nemo2602_llama3-70b_fp8_64"):
        (note,) = recipe_notes(case)
        assert "current scaling" in note and "costed as delayed" in note
    # 25.09's table does not say which of its two per-tensor recipes ran
    (note,) = recipe_notes("nemo2509_llama3-70b_fp8_64")
    assert "delayed scaling assumed" in note and "25.09" in note
    # a printed delayed recipe needs no note; 16-bit rows get none
    assert recipe_notes("dgxc_v2504_nemo_llama3.1-70b_fp8_64") == []
    assert recipe_notes("dgxc_v2504_nemo_llama3.1-70b_bf16_64") == []
    # every FP8 Megatron-Core row keeps the job's default recipe: the note is what changes
    for run in runs.values():
        assert "fp8_recipe" not in run.scenario["job"], run.case
    notes: list[str] = []
    published.te_fp8_recipe_note({"dtype": "fp8", "source": "nemo_perf_summary",
                                  "fp8_recipe": "MXFP8 (microscaling FP8)"},
                                 "megatron-core", (25, 11), notes)
    assert notes and "MXFP8" in notes[0]


def test_nemotron_340b_nemo1_yaml_optimizer():
    runs = _runs()
    for case, run in runs.items():
        is_yaml = case.startswith("dgxc_v24111_nemo_nemotron4-340b")
        assert (run.scenario["job"].get("optimizer_dtype") == "bf16") == is_yaml, case
        if is_yaml:
            assert run.scenario["job"]["grad_dtype"] == "bf16"


@pytest.mark.parametrize("case", [
    "dgxc_v250501_nemo_llama3.1-405b_fp8_512", "dgxc_v24111_nemo_nemotron4-340b_bf16_128",
    "dgxc_v24111_nemo_nemotron4-340b_fp8_128", "dgxc_v2505_nemo_nemotron4-15b_fp8_16",
    "nemo2511_gpt-oss-120b_bf16_64", "nemo2511_qwen3-30b-a3b_fp8_16"])
def test_published_layouts_that_ran_fit(case):
    run = _runs()[case]
    result = Runner([run]).cost(run, backend="python")
    assert result.status == "ok", (case, result.memory_gib)
    assert result.memory_gib < 80.0


def test_zero3_shard_is_the_master_copy_on_fsdp_and_jax_stacks():
    from trainscape.spec.pack import zero3_shard_param_bytes

    # PyTorch FSDP / JAX keep the fp32 sharded parameters as the optimizer's master copy
    assert zero3_shard_param_bytes("pytorch-fsdp", "fp32", 2.0) == 0.0
    assert zero3_shard_param_bytes("jax-xla", "fp32", 2.0) == 0.0
    # DeepSpeed / Megatron keep a 16-bit shard beside it; a bf16 optimizer has no master
    assert zero3_shard_param_bytes("megatron-core", "fp32", 2.0) == 2.0
    assert zero3_shard_param_bytes("pytorch-fsdp", "bf16", 2.0) == 2.0
    # only Transformer Engine under Megatron caches FP8 weights across microbatches
    assert fp8_linear_weight_extra_bytes("delayed", False, 2, "pytorch-fsdp") == 0.0
    assert fp8_linear_weight_extra_bytes("delayed", True, 2, "jax-xla") == 0.0
    assert fp8_linear_weight_extra_bytes("delayed", False, 2, "megatron-core") == 2.0


def test_zero3_gathers_two_units_in_flight_by_hand():
    from trainscape import layout as L
    from trainscape.model import llm

    job = np.zeros(L.N_JOB)
    job[L.JOB_PARAM_BYTES] = job[L.JOB_LINEAR_PARAM_COMM_BYTES] = 2.0
    # 8 layers of 1e9 parameters: two units gathered, 16-bit
    assert llm.zero3_gather_bytes(job, 8e9, 7e9, 8.0, False) == pytest.approx(2 * 1e9 * 2)
    # a single unit (one layer on the device) is gathered once, not twice
    assert llm.zero3_gather_bytes(job, 1e9, 1e9, 1.0, False) == pytest.approx(2e9)
    # FP8 weights gathered (fp8_param_gather): the linear part at 1 byte
    job[L.JOB_LINEAR_PARAM_COMM_BYTES] = 1.0
    assert llm.zero3_gather_bytes(job, 8e9, 6e9, 8.0, False) == pytest.approx(
        2 * (8e9 * 2 - 6e9 * 1) / 8)
    # kept unsharded for the step (fsdp_pp_unsharded under a pipeline): every unit
    assert llm.zero3_gather_bytes(job, 8e9, 6e9, 8.0, True) == pytest.approx(8e9 * 2 - 6e9)


def test_fsdp_stack_holds_no_16_bit_shard_beside_the_master(backend):  # noqa: F811
    from trainscape import api
    from trainscape.spec import load_scenario

    from test_spec import BASE

    sets = ["config.zero=3", "config.tp=1", "config.pp=1", "config.dp=64"]
    mc = api.evaluate(load_scenario(BASE, sets), backend=backend)
    fsdp = api.evaluate(load_scenario(BASE, sets + ["job.stack=pytorch-fsdp"]),
                        backend=backend)
    # same optimizer and gradients; the weights lose the 16-bit shard (2 bytes / 64 ranks)
    assert fsdp.mem_optimizer_gib == pytest.approx(mc.mem_optimizer_gib)
    assert fsdp.mem_grads_gib == pytest.approx(mc.mem_grads_gib)
    shard = mc.mem_weights_gib - fsdp.mem_weights_gib
    assert shard > 0
    assert mc.mem_weights_gib > shard  # the gathered units stay on both stacks
