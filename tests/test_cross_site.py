"""Cross-building physics (issue 13): what crosses the outer link, and where.

Known answers for the stage-boundary transfers of a pipeline charged at the tier each boundary
crosses, the oversubscription seen by the few GPUs that send across, and the steady-state
stall of a transfer that outlasts the compute hiding it; and the issue's done-when checks on
``examples/llama3-405b-2bldg.toml`` in every backend.
"""

from pathlib import Path

import numpy as np
import pytest

from trainscape import api
from trainscape import layout as L
from trainscape.model import collectives as C
from trainscape.model import pipeline as P
from trainscape.model.schedule_sim import simulate

from test_model_known_answers import system

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "llama3-405b-2bldg.toml"
NODE = (8, 400e9, 2e-6, 0.9, 1.0)
FABRIC = (64, 50e9, 10e-6, 0.8, 1.0)


def region(oversub, latency=2e-3):
    return (2, 50e9, latency, 0.8, oversub)


@pytest.mark.parametrize("oversub", [1.0, 8.0])
def test_pp_outermost_over_two_buildings_one_boundary_crosses(oversub):
    """p = 16 stages 64 ranks apart: a building (64 nodes x 8 = 512 ranks) holds 512 / 64 = 8
    consecutive stages, a node 1. Boundaries per tier: node 0, fabric 16/1 - 16/8 = 14,
    region 16/8 - 16/16 = 1. Across the region only the GPUs of one stage of the 8 in a
    building send, so an oversubscription o <= 8 leaves them the full line rate:
    bandwidth x efficiency / max(o / 8, 1) = 40 GB/s. The route is 14 t_fabric + t_region,
    t = latency + bytes / 40e9."""
    sys = system([NODE, FABRIC, region(oversub)], gpus=1024)
    nbytes = 32e6
    route, t_top, t_max = C.pipeline_boundary_transfers(sys, nbytes, 16.0, 64.0)
    t_fab = 10e-6 + nbytes / 40e9
    t_reg = 2e-3 + nbytes / 40e9
    assert route == pytest.approx(14 * t_fab + t_reg, rel=1e-12)
    assert t_top == pytest.approx(t_reg, rel=1e-12)
    assert t_max == pytest.approx(t_reg, rel=1e-12)


def test_few_stages_per_building_see_part_of_the_oversubscription():
    """p = 4 stages 256 ranks apart: 2 per building, so half of a building's GPUs send across
    an 8:1 region link: each gets 40e9 / max(8 / 2, 1) = 10 GB/s. 2 boundaries cross the
    fabric (4/1 - 4/2), 1 the region (4/2 - 4/4)."""
    sys = system([NODE, FABRIC, region(8.0)], gpus=1024)
    nbytes = 32e6
    route, t_top, _ = C.pipeline_boundary_transfers(sys, nbytes, 4.0, 256.0)
    t_fab = 10e-6 + nbytes / 40e9
    t_reg = 2e-3 + nbytes / 10e9
    assert route == pytest.approx(2 * t_fab + t_reg, rel=1e-12)
    assert t_top == pytest.approx(t_reg, rel=1e-12)


def test_uniform_boundaries_give_the_critical_transfer_count():
    """Every boundary alike (one tier, t each), within the compute window: the fill and drain
    are p2p_critical_transfers(schedule) x t (2(p-1), interleaved 2(pv-1), V 4(p-1)); 1F1B
    (blocking p2p in the steady state) adds every steady-state transfer, 2(m-1) - 2 for each
    microbatch j in 2..m with j = 2 mod p: with p = 8, m = 32, j = 2, 10, 18, 26, so
    62 - 8 = 54 more (2(p-2) + 2m(p-1)/p = 12 + 56 = 68 in all)."""
    p, v, t, m = 8, 2, 0.01, 32
    route = (p - 1) * t
    for code in range(len(L.SCHEDULES)):
        n = P.p2p_critical_transfers(code, p, v)
        if code == L.SCHED_1F1B:
            n += 54
        got = P.pipeline_comm_time(code, p, v, m, route, t, t, 1.0)
        assert got == pytest.approx(n * t, rel=1e-12), L.SCHEDULES[code]


@pytest.mark.parametrize("v", [2, 4])
@pytest.mark.parametrize("c", [0.1, 0.2, 0.5, 0.75, 1.0, 2.0])
def test_interleaved_stall_matches_the_simulator_below_the_window_and_bounds_it_above(v, c):
    """Interleaved, p = 8, m = 32, f = 1, b = 2, w = 0, every transfer c: the window is
    min(f, b + w) / v. At or below it the simulator's extra time is exactly 2(pv-1) c (fill and
    drain only); past it the model adds m v (c - window), never less than the simulator."""
    p, m, f, b = 8, 32, 1.0, 2.0
    extra = simulate("interleaved", p, m, v, f, b, 0.0, comm=c).makespan \
        - simulate("interleaved", p, m, v, f, b, 0.0).makespan
    hide = P.pipeline_hide_window(f, b, 0.0, v)
    assert hide == pytest.approx(min(f, b) / v)
    model = P.pipeline_comm_time(L.SCHED_INTERLEAVED, p, v, m, (p - 1) * c, c, c, hide)
    if c <= hide:
        assert extra == pytest.approx(2 * (p * v - 1) * c, rel=1e-9)
        assert model == pytest.approx(extra, rel=1e-9)
    else:
        assert model == pytest.approx(2 * (p * v - 1) * c + m * v * (c - hide), rel=1e-12)
        assert model >= extra - 1e-9


def _eval(backend, *overrides):
    return api.evaluate(api.load(EXAMPLE, list(overrides)), backend=backend)


PP_OUTER = 'config.order="tp-cp-dp-pp"'


def test_oversubscribed_outer_link_costs_little_pp_time_with_pp_outermost(backend):
    """Issue 13 done-when: PP outermost over the two buildings (8 stages each), 8:1 costs at
    most 1.5x the pipeline p2p time of 1:1 (one boundary of 15 crosses, and only 1/8 of a
    building's GPUs send across it)."""
    over = _eval(backend, PP_OUTER)
    flat = _eval(backend, PP_OUTER, "cluster.tiers[2].oversubscription=1")
    assert flat.pp_comm_s > 0.0
    assert over.pp_comm_s <= 1.5 * flat.pp_comm_s


def test_long_latency_lengthens_fill_and_drain_only(backend):
    """Issue 13 done-when: 20 ms instead of 64 us on the cross-building link adds at most 0.4 s
    per step with PP outermost -- and does add something (the crossings of fill and drain)."""
    near = _eval(backend, PP_OUTER)
    far = _eval(backend, PP_OUTER, "cluster.tiers[2].latency_us=20000")
    assert 0.0 < far.step_time_s - near.step_time_s <= 0.4


def test_zero3_across_buildings_pays_per_layer_call_latency(backend):
    """Issue 13 done-when: TP 8, CP 4, PP 1, DP 512 with ZeRO-3 (DP spans the buildings) pays
    at least 3 s more per step at 20 ms than at 64 us: hundreds of per-layer all-gathers and
    reduce-scatters per step, each paying the cross-building latency."""
    cfg = ["config.tp=8", "config.cp=4", "config.pp=1", "config.dp=512", "config.zero=3",
           'config.recompute="full"', 'config.schedule="1f1b"', "config.vpp=1", PP_OUTER]
    near = _eval(backend, *cfg)
    far = _eval(backend, *cfg, "cluster.tiers[2].latency_us=20000")
    assert far.step_time_s - near.step_time_s >= 3.0


# ---------------------------------------------------------------------------------------------
# Transport per tier
# ---------------------------------------------------------------------------------------------


def _with_transport(tier, window, handshake):
    return tuple(tier) + (window, handshake)


def test_window_bounds_the_bandwidth_by_the_bandwidth_delay_product():
    """RFC 7323 §1.1: at most one window in flight per round trip, so throughput <= window /
    RTT. Region tier, 50 GB/s x 0.8 / 1, one-way 10 ms (RTT 20 ms): a window of 64 MiB gives
    64 x 2^20 / 0.02 = 3.36 GB/s < 40 GB/s, which binds; 4 GiB gives 215 GB/s, which does not."""
    from trainscape.model import network as N

    small = system([NODE, FABRIC, _with_transport(region(1.0, 10e-3), 64 * 2**20, 0.0)])
    large = system([NODE, FABRIC, _with_transport(region(1.0, 10e-3), 4 * 2**30, 0.0)])
    assert N.tier_link_bandwidth(small, 2) == pytest.approx(64 * 2**20 / 0.02, rel=1e-12)
    assert N.tier_link_bandwidth(large, 2) == pytest.approx(40e9, rel=1e-12)
    # oversubscription and the window are separate limits: the lesser wins
    over = system([NODE, FABRIC, _with_transport(region(8.0, 10e-3), 4 * 2**30, 0.0)])
    assert N.tier_link_bandwidth(over, 2) == pytest.approx(40e9 / 8, rel=1e-12)


def test_tcp_pays_one_round_trip_of_handshake_per_message():
    """RFC 9293 §3.5: the three-way handshake takes one RTT before data flows, so a message
    across a TCP tier of one-way latency L takes L + 2L = 3L of latency; RDMA L."""
    from trainscape.model import network as N

    tcp = system([NODE, FABRIC, _with_transport(region(1.0, 10e-3), 0.0, 1.0)])
    rdma = system([NODE, FABRIC, _with_transport(region(1.0, 10e-3), 0.0, 0.0)])
    assert N.tier_latency(tcp, 2) == pytest.approx(30e-3, rel=1e-12)
    assert N.tier_latency(rdma, 2) == pytest.approx(10e-3, rel=1e-12)
    # a ring all-gather over the two regions: one step, so one message: 3 L
    nbytes = 1e3
    t = C.all_gather_time(tcp, nbytes, 2, 512, 1, 1, 1, 1)
    assert t == pytest.approx(30e-3 + 0.5 * nbytes / 40e9, rel=1e-12)


SMALL_TCP = 'cluster.tiers[2].transport={protocol="tcp", channels=2, window_MiB=4}'
LARGE_RDMA = 'cluster.tiers[2].transport={protocol="rdma", channels=16, window_MiB=64}'
SMALL_RDMA = 'cluster.tiers[2].transport={protocol="rdma", channels=2, window_MiB=4}'


def test_small_tcp_window_slows_a_cross_site_layout_only_at_long_rtt(backend):
    """Issue 13 done-when. The example's DP spans the buildings. At 20 ms RTT (10 ms one way)
    2 x 4 MiB / 20 ms = 0.42 GB/s per GPU, far below the 5.3 GB/s an 8:1 link leaves: the step
    is slower than with 16 x 64 MiB RDMA (54 GB/s, not binding). At 64 us one way the same
    small window allows 65 GB/s: no difference from the large one (the window never binds),
    and TCP's handshake adds only 128 us per message."""
    far = "cluster.tiers[2].latency_us=10000"
    assert _eval(backend, far, SMALL_TCP).step_time_s > _eval(backend, far, LARGE_RDMA).step_time_s
    near = "cluster.tiers[2].latency_us=64"
    assert _eval(backend, near, SMALL_RDMA).step_time_s == _eval(backend, near,
                                                                 LARGE_RDMA).step_time_s
    assert _eval(backend, near, LARGE_RDMA).step_time_s == _eval(backend, near).step_time_s


@pytest.mark.parametrize("field, value, path", [
    ("protocol", '"udp"', "cluster.tiers[2].transport.protocol"),
    ("channels", "0", "cluster.tiers[2].transport.channels"),
    ("window_MiB", "-1", "cluster.tiers[2].transport.window_MiB"),
])
def test_bad_transport_names_the_field(field, value, path):
    from trainscape.spec.errors import ScenarioError

    with pytest.raises(ScenarioError) as e:
        api.load(EXAMPLE, [f"cluster.tiers[2].transport={{{field}={value}}}"])
    assert path in str(e.value)


# ---------------------------------------------------------------------------------------------
# Placement: which members of a group share a node decides what each NIC carries
# ---------------------------------------------------------------------------------------------


def test_dp_with_4_or_8_members_per_node_carries_different_nic_bytes():
    """DP 1024 under TP 2: order tp-dp puts DP at stride 2 (4 members per 8-GPU node), dp-tp
    at stride 1 (8 per node). The hierarchical all-gather moves nbytes (f_0 - 1)/f_0 over
    NVLink and then a 1/f_0 shard over the NIC: ring of 128 or 256 nodes' worth on
    nbytes / 8 or nbytes / 4 -- the 4-per-node placement puts twice the bytes on each NIC."""
    sys = system([NODE, (1024, 50e9, 10e-6, 0.8, 1.0)], gpus=2048)
    nbytes = 4e9
    per8 = C.all_gather_time(sys, nbytes, 1024, 1, 1, 1, 1, 1)
    per4 = C.all_gather_time(sys, nbytes, 1024, 2, 1, 1, 1, 1)
    nic8 = 127 * 10e-6 + 127 / 128 * (nbytes / 8) / 40e9
    nic4 = 255 * 10e-6 + 255 / 256 * (nbytes / 4) / 40e9
    node8 = 7 * 2e-6 + 7 / 8 * nbytes / 360e9
    node4 = 3 * 2e-6 + 3 / 4 * nbytes / 360e9
    assert per8 == pytest.approx(node8 + nic8, rel=1e-12)
    assert per4 == pytest.approx(node4 + nic4, rel=1e-12)
    assert per4 > 1.5 * per8


def test_issue_orders_place_the_zero3_group_alike_but_not_cp(backend):
    """Issue 13's TP 4, CP 2, PP 2, DP 1024, ZeRO-3 under cp-dp-tp-pp and dp-tp-cp-pp: DP alone
    has 4 and 8 members per node, but ZeRO-3 shards over the cp x dp group (the weights are
    replicated over both), which has 8 members per node and lies inside one building in both
    orders -- so the DP time is equal, and correctly so. The CP ring differs: inside the node
    under cp-dp-tp-pp, across the fabric under dp-tp-cp-pp."""
    layout = ("config.tp=4", "config.cp=2", "config.pp=2", "config.dp=1024", "config.zero=3",
              'config.recompute="full"', 'config.schedule="1f1b"', "config.vpp=1")
    a = _eval(backend, 'config.order="cp-dp-tp-pp"', *layout)
    b = _eval(backend, 'config.order="dp-tp-cp-pp"', *layout)
    assert a.dp_comm_s == pytest.approx(b.dp_comm_s, rel=1e-12)
    assert a.cp_comm_s < b.cp_comm_s


# ---------------------------------------------------------------------------------------------
# evaluate --json: links
# ---------------------------------------------------------------------------------------------


def test_links_split_dp_bytes_over_building_and_region():
    """The example's DP 128 (outermost, tp-cp-pp-dp) has 64 members per building and 2
    buildings. Hierarchically, one GPU moves (64-1)/64 of each buffer over the building fabric
    and (2-1)/2 of a 1/64 shard across the region: region bytes = building bytes x
    (1/128) / (63/64) = building / 126. ZeRO-2 moves the gradients (reduce-scatter) and the
    weights (all-gather) once each. TP stays in the node, PP in the building."""
    links = api.link_report(api.load(EXAMPLE))
    assert [x["name"] for x in links] == ["node", "building", "region"]
    node, bldg, reg = links
    assert reg["by_dimension"]["dp"] == pytest.approx(bldg["by_dimension"]["dp"] / 126,
                                                      rel=1e-12)
    assert reg["by_dimension"]["pp"] == 0.0 and reg["by_dimension"]["tp"] == 0.0
    assert node["by_dimension"]["tp"] > 0.0 and node["by_dimension"]["dp"] == 0.0
    # region busy: its bytes over 50 GB/s x 0.85 / 8 per GPU
    assert reg["busy_s"] == pytest.approx(reg["bytes_per_step"] / (50e9 * 0.85 / 8), rel=1e-12)


def test_links_pp_outermost_sends_each_microbatch_per_chunk_across():
    """PP outermost: the GPU at the one crossing boundary sends m x v activations (interleaved,
    v = 2 chunks, m = 16) of b s h x 2 bytes / tp = 8192 x 16384 x 2 / 8 each across the
    region, at 42.5 GB/s (8 stages per building: the 8:1 oversubscription leaves the edge GPUs
    their line rate); DP stays inside the buildings."""
    links = api.link_report(api.load(EXAMPLE, [PP_OUTER]))
    reg = links[2]
    pp_bytes = 16 * 2 * 8192 * 16384 * 2 / 8
    assert reg["by_dimension"]["pp"] == pytest.approx(pp_bytes, rel=1e-12)
    assert reg["by_dimension"]["dp"] == 0.0
    assert reg["busy_s"] == pytest.approx(pp_bytes / 42.5e9, rel=1e-12)


def test_evaluate_json_reports_links_per_tier():
    import json

    from click.testing import CliRunner

    from trainscape.cli import main

    r = CliRunner().invoke(main, ["evaluate", str(EXAMPLE), "--json"])
    assert r.exit_code == 0, r.output
    links = json.loads(r.output)["links"]
    assert [x["name"] for x in links] == ["node", "building", "region"]
    for x in links:
        assert set(x) >= {"name", "bytes_per_step", "busy_s"}
        assert np.isfinite(x["bytes_per_step"]) and x["bytes_per_step"] >= 0.0
        assert np.isfinite(x["busy_s"]) and x["busy_s"] >= 0.0
