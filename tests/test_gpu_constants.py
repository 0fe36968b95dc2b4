"""One path for GPU constants (presets.resolve_gpu): scenario files, ``--set``, the Python API
and ``validate`` pack the same system block as ``presets.gpu(name)``; per-dtype fits; the
software-stack profile; the HBM capacity unit."""

from __future__ import annotations

import copy
import json
import tomllib

import numpy as np
import pytest
from click.testing import CliRunner

import trainscape
from trainscape import calibration as cal
from trainscape import layout as L
from trainscape import presets
from trainscape.cli import main
from trainscape.spec import ScenarioError, pack_system
from trainscape.spec.pack import hbm_capacity_bytes

TIERS = [{"name": "node", "size": 8, "bandwidth_GBps": 300.0, "latency_us": 3.0},
         {"name": "fabric", "size": 64, "bandwidth_GBps": 25.0, "latency_us": 10.0}]


def raw(gpu, dtype="bf16", **job):
    return {"model": {"preset": "llama3-8b"},
            "job": {"seq_len": 4096, "global_batch": 512, "dtype": dtype, **job},
            "cluster": {"gpu": gpu, "gpus": 512, "tiers": copy.deepcopy(TIERS)}}


def explicit_table(name, **kw):
    """The GPU as a full [cluster.gpu] table of presets.gpu(name)'s numbers, no preset."""
    return {k: v for k, v in presets.gpu(name, **kw).items() if k not in ("sources", "name")}


def write_toml(path, data):
    lines = []

    def emit(prefix, table):
        scalars = {k: v for k, v in table.items() if not isinstance(v, (dict, list))
                   or (isinstance(v, list) and not any(isinstance(x, dict) for x in v))}
        if prefix:
            lines.append(f"[{prefix}]")
        for k, v in scalars.items():
            lines.append(f"{k} = {toml_value(v)}")
        for k, v in table.items():
            if isinstance(v, dict):
                emit(f"{prefix}.{k}" if prefix else k, v)
            elif isinstance(v, list) and any(isinstance(x, dict) for x in v):
                for item in v:
                    lines.append(f"[[{prefix}.{k}]]" if prefix else f"[[{k}]]")
                    for kk, vv in item.items():
                        lines.append(f"{kk} = {toml_value(vv)}")

    def toml_value(v):
        if isinstance(v, bool):
            return "true" if v else "false"
        if isinstance(v, str):
            return f'"{v}"'
        return repr(v)

    emit("", data)
    path.write_text("\n".join(lines) + "\n")
    assert tomllib.loads(path.read_text()) == data
    return path


# ---- 1. one path ---------------------------------------------------------------------------


def test_calibrated_gpu_has_fitted_constants():
    # the premise: a100-sxm-80gb has a fit that differs from its stock constants
    stock, fitted = presets.gpu("a100-sxm-80gb", calibrated=False), presets.gpu("a100-sxm-80gb")
    assert fitted["memory_efficiency"] != stock["memory_efficiency"]
    assert fitted["layer_overhead_us"] > 0.0


@pytest.mark.parametrize("name", ["a100-sxm-80gb", "h100-sxm-80gb"])
def test_scenario_file_packs_the_presets_gpu_constants(tmp_path, name):
    dtype = "fp16" if name.startswith("a100") else "bf16"
    want = pack_system(trainscape.load(raw(explicit_table(name, dtype=dtype), dtype)))
    by_name = write_toml(tmp_path / "s.toml", raw(name, dtype))
    by_table = write_toml(tmp_path / "t.toml", raw({"preset": name}, dtype))
    for src in (by_name, by_table):
        np.testing.assert_array_equal(pack_system(trainscape.load(src)), want)
    # the Python API on a dict, and a CLI-style --set choosing the GPU
    np.testing.assert_array_equal(pack_system(trainscape.load(raw(name, dtype))), want)
    other = raw("h200-141gb", dtype)
    np.testing.assert_array_equal(
        pack_system(trainscape.load(other, overrides=[f'cluster.gpu="{name}"'])), want)
    # a cluster preset naming the GPU
    sc = trainscape.load({**raw(name, dtype), "cluster": {"preset": "dgx-a100-superpod",
                                                          "gpu": name, "gpus": 512}})
    assert sc.cluster.gpu.memory_efficiency == presets.gpu(name)["memory_efficiency"]


def test_validate_uses_the_same_path():
    # `validate` (calibration.predict) builds its cluster through the scenario path
    case = cal.legacy.fitted_cases()[0]
    built = cal.legacy.selene_cluster(64)
    assert built["gpu"]["preset"] == cal.legacy.GPU
    sc = trainscape.load({**case.scenario, "cluster": built})
    # the case's own dtype and stack profile (2021-22 Megatron-LM), as a scenario file would
    g = presets.gpu(cal.legacy.GPU, dtype=case.scenario["job"]["dtype"], stack=cal.legacy.STACK)
    for key in ("gemm_efficiency_max", "gemm_half_flops", "memory_efficiency",
                "layer_overhead_us", "attention_efficiency"):
        assert getattr(sc.cluster.gpu, key) == g[key], key
    stock = trainscape.load({**case.scenario, "cluster": cal.legacy.selene_cluster(64, calibrated=False)})
    assert stock.cluster.gpu.memory_efficiency == presets.gpu(
        cal.legacy.GPU, calibrated=False, stack=cal.legacy.STACK)["memory_efficiency"]


def test_explicit_fields_override_the_fit(tmp_path):
    sc = trainscape.load(raw({"preset": "a100-sxm-80gb", "memory_efficiency": 0.8}, "fp16"))
    sys = pack_system(sc)
    assert sys[L.SYS_MEMORY_EFFICIENCY] == 0.8
    assert sys[L.SYS_LAYER_OVERHEAD_S] == pytest.approx(
        presets.gpu("a100-sxm-80gb")["layer_overhead_us"] * 1e-6, rel=1e-15)
    via_set = trainscape.load(raw("a100-sxm-80gb", "fp16"),
                              overrides=["cluster.gpu.memory_efficiency=0.8"])
    np.testing.assert_array_equal(pack_system(via_set), sys)


def test_resolve_gpu_explicit_fields_win_last():
    g = presets.resolve_gpu("a100-sxm-80gb", dtype="fp16", explicit={"memory_efficiency": 0.8})
    assert g["memory_efficiency"] == 0.8
    assert g["sources"]["memory_efficiency"] == "set in the scenario"
    assert g["layer_overhead_us"] == presets.gpu("a100-sxm-80gb")["layer_overhead_us"]


def test_calibrated_false_gives_stock_constants():
    sc = trainscape.load(raw({"preset": "a100-sxm-80gb", "calibrated": False}, "fp16"))
    np.testing.assert_array_equal(
        pack_system(sc), pack_system(trainscape.load(
            raw(explicit_table("a100-sxm-80gb", calibrated=False), "fp16"))))


def test_peak_override_edits_the_preset_table():
    sc = trainscape.load(raw("h100-sxm-80gb"), overrides=["cluster.gpu.peak_tflops.fp8=2000.0"])
    assert sc.cluster.gpu.peak_tflops["fp8"] == 2000.0
    assert sc.cluster.gpu.peak_tflops["bf16"] == presets.gpu("h100-sxm-80gb")["peak_tflops"]["bf16"]


# ---- 2. per-dtype fits -------------------------------------------------------------------


@pytest.fixture
def data_files(monkeypatch):
    """Replace calibrated.toml / stacks.toml contents (dicts) for one test."""
    real = presets._parse
    docs: dict[str, dict] = {}

    def fake(filename):
        if filename in docs:
            return docs[filename]
        return real(filename)

    monkeypatch.setattr(presets, "_parse", fake)
    return docs


H100_FIT = {
    "gemm_efficiency_max": 0.7, "memory_efficiency": 0.6, "layer_overhead_us": 20.0,
    "provenance": {"script": "test", "sources": ["all-dtype fit"]},
    "fp8": {"gemm_efficiency_max": 0.55, "provenance": {"script": "test",
                                                        "sources": ["fp8 fit"]}},
}


def test_dtype_subtable_overrides_for_that_dtype(data_files):
    data_files["calibrated.toml"] = {"h100-sxm-80gb": copy.deepcopy(H100_FIT)}
    bf16 = presets.gpu("h100-sxm-80gb", dtype="bf16")
    fp8 = presets.gpu("h100-sxm-80gb", dtype="fp8")
    assert bf16["gemm_efficiency_max"] == 0.7 and fp8["gemm_efficiency_max"] == 0.55
    assert bf16["memory_efficiency"] == fp8["memory_efficiency"] == 0.6
    assert "fp8 fit" in fp8["sources"]["gemm_efficiency_max"]
    assert "all-dtype fit" in fp8["sources"]["memory_efficiency"]
    assert presets.calibrated_dtypes("h100-sxm-80gb") == ["fp8"]
    # scenario: the job's dtype picks the table, also when --set changes the dtype
    assert pack_system(trainscape.load(raw("h100-sxm-80gb", "fp8")))[
        L.SYS_GEMM_EFFICIENCY_MAX] == 0.55
    assert pack_system(trainscape.load(raw("h100-sxm-80gb", "bf16")))[
        L.SYS_GEMM_EFFICIENCY_MAX] == 0.7
    set_fp8 = trainscape.load(raw("h100-sxm-80gb", "bf16"), overrides=['job.dtype="fp8"'])
    assert set_fp8.cluster.gpu.gemm_efficiency_max == 0.55
    # the presets table shows one more row for the fp8 fit
    rows = [r for r in presets.summary_rows("gpu") if r["id"] == "h100-sxm-80gb"]
    assert [(r["dtype"], r["gemm_eff"]) for r in rows] == [("all", 0.7), ("fp8", 0.55)]
    res = CliRunner().invoke(main, ["presets", "gpu"])
    assert res.exit_code == 0 and "fp8" in res.output


def test_calibrated_writer_round_trips_and_keeps_other_dtypes():
    doc = {"h100-sxm-80gb": copy.deepcopy(H100_FIT)}
    text = cal.format_calibrated(doc)
    assert tomllib.loads(text) == doc
    new = cal.update_calibrated(doc, "h100-sxm-80gb", {"gemm_efficiency_max": 0.75},
                                {"script": "s", "rows": 3})
    assert new["h100-sxm-80gb"]["fp8"] == H100_FIT["fp8"]
    assert "memory_efficiency" not in new["h100-sxm-80gb"]
    new = cal.update_calibrated(new, "h100-sxm-80gb", {"gemm_efficiency_max": 0.5},
                                {"script": "s"}, dtype="bf16")
    assert tomllib.loads(cal.format_calibrated(new))["h100-sxm-80gb"]["bf16"][
        "gemm_efficiency_max"] == 0.5
    shipped = tomllib.loads((presets.resources.files(presets.__name__)
                             / "calibrated.toml").read_text())
    assert tomllib.loads(cal.format_calibrated(shipped)) == shipped


# ---- 3. the software-stack profile -------------------------------------------------------


def test_shipped_stack_profiles_are_fitted_multipliers_within_bounds():
    # the reference stack changes nothing; the others carry the multipliers scripts/calibrate.py
    # fitted, each inside the bounds the fit keeps it in
    for stack in presets.STACKS:
        prof = presets.stack_profile(stack)
        assert prof["name"] and prof["description"]
        assert set(prof["scale"]) <= set(presets.STACK_SCALABLE)
        if stack == presets.DEFAULT_STACK:
            assert prof["scale"] == {}
            continue
        # attention is fitted only for a stack whose runs use a fused attention kernel (the
        # 2021-22 Megatron-LM runs computed it with GEMMs)
        expected = set(cal.STACK_FITTED_FIELDS) - (
            {"attention_efficiency"} if stack == cal.legacy.STACK else set())
        assert set(prof["scale"]) == expected, stack
        for key in expected:
            lo, hi = cal.STACK_FITTED_FIELDS[key]
            assert lo <= prof["scale"][key] <= hi, (stack, key)
    base = pack_system(trainscape.load(raw("h100-sxm-80gb")))
    np.testing.assert_array_equal(
        pack_system(trainscape.load(raw("h100-sxm-80gb", stack=presets.DEFAULT_STACK))), base)


def test_stack_profile_reaches_the_packed_block(data_files):
    data_files["stacks.toml"] = {
        "megatron-core": {"name": "m", "scale": {}},
        "pytorch-fsdp": {"name": "f", "scale": {"layer_overhead_us": 2.0,
                                                 "memory_efficiency": 0.5}},
        "jax-xla": {"name": "j", "scale": {}},
    }
    g = presets.gpu("a100-sxm-80gb")
    sc = trainscape.load(raw("a100-sxm-80gb", "fp16", stack="pytorch-fsdp"))
    sys = pack_system(sc)
    assert sys[L.SYS_MEMORY_EFFICIENCY] == g["memory_efficiency"] * 0.5
    assert sys[L.SYS_LAYER_OVERHEAD_S] == pytest.approx(g["layer_overhead_us"] * 2.0 * 1e-6,
                                                        rel=1e-15)
    # a field the scenario sets is never scaled
    sc = trainscape.load(raw({"preset": "a100-sxm-80gb", "memory_efficiency": 0.9}, "fp16",
                             stack="pytorch-fsdp"))
    assert pack_system(sc)[L.SYS_MEMORY_EFFICIENCY] == 0.9
    # --set job.stack resolves after the override
    sc = trainscape.load(raw("a100-sxm-80gb", "fp16"), overrides=['job.stack="pytorch-fsdp"'])
    assert sc.cluster.gpu.memory_efficiency == g["memory_efficiency"] * 0.5


def test_pytorch_stack_tp_overlap_is_asynctp_not_transformer_engine():
    # PyTorch's AsyncTP has its own constants: the exposed fraction fitted to torchtitan's
    # published A/B speed-ups (scripts/calibrate.py fit_async_tp; tests/test_transfer_check.py
    # holds the model to them), what its fused ops cost netted into it (slowdown 0). The
    # fusion rules alone would leave 2/8 + 2/8 x 1/8 exposed; the published runs hid less.
    overlap = presets.stack_profile("pytorch-fsdp")["tp_overlap"]
    assert 2 / 8 + 2 / 8 * 1 / 8 < overlap["tp_overlap_exposed"] < 1.0
    assert overlap["tp_overlap_slowdown"] == 0.0
    for stack in ("megatron-core", "jax-xla", "megatron-lm"):
        assert presets.stack_profile(stack)["tp_overlap"] == {}
    assert set(overlap) == set(presets.STACK_TP_OVERLAP)
    te = pack_system(trainscape.load(raw("h100-sxm-80gb")))
    fsdp = pack_system(trainscape.load(raw("h100-sxm-80gb", stack="pytorch-fsdp")))
    assert te[L.SYS_TP_OVERLAP_EXPOSED] == presets.gpu("h100-sxm-80gb")["tp_overlap_exposed"]
    assert fsdp[L.SYS_TP_OVERLAP_EXPOSED] == overlap["tp_overlap_exposed"]
    assert fsdp[L.SYS_TP_OVERLAP_SLOWDOWN] == overlap["tp_overlap_slowdown"]
    assert "AsyncTP" in presets.gpu("h100-sxm-80gb", stack="pytorch-fsdp")["sources"][
        "tp_overlap_exposed"]
    # the same TP traffic behind the same window leaves more exposed under AsyncTP
    from trainscape.model import llm
    assert llm.tp_exposed(fsdp, 1.0, 10.0, True) > llm.tp_exposed(te, 1.0, 10.0, True)
    # a value the scenario writes wins over the stack's
    sc = trainscape.load(raw({"preset": "h100-sxm-80gb", "tp_overlap_exposed": 0.5},
                             stack="pytorch-fsdp"))
    assert pack_system(sc)[L.SYS_TP_OVERLAP_EXPOSED] == 0.5


def test_unknown_stack_is_a_field_error(tmp_path):
    with pytest.raises(ScenarioError, match=r"^job\.stack: "):
        trainscape.load(raw("h100-sxm-80gb", stack="deepspeed"))
    path = write_toml(tmp_path / "s.toml", {**raw("h100-sxm-80gb", stack="deepspeed"),
                                            "config": {"tp": 8}})
    res = CliRunner().invoke(main, ["evaluate", str(path)])
    assert res.exit_code == 2 and "job.stack" in res.output


# ---- 4. HBM capacity: one unit -------------------------------------------------------------


@pytest.mark.parametrize("name", ["a100-sxm-80gb", "h100-sxm-80gb", "h200-141gb"])
def test_hbm_gb_is_binary_in_packing_and_report(name):
    from trainscape.report import hbm_capacity_gib

    sc = trainscape.load(raw(name, "fp16" if name.startswith("a100") else "bf16"))
    gb = presets.gpu(name)["hbm_gb"]
    assert pack_system(sc)[L.SYS_HBM_BYTES] == gb * 2**30 == hbm_capacity_bytes(gb)
    assert hbm_capacity_gib(sc) == gb  # the report's "total / HBM" in GiB: 80 GB = 80 GiB


def test_report_shows_the_capacity_the_kernel_tests(tmp_path):
    from rich.console import Console

    from trainscape.report import render_result

    sc = trainscape.load({**raw("h100-sxm-80gb"), "config": {"tp": 8, "pp": 1}})
    res = trainscape.evaluate(sc)
    console = Console(width=200, record=True)
    console.print(render_result(res, sc))
    assert "/ 80.00" in console.export_text()


def test_a_loaded_scenario_resolves_afresh_when_its_dtype_changes(data_files):
    data_files["calibrated.toml"] = {"h100-sxm-80gb": copy.deepcopy(H100_FIT)}
    sc = trainscape.load(raw({"preset": "h100-sxm-80gb", "memory_efficiency": 0.9}))
    assert sc.cluster.gpu.gemm_efficiency_max == 0.7
    fp8 = trainscape.load(sc, overrides=['job.dtype="fp8"'])
    assert fp8.cluster.gpu.gemm_efficiency_max == 0.55  # the fp8 fit, not the bf16 value kept
    assert fp8.cluster.gpu.memory_efficiency == 0.9  # the user's field still wins
    assert sc.with_config({"tp": 8}).cluster.gpu == sc.cluster.gpu


def test_published_runs_resolve_constants_like_a_scenario_file():
    # every published run's GPU is resolved by presets.resolve_gpu for its dtype and stack
    runner = cal.Runner()
    for stack, dtype in (("megatron-core", "fp8"), ("pytorch-fsdp", "bf16"), ("jax-xla", "bf16")):
        run = next(r for r in runner.runs if r.stack == stack and r.dtype == dtype
                   and r.gpu == "h100-sxm-80gb")
        sc = runner.scenario(run)
        g = presets.gpu(run.gpu, dtype=dtype, stack=stack)
        for key in ("gemm_efficiency_max", "gemm_half_flops", "memory_efficiency",
                    "layer_overhead_us", "attention_efficiency"):
            assert getattr(sc.cluster.gpu, key) == g.get(key, 0.0), (stack, key)


def test_2021_22_megatron_runs_use_their_own_stack_profile():
    # SC'21, Korthikanti et al. and BLOOM ran Megatron-LM / Megatron-DeepSpeed before
    # Transformer Engine: the megatron-lm profile, not Megatron-Core's constants
    assert cal.legacy.STACK == "megatron-lm" in presets.STACKS
    for case in cal.legacy.fitted_cases()[:2]:
        assert trainscape.load({**case.scenario,
                                "cluster": cal.legacy.selene_cluster(64)}).job.stack == "megatron-lm"
    from trainscape.calibration.published import stack_of
    assert stack_of("Megatron-DeepSpeed (bigscience fork) + DeepSpeed, PyTorch 1.11") == "megatron-lm"
    assert stack_of("Megatron-LM / Megatron-Core r0.8.0") == "megatron-core"
    assert stack_of("EleutherAI GPT-NeoX (Megatron + DeepSpeed)") == "megatron-lm"
    # the stack and the Megatron-DeepSpeed rules (no TP overlap, gradients after the batch,
    # no SP) read one test of the framework text
    from trainscape.calibration.published import is_megatron_deepspeed
    for name in ("Megatron-LM + DeepSpeed (MT-NLG)", "GPT-NeoX", "Megatron-DeepSpeed"):
        assert stack_of(name) == "megatron-lm" and is_megatron_deepspeed({"framework": name})
    # DeepSpeed's ZeRO engine without Megatron's layers gathers per module, as FSDP does
    assert stack_of("DeepSpeed ZeRO-3 + Hugging Face Transformers") == "pytorch-fsdp"
    # frameworks named without their parallelism: read by the family they belong to
    for name in ("torchtitan", "llm-foundry", "OLMo-core", "torchtune", "metaseq (OPT)"):
        notes = []
        assert stack_of(name, notes) == "pytorch-fsdp" and not notes, name
    for name in ("T5X", "Levanter", "AXLearn", "Praxis", "Flax", "Pax"):
        notes = []
        assert stack_of(name, notes) == "jax-xla" and not notes, name
    notes = []
    assert stack_of("Nanotron", notes) == "megatron-core" and "names no known stack" in notes[0]
    g = presets.gpu("a100-sxm-80gb")
    lm = presets.gpu("a100-sxm-80gb", stack="megatron-lm")
    for key, factor in presets.stack_profile("megatron-lm")["scale"].items():
        assert lm[key] == pytest.approx(g.get(key, 0.0) * factor)


@pytest.mark.parametrize("stack", presets.STACKS)
@pytest.mark.parametrize("gpu", ["a100-sxm-80gb", "h100-sxm-80gb", "b200"])
def test_every_stack_resolves_to_valid_fractions(stack, gpu):
    # a multiplier fitted against calibrated constants must not push stock ones past 1
    for calibrated in (True, False):
        g = presets.gpu(gpu, calibrated=calibrated, stack=stack)
        for key in presets.FRACTION_FIELDS:
            assert 0.0 < g[key] <= 1.0, (stack, gpu, calibrated, key)
        raw_sc = raw({"preset": gpu, "calibrated": calibrated}, stack=stack)
        assert trainscape.load(raw_sc).job.stack == stack


def test_schema_and_presets_name_the_same_stacks():
    # the schema keeps its own copy (it must not import presets): the two must agree
    from trainscape.spec import models as spec_models
    assert spec_models.STACKS == presets.STACKS
    assert spec_models.DEFAULT_STACK == presets.DEFAULT_STACK
    assert set(presets.names("stack")) == set(presets.STACKS)


# ---- GPUs without published runs take a calibrated GPU's fit (gpus.toml calibrated_from) ---


FITTED_FRACTIONS = ("gemm_efficiency_max", "attention_efficiency", "memory_efficiency")


@pytest.mark.parametrize("name, die", [("h200-141gb", "h100-sxm-80gb"),
                                       ("h800-sxm-80gb", "h100-sxm-80gb"),
                                       ("a800-sxm-80gb", "a100-sxm-80gb")])
def test_a_part_of_the_same_die_copies_the_fit(name, die):
    # H200 and H800 are GH100 like the H100 SXM, the A800 GA100 like the A100 SXM4 80GB: an
    # H200 scenario must not be costed with microbenchmark constants the H100 runs showed 40 %
    # optimistic
    assert presets.calibration_donor(name) == die
    for dtype in ("bf16", "fp8") if "fp8" in presets.gpu(die)["peak_tflops"] else ("bf16",):
        mine = presets.gpu(name, dtype=dtype)
        donor = presets.gpu(die, dtype=dtype)
        fitted = [k for k, *_ in presets._own_calibrated_items(die, dtype)]
        assert "gemm_efficiency_max" in fitted and "layer_overhead_us" in fitted
        for key in fitted:
            assert mine[key] == donor[key], key
            assert f"transferred from {die} (copied)" in mine["sources"][key]
    # what the part has of its own stays its own
    assert presets.gpu(name)["hbm_gb"] == presets.gpu(name, calibrated=False)["hbm_gb"]
    assert "calibrated_from" not in presets.gpu(name)


@pytest.mark.parametrize("name", ["b200", "gb200", "b300", "gb300"])
def test_another_generation_carries_the_fitted_share_of_its_stock_values(name):
    stock = presets.gpu(name, calibrated=False)
    donor_stock = presets.gpu("h100-sxm-80gb", calibrated=False)
    donor = presets.gpu("h100-sxm-80gb")
    mine = presets.gpu(name)
    own = {k for k, *_ in presets._own_calibrated_items(name, "fp8")}
    carried = [k for k in FITTED_FRACTIONS + ("gemm_half_flops",) if k not in own]
    # Blackwell Ultra fits its BF16 ceiling too (over its sibling's carried one)
    assert ("gemm_efficiency_max" in carried) == (name in ("b200", "gb200"))
    assert "memory_efficiency" in carried and "gemm_half_flops" in carried
    for key in carried:
        assert mine[key] == pytest.approx(stock[key] * donor[key] / donor_stock[key],
                                          rel=1e-12), key
    # a time is not a share of a microbenchmark figure: copied
    assert mine["layer_overhead_us"] == donor["layer_overhead_us"] > 0.0
    assert "ASSUMPTION" in mine["sources"]["memory_efficiency"]


@pytest.mark.parametrize("name", ["b200", "gb200", "b300", "gb300"])
def test_a_blackwell_fit_of_its_own_overrides_the_carried_values(name):
    # scripts/calibrate.py fits the FP8 GEMM ceiling and the attention share on Blackwell runs
    # over the ratio transfer; the other constants stay carried from the H100 fit
    assert presets.calibration_donor(name) == "h100-sxm-80gb"
    assert presets.fit_origin(name) == "h100-sxm-80gb (ratio) + own"
    table = presets.calibrated_constants(name)
    mine, fp8 = presets.gpu(name), presets.gpu(name, dtype="fp8")
    assert mine["attention_efficiency"] == table["attention_efficiency"]
    assert fp8["fp8_gemm_efficiency_max"] == table["fp8"]["fp8_gemm_efficiency_max"]
    assert "fit_blackwell" in mine["sources"]["attention_efficiency"]
    assert "fit_blackwell" in fp8["sources"]["fp8_gemm_efficiency_max"]
    assert "transferred from h100-sxm-80gb" in mine["sources"]["memory_efficiency"]
    ultra = name in ("b300", "gb300")  # its BF16 ceiling is its own fit's, B200 / GB200's carried
    assert ("fit_blackwell_ultra" in mine["sources"]["gemm_efficiency_max"]) == ultra
    assert ("transferred from h100-sxm-80gb" in mine["sources"]["gemm_efficiency_max"]) != ultra
    # the fit moves them off the carried values, and the FP8 dtype table is found
    carried_fp8 = (presets.gpu(name, calibrated=False)["fp8_gemm_efficiency_max"]
                   * presets.gpu("h100-sxm-80gb", dtype="fp8")["fp8_gemm_efficiency_max"]
                   / presets.gpu("h100-sxm-80gb", calibrated=False)["fp8_gemm_efficiency_max"])
    assert fp8["fp8_gemm_efficiency_max"] != pytest.approx(carried_fp8, rel=1e-3)
    assert "fp8" in presets.calibrated_dtypes(name)


def test_a_gpu_with_its_own_fit_or_stock_constants_takes_no_donor():
    assert presets.calibration_donor("h100-sxm-80gb") is None
    assert presets.calibration_donor("a100-sxm-80gb") is None
    assert presets.gpu("h200-141gb", calibrated=False)["gemm_efficiency_max"] == presets.get(
        "gpu", "h200-141gb")["gemm_efficiency_max"]


def test_a_donor_fit_reaches_the_packed_block_of_a_scenario(tmp_path):
    # one path: a scenario naming the H200 packs the H100's fitted GEMM curve
    sc = trainscape.load(write_toml(tmp_path / "h200.toml", raw("h200-141gb")))
    assert sc.cluster.gpu.gemm_efficiency_max == presets.gpu("h100-sxm-80gb")[
        "gemm_efficiency_max"]
    assert sc.cluster.gpu.hbm_gb == 141.0
    stock = trainscape.load(raw({"preset": "h200-141gb", "calibrated": False}))
    assert stock.cluster.gpu.gemm_efficiency_max == presets.get("gpu", "h200-141gb")[
        "gemm_efficiency_max"]


def test_presets_show_prints_each_value_with_its_source():
    out = CliRunner().invoke(main, ["presets", "gpu", "--show", "h200-141gb", "--json"])
    assert out.exit_code == 0, out.output
    shown = json.loads(out.output)
    assert shown["values"]["gemm_efficiency_max"] == presets.gpu("h100-sxm-80gb")[
        "gemm_efficiency_max"]
    assert "transferred from h100-sxm-80gb" in shown["sources"]["gemm_efficiency_max"]
    stock = json.loads(CliRunner().invoke(
        main, ["presets", "gpu", "--show", "h200-141gb", "--stock", "--json"]).output)
    assert stock["values"]["gemm_efficiency_max"] == presets.get("gpu", "h200-141gb")[
        "gemm_efficiency_max"]
    fsdp = json.loads(CliRunner().invoke(
        main, ["presets", "gpu", "--show", "h100-sxm-80gb", "--stack", "pytorch-fsdp",
               "--dtype", "fp8", "--json"]).output)
    assert fsdp["values"] == {k: v for k, v in presets.gpu(
        "h100-sxm-80gb", dtype="fp8", stack="pytorch-fsdp").items() if k != "sources"}
    text = CliRunner().invoke(main, ["presets", "model", "--show", "llama3-8b"])
    assert text.exit_code == 0 and "hidden" in text.output
    # a source naming a TOML table prints it as written, not as console markup
    table = CliRunner(env={"COLUMNS": "400"}).invoke(
        main, ["presets", "gpu", "--show", "gb300", "--dtype", "fp8"])
    assert table.exit_code == 0 and "calibrated.toml [gb300]" in table.output


@pytest.mark.parametrize("args, message", [
    (["presets", "gpu", "--show", "h300"], "'h300' is not a gpu preset; one of"),
    (["presets", "--show", "h200-141gb"], "--show needs KIND"),
    (["presets", "gpu", "--show", "b200", "--dtype", "fp4"], "--dtype"),
])
def test_presets_show_refuses_what_does_not_exist(args, message):
    out = CliRunner().invoke(main, args)
    assert out.exit_code == 2 and message in out.output


def test_the_presets_table_says_where_each_gpus_fit_comes_from():
    origin = {r["id"]: r["fit"] for r in presets.summary_rows("gpu")}
    assert origin["h100-sxm-80gb"] == "own" and origin["a100-sxm-40gb"] == "own"
    assert origin["h200-141gb"] == "h100-sxm-80gb (copy)"
    assert origin["b200"] == origin["gb200"] == "h100-sxm-80gb (ratio) + own"
    assert origin["b300"] == origin["gb300"] == "h100-sxm-80gb (ratio) + own"
    out = CliRunner().invoke(main, ["presets", "gpu"], env={"COLUMNS": "250"})
    assert out.exit_code == 0 and "h100-sxm-80gb (ratio)" in out.output


@pytest.mark.parametrize("kind", ["gpu", "model", "stack"])
def test_a_narrow_terminal_shows_whole_values_and_names_the_columns_left_out(kind):
    every = [c for c in presets.summary_rows(kind)[0] if c != "name"]
    narrow = CliRunner().invoke(main, ["presets", kind], env={"COLUMNS": "80"})
    assert narrow.exit_code == 0, narrow.output
    assert "…" not in narrow.output  # no value or header cut to an ellipsis
    assert max(len(line) for line in narrow.output.splitlines()) <= 80
    header = next(line for line in narrow.output.splitlines() if line.startswith("┃"))
    shown = [cell.strip() for cell in header.strip("┃").split("┃")]
    assert shown == every[:len(shown)] and "id" in shown
    left_out = every[len(shown):]
    if left_out:  # the caption names each column not shown, in order
        assert ("more columns at a wider terminal, or with --json or --show ID: "
                + ", ".join(left_out)) in " ".join(narrow.output.split())
    wide = CliRunner().invoke(main, ["presets", kind], env={"COLUMNS": "400"})
    assert "more columns" not in wide.output
    assert all(col in wide.output for col in every)


def test_the_id_column_is_kept_however_narrow_the_terminal():
    from trainscape.cli.presets import _columns_that_fit

    widths = {"id": 15, "a": 5, "b": 5}
    assert _columns_that_fit(["id", "a", "b"], widths, 10) == ["id"]
    # "│ id │ a │ b │": 15 + 5 + 5 and 10 frame characters
    assert _columns_that_fit(["id", "a", "b"], widths, 35) == ["id", "a", "b"]
    assert _columns_that_fit(["id", "a", "b"], widths, 34) == ["id", "a"]


@pytest.mark.parametrize("columns", ["0", "1", "39", "abc", "-80"])
def test_a_columns_value_no_table_fits_in_is_ignored(columns):
    # COLUMNS=0 used to print nothing (exit 0) and COLUMNS=1 a letter a line: a width under
    # report.MIN_COLUMNS, or not a number, leaves the piped default
    piped = CliRunner().invoke(main, ["presets", "stack"])
    odd = CliRunner().invoke(main, ["presets", "stack"], env={"COLUMNS": columns})
    assert odd.exit_code == 0 and odd.output == piped.output
    assert "pytorch-fsdp" in odd.output
