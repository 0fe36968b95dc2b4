"""Compression per tier (issue 13 item 5): ``[[cluster.tiers]] comm_dtype``.

The data-parallel collectives carry the bytes that cross a tier in the tier's format where it
is narrower than the traffic's own width (ZeRO++ qgZ / qwZ, Wang et al. 2023, arXiv
2306.10209), plus the quantize / dequantize kernels at HBM bandwidth. Known answers with the
derivation in each docstring; the hypothesis differential test draws the field for C and numba.
"""

from pathlib import Path

import pytest
from click.testing import CliRunner

from trainscape import api
from trainscape import layout as L
from trainscape.cli import main
from trainscape.model import collectives as C
from trainscape.model import llm
from trainscape.model.numba_kernel import jitted
from trainscape.spec import ScenarioError
from trainscape.spec.pack import comm_dtype_bytes, pack, pack_configs

from test_model_known_answers import system

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "llama3-405b-2bldg.toml"
#: DP outermost over the two buildings (64 DP members in each), ZeRO-1 (fp32 gradients
#: reduce-scattered, bf16 weights all-gathered)
DP_ACROSS = ['config.order="tp-cp-pp-ep-dp"', "config.zero=1"]
BF16_REGION = ['cluster.tiers[2].comm_dtype="bf16"']

HBM = 3e12 * 0.8  # system(): hbm_bandwidth x memory_efficiency
NBYTES = 8e9


def _node(comm=0.0):
    return (8, 400e9, 2e-6, 0.9, 1.0, 0.0, 0.0, comm)  # 360 GB/s achieved


def _fabric(comm=0.0):
    return (2, 50e9, 10e-6, 0.8, 1.0, 0.0, 0.0, comm)  # 40 GB/s


def test_comm_dtype_widths():
    """bf16: 2 bytes; fp8 and int8: 1 byte + one fp32 scale per 128-element block =
    1 + 4/128 = 1.03125 (DeepSeek-V3 §3.3.2 1x128 tiles); none: 0 (the job's width)."""
    assert comm_dtype_bytes(None) == 0.0
    assert comm_dtype_bytes("none") == 0.0
    assert comm_dtype_bytes("bf16") == 2.0
    assert comm_dtype_bytes("fp8") == 1.03125
    assert comm_dtype_bytes("int8") == 1.03125


@pytest.mark.parametrize("comm,elem,want", [
    (2.0, 4.0, 2.0),  # fp32 gradients over a bf16 tier: compressed
    (1.03125, 2.0, 1.03125),  # bf16 over fp8 with scales: compressed
    (2.0, 2.0, 2.0),  # bf16 over bf16: as it is
    (1.03125, 1.0, 1.0),  # an FP8 weight gather over fp8: the scales would inflate it
    (2.0, 1.0, 1.0),  # never wider than the traffic
    (0.0, 4.0, 4.0),  # no comm_dtype
])
def test_wire_bytes_never_inflates(comm, elem, want):
    assert C.wire_bytes(comm, elem) == want


@pytest.mark.parametrize("impl", ["reference", "numba"])
def test_two_tier_all_reduce_fp32_with_outer_tier_in_bf16(impl):
    """16 ranks on 8 per node x 2 nodes, fp32 gradients (4 B per element), N = 8 GB per rank.
    Hierarchical all-reduce: a ring of 8 in the node on N (2 x 7 x 2 us + 2 x 7/8 x N / 360
    GB/s), then a ring of 2 across nodes on N / 8 (2 x 1 x 10 us + 2 x 1/2 x N/8 / 40 GB/s).
    With the outer tier in bf16 the outer ring sends N/8 x 2/4 bytes, so its bandwidth term
    halves, plus the codec: 2 x 1/2 x (N/8 / 4) elements each quantized and dequantized,
    2 x elements x (4 + 2) bytes at 3 TB/s x 0.8. The inner term is unchanged. Both beat the
    flat ring / tree over 16 ranks at 40 GB/s."""
    f = jitted["compressed_all_reduce_time"] if impl == "numba" else C.compressed_all_reduce_time
    inner = 2 * 7 * 2e-6 + 2 * 7 / 8 * NBYTES / 360e9
    outer_plain = 2 * 1 * 10e-6 + 2 * 1 / 2 * (NBYTES / 8) / 40e9
    elements = 2 * 1 / 2 * (NBYTES / 8 / 4)
    outer_bf16 = 2 * 1 * 10e-6 + 2 * 1 / 2 * (NBYTES / 8 / 2) / 40e9 \
        + 2 * elements * (4 + 2) / HBM
    dims = (16.0, 1.0, 1.0, 1.0, 1.0, 1.0)
    plain = system([_node(), _fabric()], gpus=16)
    bf16 = system([_node(), _fabric(2.0)], gpus=16)
    assert f(plain, NBYTES, 4.0, *dims) == pytest.approx(inner + outer_plain, rel=1e-12)
    assert f(bf16, NBYTES, 4.0, *dims) == pytest.approx(inner + outer_bf16, rel=1e-12)
    # the outer bandwidth term halved, the inner one unchanged
    assert (f(plain, NBYTES, 4.0, *dims) - f(bf16, NBYTES, 4.0, *dims)) == pytest.approx(
        (NBYTES / 8) / 40e9 / 2 - 2 * elements * 6 / HBM, rel=1e-9)
    # without an element width (TP, DLRM callers) nothing is compressed
    assert f(bf16, NBYTES, 0.0, *dims) == C.all_reduce_time(plain, NBYTES, *dims)


def test_inner_tier_compression_leaves_the_outer_term():
    """Only the node tier in fp8 (1.03125 B with scales) for bf16 gradients: the ring of 8
    sends N x 1.03125/2 and pays the codec of 2 x 7/8 x N/2 elements, 2 x (2 + 1.03125) bytes
    each; the cross-node ring on N / 8 is unchanged."""
    sys = system([_node(1.03125), _fabric()], gpus=16)
    elements = 2 * 7 / 8 * NBYTES / 2
    want = (2 * 7 * 2e-6 + 2 * 7 / 8 * NBYTES * 1.03125 / 2 / 360e9
            + 2 * elements * (2 + 1.03125) / HBM) \
        + (2 * 1 * 10e-6 + 2 * 1 / 2 * (NBYTES / 8) / 40e9)
    got = C.compressed_all_reduce_time(sys, NBYTES, 2.0, 16.0, 1.0, 1.0, 1.0, 1.0, 1.0)
    assert got == pytest.approx(want, rel=1e-12)


def test_fp8_weight_gather_over_an_fp8_tier_is_not_inflated():
    """Weights gathered in FP8 (1 B) over a tier whose fp8 format carries scales (1.03125 B):
    sent as they are -- the all-gather costs exactly what it costs without a comm_dtype."""
    plain = system([_node(), _fabric()], gpus=16)
    fp8 = system([_node(1.03125), _fabric(1.03125)], gpus=16)
    dims = (16.0, 1.0, 1.0, 1.0, 1.0, 1.0)
    assert C.compressed_all_gather_time(fp8, NBYTES, 1.0, *dims) \
        == C.all_gather_time(plain, NBYTES, *dims)


def test_cross_site_ring_in_the_site_tier_format():
    """Sites = 2 buildings of 8 x 64; 1024 contiguous ranks, 512 per site: a ring of 2 over
    the sites on each member's shard N / 512 at 2 ms and min(40, 16) GB/s. fp32 outer traffic
    on a bf16 site tier: 2 x 1/2 x N/512 x 2/4 bytes, plus the codec of 2 x 1/2 x N/512/4
    elements."""
    sys = system([(8, 400e9, 2e-6, 0.9, 1.0), (64, 50e9, 10e-6, 0.8, 1.0),
                  (2, 20e9, 2e-3, 0.8, 1.0, 0.0, 0.0, 2.0)], gpus=1024)
    shard = NBYTES / 512
    elements = shard / 4
    want = 2 * 2e-3 + shard / 2 / 16e9 + 2 * elements * (4 + 2) / HBM
    dims = (1024.0, 1.0, 1.0, 1.0, 1.0, 1.0)
    assert C.cross_site_time(sys, NBYTES, 4.0, *dims) == pytest.approx(want, rel=1e-12)
    # bf16 outer traffic (job.sync.outer_dtype) on the bf16 tier: as it is
    assert C.cross_site_time(sys, NBYTES / 2, 2.0, *dims) == pytest.approx(
        2 * 2e-3 + shard / 2 / 16e9, rel=1e-12)


def test_default_packs_no_comm_dtype():
    """Without comm_dtype every tier packs 0 (the job's widths: every existing number stays)."""
    sys, _, _ = pack(api.load(EXAMPLE))
    for i in range(int(sys[L.SYS_N_TIERS])):
        assert sys[L.SYS_TIER_BASE + i * L.N_TIER + L.TIER_COMM_DTYPE_BYTES] == 0.0
    sys, _, _ = pack(api.load(EXAMPLE, BF16_REGION))
    assert sys[L.SYS_TIER_BASE + 2 * L.N_TIER + L.TIER_COMM_DTYPE_BYTES] == 2.0


def test_two_buildings_bf16_region_cuts_dp_time_in_every_backend(backend):
    """The two-building example with DP across the buildings (ZeRO-1): with the region tier in
    bf16 the fp32 gradients' reduce-scatter crosses the buildings in half the bytes, so the
    data-parallel collectives before overlap get cheaper and the step no slower; every
    backend agrees with the reference."""
    base = api.load(EXAMPLE, DP_ACROSS)
    comp = api.load(EXAMPLE, DP_ACROSS + BF16_REGION)
    t0 = _dp_comm(base)
    t1 = _dp_comm(comp)
    assert t1[0] < t0[0]  # the reduce-scatter of the fp32 gradients
    assert t1[1] == t0[1]  # the all-gather of bf16 weights: already 2 bytes
    r0 = api.evaluate(base, backend=backend)
    r1 = api.evaluate(comp, backend=backend)
    ref = api.evaluate(comp, backend="python")
    assert r1.dp_comm_s < r0.dp_comm_s
    assert r1.step_time_s < r0.step_time_s
    assert r1.step_time_s == pytest.approx(ref.step_time_s, rel=1e-9)
    assert r1.dp_comm_s == pytest.approx(ref.dp_comm_s, rel=1e-9)


def _dp_comm(sc):
    sys, mdl, job = pack(sc)
    cfg = pack_configs([sc.config])
    row = llm.row_terms(sys, mdl, job, cfg, 0)
    ordt = llm.order_terms(sys, mdl, job, row, cfg[L.CFG_ORDER, 0])
    return llm.data_parallel_comm(sys, job, row, ordt, 1)


def test_links_report_shows_the_compressed_bytes():
    """ZeRO-1 at the region tier: (f-1)/f x (4 B fp32 gradients + 2 B bf16 weights) x P / 64
    per GPU; with the region in bf16 the gradients cross in 2 B: (2 + 2) / (4 + 2) = 2/3 of
    the bytes. The building and node tiers carry the same bytes as before."""
    before = api.link_report(api.load(EXAMPLE, DP_ACROSS))
    after = api.link_report(api.load(EXAMPLE, DP_ACROSS + BF16_REGION))
    assert after[2]["name"] == "region"
    assert after[2]["by_dimension"]["dp"] == pytest.approx(
        before[2]["by_dimension"]["dp"] * 4.0 / 6.0, rel=1e-12)
    for t in (0, 1):
        assert after[t]["by_dimension"]["dp"] == before[t]["by_dimension"]["dp"]
    assert after[2]["busy_s"] < before[2]["busy_s"]


def test_evaluate_json_links_carry_the_compressed_bytes():
    import json

    runner = CliRunner()
    outs = []
    for extra in ([], BF16_REGION):
        args = ["evaluate", str(EXAMPLE), "--json"]
        for s in DP_ACROSS + extra:
            args += ["--set", s]
        res = runner.invoke(main, args)
        assert res.exit_code == 0, res.output
        outs.append(json.loads(res.output))
    region = [next(x for x in o["links"] if x["name"] == "region") for o in outs]
    assert region[1]["bytes_per_step"] < region[0]["bytes_per_step"]


@pytest.mark.parametrize("value", ['"fp4"', '"fp32"', "2", "true"])
def test_bad_comm_dtype_names_the_field(value):
    with pytest.raises(ScenarioError, match=r"cluster\.tiers\[2\]\.comm_dtype"):
        api.load(EXAMPLE, [f"cluster.tiers[2].comm_dtype={value}"])


def test_bad_comm_dtype_exits_2_with_one_line():
    res = CliRunner().invoke(main, ["evaluate", str(EXAMPLE), "--set",
                                    'cluster.tiers[1].comm_dtype="fp4"'])
    assert res.exit_code == 2
    lines = [x for x in res.output.strip().splitlines() if x.strip()]
    assert len(lines) == 1
    assert "cluster.tiers[1].comm_dtype" in lines[0]
    assert "none, bf16, fp8, int8" in lines[0]
