"""PyTorch eager element-wise work (job.elementwise = "eager"): an RMSNorm, the rotary embedding
and SwiGLU run op by op, as torchtitan's Llama modules do without torch.compile, and move more
HBM bytes than fused kernels; those bytes, counted kernel by kernel, run at the GPU's streaming
bandwidth (model.llm.eager_elementwise_bytes, streaming_time)."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from trainscape import layout as L
from trainscape import presets
from trainscape.backends import evaluate_blocks
from trainscape.cli import main
from trainscape.model import llm
from trainscape.spec import ScenarioError, load_scenario, pack, pack_system

from test_model_known_answers import FABRIC, NODE, job, named_llama_model, one_config, system

# Llama 3 8B's block
H, Q, KV, FFN = 4096.0, 4096.0, 1024.0, 14336.0


def test_extra_bytes_by_hand():
    # per token: two norms x 32 B x h (36 B eager against a fused norm's 4), rotary 16 B x (q +
    # kv) (20 against 4), SwiGLU's gate 4 B x ffn (10 against 6)
    per_token = 2 * 32 * H + 16 * (Q + KV) + 4 * FFN
    assert per_token == 401408
    assert llm.eager_elementwise_bytes(8192.0, 2.0, H, Q, KV, FFN, 1.0, True, 1.0, False) \
        == 2 * 8192 * per_token
    # TP splits the projections and the MLP; sequence parallelism the norms too
    t = 8.0
    split = 2 * 32 * H + (16 * (Q + KV) + 4 * FFN) / t
    assert llm.eager_elementwise_bytes(8192.0, 1.0, H, Q, KV, FFN, 1.0, True, t, False) \
        == pytest.approx(8192 * split)
    assert llm.eager_elementwise_bytes(8192.0, 1.0, H, Q, KV, FFN, 1.0, True, t, True) \
        == pytest.approx(8192 * split - 8192 * 2 * 32 * H * (1 - 1 / t))
    # MoE: every routed and shared copy's SwiGLU; a GELU MLP is one kernel either way
    moe = llm.eager_elementwise_bytes(1.0, 1.0, H, Q, KV, 768.0, 9.0, True, 1.0, False)
    assert moe == 2 * 32 * H + 16 * (Q + KV) + 4 * 768 * 9
    assert llm.eager_elementwise_bytes(1.0, 1.0, H, Q, KV, FFN, 1.0, False, 1.0, False) \
        == 2 * 32 * H + 16 * (Q + KV)


@pytest.mark.parametrize("backend", ["python", "c", "numba"])
@pytest.mark.parametrize("recompute,passes", [(L.RECOMPUTE_NONE, 3.0), (L.RECOMPUTE_FULL, 4.0)])
def test_eager_adds_its_bytes_at_the_streaming_bandwidth(backend, recompute, passes):
    sys = system([NODE, FABRIC], gpus=8)
    sys[L.SYS_STREAM_MEMORY_EFFICIENCY] = 0.9  # the fitted memory_efficiency is 0.8
    mdl = named_llama_model(layers=4)  # Llama 3 8B's block
    j = job(seq=2048, batch=8)
    cfg = one_config(dp=8, recompute=recompute)
    fused = evaluate_blocks(sys, mdl, j, cfg, backend=backend)[:, 0]
    j2 = j.copy()
    j2[L.JOB_EAGER_ELEMENTWISE] = 1.0
    eager = evaluate_blocks(sys, mdl, j2, cfg, backend=backend)[:, 0]
    extra = llm.eager_elementwise_bytes(2048.0, 1.0, H, Q, KV, FFN, 1.0, True, 1.0, False)
    # one microbatch per device: forward once, backward twice, and once more when the forward
    # is recomputed; 4 layers, at the streaming bandwidth, not the fitted one
    expected = passes * 4 * extra / (sys[L.SYS_HBM_BANDWIDTH] * 0.9)
    assert eager[L.OUT_COMPUTE_S] - fused[L.OUT_COMPUTE_S] == pytest.approx(expected, rel=1e-9)
    # nothing but time: the same memory and model FLOPs
    assert eager[L.OUT_MEMORY_GIB] == fused[L.OUT_MEMORY_GIB]
    # without a streaming value the fitted memory_efficiency is used
    sys[L.SYS_STREAM_MEMORY_EFFICIENCY] = 0.0
    slow = evaluate_blocks(sys, mdl, j2, cfg, backend=backend)[:, 0]
    assert slow[L.OUT_COMPUTE_S] - fused[L.OUT_COMPUTE_S] == pytest.approx(
        expected * 0.9 / 0.8, rel=1e-9)


def test_presets_carry_their_stock_streaming_efficiency():
    # the fit lowers memory_efficiency; the streaming value stays the microbenchmark's
    fitted = presets.gpu("h100-sxm-80gb", stack="pytorch-fsdp")
    stock = presets.gpu("h100-sxm-80gb", calibrated=False)
    assert fitted["stream_memory_efficiency"] == stock["memory_efficiency"]
    assert fitted["memory_efficiency"] < fitted["stream_memory_efficiency"]


SCENARIO = {"model": {"preset": "llama3-8b"},
            "job": {"seq_len": 8192, "global_batch": 16, "dtype": "bf16",
                    "stack": "pytorch-fsdp"},
            "cluster": {"gpu": "h100-sxm-80gb", "gpus": 8,
                        "tiers": [{"name": "node", "size": 8, "bandwidth_GBps": 450,
                                   "latency_us": 2}]}}


def test_scenario_field_packs_and_validates():
    sc = load_scenario({**SCENARIO, "job": {**SCENARIO["job"], "elementwise": "eager"}})
    sys, _, jb = pack(sc)
    assert jb[L.JOB_EAGER_ELEMENTWISE] == 1.0
    assert sys[L.SYS_STREAM_MEMORY_EFFICIENCY] == presets.gpu(
        "h100-sxm-80gb", calibrated=False)["memory_efficiency"]
    assert pack(load_scenario(SCENARIO))[2][L.JOB_EAGER_ELEMENTWISE] == 0.0
    with pytest.raises(ScenarioError, match="job.elementwise"):
        load_scenario({**SCENARIO, "job": {**SCENARIO["job"], "elementwise": "compiled"}})
    # a GPU without a preset streams at its own memory_efficiency unless it says otherwise
    table = {k: v for k, v in presets.gpu("h100-sxm-80gb").items()
             if k not in ("sources", "name", "stream_memory_efficiency")}
    own = load_scenario({**SCENARIO, "cluster": {**SCENARIO["cluster"], "gpu": table}})
    assert pack_system(own)[L.SYS_STREAM_MEMORY_EFFICIENCY] == table["memory_efficiency"]
    with pytest.raises(ScenarioError, match="stream_memory_efficiency"):
        load_scenario({**SCENARIO, "cluster": {**SCENARIO["cluster"], "gpu": {
            **table, "stream_memory_efficiency": 1.5}}})


def test_cli_rejects_a_bad_elementwise_value_with_status_2():
    example = Path(__file__).resolve().parents[1] / "examples" / "llama3-405b-2bldg.toml"
    result = CliRunner().invoke(main, ["evaluate", str(example), "--set",
                                       'job.elementwise="jit"'])
    assert result.exit_code == 2
    assert "job.elementwise" in result.output and "Traceback" not in result.output
