"""Cross-site synchronisation strategies (issue 13 item 4): ``[job.sync]``.

Known answers for the split of the hierarchical collective at the site tier (the outermost of
two or more), and the issue's done-when checks on ``examples/llama3-405b-2bldg.toml`` with a
layout whose data parallelism spans both buildings, in every backend.
"""

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from trainscape import api
from trainscape import layout as L
from trainscape.cli import main
from trainscape.model import collectives as C
from trainscape.model import llm
from trainscape.spec import ScenarioError
from trainscape.spec.pack import pack, pack_configs

from test_model_known_answers import system

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "llama3-405b-2bldg.toml"
NODE = (8, 400e9, 2e-6, 0.9, 1.0)  # 360 GB/s achieved
FABRIC = (64, 50e9, 10e-6, 0.8, 1.0)  # 40 GB/s
SITES = (2, 20e9, 2e-3, 0.8, 1.0)  # 16 GB/s: the slowest link on the path to the site tier
NBYTES = 8e9
#: DP outermost: TP 8 x PP 16 = 128 ranks inside, DP 128 with stride 128 over 16,384 GPUs; a
#: building holds 8,192 ranks, so 64 DP members per building and 2 buildings
DP_ACROSS = ['config.order="tp-cp-pp-ep-dp"', "config.zero=1"]


def _sys3():
    return system([NODE, FABRIC, SITES], gpus=1024)


def test_cross_site_time_is_a_ring_over_the_sites_on_the_site_shard():
    """1024 contiguous ranks on 8 x 64 x 2: a site holds 512 of them, so f = 2 sites and each
    member's shard is nbytes / 512. Ring all-reduce over 2: 2 (f-1) latencies of the site tier
    plus 2 (f-1)/f x shard over the path bandwidth min(40, 16) GB/s."""
    sys = _sys3()
    assert C.site_members(sys, 1024.0, 1.0, 1.0, 1.0, 1.0, 1.0) == 512.0
    expected = 2.0 * 2e-3 + 1.0 * NBYTES / 512.0 / 16e9
    got = C.cross_site_time(sys, NBYTES, 0.0, 1024.0, 1.0, 1.0, 1.0, 1.0, 1.0)
    assert got == pytest.approx(expected, rel=1e-12)


def test_within_site_time_is_the_hierarchical_tiers_below_the_site_tier():
    """Same group: a ring of 8 in the node on the whole buffer (360 GB/s, 2 us), then a ring of
    64 nodes on 1/8 of it (40 GB/s, 10 us). All-reduce: 2 (f-1) latencies + 2 (f-1)/f x bytes
    / bandwidth per tier; all-gather half of each. The two parts add up to the hierarchical
    algorithm's sum over all three tiers."""
    sys = _sys3()
    ar = (2 * 7 * 2e-6 + 2 * 7 / 8 * NBYTES / 360e9) \
        + (2 * 63 * 10e-6 + 2 * 63 / 64 * (NBYTES / 8) / 40e9)
    ag = (7 * 2e-6 + 7 / 8 * NBYTES / 360e9) + (63 * 10e-6 + 63 / 64 * (NBYTES / 8) / 40e9)
    dims = (1024.0, 1.0, 1.0, 1.0, 1.0, 1.0)
    assert C.within_site_time(sys, NBYTES, 0.0, True, *dims) == pytest.approx(ar, rel=1e-12)
    assert C.within_site_time(sys, NBYTES, 0.0, False, *dims) == pytest.approx(ag, rel=1e-12)
    hier, _ = C.hierarchical_time(sys, NBYTES, 0.0, True, *dims)
    assert C.within_site_time(sys, NBYTES, 0.0, True, *dims) + C.cross_site_time(sys, NBYTES, 0.0, *dims) \
        == pytest.approx(hier, rel=1e-12)


@pytest.mark.parametrize("tiers,n", [([NODE, FABRIC, SITES], 64.0), ([NODE, FABRIC], 8.0)])
def test_a_group_inside_one_site_is_costed_as_synchronous(tiers, n):
    """A site is one domain of the tier below the outermost: 512 ranks on 8 x 64 x 2, one node
    of 8 on 8 x 64. A group that fits in it (64, resp. 8 ranks) crosses no site: nothing at
    the site tier, and the inside part is the synchronous collective."""
    sys = system(tiers, gpus=1024)
    dims = (n, 1.0, 1.0, 1.0, 1.0, 1.0)
    assert C.site_members(sys, *dims) == n
    assert C.cross_site_time(sys, NBYTES, 0.0, *dims) == 0.0
    assert C.within_site_time(sys, NBYTES, 0.0, True, *dims) == C.all_reduce_time(sys, NBYTES, *dims)
    assert C.within_site_time(sys, NBYTES, 0.0, False, *dims) == C.all_gather_time(sys, NBYTES, *dims)


def test_one_tier_cluster_has_no_sites():
    sys = system([NODE], gpus=8)
    dims = (8.0, 1.0, 1.0, 1.0, 1.0, 1.0)
    assert C.site_members(sys, *dims) == 8.0
    assert C.cross_site_time(sys, NBYTES, 0.0, *dims) == 0.0
    assert C.within_site_time(sys, NBYTES, 0.0, True, *dims) == C.all_reduce_time(sys, NBYTES, *dims)


@pytest.mark.parametrize("field,value", [
    (L.JOB_SYNC_FRAGMENTS, 0.0), (L.JOB_SYNC_FRAGMENTS, 8.0), (L.JOB_SYNC_INNER_STEPS, 0.0),
    (L.JOB_SYNC_OVERLAP_STEPS, 4.0), (L.JOB_SYNC_OVERLAP_STEPS, -1.0),
    (L.JOB_SYNC_FRAGMENTS, float("nan")), (L.JOB_SYNC_STRATEGY, 7.0)])
def test_a_raw_job_block_with_bad_sync_settings_is_invalid_not_a_lie(backend, field, value):
    """Job blocks from the C library or a program skip the validator: DiLoCo with 0 fragments
    used to divide by zero and the NaN vanished in a max() (status ok, a cross-site part of 0).
    The kernel now flags the column invalid (code 29) in every backend."""
    sc = api.load(EXAMPLE, DP_ACROSS + ['job.sync.strategy="diloco"', "job.sync.inner_steps=4"])
    sys, mdl, job = pack(sc)
    cfg = pack_configs([sc.config])
    assert llm.config_error(sys, mdl, job, cfg, 0) == 0
    job[field] = value
    assert llm.config_error(sys, mdl, job, cfg, 0) == llm.SYNC_SETTINGS_ERROR
    out = api.evaluate_columns(sys, mdl, job, cfg, backend=backend)
    assert out[L.OUT_STATUS, 0] == L.STATUS_INVALID_CONFIG


def test_exposure_of_the_cross_site_part():
    """DiLoCo's outer all-reduce blocks: all of it (no overlap window); the delayed reduction
    hides under the step's compute: only what outlasts it. Streaming DiLoCo's window hides
    what it can: 0.3 s against 0.25 s leaves 0.05 s; against 1 s, nothing."""
    assert llm.cross_site_exposed(L.SYNC_DILOCO, 0.3, 5.0, 0.0) == 0.3
    assert llm.cross_site_exposed(L.SYNC_DILOCO, 0.3, 5.0, 0.25) == pytest.approx(0.05)
    assert llm.cross_site_exposed(L.SYNC_DILOCO, 0.3, 5.0, 1.0) == 0.0
    assert llm.cross_site_exposed(L.SYNC_DELAYED, 0.3, 5.0, 0.0) == 0.0
    assert llm.cross_site_exposed(L.SYNC_DELAYED, 7.0, 5.0, 0.0) == 2.0


def test_streaming_overlap_window():
    """P = 4 fragments, H = 32, tau = 2 overlapped steps of 5 s compute: a step holds 4 / 32
    of the fragment syncs, each hidden behind 2 x 5 s, so 4 / 32 x 10 = 1.25 s; tau = 0: 0."""
    import numpy as np

    job = np.zeros(L.N_JOB)
    job[L.JOB_SYNC_FRAGMENTS], job[L.JOB_SYNC_INNER_STEPS] = 4.0, 32.0
    job[L.JOB_SYNC_OVERLAP_STEPS] = 2.0
    assert llm.streaming_overlap_window(job, 5.0) == 1.25
    job[L.JOB_SYNC_OVERLAP_STEPS] = 0.0
    assert llm.streaming_overlap_window(job, 5.0) == 0.0


def test_fragments_move_the_same_bytes_and_pay_the_latency_per_fragment():
    """Streaming DiLoCo with P = 4 fragments, H = 32: a step carries 4/32 of a fragment's
    all-reduce of 1/4 of the parameters, the same bandwidth term as plain DiLoCo, and each
    fragment pays the ring's latency, 2 (f - 1) x 64 us over f = 2 buildings: the difference is
    (4 - 1) / 32 x 128 us. Region-tier bytes per step are those of plain DiLoCo."""
    base = DP_ACROSS + ['job.sync.strategy="diloco"', "job.sync.inner_steps=32"]
    sys, job, row, ordt = _terms(base)
    one = llm.cross_site_sync_time(sys, job, row, ordt, L.SYNC_DILOCO)
    sys, job, row, ordt = _terms(base + ["job.sync.fragments=4"])
    four = llm.cross_site_sync_time(sys, job, row, ordt, L.SYNC_DILOCO)
    assert four - one == pytest.approx(3.0 / 32.0 * 2.0 * 64e-6, rel=1e-6)
    links = [api.link_report(api.load(EXAMPLE, base + extra))[2]["by_dimension"]["dp"]
             for extra in ([], ["job.sync.fragments=4"])]
    assert links[0] == pytest.approx(links[1], rel=1e-12)


def test_overlapped_fragments_hide_the_cross_site_part(backend):
    """With tau = 31 of H = 32 steps overlapped and P = 4, the window (4/32 x 31 x compute)
    exceeds the cross-site part: DP time is what stays inside the buildings, the same as an
    infinitely fast site link would leave (the outer traffic at ~0 bytes); tau = 0 exposes
    all of it. Every backend."""
    base = DP_ACROSS + ["config.zero=2", 'job.sync.strategy="diloco"', "job.sync.inner_steps=32",
                        "job.sync.fragments=4"]
    hidden = api.evaluate(api.load(EXAMPLE, base + ["job.sync.overlap_steps=31"]),
                          backend=backend)
    exposed = api.evaluate(api.load(EXAMPLE, base), backend=backend)
    sys, job, row, ordt = _terms(base)
    cross = llm.cross_site_sync_time(sys, job, row, ordt, L.SYNC_DILOCO)
    assert cross > 0
    assert exposed.dp_comm_s - hidden.dp_comm_s == pytest.approx(cross, rel=1e-9)
    assert exposed.step_time_s - hidden.step_time_s == pytest.approx(cross, rel=1e-9)


def _terms(overrides):
    sc = api.load(EXAMPLE, overrides)
    sys, mdl, job = pack(sc)
    cfg = pack_configs([sc.config])
    row = llm.row_terms(sys, mdl, job, cfg, 0)
    ordt = llm.order_terms(sys, mdl, job, row, cfg[L.CFG_ORDER, 0])
    return sys, job, row, ordt


def test_diloco_h32_cuts_cross_site_dp_time_and_bytes_at_least_16x():
    """Issue 13 done-when: DP spans both buildings (64 members in each). DiLoCo with H = 32
    carries the site tier's all-reduce once every 32 steps: 1/32 of the synchronous site-tier
    time in the same element type (fp32 gradients here). Bytes at the region tier: synchronous
    ZeRO-1 reduce-scatters fp32 gradients and all-gathers bf16 weights there, (f-1)/f x (4 + 2)
    B x P / 64; DiLoCo all-reduces fp32 once per 32 steps, 2 (f-1)/f x 4 B x P / 64 / 32: a
    ratio of 6 / (8 / 32) = 24."""
    sys, job, row, ordt = _terms(DP_ACROSS)
    g = llm.dp_groups(row, ordt)
    assert C.group_size(g[0], g[2], g[4]) == 128.0
    assert C.site_members(sys, *g[:6]) == 64.0
    sync = llm.cross_site_sync_time(sys, job, row, ordt, L.SYNC_SYNCHRONOUS)
    sys_d, job_d, row_d, ordt_d = _terms(DP_ACROSS + ['job.sync.strategy="diloco"',
                                                      "job.sync.inner_steps=32"])
    diloco = llm.cross_site_sync_time(sys_d, job_d, row_d, ordt_d, L.SYNC_DILOCO)
    assert sync > 0.0
    assert diloco * 16.0 <= sync
    assert diloco == pytest.approx(sync / 32.0, rel=1e-12)

    def region_dp_bytes(*extra):
        links = api.link_report(api.load(EXAMPLE, DP_ACROSS + list(extra)))
        assert links[2]["name"] == "region"
        return links[2]["by_dimension"]["dp"], links[1]["by_dimension"]["dp"]

    sync_b, sync_inside = region_dp_bytes()
    dil_b, dil_inside = region_dp_bytes('job.sync.strategy="diloco"', "job.sync.inner_steps=32")
    assert dil_b * 16.0 <= sync_b
    assert sync_b / dil_b == pytest.approx(24.0, rel=1e-12)
    assert dil_inside == sync_inside  # inside a building: the same collectives every step


def test_outer_dtype_scales_the_cross_site_part():
    """bf16 outer traffic: half the bytes of fp32 gradients, so the bandwidth term halves (the
    latency term of a 2-site ring, 2 x 64 us, stays)."""
    base = DP_ACROSS + ['job.sync.strategy="diloco"', "job.sync.inner_steps=4"]
    sys, job, row, ordt = _terms(base)
    fp32 = llm.cross_site_sync_time(sys, job, row, ordt, L.SYNC_DILOCO)
    sys, job, row, ordt = _terms(base + ['job.sync.outer_dtype="bf16"'])
    bf16 = llm.cross_site_sync_time(sys, job, row, ordt, L.SYNC_DILOCO)
    lat = 2.0 * 64e-6 / 4
    assert bf16 - lat == pytest.approx((fp32 - lat) / 2.0, rel=1e-9)


def _eval(backend, *overrides):
    """DP across the buildings with ZeRO-2 (fits in 80 GB in every strategy)."""
    return api.evaluate(api.load(EXAMPLE, DP_ACROSS + ["config.zero=2"] + list(overrides)),
                        backend=backend)


def test_strategies_in_every_backend(backend):
    """Step and memory terms per strategy, held to the reference's (C and numba against it in
    the differential suite too). DiLoCo H = 32: less DP time than synchronous; the ZeRO-1
    optimizer states sharded over the 64 DP members of a building instead of 128 (x 2), plus
    DiLoCo's fp32 outer copy and momentum: (12 + 8) / 12 x 2 the synchronous optimizer memory.
    Delayed: x 2 only. tokens_factor changes no number."""
    sync = _eval(backend)
    diloco = _eval(backend, 'job.sync.strategy="diloco"', "job.sync.inner_steps=32")
    delayed = _eval(backend, 'job.sync.strategy="delayed"')
    factor = _eval(backend, "job.sync.tokens_factor=1.5")
    assert sync.status == diloco.status == delayed.status == "ok"
    assert diloco.mem_grads_gib == pytest.approx(sync.mem_grads_gib * 2, rel=1e-12)
    assert diloco.dp_comm_s < sync.dp_comm_s
    assert delayed.dp_comm_s < sync.dp_comm_s
    assert diloco.mem_optimizer_gib == pytest.approx(sync.mem_optimizer_gib * 2 * 20 / 12,
                                                     rel=1e-12)
    assert delayed.mem_optimizer_gib == pytest.approx(sync.mem_optimizer_gib * 2, rel=1e-12)
    assert diloco.optimizer_s == pytest.approx(sync.optimizer_s * 2, rel=1e-12)
    assert factor.to_dict() == sync.to_dict()
    for res in (diloco, delayed):
        ref = _eval("python", *(['job.sync.strategy="diloco"', "job.sync.inner_steps=32"]
                                if res is diloco else ['job.sync.strategy="delayed"']))
        for key, value in ref.to_dict().items():
            if isinstance(value, float):
                assert res.to_dict()[key] == pytest.approx(value, rel=1e-9, abs=1e-12), key


def test_synchronous_default_is_unchanged_by_an_explicit_table():
    a = api.evaluate(api.load(EXAMPLE, DP_ACROSS))
    b = api.evaluate(api.load(EXAMPLE, DP_ACROSS + ['job.sync.strategy="synchronous"']))
    assert a.to_dict() == b.to_dict()


def test_zero3_with_a_non_synchronous_strategy_is_a_config_error(backend):
    """The edge names config.zero; a kernel that meets the column flags it invalid."""
    with pytest.raises(ScenarioError) as exc:
        api.load(EXAMPLE, ['job.sync.strategy="delayed"', "config.zero=3"])
    assert "config.zero" in str(exc.value)
    assert "diloco" in str(exc.value)
    sc = api.load(EXAMPLE, ['job.sync.strategy="diloco"'])
    sys, mdl, job = pack(sc)
    cfg = pack_configs([sc.config.model_copy(update={"zero": 3})])
    assert llm.config_error(sys, mdl, job, cfg, 0) == llm.SYNC_ZERO_ERROR
    out = api.evaluate_columns(sys, mdl, job, cfg, backend=backend)
    assert out[L.OUT_STATUS, 0] == L.STATUS_INVALID_CONFIG


@pytest.mark.parametrize("setting,path", [
    ('job.sync.strategy="hierarchical"', "job.sync.strategy"),
    ("job.sync.inner_steps=0", "job.sync.inner_steps"),
    ("job.sync.inner_steps=8", "job.sync.inner_steps"),  # synchronous: no H
    ('job.sync.outer_dtype="fp4"', "job.sync.outer_dtype"),
    ("job.sync.tokens_factor=0", "job.sync.tokens_factor"),
    ("job.sync.fragments=2", "job.sync.fragments"),  # synchronous: no fragments
    ('job.sync.strategy="diloco"\njob.sync.inner_steps=4\njob.sync.fragments=8',
     "job.sync.fragments"),
    ('job.sync.strategy="diloco"\njob.sync.inner_steps=4\njob.sync.overlap_steps=4',
     "job.sync.overlap_steps"),
    ("job.sync.overlap_steps=-1", "job.sync.overlap_steps"),
])
def test_bad_sync_settings_name_the_field(setting, path):
    with pytest.raises(ScenarioError) as exc:
        api.load(EXAMPLE, setting.split("\n"))
    assert path in str(exc.value)


def test_evaluate_reports_the_tokens_factor():
    """CLI: --json carries [job.sync] and the step time weighted by the factor; the text
    output a line saying it is not in the step time; a bad setting exits 2."""
    runner = CliRunner()
    args = ["evaluate", str(EXAMPLE), "--set", 'job.sync.strategy="diloco"', "--set",
            "job.sync.inner_steps=16", "--set", "job.sync.tokens_factor=1.25"]
    res = runner.invoke(main, args + ["--json"])
    assert res.exit_code == 0, res.output
    data = json.loads(res.output)
    assert data["sync"]["strategy"] == "diloco"
    assert data["sync"]["inner_steps"] == 16
    assert data["sync"]["outer_dtype"] == "fp32"
    assert data["sync"]["step_time_x_tokens_factor_s"] == pytest.approx(
        data["step_time_s"] * 1.25, rel=1e-12)
    res = runner.invoke(main, args)
    assert res.exit_code == 0, res.output
    assert "tokens to target x1.25" in res.output
    res = runner.invoke(main, ["evaluate", str(EXAMPLE), "--set", "job.sync.inner_steps=0"])
    assert res.exit_code == 2
    assert "job.sync.inner_steps" in res.output


def test_moe_stages_without_expert_layers_keep_the_site_shards(backend):
    """Regression (found by the differential test): a MoE model on more pipeline stages than
    MoE layers leaves some stages without expert weights; when the costed stage is such a stage
    the C port left the expert group unset and DiLoCo's outer states of the other stages went
    unsharded. By hand: one tier, so the whole cluster is one site and ZeRO-1 shards the
    8-byte outer copy and momentum over cp x dp = 4 x 1024 ranks, in every backend. (The
    blocks are the case hypothesis found.)"""
    import numpy as np

    sys = np.zeros(L.N_SYS)
    sys[:22] = [65536, 1, 1e13, 1.6e10, 2e11, 0, 1, 0, 0.5, 1, 0, 1e13, 1, 0, 0, 0, 0, 0, 0, 0,
                8e9, 2e10]  # the system scalars before n_sites (0: no site graph)
    sys[L.SYS_TIER_BASE:L.SYS_TIER_BASE + 5] = [65536, 1e8, 0, 1, 1]  # the one tier
    mdl = np.zeros(L.N_MODEL)
    mdl[:14] = [14, 32, 128, 2, 1, 16, 32000, 0, 2, 1, 1408, 1, 0, 0]  # no sliding window
    j = np.zeros(L.N_JOB)
    j[:17] = [512, 65536, 1, 1, 2, 0, 0, 1, 2, 0, 1.03125, 2, 1, 0, 0, 0, 1]
    j[L.JOB_LOGITS_EXTRA_BYTES] = 4.0
    j[L.JOB_LINEAR_PARAM_COMM_BYTES] = j[L.JOB_PARAM_BYTES]
    j[L.JOB_ZERO3_SHARD_PARAM_BYTES] = j[L.JOB_PARAM_BYTES]
    j[L.JOB_SYNC_STRATEGY] = 1.0  # diloco
    j[L.JOB_SYNC_INNER_STEPS] = 1.0
    j[L.JOB_SYNC_OUTER_BYTES] = 2.0
    j[L.JOB_SYNC_FRAGMENTS] = 1.0
    cfg = np.array([[1], [4], [16], [1024], [1], [1], [1], [0], [0], [1], [0], [0], [0], [0]],
                   dtype=np.int32)  # tp 1, cp 4, pp 16 (gpipe), dp 1024, zero 1
    got = api.evaluate_columns(sys, mdl, j, cfg, backend=backend)
    ref = api.evaluate_columns(sys, mdl, j, cfg, backend="python")
    col = L.OUTPUT_FIELDS.index("mem_optimizer_gib")
    assert got[col, 0] == pytest.approx(ref[col, 0], rel=1e-12)
    # every stage's parameters over 4096 ranks: a few hundred bytes a GPU, not ~1.4 MB
    assert ref[col, 0] * 2**30 < 2.0e3
