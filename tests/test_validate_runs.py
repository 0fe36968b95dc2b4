"""``trainscape validate --runs``: a user's own files of published runs, in the calibration
set's column layout, costed like the shipped rows -- and every bad file, column or cell an exit
status 2 with one message naming where it is and what is allowed."""

from __future__ import annotations

import csv
import json
import math
import os
from pathlib import Path

import pytest
from click.testing import CliRunner

from trainscape.calibration.published import PUBLISHED_FILES, read_rows
from trainscape.calibration.runs_file import REQUIRED
from trainscape.cli import main

#: shipped rows from four sources (dense and MoE, BF16 and FP8, NeMo, MaxText, FSDP)
SHIPPED_CASES = ("dgxc_v2504_nemo_llama3.1-8b_bf16_8", "dgxc_v2502_maxtext_llama3-70b_fp8_512",
                 "nemo2606_qwen3-30b-a3b_fp8_16", "mpt_h100_bf16_7b_s2048_g512",
                 "mcore_r080_gpt70b_768")


def _shipped_rows() -> dict[str, dict[str, str]]:
    rows = {}
    for filename, _ in PUBLISHED_FILES.values():
        for row in read_rows(filename):
            rows[row["case"]] = row
    return rows


def _write(path, rows, columns=None):
    columns = columns or list(rows[0])
    with open(path, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=columns, extrasaction="ignore")
        w.writeheader()
        w.writerows(rows)
    return path


def _validate(*args):
    result = CliRunner().invoke(main, ["validate", "--backend", "c", *args])
    return result


def _json(*args):
    result = _validate("--json", *args)
    assert result.exit_code == 0, result.output
    return json.loads(result.output)


@pytest.fixture(scope="module")
def shipped_json():
    return _json()


def test_shipped_rows_in_a_file_cost_as_validate_costs_them(tmp_path, shipped_json):
    rows = _shipped_rows()
    path = _write(tmp_path / "mine.csv", [rows[c] for c in SHIPPED_CASES])
    mine = {r["case"]: r for r in _json("--runs", str(path))["rows"]}
    ref = {r["case"]: r for r in shipped_json["rows"]}
    assert set(mine) == set(SHIPPED_CASES)
    for case in SHIPPED_CASES:
        a, b = mine[case], ref[case]
        for key in ("predicted_step_s", "published_step_s", "status", "memory_gib", "config",
                    "assumptions", "counted", "group", "stack"):
            assert a[key] == b[key], (case, key)
        assert a["holdout"] is False  # a user's row was never in the fit


def test_a_directory_is_every_csv_in_it_and_an_empty_source_is_the_file_name(tmp_path):
    rows = _shipped_rows()
    one = dict(rows[SHIPPED_CASES[0]], source="")
    _write(tmp_path / "lab_a.csv", [one])
    _write(tmp_path / "lab_b.csv", [rows[SHIPPED_CASES[3]]])
    (tmp_path / "readme.txt").write_text("not a csv")
    data = _json("--runs", str(tmp_path))
    assert [r["group"] for r in data["rows"]] == ["lab_a", "llm_foundry_mpt"]
    assert set(data["summary"]) == {"lab_a", "llm_foundry_mpt"}


def _minimal_row(**changes):
    """A published run with only the required columns (and the model's GQA and MLP widths, and
    its context parallelism): Llama 3 8B on 8 H100, BF16, measured as tokens/s/GPU in
    ``metric`` / ``value`` alone."""
    row = {"case": "mine_llama3-8b_8", "gpu": "h100-sxm-80gb", "framework": "NeMo 25.04",
           "dtype": "bf16", "model": "llama3-8b", "layers": "32", "hidden": "4096",
           "heads": "32", "vocab": "128256", "mlp": "swiglu", "gpus": "8", "tp": "1",
           "seq_len": "8192", "global_batch": "128", "metric": "tokens_per_s_per_gpu",
           "value": "15000", "kv_heads": "8", "ffn_hidden": "14336", "cp": "2"}
    row.update(changes)
    return row


def test_the_measurement_may_be_given_as_metric_and_value_alone(tmp_path):
    path = _write(tmp_path / "runs.csv", [_minimal_row()])
    (row,) = _json("--runs", str(path))["rows"]
    assert row["published_step_s"] == pytest.approx(8192 * 128 / (15000 * 8), rel=1e-12)
    assert row["status"] == "ok" and math.isfinite(row["error_pct"])
    # what the file did not state is named in the row
    assert any("recompute not printed" in a for a in row["assumptions"])


def _one_run(tmp_path, **changes):
    """``(runner, run)`` of a runs file holding :func:`_minimal_row` with ``changes``."""
    from trainscape.calibration.runs_file import runner_for

    runner = runner_for([str(_write(tmp_path / "runs.csv", [_minimal_row(**changes)]))])
    (run,) = runner.runs
    return runner, run


@pytest.mark.parametrize("name, gpus, gpu, preset, node, fabric", [
    ("GB200 NVL72", "144", "gb200", "gb200-nvl72", 72, 50.0),
    ("GB300 NVL72", "144", "gb300", "gb300-nvl72", 72, 100.0),  # one 800G ConnectX-8 a GPU
    ("DGX B300", "64", "b300", "hgx-b300", 8, 100.0),  # the same NICs on the HGX baseboard
])
def test_a_blackwell_row_runs_on_its_own_cluster(tmp_path, name, gpus, gpu, preset, node,
                                                  fabric):
    runner, run = _one_run(tmp_path, gpu=name, gpus=gpus, tp="4", global_batch=gpus,
                           dtype="fp8")
    tiers = runner.scenario(run).cluster.tiers
    assert run.gpu == gpu and run.cluster_preset == preset
    assert (tiers[0].size, tiers[0].bandwidth_GBps) == (node, 900.0)
    assert tiers[1].bandwidth_GBps == fabric
    assert tiers[0].size * tiers[1].size >= int(gpus)
    assert not any("no cluster preset" in a for a in run.assumptions)
    assert runner.cost(run, backend="c").status == "ok"


def test_a_cloud_machine_type_in_the_system_picks_its_cluster(tmp_path):
    # XPK's h100-80gb-8 is Google Cloud's A3 High: 4 x 200 Gb/s GPU NICs per 8 H100, so the
    # data-parallel traffic between VMs runs at 12.5 GB/s per GPU, not the DGX fabric's 50
    runner, run = _one_run(tmp_path, gpus="32", cp="1", global_batch="32",
                           system="4x Google Cloud A3 (h100-80gb-8)")
    assert run.cluster_preset == "gcp-a3-high"
    assert any("gcp-a3-high" in a for a in run.assumptions)
    tiers = runner.scenario(run).cluster.tiers
    assert (tiers[0].size, tiers[1].bandwidth_GBps) == (8, 12.5)
    plain, plain_run = _one_run(tmp_path, gpus="32", cp="1", global_batch="32",
                                system="DGX H100")
    assert plain_run.cluster_preset == "dgx-h100-superpod"
    # the slower NICs cost the same layout more time between VMs
    a3, dgx = runner.cost(run, backend="c"), plain.cost(plain_run, backend="c")
    assert a3.status == dgx.status == "ok"
    assert a3.breakdown["dp_comm_s"] > dgx.breakdown["dp_comm_s"]


def test_a_gb300_row_takes_blackwell_ultras_own_constants(tmp_path):
    # its FP8 ceiling above GB200's, its attention share GB200's times the exponential-rate
    # ratio
    from trainscape import presets
    from trainscape.model.llm import exponential_rate_attention_ratio

    runner, run = _one_run(tmp_path, gpu="GB300 NVL72", gpus="144", tp="4", global_batch="144",
                           dtype="fp8")
    gpu = runner.scenario(run).cluster.gpu
    gb200 = presets.gpu("gb200", dtype="fp8")
    assert gpu.fp8_gemm_efficiency_max > gb200["fp8_gemm_efficiency_max"]
    assert gpu.attention_efficiency == pytest.approx(
        gb200["attention_efficiency"] * exponential_rate_attention_ratio(73.1, 34.2), rel=1e-5)


def test_a_printed_activation_offload_is_costed_over_the_grace_link(tmp_path):
    # Megatron-Bridge's GB200 / GB300 Llama 3 70B FP8 recipes: Megatron FSDP, MBS 2, the saved
    # activations of cpu_offloading_num_layers of the 80 layers copied to the Grace CPU
    base = _minimal_row(gpu="gb200", model="llama3-70b", layers="80", hidden="8192",
                        heads="64", ffn_hidden="28672", gpus="64", tp="1", cp="1", mbs="2",
                        global_batch="256", dtype="fp8", fsdp="64", value="4224")
    plain = dict(base, case="plain", recompute="none")
    offloaded = dict(base, case="offloaded",
                     recompute="none; cpu_offloading_num_layers=40 (the release's recipe)")
    path = _write(tmp_path / "runs.csv", [plain, offloaded],
                  columns=list(base) + ["mbs", "fsdp", "recompute"])
    rows = {r["case"]: r for r in _json("--runs", str(path))["rows"]}
    assert any("activation offload printed: the saved activations of 40 of each model "
               "chunk's 80 layers" in a and "0.5" in a for a in rows["offloaded"]["assumptions"])
    assert not any("offload" in a for a in rows["plain"]["assumptions"])
    # half the stored activations leave HBM: the layout that did not fit (186 GB) now does,
    # over GB200 NVL72's NVLink-C2C host link (the cluster preset's, now carried to the run)
    assert rows["plain"]["status"] == "out_of_memory"
    assert rows["offloaded"]["status"] == "ok"
    assert rows["offloaded"]["memory_gib"] < rows["plain"]["memory_gib"] / 1.5


def test_a_gpu_without_a_cluster_preset_runs_on_the_dgx_fabric_and_says_so(tmp_path):
    # the fabric of the GPU whose fit it takes, its node tier at its own NVLink: an H200 on
    # the DGX H100 SuperPOD's, an A800 (an A100 with NVLink limited to 400 GB/s) on the DGX
    # A100 SuperPOD's at 200 GB/s a direction
    from trainscape.calibration.runs_file import runner_for

    rows = [_minimal_row(gpu="h200-141gb"), _minimal_row(case="a800", gpu="NVIDIA A800-SXM4-80GB")]
    path = _write(tmp_path / "runs.csv", rows)
    h200, a800 = _json("--runs", str(path))["rows"]
    assert h200["status"] == "ok" and a800["status"] in ("ok", "out_of_memory")
    assert any("no cluster preset for h200-141gb: DGX H100 SuperPOD fabric" in a
               for a in h200["assumptions"])
    assert any("no cluster preset for a800-sxm-80gb: DGX A100 SuperPOD fabric (8 x 200 Gb/s "
               "per node) with 200 GB/s NVLink" in a for a in a800["assumptions"])
    runner = runner_for([str(path)])
    h, a = runner.runs
    assert (h.cluster_preset, a.cluster_preset) == ("dgx-h100-superpod", "dgx-a100-superpod")
    assert a.cluster_overrides["tier0_bandwidth_GBps"] == 200.0


def test_an_unknown_framework_is_read_as_megatron_core_and_says_so(tmp_path):
    path = _write(tmp_path / "runs.csv", [_minimal_row(framework="in-house trainer v3")])
    (row,) = _json("--runs", str(path))["rows"]
    assert row["stack"] == "megatron-core"
    assert any("names no known stack" in a for a in row["assumptions"])


def test_a_layout_the_model_rejects_is_a_failed_row_not_an_error(tmp_path):
    # 32 heads do not split over TP 64: a published layout the model calls invalid
    path = _write(tmp_path / "runs.csv", [_minimal_row(tp="64", cp="1", gpus="64")])
    data = _json("--runs", str(path))
    (row,) = data["rows"]
    assert row["status"] == "invalid_config" and row["reason"]
    assert data["summary"][row["group"]]["failed"] == 1


BAD_CELLS = [
    ({"tp": "two"}, "'tp'", "an integer"),
    ({"tp": "1.5"}, "'tp'", "an integer"),
    ({"layers": "0"}, "'layers'", "from 1"),
    ({"gpus": "1e300"}, "'gpus'", "an integer"),
    ({"gpu": "a100"}, "'gpu'", "h100-sxm-80gb"),  # 40 or 80 GB: names no one preset
    ({"dtype": "fp4"}, "'dtype'", "bf16"),
    ({"dtype": "NVFP4"}, "'dtype'", "FP4 training is not modelled"),
    ({"dtype": "int8"}, "'dtype'", "bf16-mixed"),
    ({"mlp": "relu"}, "'mlp'", "swiglu"),
    ({"metric": "tflops"}, "'metric'", "mfu_pct"),
    ({"metric": "mfu_pct", "value": "130"}, "'mfu_pct'", "at most 100"),
    ({"hfu_pct": "0.0"}, "'hfu_pct'", "finite number above 0"),
    ({"metric": "mfu_pct", "value": "40", "dtype": "fp8"}, "'peak_tflops'", "BF16 or by the FP8"),
    ({"metric": "mfu_pct", "value": "40", "peak_tflops": "1e9"}, "'peak_tflops'", "1 to 1e+06"),
    ({"value": "nan"}, "'value'", "finite number above 0"),
    ({"value": "-3"}, "'value'", "finite number above 0"),
    ({"step_time_s": "inf"}, "'step_time_s'", "finite number above 0"),
    ({"recompute": "sometimes"}, "'recompute'", "full, selective, none"),
    ({"layers": "-"}, "'layers'", "an integer"),  # a required cell is never "not stated"
    ({"sp": "maybe"}, "'sp'", "true, false"),
    ({"zero": "4 (ZeRO++)"}, "'zero'", "0, 1, 2, 3"),
    ({"gpus": "12", "tp": "4"}, "'gpus'", "a multiple of tp x cp x pp = 8"),
    ({"dp": "3"}, "'dp'", "gpus / (tp x cp x pp) = 4"),
    ({"experts": "8"}, "'top_k'", "MoE row"),
    ({"experts": "8", "top_k": "2"}, "'expert_ffn'", "MoE row"),
    # a model no preset holds (a preset's name would fill the shape: test_gpu_aliases)
    ({"ffn_hidden": "", "model": "in-house-8b"}, "'ffn_hidden'", "dense row"),
    ({"hidden": "", "model": "in-house-8b"}, "'hidden'", "name a model preset in 'model'"),
    ({"tp_overlap": "partly"}, "'tp_overlap'", "true, false"),
    ({"dp_overlap": "2"}, "'dp_overlap'", "true, false"),
    ({"inter_node_GBps": "0"}, "'inter_node_GBps'", "GB/s per GPU between nodes"),
    ({"inter_node_GBps": "fast"}, "'inter_node_GBps'", "a number from 0.001 to 10000"),
    ({"inter_node_GBps": "1e9"}, "'inter_node_GBps'", "a number from 0.001 to 10000"),
    ({"seq_len": "100000000"}, "seq_len", "not a costable run"),
    ({"heads": "30"}, "kv_heads", "must divide heads"),
    ({"value": "1e300"}, "tokens_per_s_per_gpu", "1e-06 to 1e+07 s"),
    ({"metric": "step_time_s", "value": "1e-300"}, "step_time_s", "1e-06 to 1e+07 s"),
]


@pytest.mark.parametrize("change, column, allowed", BAD_CELLS)
def test_a_bad_cell_is_exit_2_naming_file_line_case_and_column(tmp_path, change, column,
                                                                 allowed):
    rows = [_minimal_row(case="fine"), _minimal_row(case="broken", **change)]
    columns = list(dict.fromkeys(list(rows[0]) + list(change)))
    path = _write(tmp_path / "runs.csv", rows, columns)
    result = _validate("--runs", str(path))
    assert result.exit_code == 2, result.output
    assert "Traceback" not in result.output
    assert "--runs" in result.output and column in result.output and allowed in result.output
    assert "line 3" in result.output and "'broken'" in result.output


def test_bad_files_are_exit_2_with_one_message(tmp_path):
    cases = []
    missing = _write(tmp_path / "no_gpu.csv", [_minimal_row()],
                     [c for c in _minimal_row() if c != "gpu"])
    cases.append((missing, "column 'gpu' missing"))
    empty = tmp_path / "empty.csv"
    empty.write_text(",".join(REQUIRED) + "\n")
    cases.append((empty, "no rows"))
    twice = _write(tmp_path / "twice.csv", [_minimal_row(), _minimal_row()])
    cases.append((twice, "repeats"))
    binary = tmp_path / "binary.csv"
    binary.write_bytes(b"\xff\xfe\x00garbage")
    cases.append((binary, "cannot be read"))
    ragged = tmp_path / "ragged.csv"
    ragged.write_text(",".join(REQUIRED) + "\n" + ",".join(["1"] * (len(REQUIRED) + 2)) + "\n")
    cases.append((ragged, "more cells than the header"))
    nothing = tmp_path / "nothing_here"
    nothing.mkdir()
    cases.append((nothing, "without *.csv"))
    cases.append((tmp_path / "absent.csv", "no such file"))
    # files that never end or never open are refused, not read (a fuzz case hung on /dev/zero)
    cases.append((Path("/dev/zero"), "a device, not a regular file"))
    fifo = tmp_path / "runs.fifo"
    os.mkfifo(fifo)
    cases.append((fifo, "a FIFO, not a regular file"))
    for path, words in cases:
        result = _validate("--runs", str(path))
        assert result.exit_code == 2, (path, result.output)
        assert words in result.output, (path, result.output)
        assert "Traceback" not in result.output


def test_hardware_tflops_alone_are_converted_with_the_models_hardware_flops(tmp_path):
    from trainscape import layout as L
    from trainscape.backends import evaluate_blocks
    from trainscape.calibration.runs_file import runner_for
    from trainscape.spec import ConfigSpec, pack, pack_configs

    timed = _write(tmp_path / "timed.csv", [_minimal_row(metric="step_time_s", value="2.0",
                                                         recompute="full")])
    runner = runner_for([str(timed)])
    (run,) = runner.runs
    sc = runner.scenario(run)
    s, m, j = pack(sc)
    out = evaluate_blocks(s, m, j, pack_configs([ConfigSpec(**run.config)],
                                                gpus=sc.cluster.gpus), backend="python")[:, 0]
    # the hardware rate a 2.0 s step of this layout runs at, recompute counted
    rate = float(out[L.OUT_HW_TFLOPS_PER_GPU] * out[L.OUT_STEP_TIME_S]) / 2.0
    assert rate > float(out[L.OUT_MODEL_TFLOPS_PER_GPU] * out[L.OUT_STEP_TIME_S]) / 2.0
    hw = _write(tmp_path / "hw.csv", [_minimal_row(metric="hw_tflops_per_gpu", value=repr(rate),
                                                   recompute="full")])
    (converted,) = runner_for([str(hw)]).runs
    assert converted.published_step_s == pytest.approx(2.0, rel=1e-9)
    assert any("hardware TFLOP/s converted" in a for a in converted.assumptions)
    data = _json("--runs", str(hw))
    assert data["rows"][0]["published_step_s"] == pytest.approx(2.0, rel=1e-9)


@pytest.mark.parametrize("written, dtype, recipe", [
    ("BF16-mixed", "bf16", ""), ("amp_bf16", "bf16", ""), ("bfloat16", "bf16", ""),
    ("FP16 mixed", "fp16", ""), ("MXFP8", "fp8", "MXFP8"), ("FP8-CS", "fp8", "FP8-CS"),
])
def test_a_dtype_in_a_tables_words_is_read_as_the_layouts(tmp_path, written, dtype, recipe):
    from trainscape.calibration.runs_file import runner_for

    path = _write(tmp_path / "w.csv", [_minimal_row(dtype=written)])
    plain = _write(tmp_path / "p.csv", [_minimal_row(dtype=dtype, fp8_recipe=recipe)])
    (run,), (twin,) = runner_for([str(path)]).runs, runner_for([str(plain)]).runs
    assert run.dtype == dtype and run.scenario == twin.scenario
    assert any(a.startswith(f"dtype {written!r} read as {dtype}") for a in run.assumptions)
    if recipe:  # the recipe is read from the name: MXFP8 / current scaling said in the row
        assert any("FP8 recipe printed" in a for a in run.assumptions), run.assumptions


def test_mfu_alone_is_model_tflops_of_the_dense_peak_and_says_which(tmp_path):
    from trainscape import presets
    from trainscape.calibration.runs_file import runner_for

    peak = presets.gpu("h100-sxm-80gb")["peak_tflops"]["bf16"]
    rate = _write(tmp_path / "rate.csv", [_minimal_row(metric="model_tflops_per_gpu",
                                                       value=repr(0.41 * peak))])
    mfu = _write(tmp_path / "mfu.csv", [_minimal_row(metric="mfu_pct", value="41")])
    (by_rate,), (by_mfu,) = runner_for([str(rate)]).runs, runner_for([str(mfu)]).runs
    assert by_mfu.published_step_s == pytest.approx(by_rate.published_step_s, rel=1e-12)
    assert any("mfu_pct 41 read against the h100-sxm-80gb preset's dense bf16 peak" in a
               for a in by_mfu.assumptions)
    # a stated peak wins, and an FP8 row may be read once it states one
    fp8 = _write(tmp_path / "fp8.csv", [_minimal_row(metric="mfu_pct", value="41",
                                                     dtype="fp8", peak_tflops=repr(peak))])
    (stated,) = runner_for([str(fp8)]).runs
    assert stated.published_step_s == pytest.approx(by_rate.published_step_s, rel=1e-12)
    assert any("the row's peak_tflops" in a for a in stated.assumptions)
    # a direct measurement beside the utilization sets the step; the utilization is not read
    both = _write(tmp_path / "both.csv", [_minimal_row(mfu_pct="99")])
    (direct,) = runner_for([str(both)]).runs
    assert direct.published_step_s == pytest.approx(8192 * 128 / (15000 * 8), rel=1e-12)
    assert not any("mfu_pct" in a for a in direct.assumptions)


def test_hfu_alone_is_hardware_tflops_of_the_dense_peak(tmp_path):
    from trainscape import presets
    from trainscape.calibration.runs_file import runner_for

    peak = presets.gpu("a100-sxm-80gb")["peak_tflops"]["bf16"]
    common = dict(gpu="a100-sxm-80gb", recompute="full")
    hw = _write(tmp_path / "hw.csv", [_minimal_row(metric="hw_tflops_per_gpu",
                                                   value=repr(0.5 * peak), **common)])
    hfu = _write(tmp_path / "hfu.csv", [_minimal_row(metric="mfu_pct", value="1",
                                                     hfu_pct="50", **common)])
    (by_hw,) = runner_for([str(hw)]).runs
    # mfu_pct is read before hfu_pct: the row above is an MFU row
    (by_mfu,) = runner_for([str(hfu)]).runs
    assert by_mfu.published_step_s > 10 * by_hw.published_step_s
    only_hfu = _write(tmp_path / "only.csv", [_minimal_row(metric="hfu_pct", value="50",
                                                           **common)])
    (by_hfu,) = runner_for([str(only_hfu)]).runs
    assert by_hfu.published_step_s == pytest.approx(by_hw.published_step_s, rel=1e-12)
    assert any("hfu_pct 50 read against" in a for a in by_hfu.assumptions)
    assert any("hardware TFLOP/s converted" in a for a in by_hfu.assumptions)


def _llama70b_on_64(**changes):
    return _minimal_row(**{"model": "llama3-70b", "layers": "80", "hidden": "8192",
                           "heads": "64", "kv_heads": "8", "ffn_hidden": "28672", "gpus": "64",
                           "tp": "8", "cp": "1", "global_batch": "512", **changes})


@pytest.mark.parametrize("framework, tp, mbs, mode", [
    ("NeMo 25.04", "8", "1", "none"),               # fits as read: nothing to settle
    ("NeMo 25.04", "8", "2", "full"),               # Megatron's selective is not enough
    ("torchtitan (PyTorch FSDP2)", "8", "4", "op_selective"),
    ("torchtitan (PyTorch FSDP2)", "4", "4", "full"),
])
def test_an_unprinted_recompute_is_the_lightest_that_fits_where_none_does_not(
        tmp_path, framework, tp, mbs, mode):
    path = _write(tmp_path / "runs.csv", [_llama70b_on_64(framework=framework, tp=tp,
                                                          mbs=mbs)])
    (row,) = _json("--runs", str(path))["rows"]
    assert row["status"] == "ok" and row["config"]["recompute"] == mode
    settled = [a for a in row["assumptions"] if "so the published run did otherwise" in a]
    if mode == "none":
        assert not settled
        assert any(a.startswith("recompute not printed: none assumed") for a in row["assumptions"])
    else:
        (note,) = settled
        assert f"{mode} recompute (the lightest" in note and "does not fit" in note
        assert not any(a.startswith("recompute not printed: none assumed")
                       for a in row["assumptions"])


def test_an_unprinted_expert_parallelism_is_the_fastest_that_fits_where_ep_1_does_not(tmp_path):
    from trainscape.calibration.runs_file import runner_for

    transfer = Path(__file__).resolve().parents[1] / "docs" / "data" / "transfer_check_runs.csv"
    with open(transfer, newline="") as f:
        (row,) = [r for r in csv.DictReader(f) if r["case"] == "automodel_gpt-oss-120b_bf16_64"]
    assert row["ep"] in ("", "-")  # the table prints no EP
    row = dict(row, source="a_lab")
    path = _write(tmp_path / "runs.csv", [row])
    runner = runner_for([str(path)])
    (run,) = runner.runs
    assert run.config["ep"] == 1 and run.ep_fallbacks
    result = runner.cost(run, backend="c")
    assert result.status == "ok" and run.config["ep"] > 1 and run.config["recompute"] == "none"
    assert any(f"EP {run.config['ep']} (of the expert-parallel degrees that fit, the fastest"
               in a for a in run.assumptions)
    # the fastest of the degrees that fit, each costed as a row printing it
    steps = {}
    for ep in (1,) + tuple(2 ** k for k in range(1, 7)):
        printed = _write(tmp_path / f"ep{ep}.csv", [dict(row, ep=str(ep))])
        (r,) = runner_for([str(printed)]).runs
        res = runner_for([str(printed)]).cost(r, backend="c")
        if res.status == "ok":
            steps[ep] = res.predicted_step_s
    assert 1 not in steps and min(steps, key=steps.get) == run.config["ep"]
    assert result.predicted_step_s == pytest.approx(steps[run.config["ep"]], rel=1e-12)


def test_unprinted_precisions_are_the_lightest_departure_that_fits(tmp_path):
    # NeMo 24.07's Nemotron-4 340B FP8 on 128 H100 ran with BF16 Adam moments and BF16
    # gradients (its NeMo 1.0 yaml); read blind, under a source the reader has no settings
    # for, FP32 states do not fit, and the reader tries BF16 gradients, then FP8 weights, then
    # BF16 optimizer states, and keeps the first that fits
    from trainscape.calibration.runs_file import runner_for

    transfer = Path(__file__).resolve().parents[1] / "docs" / "data" / "transfer_check_runs.csv"
    with open(transfer, newline="") as f:
        (row,) = [r for r in csv.DictReader(f) if r["case"] == "nemo2407_nemotron4-340b_fp8_128"]
    row = dict(row, source="a_lab")
    runner = runner_for([str(_write(tmp_path / "runs.csv", [row]))])
    (run,) = runner.runs
    assert run.scenario["job"]["grad_dtype"] == "fp32"
    assert [set(step) for step in run.precision_fallbacks] == [
        {"grad_dtype"}, {"grad_dtype", "fp8_param_gather"}, {"grad_dtype", "optimizer_dtype"},
        {"grad_dtype", "cross_entropy"}]
    result = runner.cost(run, backend="c")
    assert result.status == "ok" and result.memory_gib < 80.0 * 1e9 / 2**30
    job = run.scenario["job"]
    assert (job["grad_dtype"], job["optimizer_dtype"]) == ("bf16", "bf16")
    assert not job.get("fp8_param_gather", False)
    (note,) = [a for a in result.assumptions if "so the published run did otherwise" in a]
    assert "gradients kept and reduced in BF16" in note and "BF16 optimizer states" in note
    # the same row as a row of the lighter states costs the same
    again = runner_for([str(_write(tmp_path / "again.csv", [row]))])
    (other,) = again.runs
    other.scenario = {**other.scenario, "job": dict(job)}
    other.precision_fallbacks = ()
    again._scenarios.pop(other.case)  # reading the file validated the scenario as read
    assert again.cost(other, backend="c").predicted_step_s == pytest.approx(
        result.predicted_step_s, rel=1e-12)
    # on half the GPUs nothing fits: a failed row that names every precision it tried, and the
    # precisions it was read with are kept
    half = dict(row, gpus="64", dp="1", global_batch="32")
    (h_run,) = (h := runner_for([str(_write(tmp_path / "half.csv", [half]))])).runs
    failed = h.cost(h_run, backend="c")
    assert failed.status == "out_of_memory" and h_run.scenario["job"]["grad_dtype"] == "fp32"
    (why,) = [a for a in failed.assumptions if "nor with" in a]
    assert all(words in why for words in ("gradients kept and reduced in BF16",
                                          "FP8 weights only", "BF16 optimizer states",
                                          "a fused cross-entropy"))
    # a layout that fits as read keeps the precisions it was read with
    fits = dict(row, gpus="256", dp="4", global_batch="256")
    (fit_run,) = (r := runner_for([str(_write(tmp_path / "fits.csv", [fits]))])).runs
    r.cost(fit_run, backend="c")
    assert fit_run.scenario["job"]["grad_dtype"] == "fp32"
    # only Megatron-Core has these switches to try; a NeMo 2.0 row already reduces in BF16,
    # and FP16 weights keep their FP32 master copy; every stack may have fused its loss where
    # the reading left the loss's FP32 copy, and not where it read the loss
    titan = _minimal_row(framework="torchtitan (PyTorch FSDP2)")
    nemo = _minimal_row(case="nemo_bf16")
    fp16 = _minimal_row(case="nemo_fp16", dtype="fp16")
    foundry = _minimal_row(case="mpt", framework="llm-foundry (Composer, PyTorch FSDP)")
    t, n, h, f = runner_for([str(_write(tmp_path / "four.csv",
                                        [titan, nemo, fp16, foundry]))]).runs
    assert t.precision_fallbacks == ({"cross_entropy": "fused"},)
    assert h.precision_fallbacks == ({"cross_entropy": "fused"},)
    assert n.precision_fallbacks == ({"optimizer_dtype": "bf16"}, {"cross_entropy": "fused"})
    assert f.scenario["job"]["cross_entropy"] == "fused" and f.precision_fallbacks == ()


def test_an_unprinted_mtp_block_is_the_models_own_on_megatron_core(tmp_path):
    # DeepSeek-V3 trains one multi-token prediction block (its preset's mtp_layers = 1), and
    # Megatron-Core's recipes for it run it: a Megatron-Core row of a source the reader has no
    # rules for gets the block, said in the row; printed "w/o MTP" none; another stack none
    from trainscape.calibration.runs_file import runner_for

    dsv3 = dict(_minimal_row(case="dsv3", model="DeepSeek-V3", framework="Megatron-Core 0.14",
                             gpus="256", tp="1", pp="8", seq_len="4096", global_batch="1024",
                             cp="1"),
                layers="", hidden="", heads="", vocab="", mlp="", kv_heads="", ffn_hidden="",
                ep="32")
    off = dict(dsv3, case="dsv3_off", model="DeepSeekV3 (w/o MTP)")
    fsdp = dict(dsv3, case="dsv3_fsdp", framework="torchtitan (PyTorch FSDP2)")
    a, b, c = runner_for([str(_write(tmp_path / "runs.csv", [dsv3, off, fsdp]))]).runs
    assert a.scenario["model"]["mtp_layers"] == 1
    assert any(n.startswith("multi-token prediction not printed: depth 1") for n in a.assumptions)
    assert not b.scenario["model"].get("mtp_layers", 0)
    assert not c.scenario["model"].get("mtp_layers", 0)
    assert not any(n.startswith("multi-token prediction") for n in c.assumptions)
    # NeMo's own performance tables say per release: NeMo 2.4's script (25.07) ran none, the
    # Megatron-Bridge recipes (25.09 on) one
    old, new = (dict(dsv3, case=f"nemo{v}", source="nemo_perf_summary", model="deepseek-v3",
                     framework=f"NeMo {v} container") for v in ("25.07", "25.11"))
    o, n = runner_for([str(_write(tmp_path / "nemo.csv", [old, new]))]).runs
    assert not o.scenario["model"].get("mtp_layers", 0)
    assert any(x.startswith("no multi-token prediction: NeMo 2.4") for x in o.assumptions)
    assert n.scenario["model"]["mtp_layers"] == 1
    assert any("Megatron-Bridge deepseek_v3 recipe" in x for x in n.assumptions)


def test_a_printed_recompute_is_never_changed_to_fit(tmp_path):
    path = _write(tmp_path / "runs.csv", [_llama70b_on_64(mbs="2", recompute="none")])
    (row,) = _json("--runs", str(path))["rows"]
    assert row["status"] == "out_of_memory" and row["config"]["recompute"] == "none"
    # and a layout that fits with no mode of its stack stays a failed row, said in the row
    path = _write(tmp_path / "tp4.csv", [_llama70b_on_64(tp="4")])
    (row,) = _json("--runs", str(path))["rows"]
    assert row["status"] == "out_of_memory" and row["config"]["recompute"] == "none"
    assert any("nor with selective recompute or full recompute" in a
               for a in row["assumptions"])


def test_llama3_at_8k_tokens_is_read_without_recompute_as_the_paper_says(shipped_json):
    rows = {r["case"]: r for r in shipped_json["rows"]}
    for case in ("l3t4_8k", "l3t4_16k"):
        assert rows[case]["config"]["recompute"] == "none"
        assert any("without activation checkpointing" in a for a in rows[case]["assumptions"])


@pytest.mark.parametrize("pp, stage", [("1", 3), ("2", 2)])
def test_an_unprinted_fsdp_stage_is_full_sharding_but_under_a_pipeline(tmp_path, pp, stage):
    path = _write(tmp_path / "runs.csv", [_minimal_row(framework="torchtitan (FSDP2)", cp="1",
                                                       pp=pp)])
    (row,) = _json("--runs", str(path))["rows"]
    assert row["config"]["zero"] == stage
    assert any(a.startswith("ZeRO stage not printed: FSDP") and f"ZeRO-{stage}" in a
               for a in row["assumptions"])


def test_the_transfer_files_costable_rows_read_as_the_transfer_check_reads_them(tmp_path,
                                                                                  monkeypatch):
    """``--runs`` and ``scripts/transfer_check.py`` are one reader: the same layout, settings,
    fabric, assumptions, published step and counting (validate's rule: only the newest release
    of a repeated layout counts) for every row the check costs."""
    import _scripts

    from trainscape.calibration.runs_file import runner_for

    tc = _scripts.load_script(monkeypatch, "transfer_check")
    with open(tc.DEFAULT, newline="") as f:
        rows = list(csv.DictReader(f))
    checked, _ = tc.runs_of(rows)
    tc.runner_of(checked)  # a run measured in hardware TFLOP/s gets its step there, as below
    by_case = {r["case"]: r for r in rows}
    path = _write(tmp_path / "transfer.csv", [by_case[run.case] for run in checked])
    mine = {run.case: run for run in runner_for([str(path)]).runs}
    assert len(mine) == len(checked) > 100
    for run in checked:
        other = mine[run.case]
        for key in ("config", "scenario", "stack", "group", "published_step_s",
                    "cluster_preset", "cluster_overrides"):
            assert getattr(other, key) == getattr(run, key), (run.case, key)
        assert other.counted == run.counted, run.case
        older = [a for a in other.assumptions if a.startswith("older release")]
        assert (len(older) == 1) == (not other.counted)
        assert other.assumptions == run.assumptions, run.case
    assert not all(run.counted for run in checked)


@pytest.mark.parametrize("printed, schedule, note", [
    ("ZB-H2", "zb-h2", None),
    ("zero bubble V", "zb-v", None),
    ("zero-bubble", "zb-h1", "ZB-H1 assumed"),
    ("DualPipe (bidirectional)", "dualpipe", None),
    ("DualPipeV", "dualpipe-v", None),
    ("GPipe", "gpipe", None),
    ("1F1B", "1f1b", None),
    ("round robin", "1f1b", "not one the reader knows"),
])
def test_a_printed_pipeline_schedule_is_the_models_or_named_as_assumed(tmp_path, printed,
                                                                       schedule, note):
    row = _minimal_row(schedule=printed, pp="4", gpus="32", tp="2", cp="1")
    (out,) = _json("--runs", str(_write(tmp_path / "runs.csv", [row])))["rows"]
    assert out["config"]["schedule"] == schedule and out["config"]["vpp"] == 1
    notes = [a for a in out["assumptions"] if "schedule" in a]
    assert (note is None and not notes) or (note is not None and note in notes[0])


def test_the_shipped_calibration_folder_as_runs_is_the_shipped_validate(shipped_json):
    """Pointed at the calibration set's own folder, --runs skips (and names) the two older
    tables of another layout and costs every other row exactly as validate does."""
    import trainscape.data.calibration as shipped

    folder = Path(next(iter(shipped.__path__)))
    result = _validate("--runs", str(folder), "--json")
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert sorted(Path(s["file"]).name for s in data["skipped_files"]) == [
        "korthikanti_table5.csv", "megatron_sc21_table1.csv"]
    assert "skipped" in result.stderr
    ref = {r["case"]: r for r in shipped_json["rows"]}
    assert len(data["rows"]) == sum(len(read_rows(f)) for f, _ in PUBLISHED_FILES.values())
    for row in data["rows"]:
        want = ref[row["case"]]
        for key in ("predicted_step_s", "published_step_s", "status", "config", "counted",
                    "assumptions", "memory_gib", "group"):
            assert row[key] == want[key], (row["case"], key)


def test_a_file_named_itself_must_be_in_the_layout(tmp_path):
    (tmp_path / "other.csv").write_text("model,heads\n22B,64\n")
    result = _validate("--runs", str(tmp_path / "other.csv"))
    assert result.exit_code == 2 and "column 'case' missing" in result.output
    result = _validate("--runs", str(tmp_path))  # a folder of nothing in the layout
    assert result.exit_code == 2 and "no CSV file in the published-runs layout" in result.output


def test_a_published_peak_memory_is_set_beside_the_models(tmp_path):
    rows = [_minimal_row(case="reserved", peak_memory_gib="60", memory_measure="max_reserved"),
            _minimal_row(case="device", peak_memory_gib="60", memory_measure="nvidia-smi"),
            _minimal_row(case="none")]
    data = _json("--runs", str(_write(tmp_path / "runs.csv", rows)))
    by = {r["case"]: r for r in data["rows"]}
    alloc = by["reserved"]["memory_gib"] - by["reserved"]["memory_reserve_gib"]
    # against an allocator's peak the model's allocations count, against the device's all of it
    assert by["reserved"]["memory_ratio"] == pytest.approx(alloc / 60, rel=1e-12)
    assert by["device"]["memory_ratio"] == pytest.approx(by["device"]["memory_gib"] / 60,
                                                         rel=1e-12)
    assert by["none"]["memory_ratio"] is None and by["none"]["published_memory_gib"] is None
    text = _validate("--runs", str(tmp_path / "runs.csv")).output
    assert "Memory per GPU against the published peak" in text and "2 rows: ratio median" in text


@pytest.mark.parametrize("value", ["0", "-1", "nan", "inf", "5000", "lots", "1e-320"])
def test_a_bad_peak_memory_is_exit_2(tmp_path, value):
    path = _write(tmp_path / "runs.csv", [_minimal_row(peak_memory_gib=value)])
    result = _validate("--runs", str(path))
    assert result.exit_code == 2 and "'peak_memory_gib'" in result.output


def test_a_path_with_a_control_character_is_named_on_one_line(tmp_path):
    result = _validate("--runs", str(tmp_path / "a\x1cb.csv"))
    assert result.exit_code == 2
    message = [line for line in result.output.splitlines() if line.startswith("Error:")]
    assert len(message) == 1 and "\\x1c" in message[0] and "no such file" in message[0]


@pytest.mark.parametrize("printed, stage", [
    ("3 (FSDP FULL_SHARD)", 3), ("ZeRO-2", 2), ("zero stage 1", 1), ("FSDP", 3),
    ("PyTorch FSDP2, fully sharded", 3), ("distributed optimizer", 1), ("DDP", 0)])
def test_a_zero_stage_named_in_words_is_read_as_that_stage(tmp_path, printed, stage):
    row = _minimal_row(zero=printed, recompute="full")
    (out,) = _json("--runs", str(_write(tmp_path / "runs.csv", [row])))["rows"]
    assert out["config"]["zero"] == stage
    assert not any("ZeRO stage not printed" in a for a in out["assumptions"])


@pytest.mark.parametrize("printed, mode", [("Full (uniform, 1 layer)", "full"),
                                           ("selective", "selective"), ("off", "none"),
                                           ("No", "none"), ("none", "none")])
def test_a_stated_recompute_is_read_as_stated(tmp_path, printed, mode):
    (out,) = _json("--runs", str(_write(tmp_path / "runs.csv",
                                        [_minimal_row(recompute=printed)])))["rows"]
    assert out["config"]["recompute"] == mode
    assert not any("recompute not printed" in a for a in out["assumptions"])


@pytest.mark.parametrize("framework, recipe, kept, note", [
    # what the row prints comes first: MLPerf's FP8_PARAMS=True, Megatron's --fp8-param-gather
    ("NeMo 24.04", "delayed scaling; FP8 parameters (FP8_PARAMS=True)", True, "printed"),
    ("Megatron-LM", "fp8_param_gather", True, "printed"),
    ("NeMo 25.04", "current scaling, no FP8 params", False, "no FP8 parameters"),
    ("NeMo 25.04", "fp8_params: false", False, "no FP8 parameters"),
    # unsaid on a NeMo 2.0 release: its performance scripts' plugins keep FP8 weights only ...
    ("NeMo 25.04", "", True, "NeMo >= 25.02"),
    # ... but for the 128x128-block recipe, and not before 25.02
    ("NeMo 25.04", "128x128 weight blocks", False, None),
    ("NeMo 24.09", "", False, None),
])
def test_fp8_parameters_are_read_from_the_row_then_from_its_release(tmp_path, framework, recipe,
                                                                    kept, note):
    from trainscape.calibration.runs_file import runner_for

    row = _minimal_row(dtype="fp8", framework=framework, fp8_recipe=recipe)
    (run,) = runner_for([str(_write(tmp_path / "runs.csv", [row]))]).runs
    assert run.scenario["job"].get("fp8_param_gather", False) is kept
    said = [a for a in run.assumptions if "FP8 weights" in a or "FP8 parameters" in a
            or "16-bit weights" in a]
    if note is None:
        assert not said
    else:
        assert len(said) == 1 and note in said[0], said
    # a BF16 row has no FP8 weights whatever its recipe column says
    bf16 = _minimal_row(fp8_recipe="FP8 parameters", framework=framework)
    (run,) = runner_for([str(_write(tmp_path / "bf16.csv", [bf16]))]).runs
    assert not run.scenario["job"].get("fp8_param_gather", False)


def test_fp8_weights_make_a_published_405b_layout_fit(tmp_path, monkeypatch):
    # MLPerf Training v5.0's Llama 3.1 405B on 512 H100 (TP 8, PP 8, VP 8, CP 2, 8K tokens) ran
    # with FP8 parameters; under a source the reader has no settings for, the row's own text
    # is what keeps it from being called out of memory
    import _scripts

    tc = _scripts.load_script(monkeypatch, "transfer_check")
    with open(tc.DEFAULT, newline="") as f:
        (row,) = [r for r in csv.DictReader(f) if r["case"] == "mlperf50_llama3.1-405b_fp8_512"]
    row = dict(row, source="a_lab_of_our_own")
    data = _json("--runs", str(_write(tmp_path / "runs.csv", [row])))
    (out,) = data["rows"]
    assert out["status"] == "ok" and out["memory_gib"] < 80.0
    assert "FP8 weights without a 16-bit copy printed" in out["assumptions"]
    (without,) = _json("--runs", str(_write(tmp_path / "plain.csv", [
        dict(row, fp8_recipe="delayed scaling, E4M3")])))["rows"]
    # printed without them, the layout as read does not fit; the run did, so the reader
    # settles the precisions the row does not print (the lightest departure that fits: BF16
    # gradients, then FP8 weights) and says so in the row
    assert without["status"] == "ok" and without["memory_gib"] < 80.0
    (settled,) = [a for a in without["assumptions"] if "so the published run did otherwise" in a]
    assert "FP8 weights only, no 16-bit copy" in settled
    assert "FP8 weights without a 16-bit copy printed" not in without["assumptions"]


def test_a_stack_is_read_from_the_framework_not_from_the_source_id(tmp_path):
    # what a published table's software did follows its framework text, so a user's own
    # llm-foundry or Megatron-DeepSpeed runs are read as the shipped MPT and BLOOM rows are
    from trainscape.calibration.runs_file import runner_for

    foundry = _minimal_row(case="lab_mpt", framework="Composer / llm-foundry (PyTorch FSDP)",
                           cp="1", notes="attn_impl triton")
    deepspeed = _minimal_row(case="lab_ds", framework="Megatron-DeepSpeed + DeepSpeed ZeRO-1",
                             cp="1", tp="2")
    plain = _minimal_row(case="lab_fsdp", framework="PyTorch FSDP", cp="1")
    ds_sp = dict(deepspeed, case="lab_ds_sp", sp="true")
    megatron = _minimal_row(case="lab_mcore", framework="NeMo 25.02 (Megatron-Core)", cp="1",
                            tp="2")
    zero3 = _minimal_row(case="lab_zero3", framework="DeepSpeed ZeRO-3 + HF Transformers",
                         cp="1")
    rows = [foundry, deepspeed, plain, ds_sp, megatron, zero3]
    columns = list(dict.fromkeys(k for r in rows for k in r))
    runs = {r.case: r for r in runner_for([str(_write(tmp_path / "runs.csv", rows,
                                                       columns))]).runs}
    mpt = runs["lab_mpt"]
    assert mpt.scenario["job"]["cross_entropy"] == "fused"
    assert mpt.scenario["job"]["attention_kernel"] == "legacy"
    assert any("llm-foundry's default fused cross-entropy" in a for a in mpt.assumptions)
    assert "cross_entropy" not in runs["lab_fsdp"].scenario["job"]
    ds = runs["lab_ds"]
    assert ds.stack == "megatron-lm"
    assert not ds.config["tp_overlap"] and not ds.config["dp_overlap"]
    assert any(a.startswith("Megatron-DeepSpeed: no TP overlap") for a in ds.assumptions)
    # sequence parallelism unprinted: off in Megatron-DeepSpeed (BLOOM's fork never had it),
    # on in a Megatron-Core recipe; printed, as printed -- each said in the row
    assert ds.config["sp"] is False
    assert any(a.startswith("sequence parallelism not printed: off assumed (Megatron-DeepSpeed")
               for a in ds.assumptions)
    assert runs["lab_ds_sp"].config["sp"] is True
    assert not any(a.startswith("sequence parallelism") for a in runs["lab_ds_sp"].assumptions)
    # DeepSpeed's ZeRO engine without Megatron: the FSDP profile, its overlaps kept
    z3 = runs["lab_zero3"]
    assert z3.stack == "pytorch-fsdp" and z3.config["dp_overlap"]
    assert any("DeepSpeed's ZeRO engine" in a for a in z3.assumptions)
    assert not any(a.startswith("Megatron-DeepSpeed") for a in z3.assumptions)
    assert runs["lab_mcore"].config["sp"] is True
    assert any(a.startswith("sequence parallelism not printed: on assumed")
               for a in runs["lab_mcore"].assumptions)


@pytest.mark.parametrize("framework, version, legacy", [
    ("Megatron-LM @285068c8 (2023-01-11)", "", True),
    ("Megatron-LM", "paper, 2022", True),
    ("Megatron-LM", "2023-09 checkout", False),     # --overlap-grad-reduce exists (opt-in)
    ("Megatron-LM / Megatron-Core r0.8.0", "2021", False),
    ("NeMo 24.07 (Megatron-LM)", "2022", False),
    ("Megatron-LM", "", False),                      # undated: today's defaults
    # an FSDP stack with Megatron-LM's TP layers (OPT's metaseq) stays an FSDP stack
    ("metaseq (PyTorch FSDP + Megatron-LM tensor parallelism)", "2022", False),
])
def test_a_dated_megatron_lm_run_before_its_overlaps_is_read_without_them(tmp_path, framework,
                                                                          version, legacy):
    from trainscape.calibration.runs_file import runner_for

    row = _minimal_row(framework=framework, version=version, cp="1", tp="2")
    (run,) = runner_for([str(_write(tmp_path / "runs.csv", [row]))]).runs
    assert (run.stack == "megatron-lm") is legacy
    assert run.config["dp_overlap"] is not legacy
    assert any(a.startswith("Megatron-LM of 20") for a in run.assumptions) is legacy


def test_cells_a_table_prints_for_not_stated_and_other_words_read_as_the_layout_writes(tmp_path):
    # published tables print "-" or "n/a" where the layout leaves a cell empty, "on" / "1" for
    # sequence parallelism, "none" for no ZeRO sharding: each row costs as its plain twin
    plain = _minimal_row(case="plain", tp="2", sp="true", zero="0", vpp="", mbs="", ep="")
    marked = _minimal_row(case="marked", tp="2", sp="on", zero="none", vpp="n/a", mbs="-",
                          ep="\u2014")
    other = _minimal_row(case="other", tp="2", sp="1", zero="No", vpp="?", mbs="unknown",
                         ep="N/A")
    path = _write(tmp_path / "runs.csv", [plain, marked, other])
    rows = {r["case"]: r for r in _json("--runs", str(path))["rows"]}
    for case in ("marked", "other"):
        assert rows[case]["predicted_step_s"] == rows["plain"]["predicted_step_s"]
        assert rows[case]["config"] == rows["plain"]["config"]
        assert any(a.startswith("mbs not printed") for a in rows[case]["assumptions"])
    assert rows["plain"]["config"]["sp"] is True and rows["plain"]["config"]["zero"] == 0


@pytest.mark.parametrize("written", ["activation checkpointing", "yes", "AC", "True",
                                     "checkpoint-activations", "gradient checkpointing (all)"])
def test_activation_checkpointing_switched_on_is_full_recompute_and_says_so(tmp_path, written):
    rows = [_minimal_row(case="full", recompute="full"),
            _minimal_row(case="switch", recompute=written)]
    got = {r["case"]: r for r in _json("--runs", str(_write(tmp_path / "r.csv", rows)))["rows"]}
    assert got["switch"]["config"]["recompute"] == "full"
    assert got["switch"]["predicted_step_s"] == got["full"]["predicted_step_s"]
    assert any(a.startswith(f"recompute {written!r}: activation checkpointing switched on")
               for a in got["switch"]["assumptions"])
    assert not any("switched on" in a for a in got["full"]["assumptions"])


@pytest.mark.parametrize("recipe, note", [
    ("blockwise (1x128 / 128x128)", "FP8 recipe printed as 'blockwise (1x128 / 128x128)', not "
                                    "one the reader tells apart"),
    ("tensorwise", "FP8 recipe printed: per-tensor current scaling"),
    ("not stated in the table", "FP8 recipe not printed"),
    ("", "FP8 recipe not printed")])
def test_an_fp8_recipe_is_said_as_printed(tmp_path, recipe, note):
    row = _minimal_row(case="fp8", dtype="fp8", fp8_recipe=recipe)
    (got,) = [r for r in _json("--runs", str(_write(tmp_path / "r.csv", [row])))["rows"]
              if r["case"] == "fp8"]
    assert any(a.startswith(note) for a in got["assumptions"]), got["assumptions"]


def test_keep_going_costs_the_readable_rows_and_lists_the_others(tmp_path):
    rows = [_minimal_row(case="first"), _minimal_row(case="no_gpu", gpu="mi300x"),
            _minimal_row(case="no_tp", tp="two"), _minimal_row(case="second", tp="2", cp="1"),
            _minimal_row(case="too_long", seq_len="100000000")]
    path = _write(tmp_path / "runs.csv", rows)
    strict = _validate("--runs", str(path))
    assert strict.exit_code == 2 and "line 3" in strict.output  # the contract: first bad cell
    result = _validate("--runs", str(path), "--keep-going", "--json")
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert [r["case"] for r in data["rows"]] == ["first", "second"]
    lines = data["unreadable_rows"]
    assert len(lines) == 3
    assert "line 3 (case 'no_gpu'): column 'gpu'" in lines[0]
    assert "line 4 (case 'no_tp'): column 'tp'" in lines[1]
    assert "line 6 (case 'too_long'): not a costable run" in lines[2]
    # the readable rows cost as they do alone
    alone = _json("--runs", str(_write(tmp_path / "alone.csv", [rows[0], rows[3]])))
    assert [r["predicted_step_s"] for r in alone["rows"]] == \
        [r["predicted_step_s"] for r in data["rows"]]
    text = _validate("--runs", str(path), "--keep-going")
    assert text.exit_code == 0 and "3 row(s) could not be read" in text.output


def test_keep_going_with_no_readable_row_or_without_runs_is_exit_2(tmp_path):
    path = _write(tmp_path / "runs.csv", [_minimal_row(case="a", gpu="mi300x"),
                                          _minimal_row(case="b", tp="two")])
    result = _validate("--runs", str(path), "--keep-going")
    assert result.exit_code == 2 and "no readable row" in result.output
    assert "(and 1 more)" in result.output and "Traceback" not in result.output
    alone = _validate("--keep-going")
    assert alone.exit_code == 2 and "--runs" in alone.output


def test_layers_that_do_not_split_over_the_pipeline_lighten_the_edge_stages(tmp_path):
    # 61 layers on 4 stages: every stack must be told such a split, and the published ones
    # count the embedding and the loss as a layer each (63 slots: 15 layers on the first and
    # last stage, 16 on the middle ones); 64 layers split evenly, as printed
    rows = [_minimal_row(case="uneven", layers="61", pp="4", cp="1", gpus="8", tp="1"),
            _minimal_row(case="even", layers="64", pp="4", cp="1", gpus="8", tp="1")]
    runs = {r.case: r for r in runner_for_rows(tmp_path, rows)}
    assert runs["uneven"].scenario["job"]["pipeline_edge_layers"] == 1
    assert any(a.startswith("61 layers on 4 pipeline chunks: embedding and loss counted")
               for a in runs["uneven"].assumptions)
    assert "pipeline_edge_layers" not in runs["even"].scenario["job"]


def runner_for_rows(tmp_path, rows):
    from trainscape.calibration.runs_file import runner_for

    return runner_for([str(_write(tmp_path / "runs.csv", rows))]).runs


def test_a_stated_inter_node_bandwidth_sets_the_fabric_and_says_so(tmp_path):
    # AWS p4d: 4 x 100 Gb/s EFA per 8-GPU node = 6.25 GB/s per GPU, a quarter of the DGX A100
    # SuperPOD preset's fabric: a multi-node data-parallel run takes longer, a one-node run not
    base = dict(gpu="a100-sxm-80gb", framework="PyTorch FSDP", tp="1", cp="1", zero="3",
                gpus="64")
    rows = [_minimal_row(case="preset", **base),
            _minimal_row(case="p4d", inter_node_GBps="6.25", **base),
            _minimal_row(case="one_node", **dict(base, gpus="8")),
            _minimal_row(case="one_node_p4d", inter_node_GBps="6.25", **dict(base, gpus="8"))]
    path = _write(tmp_path / "runs.csv", rows, list(rows[1]))
    got = {r["case"]: r for r in _json("--runs", str(path))["rows"]}
    assert got["p4d"]["predicted_step_s"] > got["preset"]["predicted_step_s"]
    assert got["p4d"]["breakdown"]["dp_comm_s"] > got["preset"]["breakdown"]["dp_comm_s"]
    assert got["one_node_p4d"]["predicted_step_s"] == got["one_node"]["predicted_step_s"]
    assert ("inter-node bandwidth stated: 6.25 GB/s per GPU between nodes"
            in " ".join(got["p4d"]["assumptions"]))
    assert not any("inter-node" in a for a in got["preset"]["assumptions"])


def test_stated_overlaps_replace_the_stacks_and_say_so(tmp_path):
    # a plain Megatron-LM launch without --tp-comm-overlap / --overlap-grad-reduce: both off,
    # over the Megatron-Core profile's NeMo-style defaults; stated as the default: no note
    base = dict(tp="2", cp="1", gpus="16", framework="Megatron-LM core_v0.6.0")
    rows = [_minimal_row(case="default", **base),
            _minimal_row(case="off", tp_overlap="false", dp_overlap="off", **base),
            _minimal_row(case="same", tp_overlap="yes", dp_overlap="1", **base)]
    path = _write(tmp_path / "runs.csv", rows, list(rows[1]))
    got = {r["case"]: r for r in _json("--runs", str(path))["rows"]}
    assert got["default"]["config"]["tp_overlap"] and got["default"]["config"]["dp_overlap"]
    off = got["off"]
    assert not off["config"]["tp_overlap"] and not off["config"]["dp_overlap"]
    assert off["predicted_step_s"] > got["default"]["predicted_step_s"]
    said = [a for a in off["assumptions"] if "_overlap printed off" in a]
    assert len(said) == 2 and said[0].startswith("tp_overlap printed off")
    assert got["same"]["predicted_step_s"] == got["default"]["predicted_step_s"]
    assert not any("_overlap printed" in a for a in got["same"]["assumptions"])


def test_an_unknown_framework_is_not_given_transformer_engines_tp_overlap(tmp_path):
    # the TP overlap is an implementation's (TE userbuffers, AsyncTP): a framework the reader
    # does not know gets Megatron-Core's costs without it, said; a stated overlap still wins
    base = dict(tp="2", cp="1", gpus="16")
    rows = [_minimal_row(case="nemo", framework="NeMo 25.04", **base),
            _minimal_row(case="unknown", framework="in-house trainer v3", **base),
            _minimal_row(case="unknown_stated", framework="in-house trainer v3",
                         tp_overlap="true", **base)]
    path = _write(tmp_path / "runs.csv", rows, list(rows[2]))
    got = {r["case"]: r for r in _json("--runs", str(path))["rows"]}
    assert got["nemo"]["config"]["tp_overlap"] is True
    unknown = got["unknown"]
    assert unknown["stack"] == "megatron-core" and unknown["config"]["tp_overlap"] is False
    assert any(a.startswith("TP communication not overlapped assumed")
               for a in unknown["assumptions"])
    assert unknown["predicted_step_s"] > got["nemo"]["predicted_step_s"]
    assert got["unknown_stated"]["config"]["tp_overlap"] is True


def test_the_smallest_file_of_the_docs_reads_as_they_say(tmp_path):
    # docs/validate-runs.md, "The smallest file": its CSV block, verbatim, costs both rows and
    # says what the text says it does
    text = (Path(__file__).resolve().parents[1] / "docs" / "validate-runs.md").read_text()
    block = text.split("## The smallest file", 1)[1].split("```csv\n", 1)[1].split("```", 1)[0]
    path = tmp_path / "smallest.csv"
    path.write_text(block)
    rows = {r["case"]: r for r in _json("--runs", str(path))["rows"]}
    assert set(rows) == {"llama70b_512", "llama8b_p4d_64"}
    for case, preset, gpu in (("llama70b_512", "llama3-70b", "h100-sxm-80gb"),
                              ("llama8b_p4d_64", "llama3-8b", "a100-sxm-40gb")):
        said = " ".join(rows[case]["assumptions"])
        assert rows[case]["gpu"] == gpu and rows[case]["error_pct"] is not None
        assert f"from the {preset} model preset" in said and f"as the {gpu} preset" in said
    p4d = rows["llama8b_p4d_64"]
    assert "inter-node bandwidth stated: 6.25 GB/s" in " ".join(p4d["assumptions"])
    assert not p4d["config"]["tp_overlap"] and not p4d["config"]["dp_overlap"]
