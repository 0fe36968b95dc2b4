"""Scenario inputs: validation errors (one line, exact field path), presets + overrides, packing."""

from __future__ import annotations

import copy
import itertools
import json

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from trainscape import layout as L
from trainscape.model.network import order_names
from trainscape import presets
from trainscape.spec import (
    ConfigSpec,
    ScenarioError,
    complete_order,
    encode_order,
    load_scenario,
    pack_configs,
    pack_job,
    pack_model,
    pack_system,
)
from trainscape.spec.load import parse_path, parse_scalar
from trainscape.spec.pack import optimizer_state_bytes, optimizer_traffic_bytes

# A small, fully explicit scenario: 64 GPUs in 8 nodes of 8, a 7B-class dense model.
BASE = {
    "name": "base",
    "model": {"layers": 32, "hidden": 4096, "ffn_hidden": 16384, "heads": 32, "kv_heads": 8,
              "vocab": 32000, "mlp": "swiglu"},
    "job": {"seq_len": 4096, "global_batch": 256, "dtype": "bf16", "optimizer": "adam"},
    "cluster": {
        "gpu": {"peak_tflops": {"bf16": 1000.0, "fp8": 2000.0}, "hbm_gb": 80.0,
                "hbm_bandwidth_GBps": 3000.0, "gemm_efficiency_max": 0.8,
                "gemm_half_flops": 1e9, "attention_efficiency": 0.5,
                "memory_efficiency": 0.9, "hbm_reserve_gb": 4.0, "layer_overhead_us": 20.0},
        "gpus": 64,
        "tiers": [
            {"name": "node", "size": 8, "bandwidth_GBps": 450.0, "latency_us": 2.0},
            {"name": "pod", "size": 8, "bandwidth_GBps": 50.0, "latency_us": 10.0,
             "efficiency": 0.7, "oversubscription": 2.0},
        ],
    },
    "config": {"tp": 8, "pp": 4, "dp": 2, "schedule": "1f1b"},
}

MOE = {
    "model": {"preset": "mixtral-8x7b"},
    "job": {"seq_len": 4096, "global_batch": 256},
    "cluster": {"preset": "dgx-h100-superpod", "gpus": 64},
    "config": {"tp": 2, "pp": 4, "dp": 8, "ep": 8},
}


def base() -> dict:
    return copy.deepcopy(BASE)


def error_of(raw: dict, overrides=()) -> ScenarioError:
    with pytest.raises(ScenarioError) as info:
        load_scenario(raw, overrides)
    msg = str(info.value)
    assert "\n" not in msg and msg == msg.strip(), msg
    return info.value


def assert_error(raw: dict, overrides, path: str, *fragments: str) -> str:
    msg = str(error_of(raw, overrides))
    assert msg.startswith(path + ": "), msg
    for f in fragments:
        assert f in msg, msg
    return msg


def test_base_is_valid():
    sc = load_scenario(base())
    assert sc.config.dp == 2 and sc.config.sp is True
    assert sc.model.head_dim == 128


# --------------------------------------------------------------------------------------------
# Every bad input kind: exact field path, one line, the bad value, what is allowed
# --------------------------------------------------------------------------------------------


def test_unknown_key_top_level():
    raw = base()
    raw["modle"] = {}
    assert_error(raw, (), "modle", "unknown key", "allowed: name, description, model")


def test_unknown_key_nested_lists_allowed_keys():
    assert_error(base(), ["cluster.tiers[1].bandwdith_GBps=50"],
                 "cluster.tiers[1].bandwdith_GBps", "unknown key", "got 50",
                 "allowed: name, size, bandwidth_GBps")


def test_wrong_type_string_for_int():
    assert_error(base(), ['job.seq_len="4096"'], "job.seq_len", "expected an integer",
                 "got '4096'")


def test_wrong_type_bool_for_int():
    assert_error(base(), ["config.tp=true"], "config.tp", "expected an integer", "got true")


def test_wrong_type_float_for_int():
    assert_error(base(), ["model.layers=31.5"], "model.layers", "expected an integer")


def test_wrong_type_number_field():
    assert_error(base(), ['cluster.tiers[1].bandwidth_GBps="fast"'],
                 "cluster.tiers[1].bandwidth_GBps", "expected a number", "got 'fast'")


def test_wrong_type_table():
    raw = base()
    raw["job"] = 5
    assert_error(raw, (), "job", "expected a table", "got 5")


@pytest.mark.parametrize("path", ["cluster.tiers[0].size", "model.layers", "job.global_batch",
                                  "cluster.gpus", "config.pp", "cluster.gpu.hbm_gb"])
@pytest.mark.parametrize("value", [0, -3])
def test_non_positive_sizes(path, value):
    msg = assert_error(base(), [f"{path}={value}"], path, "out of range", f"got {value}")
    # both ends of the documented range (spec/ranges.py): integers from 1, floats above 0
    assert ("allowed: 1 to " in msg) or ("allowed: > 0 to " in msg), msg


def test_efficiency_out_of_range():
    assert_error(base(), ["cluster.tiers[0].efficiency=1.5"], "cluster.tiers[0].efficiency",
                 "allowed: 1e-06 to 1)")


def test_oversubscription_below_one():
    assert_error(base(), ["cluster.tiers[1].oversubscription=0.5"],
                 "cluster.tiers[1].oversubscription", "allowed: 1 to 1e+06")


def test_missing_required_field():
    raw = base()
    del raw["model"]["vocab"]
    msg = assert_error(raw, (), "model.vocab", "missing")
    assert "got" not in msg


def test_unknown_model_preset():
    assert_error(base(), ["model.preset=gpt5"], "model.preset", "unknown model preset",
                 "got 'gpt5'", "llama3-405b")


def test_unknown_gpu_preset_name():
    raw = base()
    raw["cluster"]["gpu"] = "tpu-v9"
    assert_error(raw, (), "cluster.gpu", "unknown gpu preset", "got 'tpu-v9'", "h100-sxm-80gb")


def test_unknown_cluster_preset():
    raw = base()
    raw["cluster"] = {"preset": "nowhere", "gpus": 8}
    assert_error(raw, (), "cluster.preset", "unknown cluster preset", "dgx-h100-superpod")


def test_unknown_schedule():
    assert_error(base(), ["config.schedule=1f2b"], "config.schedule", "got '1f2b'",
                 "allowed: gpipe, 1f1b, interleaved, zb-h1, zb-h2, zb-v, dualpipe, dualpipe-v")


def test_unknown_recompute():
    assert_error(base(), ["config.recompute=some"], "config.recompute",
                 "allowed: none, selective, full, dots, dots_no_mlp_in, dots_attn, qkv_proj, "
                 "op_selective")
    assert_error(base(), ["config.recompute=save_dot_except_mlpwi"], "config.recompute",
                 "got 'save_dot_except_mlpwi'")


@pytest.mark.parametrize("name", ["dots_no_mlp_in", "dots_attn", "qkv_proj", "op_selective"])
def test_named_dot_recompute_modes_are_accepted(name):
    sc = load_scenario(base(), [f"config.recompute={name}"])
    assert sc.config.recompute == name
    assert pack_configs([sc.config])[L.CFG_RECOMPUTE, 0] == L.RECOMPUTE.index(name)


def test_unknown_dtype():
    assert_error(base(), ["job.dtype=fp4"], "job.dtype", "got 'fp4'", "allowed: bf16, fp16, fp8")


def test_dtype_without_peak_on_gpu():
    raw = base()
    raw["cluster"]["gpu"] = "a100-sxm-80gb"
    assert_error(raw, ["job.dtype=fp8"], "job.dtype", "no peak", "got 'fp8'")


def test_unknown_zero_stage():
    assert_error(base(), ["config.zero=4"], "config.zero", "allowed: 0, 1, 2, 3")


def test_unknown_optimizer():
    assert_error(base(), ["job.optimizer=lion"], "job.optimizer", "allowed: adam, sgd")


def test_tp_not_dividing_heads():
    # 12 heads, tp 8: degrees still multiply to the 64 GPUs, so the heads check is what fails.
    assert_error(base(), ["model.heads=12", "model.hidden=1536", "model.kv_heads=4"],
                 "config.tp", "heads", "got 8")


def test_degrees_not_matching_gpu_count():
    assert_error(base(), ["config.dp=4"], "config.dp", "GPU count", "got 4")


def test_dp_derived_when_omitted():
    raw = base()
    del raw["config"]["dp"]
    assert load_scenario(raw).config.dp == 2


def test_dp_not_derivable():
    raw = base()
    del raw["config"]["dp"]
    assert_error(raw, ["config.pp=3"], "config.dp", "cannot be derived")


def test_global_batch_not_divisible_by_dp_mbs():
    assert_error(base(), ["config.mbs=3"], "config.mbs", "global batch", "got 3")


@pytest.mark.parametrize("order,fragment", [
    ("tp-cp-dp", "pp has degree 4 but is missing"),
    ("tp-pp-tp-dp", "appears twice"),
    ("tp-xp-pp-dp", "unknown dimension 'xp'"),
    ("", "expected dimension names"),
])
def test_order_not_a_permutation(order, fragment):
    assert_error(base(), [f'config.order="{order}"'], "config.order", fragment)


def test_order_may_omit_degree_one_dims_and_ep():
    sc = load_scenario(base(), ["config.order=tp-pp-dp"])
    assert sc.config.order_dims() == ("tp", "pp", "ep", "dp", "cp")
    sc = load_scenario(MOE, ["config.order=tp-dp-pp"])  # ep = 8 omitted: placed before dp
    assert sc.config.order_dims() == ("tp", "ep", "dp", "pp", "cp")


def test_tiers_cannot_hold_the_gpus():
    assert_error(base(), ["cluster.gpus=128", "config.dp=4"], "cluster.tiers",
                 "hold only 64 GPUs", "got [8, 8]")


def test_too_many_tiers():
    raw = base()
    tier = {"name": "t", "size": 2, "bandwidth_GBps": 10.0, "latency_us": 1.0}
    raw["cluster"]["tiers"] = [dict(tier) for _ in range(L.MAX_TIERS + 1)]
    assert_error(raw, (), "cluster.tiers", "too many items", f"at most {L.MAX_TIERS}")


def test_no_tiers():
    assert_error(base(), ["cluster.tiers=[]"], "cluster.tiers", "too few items")


def test_ep_not_dividing_dp():
    assert_error(MOE, ["config.ep=16"], "config.ep", "dp", "got 16")


def test_ep_not_dividing_experts():
    # dp 8 holds ep 4 ... but try 8 experts with ep dividing dp and not experts: use 6 experts
    assert_error(MOE, ["model.experts=6", "model.top_k=2", "config.ep=4"], "config.ep",
                 "experts", "got 4")


def test_ep_on_dense_model():
    assert_error(base(), ["config.ep=2"], "config.ep", "got 2")


def test_fewer_layers_than_stages():
    assert_error(base(), ["model.layers=3"], "config.pp", "layers", "got 4")


def test_fewer_layers_than_interleaved_chunks():
    assert_error(base(), ["config.schedule=interleaved", "config.vpp=16"], "config.pp",
                 "layers", "pipeline_edge_layers")


def test_layers_not_divisible_by_stages_split_unevenly():
    # Megatron-LM and Llama 3 split layers unevenly (the slowest stage costs ceil)
    sc = load_scenario(base(), ["model.layers=30"])
    assert sc.model.layers == 30
    sc = load_scenario(base(), ["config.schedule=interleaved", "config.vpp=3"])
    assert sc.config.vpp == 3


def test_pipeline_edge_layers_and_dropout():
    sc = load_scenario(base(), [])
    assert sc.job.pipeline_edge_layers == 0 and sc.job.dropout is True
    sc = load_scenario(base(), ["job.pipeline_edge_layers=1", "job.dropout=false"])
    job = pack_job(sc)
    assert job[L.JOB_PIPELINE_EDGE_LAYERS] == 1 and job[L.JOB_DROPOUT] == 0
    assert_error(base(), ["job.pipeline_edge_layers=16"], "job.pipeline_edge_layers",
                 "model.layers", "got 16")
    assert_error(base(), ["job.pipeline_edge_layers=-1"], "job.pipeline_edge_layers")


def test_vpp_only_with_interleaved():
    assert_error(base(), ["config.vpp=2"], "config.vpp", "interleaved", "got 2")


def test_interleaved_needs_vpp():
    assert_error(base(), ["config.schedule=interleaved"], "config.vpp", "got 1")


def test_schedule_specific_constraint():
    # DualPipe needs an even number of stages and microbatches >= 2 * pp (DeepSeek DualPipe):
    # 256 sequences / (dp 2 * mbs 64) = 2 microbatches < 2 * pp = 8.
    assert_error(base(), ["config.schedule=dualpipe", "config.mbs=64"], "config.schedule",
                 "got 'dualpipe'")


def test_cp_not_dividing_sequence():
    assert_error(base(), ["job.seq_len=4095", "config.cp=2", "config.dp=1"], "config.cp",
                 "got 2")


def test_kv_heads_not_dividing_heads():
    assert_error(base(), ["model.kv_heads=5"], "model.kv_heads", "must divide heads", "got 5")


def test_head_dim_required_when_heads_do_not_divide_hidden():
    assert_error(base(), ["model.heads=24", "model.kv_heads=8"], "model.head_dim", "required")


def test_moe_fields_on_dense_model():
    assert_error(base(), ["model.top_k=2"], "model.top_k", "MoE", "got 2")


def test_moe_top_k_out_of_range():
    assert_error(MOE, ["model.top_k=9"], "model.top_k", "1 to 8", "got 9")


def test_hbm_reserve_exceeds_capacity():
    assert_error(base(), ["cluster.gpu.hbm_reserve_gb=90"], "cluster.gpu.hbm_reserve_gb",
                 "smaller than hbm_gb")


def test_space_unknown_axis():
    assert_error(base(), ["space.tensor=[1, 2]"], "space.tensor", "unknown key",
                 "allowed: tp, cp, pp")


def test_space_bad_values_per_axis():
    assert_error(base(), ["space.tp=[1, 0]"], "space.tp[1]", "out of range")
    assert_error(base(), ['space.schedule=["1f1b", "2f2b"]'], "space.schedule[1]",
                 "got '2f2b'")
    assert_error(base(), ['space.order=["tp-cp-dp-pp-xx"]'], "space.order[0]",
                 "unknown dimension 'xx'")
    assert_error(base(), ['space.order="most"'], "space.order", "\"all\"")
    assert_error(base(), ["space.pp=[]"], "space.pp", "too few items")


def test_space_is_stored_not_enumerated():
    sc = load_scenario(base(), ["space.tp=[1, 2, 4]", 'space.order="all"',
                                 'space.schedule=["1f1b", "zb-v"]'])
    assert sc.space.axes() == {"tp": [1, 2, 4], "schedule": ["1f1b", "zb-v"], "order": "all"}


def test_set_path_errors():
    assert_error(base(), ["cluster.tiers[5].size=2"], "cluster.tiers[5]", "no such item",
                 "index 0 to 1")
    assert_error(base(), ["job.seq_len"], "--set", "expected path=value")
    assert_error(base(), ["job..seq_len=3"], "--set", "not a field path")


def test_bad_value_with_newline_stays_one_line():
    msg = str(error_of(base(), [("job.dtype", "bf16\nfp8")]))
    assert msg.startswith("job.dtype: ")


@given(st.sampled_from(["model.layers", "model.hidden", "job.seq_len", "job.dtype",
                        "cluster.gpus", "cluster.tiers[0].latency_us", "config.tp",
                        "config.schedule", "config.order", "cluster.gpu.hbm_gb",
                        "config.sp", "job.flash_attention"]),
       st.one_of(st.text(max_size=30).map(lambda s: "?" + s), st.lists(st.integers(), max_size=3),
                 st.dictionaries(st.text(max_size=3), st.integers(), min_size=1, max_size=2)))
def test_junk_anywhere_gives_one_line_error_at_its_path(path, junk):
    raw = base()
    with pytest.raises(ScenarioError) as info:
        load_scenario(raw, [(path, junk)])
    msg = str(info.value)
    assert "\n" not in msg
    assert msg.startswith(path)


# --------------------------------------------------------------------------------------------
# Files
# --------------------------------------------------------------------------------------------


def test_missing_file(tmp_path):
    path = tmp_path / "nope.toml"
    with pytest.raises(ScenarioError, match="file not found"):
        load_scenario(path)


def test_toml_syntax_error_names_the_line(tmp_path):
    path = tmp_path / "bad.toml"
    path.write_text('name = "x"\n[job]\nseq_len = = 3\n')
    msg = str(error_of_path(path))
    assert msg.startswith(str(path) + ": invalid TOML") and "line 3" in msg


def test_json_scenarios_are_accepted(tmp_path):
    path = tmp_path / "s.json"
    path.write_text(json.dumps(base()))
    sc = load_scenario(path)
    assert sc.config.tp == 8 and sc.name == "base"


def test_json_syntax_error(tmp_path):
    path = tmp_path / "s.json"
    path.write_text('{"model": {,}')
    msg = str(error_of_path(path))
    assert "invalid JSON" in msg and "line 1" in msg


def test_name_defaults_to_file_stem(tmp_path):
    raw = base()
    del raw["name"]
    path = tmp_path / "my-run.json"
    path.write_text(json.dumps(raw))
    assert load_scenario(path).name == "my-run"


def error_of_path(path) -> ScenarioError:
    with pytest.raises(ScenarioError) as info:
        load_scenario(path)
    assert "\n" not in str(info.value)
    return info.value


def test_examples_load(example_path):
    sc = load_scenario(example_path)
    assert sc.config is not None and sc.space is not None


# --------------------------------------------------------------------------------------------
# Presets and overrides
# --------------------------------------------------------------------------------------------


def test_model_preset_with_field_override():
    raw = base()
    raw["model"] = {"preset": "llama3-405b", "layers": 32}
    sc = load_scenario(raw, ["config.tp=8"])
    ref = presets.model("llama3-405b")
    assert sc.model.layers == 32 and sc.model.hidden == ref["hidden"]
    assert sc.model.kv_heads == ref["kv_heads"] and sc.model.name == ref["name"]


def test_cluster_preset_gives_gpu_and_tiers():
    sc = load_scenario(MOE)
    ref = presets.cluster("dgx-h100-superpod")
    assert [t.size for t in sc.cluster.tiers] == [t["size"] for t in ref["tiers"]]
    assert sc.cluster.gpu.preset == ref["gpu"]
    assert sc.cluster.gpu.hbm_gb == presets.gpu(ref["gpu"])["hbm_gb"]


def test_override_reaches_into_preset_tiers_and_gpu():
    sc = load_scenario(MOE, ["cluster.tiers[1].bandwidth_GBps=100", "cluster.gpu.hbm_gb=96"])
    assert sc.cluster.tiers[1].bandwidth_GBps == 100.0
    assert sc.cluster.gpu.hbm_gb == 96.0


def test_override_gpu_field_when_gpu_is_a_name():
    raw = base()
    raw["cluster"]["gpu"] = "h100-sxm-80gb"
    sc = load_scenario(raw, ["cluster.gpu.hbm_reserve_gb=2"])
    assert sc.cluster.gpu.hbm_reserve_gb == 2.0
    assert sc.cluster.gpu.preset == "h100-sxm-80gb"


def test_override_selects_preset_before_merging():
    raw = base()
    raw["cluster"]["gpu"] = "h100-sxm-80gb"
    sc = load_scenario(raw, ["cluster.gpu=a100-sxm-80gb", "model.preset=llama3-8b"])
    assert sc.cluster.gpu.preset == "a100-sxm-80gb"
    assert sc.model.hidden == presets.model("llama3-8b")["hidden"]


def test_overrides_parse_toml_scalars():
    assert parse_scalar("4096") == 4096
    assert parse_scalar("1e3") == 1000.0
    assert parse_scalar("true") is True
    assert parse_scalar("interleaved") == "interleaved"
    assert parse_scalar("tp-cp-pp-dp") == "tp-cp-pp-dp"
    assert parse_scalar("[1, 2]") == [1, 2]
    assert parse_path("cluster.tiers[2].bandwidth_GBps") == ["cluster", "tiers", 2,
                                                             "bandwidth_GBps"]


def test_overrides_do_not_mutate_input():
    raw = base()
    before = copy.deepcopy(raw)
    load_scenario(raw, ["job.global_batch=512"])
    assert raw == before


# --------------------------------------------------------------------------------------------
# Packing: values at the layout's indices, in SI units
# --------------------------------------------------------------------------------------------


def test_pack_system_units_and_indices():
    sc = load_scenario(base(), ["job.dtype=fp8"])
    sys = pack_system(sc)
    assert sys.dtype == np.float64 and sys.shape == (L.N_SYS,)
    assert sys[L.SYS_GPUS] == 64 and sys[L.SYS_N_TIERS] == 2
    # FP8 as Transformer Engine runs it: the linear layers at the fp8 peak, the rest at bf16's
    assert sys[L.SYS_PEAK_FLOPS] == 1000.0e12  # the bf16 peak, TFLOP/s -> FLOP/s
    assert sys[L.SYS_LINEAR_PEAK_FLOPS] == 2000.0e12  # the fp8 peak
    # no fp8 curve in this GPU table: the linear layers keep the bf16 curve's constants
    assert sys[L.SYS_LINEAR_EFFICIENCY_MAX] == 0.8
    assert sys[L.SYS_LINEAR_HALF_FLOPS] == 1e9
    assert sys[L.SYS_HBM_BYTES] == 80 * 2**30  # HBM capacity is binary (81920 MiB)
    assert sys[L.SYS_HBM_BANDWIDTH] == 3000e9
    assert sys[L.SYS_HBM_RESERVE_BYTES] == 4 * 2**30
    assert sys[L.SYS_GEMM_EFFICIENCY_MAX] == 0.8
    assert sys[L.SYS_GEMM_HALF_FLOPS] == 1e9
    assert sys[L.SYS_ATTENTION_EFFICIENCY] == 0.5
    assert sys[L.SYS_MEMORY_EFFICIENCY] == 0.9
    assert sys[L.SYS_LAYER_OVERHEAD_S] == pytest.approx(20e-6, rel=1e-15)
    t1 = L.SYS_TIER_BASE + 1 * L.N_TIER
    assert sys[t1 + L.TIER_SIZE] == 8
    assert sys[t1 + L.TIER_BANDWIDTH] == 50e9
    assert sys[t1 + L.TIER_LATENCY] == pytest.approx(10e-6, rel=1e-15)
    assert sys[t1 + L.TIER_EFFICIENCY] == 0.7
    assert sys[t1 + L.TIER_OVERSUBSCRIPTION] == 2.0
    t0 = L.SYS_TIER_BASE
    assert sys[t0 + L.TIER_EFFICIENCY] == 0.8 and sys[t0 + L.TIER_OVERSUBSCRIPTION] == 1.0
    assert np.all(sys[L.SYS_TIER_BASE + 2 * L.N_TIER:] == 0.0)  # unused tier slots


def test_pack_system_bf16_peak():
    assert pack_system(load_scenario(base()))[L.SYS_PEAK_FLOPS] == 1000.0e12


def test_fp16_peak_falls_back_to_bf16():
    sc = load_scenario(base(), ["job.dtype=fp16"])
    assert pack_system(sc)[L.SYS_PEAK_FLOPS] == 1000.0e12


def test_pack_model_dense():
    mdl = pack_model(load_scenario(base()))
    assert mdl.dtype == np.float64 and mdl.shape == (L.N_MODEL,)
    expect = {L.MDL_LAYERS: 32, L.MDL_HIDDEN: 4096, L.MDL_FFN_HIDDEN: 16384, L.MDL_HEADS: 32,
              L.MDL_KV_HEADS: 8, L.MDL_HEAD_DIM: 128, L.MDL_VOCAB: 32000, L.MDL_SWIGLU: 1,
              L.MDL_EXPERTS: 0, L.MDL_TOP_K: 0, L.MDL_EXPERT_FFN_HIDDEN: 0,
              L.MDL_MOE_EVERY: 0, L.MDL_SHARED_EXPERTS: 0}
    assert {i: mdl[i] for i in expect} == expect


def test_pack_model_moe_and_gelu():
    mdl = pack_model(load_scenario(MOE, ["model.mlp=gelu", "model.shared_experts=1"]))
    ref = presets.model("mixtral-8x7b")
    assert mdl[L.MDL_SWIGLU] == 0
    assert mdl[L.MDL_EXPERTS] == ref["experts"] and mdl[L.MDL_TOP_K] == ref["top_k"]
    assert mdl[L.MDL_EXPERT_FFN_HIDDEN] == ref["expert_ffn_hidden"]
    assert mdl[L.MDL_MOE_EVERY] == 1 and mdl[L.MDL_SHARED_EXPERTS] == 1


def test_moe_defaults():
    raw = base()
    raw["model"].update(experts=4, top_k=1)
    sc = load_scenario(raw)
    assert sc.model.moe_every == 1 and sc.model.expert_ffn_hidden == 16384


def test_pack_job_adam_fp32_grads():
    job = pack_job(load_scenario(base()))
    assert job.dtype == np.float64 and job.shape == (L.N_JOB,)
    assert job[L.JOB_SEQ_LEN] == 4096 and job[L.JOB_GLOBAL_BATCH] == 256
    assert job[L.JOB_ACTIVATION_BYTES] == 2 and job[L.JOB_PARAM_BYTES] == 2
    assert job[L.JOB_GRAD_BYTES] == 4 and job[L.JOB_GRAD_COMM_BYTES] == 4
    assert job[L.JOB_OPTIMIZER_BYTES] == 12  # ZeRO §3.1: K = 12
    # read fp32 grad 4 + r/w master, m, v 24 + write bf16 weight 2
    assert job[L.JOB_OPTIMIZER_TRAFFIC_BYTES] == 30
    assert job[L.JOB_COMM_BYTES] == 2 and job[L.JOB_FLASH_ATTENTION] == 1


def test_pack_job_sgd_bf16_grads_no_flash_fp8():
    job = pack_job(load_scenario(base(), ["job.optimizer=sgd", "job.grad_dtype=bf16",
                                          "job.flash_attention=false", "job.dtype=fp8"]))
    assert job[L.JOB_GRAD_BYTES] == 2 and job[L.JOB_GRAD_COMM_BYTES] == 2
    assert job[L.JOB_PARAM_BYTES] == 2  # fp8 compute keeps bf16 weights
    assert job[L.JOB_OPTIMIZER_BYTES] == 8 + 4  # master + momentum + fp32 main grad
    assert job[L.JOB_OPTIMIZER_TRAFFIC_BYTES] == 4 + 16 + 2 + (2 + 4)
    assert job[L.JOB_FLASH_ATTENTION] == 0


def test_megatron_bytes_per_parameter():
    # Megatron Core distributed optimizer guide: bf16 params + fp32 grads = 18 bytes/param,
    # fp16 params + fp16 grads = 20 (without sharding).
    assert 2 + 4 + optimizer_state_bytes("adam", "fp32") == 18
    assert 2 + 2 + optimizer_state_bytes("adam", "bf16") == 20
    assert optimizer_traffic_bytes("adam", "fp32", 2) == 30


def test_pack_configs_indices_and_codes():
    c = ConfigSpec(tp=4, cp=2, pp=8, dp=16, ep=2, mbs=2, vpp=3, schedule="interleaved",
                   recompute="selective", zero=3, sp=False, order="tp-cp-pp-dp",
                   tp_overlap=False, dp_overlap=True)
    cfg = pack_configs([c])
    assert cfg.dtype == np.int32 and cfg.shape == (L.N_CFG, 1)
    col = cfg[:, 0]
    assert (col[L.CFG_TP], col[L.CFG_CP], col[L.CFG_PP], col[L.CFG_DP], col[L.CFG_EP],
            col[L.CFG_MBS], col[L.CFG_VPP]) == (4, 2, 8, 16, 2, 2, 3)
    assert col[L.CFG_SCHEDULE] == L.SCHED_INTERLEAVED
    assert col[L.CFG_RECOMPUTE] == L.RECOMPUTE_SELECTIVE
    assert col[L.CFG_ZERO] == 3 and col[L.CFG_SP] == 0
    assert col[L.CFG_TP_OVERLAP] == 0 and col[L.CFG_DP_OVERLAP] == 1
    assert col[L.CFG_ORDER] == L.order_from_names(["tp", "cp", "pp", "ep", "dp"])


def test_pack_configs_dict_columns_match_list():
    specs = [ConfigSpec(tp=8, pp=4, dp=2), ConfigSpec(tp=2, pp=2, dp=16, schedule="zb-v",
                                                       order="pp-dp-tp-cp-ep")]
    cols = {"tp": [8, 2], "pp": [4, 2], "dp": [2, 16], "schedule": ["1f1b", "zb-v"],
            "order": ["tp-cp-ep-dp-pp", "pp-dp-tp-cp-ep"]}
    assert np.array_equal(pack_configs(specs), pack_configs(cols))
    coded = dict(cols, schedule=np.array([L.SCHED_1F1B, L.SCHED_ZB_V]),
                 order=np.array([encode_order(o) for o in cols["order"]]))
    assert np.array_equal(pack_configs(specs), pack_configs(coded))


def test_pack_configs_derives_dp():
    cfg = pack_configs([ConfigSpec(tp=8, pp=4)], gpus=64)
    assert cfg[L.CFG_DP, 0] == 2
    assert pack_configs({"tp": [8, 4], "pp": [4, 4]}, gpus=64)[L.CFG_DP].tolist() == [2, 4]
    with pytest.raises(ScenarioError, match="config.dp"):
        pack_configs([ConfigSpec(tp=8)])


def test_pack_configs_rejects_unknown_columns_and_lengths():
    with pytest.raises(ScenarioError, match="configs.tq"):
        pack_configs({"tq": [1]})
    with pytest.raises(ScenarioError, match="configs.pp"):
        pack_configs({"tp": [1, 2], "pp": [1], "dp": [1, 1]})


def test_complete_order_rules():
    assert complete_order(("tp", "cp", "pp", "dp")) == ("tp", "cp", "pp", "ep", "dp")
    assert complete_order(("tp", "pp")) == ("tp", "pp", "cp", "ep", "dp")
    assert complete_order(L.DIMS) == L.DIMS


@given(st.permutations(L.DIMS))
def test_order_encoding_round_trips(perm):
    code = encode_order("-".join(perm))
    assert 0 <= code < L.N_ORDERS
    assert code == L.order_from_names(perm)
    assert order_names(code) == tuple(perm)


def test_every_order_has_a_distinct_code():
    codes = {encode_order("-".join(p)) for p in itertools.permutations(L.DIMS)}
    assert codes == set(range(L.N_ORDERS))


@given(tp=st.sampled_from([1, 2, 4, 8]), cp=st.sampled_from([1, 2]),
       pp=st.sampled_from([1, 2, 4]), mbs=st.sampled_from([1, 2]),
       schedule=st.sampled_from(L.SCHEDULES), recompute=st.sampled_from(L.RECOMPUTE),
       zero=st.sampled_from([0, 1, 2, 3]), order=st.permutations(L.DIMS))
def test_pack_configs_list_equals_columns(tp, cp, pp, mbs, schedule, recompute, zero, order):
    spec = ConfigSpec(tp=tp, cp=cp, pp=pp, mbs=mbs, schedule=schedule, recompute=recompute,
                      zero=zero, order="-".join(order))
    cfg = pack_configs([spec], gpus=64)
    cols = pack_configs({"tp": [tp], "cp": [cp], "pp": [pp], "mbs": [mbs],
                         "schedule": [schedule], "recompute": [recompute], "zero": [zero],
                         "order": ["-".join(order)]}, gpus=64)
    assert np.array_equal(cfg, cols)
    assert cfg[L.CFG_SP, 0] == (tp > 1)


def test_pack_moe_all_to_all_widths():
    # DeepSeek-V3 §3.3.2: FP8 dispatch with 1x128 fp32 tile scales, BF16 combine
    bf16 = pack_job(load_scenario(base()))
    assert bf16[L.JOB_DISPATCH_BYTES] == 2 and bf16[L.JOB_COMBINE_BYTES] == 2
    fp8 = pack_job(load_scenario(base(), ["job.dtype=fp8"]))
    assert fp8[L.JOB_DISPATCH_BYTES] == 1 + 4 / 128 and fp8[L.JOB_COMBINE_BYTES] == 2
    mixed = pack_job(load_scenario(base(), ['job.moe_dispatch_dtype="fp8"']))
    assert mixed[L.JOB_DISPATCH_BYTES] == 1.03125 and mixed[L.JOB_COMBINE_BYTES] == 2
    wide = pack_job(load_scenario(base(), ["job.dtype=fp8", 'job.moe_dispatch_dtype="bf16"']))
    assert wide[L.JOB_DISPATCH_BYTES] == 2
    with pytest.raises(ScenarioError, match=r"^job\.moe_combine_dtype: "):
        load_scenario(base(), ['job.moe_combine_dtype="int4"'])


def test_max_route_nodes_is_an_moe_field():
    raw = base()
    raw["model"].update(experts=64, top_k=8, max_route_nodes=4)
    assert pack_model(load_scenario(raw))[L.MDL_MAX_ROUTE_NODES] == 4
    raw["model"].update(max_route_nodes=0)
    assert pack_model(load_scenario(raw))[L.MDL_MAX_ROUTE_NODES] == 0
    dense = base()
    dense["model"]["max_route_nodes"] = 2
    with pytest.raises(ScenarioError, match=r"^model\.max_route_nodes: "):
        load_scenario(dense)
    raw["model"].update(max_route_nodes=-1)
    with pytest.raises(ScenarioError, match=r"^model\.max_route_nodes: "):
        load_scenario(raw)


def assert_each_rejected(section, start, cases):
    """Each ``(field, value, pattern)``: the base scenario with ``start`` in ``section`` and
    ``section.field = value`` fails with a message matching ``pattern``."""
    for field, value, pattern in cases:
        bad = base()
        bad[section].update(start)
        bad[section][field] = value
        with pytest.raises(ScenarioError, match=pattern):
            load_scenario(bad)


def test_sliding_window_fields_pack_and_reject_what_cannot_run():
    raw = base()
    raw["model"].update(attention_window=128, full_attention_every=2)
    mdl = pack_model(load_scenario(raw))
    assert mdl[L.MDL_ATTENTION_WINDOW] == 128 and mdl[L.MDL_FULL_ATTENTION_EVERY] == 2
    assert pack_model(load_scenario(base()))[L.MDL_ATTENTION_WINDOW] == 0
    layers = raw["model"]["layers"]
    assert_each_rejected("model", {"attention_window": 128, "full_attention_every": 2}, (
        ("attention_window", -1, r"^model\.attention_window: "),
        ("attention_window", 12.5, r"^model\.attention_window: "),
        ("full_attention_every", layers + 1, r"^model\.full_attention_every: .*0 to "),
        ("full_attention_every", -2, r"^model\.full_attention_every: ")))
    # a stride without a window: every layer attends fully (a [space] may sweep the window
    # through 0 and keep the model's stride), costed exactly as no window
    from trainscape.backends import evaluate_blocks

    lone = base()
    lone["model"]["full_attention_every"] = 2
    cols = []
    for raw in (lone, base()):
        sc = load_scenario(raw)
        cfg = pack_configs([sc.config], gpus=sc.cluster.gpus)
        cols.append(evaluate_blocks(pack_system(sc), pack_model(sc), pack_job(sc), cfg,
                                    backend="python")[:, 0])
    np.testing.assert_array_equal(cols[0], cols[1])


def test_mtp_layers_pack_and_reject_what_cannot_run():
    raw = base()
    raw["model"]["mtp_layers"] = 1
    assert pack_model(load_scenario(raw))[L.MDL_MTP_LAYERS] == 1
    assert pack_model(load_scenario(base()))[L.MDL_MTP_LAYERS] == 0
    layers = raw["model"]["layers"]
    assert_each_rejected("model", {}, (
        ("mtp_layers", -1, r"^model\.mtp_layers: "),
        ("mtp_layers", 1.5, r"^model\.mtp_layers: "),
        ("mtp_layers", layers + 1, r"^model\.mtp_layers: more multi-token .*0 to ")))


def test_stated_stage_layers_pack_and_reject_more_than_the_model():
    raw = base()
    raw["job"].update(pipeline_first_stage_layers=3, pipeline_last_stage_layers=2)
    jb = pack_job(load_scenario(raw))
    assert jb[L.JOB_PIPELINE_FIRST_STAGE_LAYERS] == 3 and jb[L.JOB_PIPELINE_LAST_STAGE_LAYERS] == 2
    layers = raw["model"]["layers"]
    assert_each_rejected("job", {"pipeline_first_stage_layers": 3}, (
        ("pipeline_first_stage_layers", -1, r"^job\.pipeline_first_stage_layers: "),
        ("pipeline_last_stage_layers", 2.5, r"^job\.pipeline_last_stage_layers: "),
        ("pipeline_last_stage_layers", layers,
         r"^job\.pipeline_last_stage_layers: the first and last pipeline stages would hold "
         r"more layers than the model has")))
