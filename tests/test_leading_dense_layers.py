"""Leading dense layers (model.first_dense_layers): DeepSeek-V3 keeps its first three layers
dense and routes every layer after them (arXiv 2412.19437 §4.2; Hugging Face
``first_k_dense_replace``, Megatron-Core ``moe_layer_freq = [0]*3 + [1]*58``). Those layers
hold a dense MLP instead of the experts, send no all-to-all, and sit on the first pipeline
device."""

from __future__ import annotations

import pytest

from trainscape import api, presets
from trainscape import layout as L
from trainscape.backends import evaluate_blocks
from trainscape.model import llm
from trainscape.spec import ScenarioError, load_scenario

from test_model_known_answers import FABRIC, NODE, job, moe_model, one_config, system


def test_the_moe_pattern_starts_after_the_leading_dense_layers():
    assert llm.moe_layer_count(61, 256, 1, 3) == 58  # DeepSeek-V3
    assert llm.moe_layer_count(61, 384, 1, 1) == 60  # Kimi K2
    assert llm.moe_layer_count(48, 128, 2, 0) == 24  # Llama 4 Maverick: every other layer
    assert llm.moe_layer_count(48, 128, 2, 1) == 23  # (47 after one dense layer) // 2
    assert llm.moe_layer_count(61, 0, 1, 3) == 0  # a dense model
    # a raw block past the depth leaves no MoE layer (the spec refuses it before)
    assert llm.moe_layer_count(4, 8, 1, 4) == 0 and llm.moe_layer_count(4, 8, 1, 9) == 0


def test_the_last_layer_sets_the_kind_of_the_mtp_block():
    mdl = moe_model()  # 4 layers, every one MoE
    mdl[L.MDL_MTP_LAYERS] = 1
    mdl[L.MDL_FIRST_DENSE_LAYERS] = 1
    assert llm.mtp_moe_blocks(mdl) == 1  # 3 MoE layers after the dense one: the last is MoE
    mdl[L.MDL_MOE_EVERY] = 2
    assert llm.mtp_moe_blocks(mdl) == 0  # MoE at layers 3 only (1 + 2): the last is dense
    mdl[L.MDL_FIRST_DENSE_LAYERS] = 2
    assert llm.mtp_moe_blocks(mdl) == 1  # MoE at layer 4 (2 + 2)


@pytest.mark.parametrize("pp,chunks,loss_first,n,want", [
    # no pipeline: the one device holds all three
    (1, 1, False, (61.0, 0.0, 61.0), (3.0, 0.0, 3.0)),
    # Megatron-Bridge's DeepSeek-V3 layout on PP 16, "Et*4|(t*4|)*14tmL": the first device's 4
    # layers are the 3 dense ones and one MoE layer, every other device all MoE
    (16, 1, False, (4.0, 4.0, 1.0), (3.0, 0.0, 0.0)),
    # 1 layer on the first device (Megatron-Bridge's H100 layout "Et|(tt|)*30mL" on PP 8 x VP 4,
    # its first chunk a quarter of the device's 7): the spill reaches device 1, a middle one,
    # and the busiest middle device (the last the spill would reach) holds none
    (8, 4, False, (7.0, 8.0, 6.0), (1.75, 0.0, 0.0)),
    # two devices: what the first device's chunk cannot hold goes to the last
    (2, 1, False, (2.0, 0.0, 59.0), (2.0, 0.0, 1.0)),
    # three devices with one-layer chunks: the spill fills the middle one, then the last
    (3, 1, False, (1.0, 1.0, 59.0), (1.0, 1.0, 1.0)),
    # a V placement: the first device holds the first and the last chunk
    (4, 2, True, (16.0, 15.0, 16.0), (3.0, 0.0, 3.0)),
])
def test_the_leading_layers_open_the_first_device(pp, chunks, loss_first, n, want):
    got = llm.leading_dense_layers(3.0, *n, float(pp), float(chunks), loss_first)
    assert got == pytest.approx(want)


@pytest.mark.parametrize("schedule,vpp,chunks", [
    (L.SCHED_1F1B, 1, 1.0), (L.SCHED_INTERLEAVED, 4, 4.0), (L.SCHED_ZB_V, 1, 2.0),
    (L.SCHED_DUALPIPE_V, 1, 2.0),
    # DualPipe's two mirrored directions count as one pass: a device's stage is one chunk
    (L.SCHED_DUALPIPE, 1, 1.0)])
def test_the_first_chunk_is_the_devices_share_of_its_chunks(schedule, vpp, chunks):
    assert llm.leading_dense_chunks(schedule, 16.0, float(vpp)) == chunks
    assert llm.leading_dense_chunks(schedule, 1.0, float(vpp)) == 1.0  # no pipeline


def test_a_device_splits_its_other_layers_by_the_moe_share_of_the_rest():
    # 4 layers of which the 3 leading dense ones: one MoE layer, of 58 over the 58 after them
    assert llm.stage_layer_split(4.0, 3.0, 61.0, 3.0, 58.0) == (3.0, 1.0)
    # every other layer MoE after one dense: 8 layers, none leading, half MoE
    assert llm.stage_layer_split(8.0, 0.0, 49.0, 1.0, 24.0) == (4.0, 4.0)


def test_only_the_moe_layers_send_all_to_alls(backend):
    # one device per pipeline stage (PP 1), EP 64 over 8 nodes: the expert-parallel time is a
    # per-MoE-layer term, so leading dense layers scale it by the MoE layers left
    sys = system([NODE, FABRIC], gpus=64)
    mdl = moe_model()
    mdl[L.MDL_LAYERS] = 8
    j = job(seq=4096, batch=64)
    cfg = one_config(dp=64, ep=64)
    all_moe = evaluate_blocks(sys, mdl, j, cfg, backend=backend)[:, 0]
    mdl[L.MDL_FIRST_DENSE_LAYERS] = 3
    led = evaluate_blocks(sys, mdl, j, cfg, backend=backend)[:, 0]
    assert all_moe[L.OUT_STATUS] == led[L.OUT_STATUS] == L.STATUS_OK
    assert all_moe[L.OUT_EP_COMM_S] > 0
    assert led[L.OUT_EP_COMM_S] == pytest.approx(all_moe[L.OUT_EP_COMM_S] * 5 / 8, rel=1e-12)
    # each leading layer holds a dense MLP of ffn_hidden (16384, SwiGLU) on every device where
    # an MoE layer held its router and its one local expert (64 experts over EP 64), 2 bytes a
    # weight: the first device's weights grow by exactly that
    h = 4096.0
    dense_mlp = 3 * h * 16384
    moe_local = h * 64 + 3 * h * 1024
    assert (led[L.OUT_MEM_WEIGHTS_GIB] - all_moe[L.OUT_MEM_WEIGHTS_GIB]) * 2**30 == \
        pytest.approx(3 * (dense_mlp - moe_local) * 2, rel=1e-12)


def _dsv3(**model):
    return {"name": "dsv3", "model": {"preset": "deepseek-v3", **model},
            "job": {"seq_len": 4096, "global_batch": 1024, "dtype": "bf16"},
            "cluster": {"preset": "dgx-h100-superpod", "gpus": 512},
            "config": {"tp": 1, "pp": 16, "dp": 32, "ep": 32, "mbs": 1, "zero": 1,
                       "recompute": "full"}}


def test_deepseek_v3_holds_its_published_weights():
    # 671B in the report; the preset's GQA stand-in for its latent attention adds 3.8B
    m = presets.model("deepseek-v3")
    assert m["first_dense_layers"] == 3
    total, _ = presets.llm_param_counts(m)
    assert 671e9 < total < 676e9


def test_the_first_device_of_deepseek_v3_holds_the_dense_layers(backend):
    # PP 16 with the recipe's split (4 layers and the embedding first, 1 layer, the MTP block
    # and the loss last): the first device's weights are 3 dense MLPs and one MoE layer's
    # experts; without the leading dense layers it held four MoE layers'
    split = {"pipeline_first_stage_layers": 4, "pipeline_last_stage_layers": 1}
    led = api.evaluate({**_dsv3(), "job": {**_dsv3()["job"], **split}}, backend=backend)
    moe = api.evaluate({**_dsv3(first_dense_layers=0), "job": {**_dsv3()["job"], **split}},
                       backend=backend)
    assert led.status == moe.status == "ok"
    assert led.step_time_s <= moe.step_time_s
    assert led.ep_comm_s == pytest.approx(moe.ep_comm_s)  # the slowest device is all MoE


@pytest.mark.parametrize("model,message", [
    ({"first_dense_layers": 61}, r"model\.first_dense_layers: an MoE model needs at least one "
                                 r"MoE layer.*got 61.*allowed: 0 to 60"),
    ({"first_dense_layers": 60, "moe_every": 2},
     r"model\.first_dense_layers:.*got 60.*allowed: 0 to 59"),
])
def test_a_model_with_no_moe_layer_left_is_refused(model, message):
    with pytest.raises(ScenarioError, match=message):
        load_scenario(_dsv3(**model))


def test_a_dense_model_takes_no_leading_dense_layers():
    raw = _dsv3()
    raw["model"] = {"preset": "llama3-70b", "first_dense_layers": 2}
    with pytest.raises(ScenarioError, match=r"model\.first_dense_layers: only for MoE models"):
        load_scenario(raw)


def _dsv3_row(model):
    # a published row's shape columns as a config.json states them (MLA: 128 KV heads)
    return {"model": model, "layers": "61", "hidden": "7168", "ffn_hidden": "18432",
            "heads": "128", "kv_heads": "128", "vocab": "129280", "mlp": "swiglu",
            "experts": "256", "top_k": "8", "expert_ffn": "2048"}


@pytest.mark.parametrize("name", ["DeepSeek-V3-Base", "deepseek-ai/DeepSeek-V3-0324",
                                  "DeepSeek-V3 671B", "DeepSeek-V3.1"])
def test_a_row_reads_one_architecture_whatever_it_calls_the_model(name):
    # another name of the deepseek-v3 preset (presets/aliases.toml) takes the reader's own
    # facts too: the GQA stand-in's heads, the shared expert, the routing limit and the three
    # leading dense layers, as a row named "DeepSeek-V3" does
    from trainscape.calibration import published

    plain = published.model_of(_dsv3_row("DeepSeek-V3"), [])
    notes = []
    other = published.model_of(_dsv3_row(name), notes)
    assert {**other, "name": None} == {**plain, "name": None}
    assert other["first_dense_layers"] == 3 and other["kv_heads"] == 8
    assert any("read as deepseek-v3" in n for n in notes)
