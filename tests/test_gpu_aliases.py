"""Other names of the GPU presets (presets/aliases.toml, ``presets.preset_id``): a published
table, a datasheet or nvidia-smi spells a part its own way, and every entry point -- a runs file
for ``validate --runs``, a scenario, ``--set``, the Python API -- reads it as the preset it
names, costs it exactly as the id, and says so where it read a row that way. A name that
names no part, or more than one, stays an error that lists the ids."""

from __future__ import annotations

import csv
import json
import tomllib
from importlib import resources
from pathlib import Path

import pytest
from click.testing import CliRunner

import trainscape
from trainscape import presets
from trainscape.cli import main

TIERS = [{"name": "node", "size": 8, "bandwidth_GBps": 450.0, "latency_us": 3.0},
         {"name": "fabric", "size": 64, "bandwidth_GBps": 50.0, "latency_us": 10.0}]


def _aliases(kind: str = "gpu") -> dict[str, str]:
    with resources.files("trainscape.presets").joinpath("aliases.toml").open("rb") as fh:
        return tomllib.load(fh)[kind]


@pytest.mark.parametrize("text, expected", [
    ("NVIDIA H100 80GB HBM3", "h10080gbhbm3"),
    ("  H100_SXM5__80GB ", "h100sxm580gb"),
    ("nvidia-a100-sxm4-40gb", "a100sxm440gb"),
    ("Llama 3.1 405B", "llama31405b"),
    ("b200", "b200"),
])
def test_names_are_compared_without_case_or_separators(text, expected):
    assert presets.normalized_name(text) == expected


@pytest.mark.parametrize("kind", presets.KINDS)
def test_no_two_presets_of_a_kind_read_alike(kind):
    ids = presets.names(kind)
    assert len({presets.normalized_name(pid) for pid in ids}) == len(ids)
    for pid in ids:
        assert presets.preset_id(kind, pid.upper()) == pid


@pytest.mark.parametrize("kind", ["gpu", "model"])
def test_every_alias_names_one_existing_preset_and_shadows_no_id(kind):
    ids = presets.names(kind)
    by_normal = {presets.normalized_name(pid): pid for pid in ids}
    assert len(by_normal) == len(ids)  # no two ids read alike
    for alias, pid in _aliases(kind).items():
        assert pid in ids, alias
        # an alias never reads as another preset's id
        assert by_normal.get(presets.normalized_name(alias), pid) == pid, alias
        assert presets.preset_id(kind, alias) == pid


@pytest.mark.parametrize("name, pid", [
    ("h100-sxm-80gb", "h100-sxm-80gb"),          # the id itself
    ("NVIDIA H100 SXM5 80GB", "h100-sxm-80gb"),  # gpus.toml's datasheet name
    ("NVIDIA H100 80GB HBM3", "h100-sxm-80gb"),  # nvidia-smi
    ("H100", "h100-sxm-80gb"),
    ("NVIDIA A100-SXM4-40GB", "a100-sxm-40gb"),
    ("NVIDIA A100-SXM4-80GB", "a100-sxm-80gb"),
    ("A100 80GB", "a100-sxm-80gb"),
    ("h200-sxm-141gb", "h200-141gb"),            # the calibration layout's pattern
    ("NVIDIA H200", "h200-141gb"),
    ("NVIDIA B200", "b200"),
    ("NVIDIA GB200", "gb200"),                   # nvidia-smi on a GB200 NVL72 tray
    ("GB200 NVL72", "gb200"),
    ("NVIDIA B300", "b300"),
    ("DGX B300", "b300"),
    ("NVIDIA GB300", "gb300"),
    ("GB300 NVL72", "gb300"),
    ("H800", "h800-sxm-80gb"),
    ("NVIDIA A800-SXM4-80GB", "a800-sxm-80gb"),   # nvidia-smi
    ("A800", "a800-sxm-80gb"),
    ("H100 96GB HBM2e", "h100-hbm2e-96gb"),
])
def test_a_gpu_is_found_by_its_other_names(name, pid):
    assert presets.preset_id("gpu", name) == pid
    assert presets.resolve_gpu(name, dtype="bf16") == presets.resolve_gpu(pid, dtype="bf16")


@pytest.mark.parametrize("name", ["a100", "A100 SXM4", "h100 pcie", "H100 NVL", "mi300x",
                                  "", "nvidia", 7, None])
def test_a_name_of_no_part_or_of_two_is_refused_with_the_ids(name):
    with pytest.raises(presets.UnknownPreset) as info:
        presets.preset_id("gpu", name)
    assert "a100-sxm-40gb" in str(info.value) and "h200-141gb" in str(info.value)


def _scenario(gpu):
    return {"model": {"preset": "llama3-8b"},
            "job": {"seq_len": 4096, "global_batch": 512, "dtype": "bf16"},
            "cluster": {"gpu": gpu, "gpus": 64, "tiers": TIERS},
            "config": {"tp": 2, "pp": 1, "mbs": 1}}


def test_a_scenario_reads_another_name_as_the_preset_and_costs_it_the_same():
    by_id = trainscape.load(_scenario("h100-sxm-80gb"))
    by_name = trainscape.load(_scenario("NVIDIA H100 80GB HBM3"))
    assert by_name.cluster.gpu.preset == "h100-sxm-80gb"  # what is shown and looked up
    assert by_name.cluster.gpu == by_id.cluster.gpu
    assert trainscape.evaluate(by_name).step_time_s == trainscape.evaluate(by_id).step_time_s
    table = trainscape.load(_scenario({"preset": "H100 SXM5 80GB", "hbm_gb": 64.0}))
    assert table.cluster.gpu.preset == "h100-sxm-80gb" and table.cluster.gpu.hbm_gb == 64.0


def test_set_takes_another_name_and_an_unknown_one_is_exit_2():
    path = Path(__file__).resolve().parents[1] / "examples" / "gpt3-175b-a100.toml"
    runner = CliRunner()
    plain = runner.invoke(main, ["evaluate", str(path), "--json"])
    named = runner.invoke(main, ["evaluate", str(path), "--json", "--set",
                                 "cluster.gpu=NVIDIA A100-SXM4-80GB"])
    assert plain.exit_code == 0 and named.exit_code == 0, named.output
    assert json.loads(named.output)["step_time_s"] == json.loads(plain.output)["step_time_s"]
    bad = runner.invoke(main, ["evaluate", str(path), "--set", "cluster.gpu=a100"])
    assert bad.exit_code == 2
    assert "cluster.gpu" in bad.output and "a100-sxm-80gb" in bad.output
    assert "Traceback" not in bad.output


def _runs_file(path, rows):
    columns = list(dict.fromkeys(k for r in rows for k in r))
    with open(path, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=columns)
        w.writeheader()
        w.writerows(rows)
    return path


def _row(**changes):
    row = {"case": "mine", "gpu": "h100-sxm-80gb", "framework": "NeMo 25.04", "dtype": "bf16",
           "model": "llama3-8b", "layers": "32", "hidden": "4096", "heads": "32",
           "kv_heads": "8", "vocab": "128256", "mlp": "swiglu", "ffn_hidden": "14336",
           "gpus": "8", "tp": "1", "seq_len": "8192", "global_batch": "128",
           "metric": "tokens_per_s_per_gpu", "value": "15000"}
    row.update(changes)
    return row


def test_a_runs_file_reads_other_names_and_says_so_in_the_row(tmp_path):
    rows = [_row(case="by_id"),
            _row(case="by_smi", gpu="NVIDIA H100 80GB HBM3"),
            _row(case="by_case", gpu="H100", dtype="BF16", mlp="SwiGLU"),
            _row(case="h200", gpu="h200-sxm-141gb")]
    result = CliRunner().invoke(main, ["validate", "--backend", "c", "--runs",
                                       str(_runs_file(tmp_path / "r.csv", rows)), "--json"])
    assert result.exit_code == 0, result.output
    got = {r["case"]: r for r in json.loads(result.output)["rows"] if not r["case"][0].isdigit()}
    base = got["by_id"]
    assert not any(a.startswith("gpu ") for a in base["assumptions"])
    for case, written in (("by_smi", "NVIDIA H100 80GB HBM3"), ("by_case", "H100")):
        r = got[case]
        assert r["gpu"] == "h100-sxm-80gb" and r["dtype"] == "bf16"
        assert r["predicted_step_s"] == base["predicted_step_s"]
        assert f"gpu {written!r} read as the h100-sxm-80gb preset" in " ".join(r["assumptions"])
    assert got["h200"]["gpu"] == "h200-141gb" and got["h200"]["status"] == "ok"


@pytest.mark.parametrize("column, value", [("gpu", "a100"), ("gpu", "H100 PCIe"),
                                           ("dtype", "tf32"), ("mlp", "relu")])
def test_a_runs_file_cell_of_no_known_name_is_exit_2_naming_it(tmp_path, column, value):
    path = _runs_file(tmp_path / "r.csv", [_row(**{column: value})])
    result = CliRunner().invoke(main, ["validate", "--runs", str(path)])
    assert result.exit_code == 2
    assert f"column {column!r}" in result.output and repr(value) in result.output
    assert "Traceback" not in result.output


def test_a_model_is_known_by_its_name_in_any_case(tmp_path):
    # the reader's architecture facts (Qwen3's 128-wide heads with hidden 2048 / 32 heads = 64,
    # DeepSeek-V3's latent attention and shared expert) hold for the name however it is written
    from trainscape.data import calibration as shipped

    src = resources.files(shipped).joinpath("nemo_perf_summary_h100.csv").read_text()
    (row,) = [r for r in csv.DictReader(src.splitlines())
              if r["case"] == "nemo2606_qwen3-30b-a3b_fp8_16"]
    rows = [dict(row, source="a_lab", case="as_id"),
            dict(row, source="a_lab", case="as_written", model="Qwen3 30B-A3B"),
            dict(row, source="a_lab", case="remarked", model="Qwen3-30B-A3B (FP8)"),
            dict(row, source="a_lab", case="hf_repo", model="Qwen/Qwen3-30B-A3B")]
    path = _runs_file(tmp_path / "r.csv", rows)
    result = CliRunner().invoke(main, ["validate", "--backend", "c", "--runs", str(path),
                                       "--json"])
    assert result.exit_code == 0, result.output
    got = {r["case"]: r for r in json.loads(result.output)["rows"] if r["source"] == "a_lab"}
    assert got["as_written"]["predicted_step_s"] == got["as_id"]["predicted_step_s"]
    # a remark in parentheses is not part of the name, nor a Hugging Face organization
    assert got["remarked"]["predicted_step_s"] == got["as_id"]["predicted_step_s"]
    assert got["hf_repo"]["predicted_step_s"] == got["as_id"]["predicted_step_s"]
    assert "model 'Qwen3 30B-A3B' read as qwen3-30b-a3b" in " ".join(
        got["as_written"]["assumptions"])
    assert not any(a.startswith("model ") for a in got["as_id"]["assumptions"])


def test_a_site_gpu_may_be_named_otherwise_and_keeps_the_id():
    path = Path(__file__).resolve().parents[1] / "examples" / "three-region.toml"
    text = path.read_text().replace('gpu = "a100-sxm-80gb"', 'gpu = "NVIDIA A100-SXM4-80GB"')
    assert "NVIDIA A100-SXM4-80GB" in text
    raw = tomllib.loads(text)
    by_id = trainscape.load(tomllib.loads(path.read_text()))
    by_name = trainscape.load(raw)
    assert [s.gpu for s in by_name.cluster.sites] == [s.gpu for s in by_id.cluster.sites]
    assert trainscape.evaluate(by_name).step_time_s == trainscape.evaluate(by_id).step_time_s


@pytest.mark.parametrize("model, hidden, heads, head_dim", [
    ("Qwen3-32B", 5120, 64, 128), ("gpt-oss-20b", 2880, 64, 64), ("gemma-2-9b", 3584, 16, 256),
    ("Gemma 3 27B", 5376, 32, 128), ("mistral-nemo-12b", 5120, 32, 128),
    # a post-trained variant's repo name is its base model's architecture
    ("google/gemma-2-9b-it", 3584, 16, 256), ("Qwen/Qwen3-32B-Instruct", 5120, 64, 128)])
def test_a_known_model_keeps_its_head_width_however_written(model, hidden, heads, head_dim):
    # hidden / heads is not the head width of these models (their public configs)
    from trainscape.calibration.published import model_of

    row = {"model": model, "layers": "8", "hidden": str(hidden), "heads": str(heads),
           "kv_heads": "8", "vocab": "32000", "mlp": "swiglu", "ffn_hidden": "4096",
           "experts": "", "top_k": "", "expert_ffn": ""}
    notes: list[str] = []
    assert model_of(row, notes)["head_dim"] == head_dim
    assert hidden // heads != head_dim


@pytest.mark.parametrize("name, pid", [
    ("llama3-70b", "llama3-70b"),            # the id itself
    ("Llama 3 70B", "llama3-70b"),           # models.toml's name
    ("llama3.1-70b", "llama3-70b"),          # Llama 3.1 / 3.3 keep Llama 3's shapes
    ("Llama 3.3 70B", "llama3-70b"),
    ("Meta-Llama-3.1-8B", "llama3-8b"),
    ("Llama 3.1 405B", "llama3-405b"),
    ("Mixtral 8x7B", "mixtral-8x7b"),
    ("DeepSeek-V3-Base", "deepseek-v3"),
])
def test_a_model_preset_is_found_by_its_other_names(name, pid):
    assert presets.preset_id("model", name) == pid


@pytest.mark.parametrize("cell, pid", [
    ("meta-llama/Llama-3.1-8B-Instruct", "llama3-8b"),
    ("Qwen/Qwen3-235B-A22B-Instruct-2507", "qwen3-235b-a22b"),
    ("meta-llama/Llama-2-70b-chat-hf", "llama2-70b"),
    ("moonshotai/Kimi-K2-Instruct-0905", "kimi-k2"),
    ("meta-llama/Llama-4-Maverick-17B-128E-Instruct", "llama4-maverick"),
    ("zai-org/GLM-4.5", "glm45"),
])
def test_a_runs_row_names_a_post_trained_variant_by_its_base_model(cell, pid):
    # an -Instruct / -chat / -it / -Base / -hf checkpoint has its base model's architecture
    from trainscape.calibration.published import model_preset_id

    assert model_preset_id(cell) == pid


def test_a_runs_row_naming_a_model_preset_takes_the_architecture_it_leaves_empty(tmp_path):
    shape = ("layers", "hidden", "heads", "kv_heads", "vocab", "mlp", "ffn_hidden")
    bare = {c: "" for c in shape}
    rows = [_row(case="printed"),
            _row(case="by_name", model="Llama 3.1 8B", **bare),
            _row(case="hf_repo", model="meta-llama/Llama-3.1-8B (BF16)", **bare),
            _row(case="half", model="llama3-8b", **{**bare, "layers": "16"})]
    result = CliRunner().invoke(main, ["validate", "--backend", "c", "--runs",
                                       str(_runs_file(tmp_path / "r.csv", rows)), "--json"])
    assert result.exit_code == 0, result.output
    got = {r["case"]: r for r in json.loads(result.output)["rows"]}
    assert not any(a.startswith("architecture") for a in got["printed"]["assumptions"])
    for case in ("by_name", "hf_repo"):
        assert got[case]["predicted_step_s"] == got["printed"]["predicted_step_s"]
        said = [a for a in got[case]["assumptions"] if a.startswith("architecture")]
        assert said == ["architecture not printed: layers 32, hidden 4096, ffn_hidden 14336, "
                        "heads 32, kv_heads 8, vocab 128256, mlp swiglu from the llama3-8b "
                        "model preset (Llama 3 8B; its sources in presets/models.toml)"]
    # a printed cell is the run's own: 16 layers stay 16 (half the model, about half the step)
    half = got["half"]
    assert "layers 32" not in " ".join(half["assumptions"]) and "hidden 4096" in " ".join(
        half["assumptions"])
    assert 0.4 < half["predicted_step_s"] / got["printed"]["predicted_step_s"] < 0.6


def test_a_runs_row_takes_an_moe_presets_experts(tmp_path):
    bare = {c: "" for c in ("layers", "hidden", "heads", "kv_heads", "vocab", "mlp",
                            "ffn_hidden")}
    row = _row(case="moe", model="Mixtral 8x7B", gpus="16", ep="8", **bare)
    result = CliRunner().invoke(main, ["validate", "--backend", "c", "--runs",
                                       str(_runs_file(tmp_path / "r.csv", [row])), "--json"])
    assert result.exit_code == 0, result.output
    (r,) = json.loads(result.output)["rows"]
    assert r["status"] == "ok" and r["config"]["ep"] == 8
    assert "experts 8, top_k 2, expert_ffn 14336 from the mixtral-8x7b model preset" in " ".join(
        r["assumptions"])


def test_an_empty_architecture_of_a_model_no_preset_holds_is_exit_2_with_the_presets(tmp_path):
    row = _row(model="my-own-7b", layers="")
    result = CliRunner().invoke(main, ["validate", "--runs",
                                       str(_runs_file(tmp_path / "r.csv", [row]))])
    assert result.exit_code == 2 and "Traceback" not in result.output
    text = " ".join(result.output.split())
    assert "column 'layers' is empty; it is required (or name a model preset in 'model'" in text
    assert "llama3-8b" in text and "deepseek-v3" in text


def test_a_model_known_to_a_preset_only_gets_the_presets_facts(tmp_path):
    # Llama 4 Maverick's MoE every other layer and its shared expert are facts no column holds:
    # the reader's table knows the transfer file's "llama4-maverick-400b", the preset knows
    # "Llama 4 Maverick" too; both readings cost the same
    shape = {"layers": "48", "hidden": "5120", "heads": "40", "kv_heads": "8", "vocab": "202048",
             "mlp": "swiglu", "ffn_hidden": "16384", "experts": "128", "top_k": "1",
             "expert_ffn": "8192", "gpus": "64", "tp": "8", "pp": "1", "ep": "8"}
    rows = [_row(case="table", model="llama4-maverick-400b", **shape),
            _row(case="preset", model="Llama 4 Maverick", **shape),
            _row(case="unknown", model="an-unknown-moe", **shape)]
    result = CliRunner().invoke(main, ["validate", "--backend", "c", "--runs",
                                       str(_runs_file(tmp_path / "r.csv", rows)), "--json"])
    assert result.exit_code == 0, result.output
    got = {r["case"]: r for r in json.loads(result.output)["rows"]}
    assert got["preset"]["predicted_step_s"] == got["table"]["predicted_step_s"]
    # without the facts every layer is MoE with no shared expert: another model
    assert got["unknown"]["predicted_step_s"] != got["table"]["predicted_step_s"]
