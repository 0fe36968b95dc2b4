"""Presets: every preset loads, every numeric value has a source, values are sane, and the LLM
dimensions reproduce the published parameter counts."""

from __future__ import annotations

import math
import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from trainscape import presets

GPU_NUMERIC = (
    "peak_tflops",
    "hbm_gb",
    "hbm_bandwidth_GBps",
    "nvlink_bandwidth_GBps",
    "gemm_efficiency_max",
    "gemm_half_flops",
    "attention_efficiency",
    "memory_efficiency",
    "hbm_reserve_gb",
    "attention_head_dim_half", "host_op_us",
)
CLUSTER_NUMERIC = ("host_ddr_gb", "host_to_device_GBps")
TIER_NUMERIC = ("size", "bandwidth_GBps", "latency_us", "efficiency", "oversubscription")
LLM_FIELDS = (
    "layers", "hidden", "ffn_hidden", "heads", "kv_heads", "head_dim", "vocab", "mlp",
    "experts", "top_k", "expert_ffn_hidden", "moe_every", "shared_experts",
)
LLM_NUMERIC = tuple(f for f in LLM_FIELDS if f != "mlp")
#: fields a model preset states only where the model has them (each with its source then)
LLM_OPTIONAL = ("mtp_layers", "max_route_nodes", "attention_window", "full_attention_every",
                "first_dense_layers")
#: flags a model preset states only where the model has them (true, with its source)
LLM_OPTIONAL_FLAGS = ("expert_bias",)
DLRM_NUMERIC = (
    "dense_in_features", "dense_arch", "over_arch", "dcn_layers", "dcn_low_rank",
    "embedding_dim", "global_batch", "tables",
)

REQUIRED = {
    "gpu": {"a100-sxm-40gb", "a100-sxm-80gb", "h100-sxm-80gb", "h200-141gb", "b200", "h800-sxm-80gb",
            "gb200", "b300", "gb300", "a800-sxm-80gb"},
    "cluster": {
        "dgx-a100-superpod", "dgx-h100-superpod", "meta-roce-h100", "zionex",
        "meta-roce-h100-2bldg", "dgx-h100-superpod-2bldg", "gb200-nvl72", "gb300-nvl72",
        "hgx-b300", "gcp-a3-high",
    },
    "model": {
        "gpt3-175b", "megatron-530b", "megatron-1t", "llama2-7b", "llama2-13b", "llama2-70b",
        "llama3-8b", "llama3-70b", "llama3-405b", "mixtral-8x7b", "deepseek-v3", "kimi-k2",
    },
    "dlrm": {"dlrm-mlperf"},
    "stack": {"megatron-core", "pytorch-fsdp", "jax-xla", "megatron-lm"},
}
GETTERS = {"gpu": presets.gpu, "cluster": presets.cluster, "model": presets.model, "dlrm": presets.dlrm,
           "stack": lambda name: presets.get("stack", name)}


def _all(kind):
    return [(n, GETTERS[kind](n)) for n in presets.names(kind)]


def _has_source(sources: dict, key: str) -> bool:
    s = sources.get(key)
    return isinstance(s, str) and len(s.strip()) >= 10


# ------------------------------------------------------------------------------------------------
# API
# ------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("kind", presets.KINDS)
def test_required_presets_exist_and_load(kind):
    names = presets.names(kind)
    assert REQUIRED[kind] <= set(names), REQUIRED[kind] - set(names)
    assert len(names) == len(set(names))
    for n in names:
        assert re.fullmatch(r"[a-z0-9]+(-[a-z0-9]+)*", n), n
        p = GETTERS[kind](n)
        assert isinstance(p, dict) and isinstance(p["name"], str) and p["name"]
        assert isinstance(p["sources"], dict)


def test_dlrm_namespace_is_not_a_model():
    assert "dlrm" not in presets.names("model")
    assert not set(presets.names("dlrm")) & set(presets.names("model"))


@pytest.mark.parametrize("kind", presets.KINDS)
def test_each_call_returns_a_fresh_deep_copy(kind):
    name = presets.names(kind)[0]
    a = GETTERS[kind](name)
    a["sources"].clear()
    a["name"] = "changed"
    if kind == "cluster":
        a["tiers"][0]["size"] = -1
    b = GETTERS[kind](name)
    assert b["name"] != "changed" and b["sources"]
    if kind == "cluster":
        assert b["tiers"][0]["size"] >= 1
    assert GETTERS[kind](name) == b  # the same values again: nothing shared between calls


@pytest.mark.parametrize("kind", presets.KINDS)
def test_unknown_name_lists_available(kind):
    with pytest.raises(presets.UnknownPreset) as ei:
        GETTERS[kind]("no-such-preset")
    err = ei.value
    assert isinstance(err, KeyError)
    msg = str(err)
    assert "no-such-preset" in msg and kind in msg
    for n in presets.names(kind):
        assert n in msg


@settings(max_examples=50, deadline=None)
@given(st.text(max_size=20))
def test_unknown_names_always_raise_unknown_preset(name):
    for kind in presets.KINDS:
        if name in presets.names(kind):
            continue
        with pytest.raises(presets.UnknownPreset):
            presets.get(kind, name)


def test_unknown_kind():
    with pytest.raises(ValueError, match="gpu"):
        presets.names("tpu")
    with pytest.raises(ValueError):
        presets.summary_rows("tpu")


@pytest.mark.parametrize("kind", presets.KINDS)
def test_summary_rows(kind):
    rows = presets.summary_rows(kind)
    assert [r["id"] for r in rows] == presets.names(kind)
    keys = set(rows[0])
    assert all(set(r) == keys for r in rows)
    assert "name" in keys


# ------------------------------------------------------------------------------------------------
# Every numeric value has a source
# ------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("name,g", _all("gpu"))
def test_gpu_fields_and_sources(name, g):
    for f in GPU_NUMERIC:
        assert f in g, f"{name}.{f} missing"
        assert _has_source(g["sources"], f), f"{name}.sources.{f} missing"


@pytest.mark.parametrize("name,c", _all("cluster"))
def test_cluster_fields_and_sources(name, c):
    for f in CLUSTER_NUMERIC:
        assert f in c and _has_source(c["sources"], f), f"{name}.{f}"
    for i, t in enumerate(c["tiers"]):
        src = t.get("source", "")
        for f in TIER_NUMERIC:
            assert f in t, f"{name}.tiers[{i}].{f} missing"
            # each tier's source string carries one labelled part per numeric field
            assert re.search(rf"(^|; ){f}: \S", src), f"{name}.tiers[{i}].source lacks '{f}: ...'"


@pytest.mark.parametrize("name,m", _all("model"))
def test_model_fields_and_sources(name, m):
    optional = {f for f in LLM_OPTIONAL if f in m}
    flags = {f for f in LLM_OPTIONAL_FLAGS if f in m}
    assert set(m) == set(LLM_FIELDS) | optional | flags | {"name", "sources"}, \
        f"{name}: fields {sorted(m)}"
    for f in LLM_NUMERIC + tuple(optional):
        assert isinstance(m[f], int) and not isinstance(m[f], bool), f"{name}.{f}"
        assert _has_source(m["sources"], f), f"{name}.sources.{f} missing"
    for f in flags:
        assert m[f] is True and m["experts"] > 0, f"{name}.{f}"
        assert _has_source(m["sources"], f), f"{name}.sources.{f} missing"


@pytest.mark.parametrize("name,d", _all("dlrm"))
def test_dlrm_fields_and_sources(name, d):
    for f in DLRM_NUMERIC:
        assert f in d and _has_source(d["sources"], f), f"{name}.{f}"


# ------------------------------------------------------------------------------------------------
# Sanity ranges
# ------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("name,g", _all("gpu"))
def test_gpu_ranges(name, g):
    pk = g["peak_tflops"]
    assert {"bf16", "fp16"} <= set(pk) <= {"bf16", "fp16", "fp8"}
    assert all(v > 0 for v in pk.values())
    if "fp8" in pk:  # FP8 tensor throughput is twice BF16 on Hopper and Blackwell
        assert math.isclose(pk["fp8"], 2 * pk["bf16"], rel_tol=0.01)
    for f in ("gemm_efficiency_max", "attention_efficiency", "memory_efficiency"):
        assert 0.0 < g[f] <= 1.0, f"{name}.{f}={g[f]}"
    assert g["attention_efficiency"] <= g["gemm_efficiency_max"]
    assert 1e7 <= g["gemm_half_flops"] <= 1e12
    assert g["hbm_gb"] > 0 and g["hbm_bandwidth_GBps"] > 0 and g["nvlink_bandwidth_GBps"] > 0
    assert 0 < g["hbm_reserve_gb"] < 0.2 * g["hbm_gb"]


@pytest.mark.parametrize("name,c", _all("cluster"))
def test_cluster_ranges(name, c):
    assert c["gpu"] in presets.names("gpu")
    assert c["host_ddr_gb"] > 0 and c["host_to_device_GBps"] > 0
    tiers = c["tiers"]
    assert 1 <= len(tiers) <= 6  # layout.MAX_TIERS
    for t in tiers:
        assert isinstance(t["size"], int) and t["size"] >= 1
        assert t["bandwidth_GBps"] > 0 and t["latency_us"] > 0
        assert 0 < t["efficiency"] <= 1 and t["oversubscription"] >= 1
    # the node tier is NVLink at the GPU preset's NVLink bandwidth, and no outer tier is faster
    assert tiers[0]["bandwidth_GBps"] == presets.gpu(c["gpu"])["nvlink_bandwidth_GBps"]
    assert all(t["bandwidth_GBps"] <= tiers[0]["bandwidth_GBps"] for t in tiers[1:])
    assert all(a["latency_us"] <= b["latency_us"] for a, b in zip(tiers, tiers[1:]))


def test_cluster_sizes_match_the_papers():
    meta = presets.cluster("meta-roce-h100")["tiers"]
    assert meta[0]["size"] * meta[1]["size"] == 3072  # Llama 3 §3.3: 3072-GPU pods
    assert meta[2]["oversubscription"] == 7.0  # 1:7 above the pod
    assert math.prod(t["size"] for t in meta) == 24576  # 24K GPUs
    two = presets.cluster("meta-roce-h100-2bldg")["tiers"]
    assert [t["name"] for t in two][-1] == "region" and two[-1]["size"] == 2
    assert presets.cluster("dgx-h100-superpod-2bldg")["tiers"][-1]["size"] == 2


# ------------------------------------------------------------------------------------------------
# Model dimensions
# ------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("name,m", _all("model"))
def test_model_dims_consistent(name, m):
    assert m["mlp"] in ("swiglu", "gelu")
    assert m["heads"] % m["kv_heads"] == 0
    # heads * head_dim == hidden but where a model's heads are wider or narrower than its
    # hidden: DeepSeek-V3's MLA heads (128 x 128 on 7168), Qwen3's 128-wide heads, GPT-OSS's
    # 64 heads of 64 on 2880 (models.toml documents each)
    assert m["heads"] * m["head_dim"] == QUERY_WIDTH.get(name, m["hidden"])
    for f in ("layers", "hidden", "ffn_hidden", "heads", "kv_heads", "head_dim", "vocab"):
        assert m[f] >= 1
    moe = m["experts"] > 0
    assert moe == (m["moe_every"] > 0) == (m["top_k"] > 0) == (m["expert_ffn_hidden"] > 0)
    if moe:
        assert 1 <= m["top_k"] <= m["experts"] and m["moe_every"] <= m["layers"]
    else:
        assert m["shared_experts"] == 0


#: the query projection's width (heads x head_dim) of the models whose heads do not tile their
#: hidden (their configs: DeepSeek-V3 qk_nope_head_dim 128, Qwen3 head_dim 128, GPT-OSS 64)
QUERY_WIDTH = {"deepseek-v3": 16384, "kimi-k2": 8192, "glm45": 12288, "qwen3-30b-a3b": 4096,
               "qwen3-235b-a22b": 8192, "gpt-oss-20b": 4096, "gpt-oss-120b": 4096}


def _param_count(m, tied_embeddings):
    """Independent count: per layer attention Q,O = h*a*d each, K,V = h*kv*d each; MLP 3*h*f
    (SwiGLU) or 2*h*f (GeLU) [Narayanan et al. SC'21 §5.1 gives 12lh^2 for GPT]; MoE layers
    (after the first_dense_layers leading dense ones, 1-based index among the rest divisible
    by moe_every) hold experts + shared experts and a router h*experts; embedding v*h, plus an
    output projection v*h unless tied. Norms/biases ignored (<0.1%)."""
    h, f = m["hidden"], m["ffn_hidden"]
    mats = 3 if m["mlp"] == "swiglu" else 2
    lead = m.get("first_dense_layers", 0)
    total = active = 0
    for layer in range(1, m["layers"] + 1):
        attn = 2 * h * m["heads"] * m["head_dim"] + 2 * h * m["kv_heads"] * m["head_dim"]
        total += attn
        active += attn
        if m["moe_every"] and layer > lead and (layer - lead) % m["moe_every"] == 0:
            e = mats * h * m["expert_ffn_hidden"]
            total += (m["experts"] + m["shared_experts"]) * e + h * m["experts"]
            active += (m["top_k"] + m["shared_experts"]) * e + h * m["experts"]
        else:
            total += mats * h * f
            active += mats * h * f
    emb = m["vocab"] * h * (1 if tied_embeddings else 2)
    return total + emb, active + emb


# (published total, published active, tied embeddings, source)
PUBLISHED = {
    "gpt3-175b": (175.0e9, None, True, "Brown et al. 2020 Table 2.1"),
    "megatron-530b": (529.6e9, None, True, "Narayanan et al. SC'21 Table 1"),
    "megatron-1t": (1008.0e9, None, True, "Narayanan et al. SC'21 Table 1"),
    "llama2-7b": (6.74e9, None, False, "Llama 2 release: 6,738,415,616 parameters"),
    "llama2-13b": (13.02e9, None, False, "Llama 2 release: 13,015,864,320 parameters"),
    "llama2-70b": (70e9, None, False, "Touvron et al. 2023: 70B (68.98B exact)"),
    "llama3-8b": (8e9, None, False, "Llama 3 paper Table 3: 8B"),
    "llama3-70b": (70e9, None, False, "Llama 3 paper Table 3: 70B"),
    "llama3-405b": (405e9, None, False, "Llama 3 paper Table 3: 405B"),
    "mixtral-8x7b": (46.7e9, 12.9e9, False, "Mixtral (arXiv 2401.04088) / Mistral: 46.7B total, 12.9B active"),
    "deepseek-v3": (671e9, 37e9, False, "DeepSeek-V3 (arXiv 2412.19437) abstract: 671B total, 37B active"),
    "kimi-k2": (1.04e12, 32e9, False, "Kimi K2: 1.04T total (arXiv 2507.20534), 32B activated (model card)"),
    # its 32B active leave the embeddings out (models.toml counts both): total only
    "glm45": (355e9, None, False, "Megatron-Bridge docs/models/glm/glm45.md: 355B total parameters"),
    "qwen3-30b-a3b": (30.5e9, 3.3e9, False, "Qwen/Qwen3-30B-A3B model card: 30.5B total, 3.3B activated"),
    "qwen3-235b-a22b": (235e9, 22e9, False, "Qwen/Qwen3-235B-A22B model card: 235B total, 22B activated"),
    # active counts one embedding matrix there (models.toml): total only
    "gpt-oss-20b": (20.91e9, None, False, "gpt-oss model card (arXiv 2508.10925): 20.91B total"),
    "gpt-oss-120b": (116.83e9, None, False, "gpt-oss model card (arXiv 2508.10925): 116.83B total"),
    "nemotron4-15b": (15.7e9, None, False, "Nemotron-4 15B (arXiv 2402.16819) Sec. 2: 3.2B embedding + 12.5B non-embedding"),
    "nemotron4-340b": (341.0e9, None, False, "Nemotron-4 340B (arXiv 2406.11704) Sec. 2: 9.4B embedding + 331.6B non-embedding"),
    "llama4-maverick": (400e9, 17e9, False, "Meta Llama 4 model card: Maverick 400B total, 17B active"),
}


def _mla_documented_delta(m):
    """The approximation delta stated in models.toml for deepseek-v3 and kimi-k2 (total,
    active): the GQA stand-in for multi-head latent attention. Their leading dense layers are
    the models' own (first_dense_layers), not an approximation."""
    h, a = m["hidden"], m["heads"]
    # GQA stand-in vs MLA attention weights per layer (q 1536 rank, kv 512 + rope 64, 192/128 dims)
    mla = h * 1536 + 1536 * a * 192 + h * (512 + 64) + 512 * a * (128 + 128) + a * 128 * h
    gqa = 2 * h * a * 128 + 2 * h * 8 * 128
    attn_extra = m["layers"] * (gqa - mla)
    return attn_extra, attn_extra


@pytest.mark.parametrize("name", sorted(PUBLISHED))
def test_param_count_matches_published(name):
    m = presets.model(name)
    total_pub, active_pub, tied, _src = PUBLISHED[name]
    total, active = _param_count(m, tied)
    if name in ("deepseek-v3", "kimi-k2"):
        d_total, d_active = _mla_documented_delta(m)
        total_pub, active_pub = total_pub + d_total, active_pub + d_active
    assert abs(total / total_pub - 1) < 0.03, f"{name}: {total / 1e9:.1f}B vs {total_pub / 1e9:.1f}B"
    if active_pub is not None:
        assert abs(active / active_pub - 1) < 0.03, f"{name}: active {active / 1e9:.2f}B"
    # the API's summary helper agrees with this independent count (it never ties embeddings)
    api_total, api_active = presets.llm_param_counts(m)
    untied_total, untied_active = _param_count(m, False)
    assert math.isclose(api_total, untied_total) and math.isclose(api_active, untied_active)


def test_all_models_have_published_sizes():
    assert set(presets.names("model")) <= set(PUBLISHED)


# ------------------------------------------------------------------------------------------------
# DLRM
# ------------------------------------------------------------------------------------------------


def test_dlrm_mlperf():
    d = presets.dlrm("dlrm-mlperf")
    assert d["dense_in_features"] == 13 and d["dense_arch"] == [512, 256, 128]
    assert d["over_arch"] == [1024, 1024, 512, 256, 1]
    assert (d["interaction"], d["dcn_layers"], d["dcn_low_rank"]) == ("dcn", 3, 512)
    assert d["embedding_dim"] == 128 and d["global_batch"] == 65536
    tables = d["tables"]
    assert len(tables) == 26 and len({t["name"] for t in tables}) == 26
    assert all(t["dim"] == d["embedding_dim"] and 1 <= t["rows"] <= 40_000_000 for t in tables)
    assert all(t["pooling"] >= 1 for t in tables)
    # totals of shared/cases/criteo_1tb_tables.csv (rows; multi_hot lookups per sample)
    assert sum(t["rows"] for t in tables) == 204_184_588
    assert sum(t["pooling"] for t in tables) == 214
    # the dense arch output feeds the interaction at the embedding width
    assert d["dense_arch"][-1] == d["embedding_dim"]


@pytest.mark.parametrize("pid", presets.names("model"))
def test_the_run_readers_architecture_facts_agree_with_the_model_presets(pid):
    # the published-run reader keeps facts a CSV row cannot carry (head width, routing, sliding
    # windows, MoE spacing) per model name; a model it knows and a preset both hold must agree
    from trainscape.calibration import published as pub

    m = presets.model(pid)
    key = next((k for k in (pub.architecture_key(m["name"]), pub.architecture_key(pid))
                if k in pub._architecture_names().values()), None)
    if key is None:
        return  # no fact of the reader's about this model
    if key in pub.HEAD_DIM:
        assert pub.HEAD_DIM[key] == m["head_dim"]
    if key in pub.KV_HEADS:
        assert pub.KV_HEADS[key] == m["kv_heads"]
    if m["experts"]:
        assert pub.MOE_EVERY.get(key, 1) == m["moe_every"]
        assert pub.SHARED_EXPERTS.get(key, 0) == m["shared_experts"]
        assert pub.FIRST_DENSE_LAYERS.get(key, 0) == m.get("first_dense_layers", 0)
    assert pub.MAX_ROUTE_NODES.get(key, 0) == m.get("max_route_nodes", 0)
    assert pub.SLIDING_WINDOW.get(key, (0, 0)) == (m.get("attention_window", 0),
                                                   m.get("full_attention_every", 0))
