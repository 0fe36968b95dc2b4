"""[[cluster.sites]] and [[cluster.links]]: the site graph's rules (known answers), the tier-only
special case, validation (exit 2 with the field path), the links report, and the three-region
example through evaluate, search and explore."""

from __future__ import annotations

import json
import math
import tomllib
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from trainscape import layout as L
from trainscape.backends import available_backends, evaluate_blocks
from trainscape.cli import main
from trainscape.model import collectives as C
from trainscape.model import reference
from trainscape.model import sites as S
from trainscape.model.network import site_link_tier, tier_latency, tier_link_bandwidth
from trainscape.spec.errors import ScenarioError
from trainscape.spec.load import validate
from trainscape.spec.pack import pack

ROOT = Path(__file__).resolve().parents[1]
THREE = ROOT / "examples" / "three-region.toml"
TWO = ROOT / "examples" / "llama3-405b-2bldg.toml"
GB = 1e9


def raw(path: Path) -> dict:
    return tomllib.loads(path.read_text())


def two_sites_raw() -> dict:
    """The two-building example with its outermost tier written as two sites and one link."""
    r = raw(TWO)
    region = r["cluster"]["tiers"].pop()
    r["cluster"]["sites"] = [{"name": "A", "gpus": 8192}, {"name": "B", "gpus": 8192}]
    r["cluster"]["links"] = [{"sites": ["A", "B"], **{k: region[k] for k in (
        "bandwidth_GBps", "latency_us", "efficiency", "oversubscription")}}]
    return r


# ---- known answers: the rules of model/sites.py ----------------------------------------------


def test_best_cycle_is_paced_by_its_slowest_link():
    """Four sites on a square of fast links (100 GB/s) with slow diagonals (10 GB/s): the only
    ring avoiding both diagonals is 0-1-2-3, bottleneck 100 x 0.8 = 80 GB/s; every other ring
    uses a diagonal and is paced at 8 GB/s. The derived tier: the slowest link's rate, and the
    mean of the cycle's latencies (1, 2, 3, 4 ms -> 2.5 ms per step, 10 ms per trip round)."""
    fast = {(0, 1): 1e-3, (1, 2): 2e-3, (2, 3): 3e-3, (0, 3): 4e-3}
    links = {}
    for (a, b), lat in fast.items():
        links[(a, b)] = links[(b, a)] = S.Link(100 * GB, lat)
    for a, b in ((0, 2), (1, 3)):
        links[(a, b)] = links[(b, a)] = S.Link(10 * GB, 1e-4)
    cycle = S.best_cycle(4, links)
    assert set(map(frozenset, S.cycle_pairs(cycle))) == {frozenset(p) for p in fast}
    tier = S.ring_tier(cycle, links)
    assert S.link_rate(tier) == pytest.approx(80 * GB, rel=1e-12)
    assert tier.latency == pytest.approx(2.5e-3, rel=1e-12)
    # a ring all-reduce of S bytes over the 4 sites at the derived tier: 2(n-1) latency steps
    # (6 x 2.5 ms = 1.5 x the 10 ms cycle) + 2(n-1)/n S / bottleneck
    s = 1e9
    t = C.ring_all_reduce_time(4, s, tier.latency, S.link_rate(tier))
    assert t == pytest.approx(6 * 2.5e-3 + 1.5 * s / (80 * GB), rel=1e-12)


def test_best_cycle_breaks_rate_ties_by_latency_and_none_without_a_ring():
    """Equal rates everywhere: the ring with the smallest latency sum wins. A star (no ring
    through every site) gives None, and the missing pair that would close one is named."""
    lat = {(0, 1): 1.0, (1, 2): 1.0, (0, 2): 5.0, (2, 3): 1.0, (1, 3): 1.0, (0, 3): 1.0}
    links = {}
    for (a, b), x in lat.items():
        links[(a, b)] = links[(b, a)] = S.Link(GB, x)
    # rings: 0-1-2-3 (1+1+1+1 = 4), 0-1-3-2 (1+1+1+5 = 8), 0-2-1-3 (5+1+1+1 = 8)
    assert set(map(frozenset, S.cycle_pairs(S.best_cycle(4, links)))) == {
        frozenset(p) for p in ((0, 1), (1, 2), (2, 3), (0, 3))}
    star = {}
    for b in (1, 2, 3):
        star[(0, b)] = star[(b, 0)] = S.Link(GB, 1.0)
    assert S.best_cycle(4, star) is None
    # adding 1-2 does not close a ring through 3 (3 has one link); 1-3 neither; 2-3 neither
    assert S.missing_pair_for_ring(4, star) is None
    three = {(0, 1): 1, (1, 0): 1, (1, 2): 1, (2, 1): 1}
    three = {k: S.Link(GB, 1.0) for k in three}
    assert S.missing_pair_for_ring(3, three) == (0, 2)


def test_ring_tier_of_identical_links_is_the_link():
    """Identical links fully connected: the derived tier is the link itself (the tier-only
    cluster is the special case), transport window and handshake included."""
    link = S.Link(50 * GB, 64e-6, 0.85, 8.0, 16 * 2**20, 1.0)
    links = {(a, b): link for a in range(5) for b in range(5) if a != b}
    tier = S.ring_tier(S.best_cycle(5, links), links)
    for got, want in zip(tier, link):
        assert got == pytest.approx(want, rel=1e-12)


def test_series_link_adds_latencies_and_keeps_the_bottleneck():
    """A pair without a direct link is reached along the path: 2 ms + 3 ms, and the slower
    link's rate (20 x 0.5 = 10 GB/s against 40 x 0.8 = 32 GB/s); TCP on one hop adds its RTT."""
    a = S.Link(40 * GB, 2e-3)
    b = S.Link(20 * GB, 3e-3, 0.5, 1.0, 0.0, 1.0)
    s = S.series_link([a, b])
    assert s.latency == pytest.approx(5e-3)
    assert S.message_latency(s) == pytest.approx(2e-3 + 3e-3 * 3)
    assert S.link_rate(s) == pytest.approx(10 * GB)


def test_best_path_avoids_the_slow_link():
    """Three sites: a-b 50, b-c 50, a-c 10 GB/s. The ring has to use a-c; the path a-b-c does
    not, so pipelines cross only fast links."""
    links = {}
    for (x, y), bw in {(0, 1): 50, (1, 2): 50, (0, 2): 10}.items():
        links[(x, y)] = links[(y, x)] = S.Link(bw * GB, 1e-3)
    assert S.best_path(3, links) in ((0, 1, 2), (2, 1, 0))
    ring = S.ring_tier(S.best_cycle(3, links), links)
    assert S.link_rate(ring) == pytest.approx(8 * GB)


def _site_sys(links_in_path_order, wrap, node_bw=400 * GB):
    """A system block: tier 0 a node of 8 GPUs, tier 1 the site tier (3 sites); the site links
    in path order (0-1, 1-2) and the wrap 2-0, as pack_system lays them out."""
    sys = np.zeros(L.N_SYS)
    sys[L.SYS_N_TIERS] = 2
    sys[L.SYS_N_SITES] = 3
    base = L.SYS_TIER_BASE
    sys[base + L.TIER_SIZE] = 8
    sys[base + L.TIER_BANDWIDTH] = node_bw
    sys[base + L.TIER_EFFICIENCY] = 1.0
    sys[base + L.TIER_OVERSUBSCRIPTION] = 1.0
    ring = S.ring_tier((0, 1, 2), {(0, 1): links_in_path_order[0], (1, 2): links_in_path_order[1],
                                   (2, 0): wrap})
    base1 = L.SYS_TIER_BASE + L.N_TIER
    for f, v in enumerate(ring):
        sys[base1 + 1 + f] = v
    sys[base1 + L.TIER_SIZE] = 3
    pairs = {(0, 1): links_in_path_order[0], (1, 2): links_in_path_order[1], (2, 0): wrap}
    for (a, b), link in list(pairs.items()):
        for x, y in ((a, b), (b, a)):
            k = L.SYS_TIER_BASE + site_link_tier(x, y) * L.N_TIER
            for f, v in enumerate(link):
                sys[k + 1 + f] = v
    return sys


def test_pipeline_pays_the_links_it_crosses():
    """p = 3 stages of 8 GPUs, one per site (stride 8 = one node = one site here): the fill
    crosses 0-1 (1 ms, 100 GB/s x 0.5 = 50 GB/s) then 1-2 (4 ms, 20 GB/s x 1.0), route =
    (1e-3 + S/50e9) + (4e-3 + S/20e9); the interleaved wrap 2-0 (30 ms, 5 GB/s): t_top =
    30e-3 + S/5e9; the slowest path crossing 4e-3 + S/20e9. A tier model with the ring's
    parameters would charge both crossings at the slowest link (5 GB/s) and the mean latency."""
    l01 = S.Link(100 * GB, 1e-3, 0.5, 1.0)
    l12 = S.Link(20 * GB, 4e-3, 1.0, 1.0)
    l20 = S.Link(5 * GB, 30e-3, 1.0, 1.0)
    sys = _site_sys((l01, l12), l20)
    s = 64e6
    route, t_top, t_max = C.pipeline_boundary_transfers(sys, s, 3.0, 8.0)
    assert route == pytest.approx((1e-3 + s / 50e9) + (4e-3 + s / 20e9), rel=1e-12)
    assert t_top == pytest.approx(30e-3 + s / 5e9, rel=1e-12)
    assert t_max == pytest.approx(4e-3 + s / 20e9, rel=1e-12)
    # without the site graph the same tier charges each crossing at the ring's parameters
    sys[L.SYS_N_SITES] = 0
    route0, _, _ = C.pipeline_boundary_transfers(sys, s, 3.0, 8.0)
    ring = 2 * (tier_latency(sys, 1) + s / tier_link_bandwidth(sys, 1))
    assert route0 == pytest.approx(ring, rel=1e-12)
    assert tier_link_bandwidth(sys, 1) == pytest.approx(5 * GB) and route0 > route


def test_pipeline_blocks_of_sites_pay_their_own_links():
    """Six sites, pipelines of 2 sites (f = 2, stride 1): blocks {0,1}, {2,3}, {4,5} cross
    links 0-1, 2-3, 4-5 only; the slowest block (2-3 at 8 ms) paces the fill."""
    sys = np.zeros(L.N_SYS)
    sys[L.SYS_N_TIERS] = 2
    sys[L.SYS_N_SITES] = 6
    base = L.SYS_TIER_BASE
    for f, v in ((L.TIER_SIZE, 8), (L.TIER_BANDWIDTH, 400 * GB), (L.TIER_EFFICIENCY, 1.0),
                 (L.TIER_OVERSUBSCRIPTION, 1.0)):
        sys[base + f] = v
    lat = {(0, 1): 1e-3, (2, 3): 8e-3, (4, 5): 2e-3}
    for a in range(6):
        for b in range(6):
            if a == b:
                continue
            k = L.SYS_TIER_BASE + site_link_tier(a, b) * L.N_TIER
            x = lat.get((min(a, b), max(a, b)), 50e-3)
            for f, v in zip(range(1, 5), (10 * GB, x, 1.0, 1.0)):
                sys[k + f] = v
    k1 = L.SYS_TIER_BASE + L.N_TIER
    for f, v in ((L.TIER_SIZE, 6), (L.TIER_BANDWIDTH, 10 * GB), (L.TIER_LATENCY, 50e-3),
                 (L.TIER_EFFICIENCY, 1.0), (L.TIER_OVERSUBSCRIPTION, 1.0)):
        sys[k1 + f] = v
    # stages of 4 GPUs (stride 4): 2 stages per site, 4 stages = 2 sites per pipeline
    route, t_top, t_max = C.pipeline_boundary_transfers(sys, 1e6, 4.0, 4.0)
    node = 1e6 / 400e9  # the in-site boundary (tier 0)
    cross = 8e-3 + 1e6 / 10e9
    assert route == pytest.approx(2 * node + cross, rel=1e-12)
    assert t_max == pytest.approx(cross, rel=1e-12)
    assert t_top == pytest.approx(cross, rel=1e-12)  # the wrap of a 2-site block: the same link


def test_slowest_site_rules():
    """slowest_gpu: the lowest achievable rate (an A100 at 312 x 0.7 against an H100 at
    989 x 0.6); smallest_memory: the least usable HBM; weighted_mean over GPU counts."""
    assert S.slowest_gpu([989 * 0.6, 312 * 0.7, 989 * 0.6]) == 1
    assert S.smallest_memory([75.0, 136.0, 75.0]) == 0
    assert S.weighted_mean([2.0, 4.0], [1, 3]) == pytest.approx(3.5)


def test_three_region_packs_the_slowest_gpu_and_the_derived_site_tier():
    """The example: compute constants of the A100 (its bf16 peak, 312 TFLOP/s), HBM 80 GB,
    the inner tiers of us-west (300 / 25 GB/s); site tier = the ring's bottleneck, us-east -
    us-west (25 x 0.85 / 32), mean latency (9 + 14 + 30) / 3 ms, TCP's handshake folded in so
    that the mean message latency is (9 + 14 + 3 x 30) / 3 ms; links in path order
    us-east, us-central, us-west."""
    sc = validate(raw(THREE))
    sys, _, _ = pack(sc)
    assert sys[L.SYS_PEAK_FLOPS] == pytest.approx(312e12)
    assert sys[L.SYS_HBM_BYTES] == pytest.approx(80 * 2**30)
    assert sys[L.SYS_N_TIERS] == 3 and sys[L.SYS_N_SITES] == 3
    assert tier_link_bandwidth(sys, 0) == pytest.approx(300 * GB * 0.8)
    assert tier_link_bandwidth(sys, 1) == pytest.approx(25 * GB * 0.85)
    assert tier_link_bandwidth(sys, 2) == pytest.approx(25 * GB * 0.85 / 32)
    assert tier_latency(sys, 2) == pytest.approx((9e-3 + 14e-3 + 3 * 30e-3) / 3)
    # path order: east(0) - central(1) - west(2); the 0-1 link is east-central's
    assert tier_latency(sys, site_link_tier(0, 1)) == pytest.approx(9e-3)
    assert tier_latency(sys, site_link_tier(1, 2)) == pytest.approx(14e-3)
    assert tier_latency(sys, site_link_tier(2, 0)) == pytest.approx(3 * 30e-3)


# ---- the tier-only cluster is the special case ------------------------------------------------


def test_identical_sites_equal_the_tier_only_cluster():
    """The two-building example with its region tier written as 2 sites and 1 link packs the
    same tiers, and every backend gives bit-identical results on 2,000 configurations."""
    sc0 = validate(raw(TWO))
    sc1 = validate(two_sites_raw())
    s0, m0, j0 = pack(sc0)
    s1, m1, j1 = pack(sc1)
    diff = np.flatnonzero(s0 != s1)
    assert set(diff) - set(range(L.SYS_SITE_LINK_BASE, L.N_SYS)) == {L.SYS_N_SITES}
    cfg = sc0.space.sample(2000, seed=3)
    for name, (ok, _) in available_backends().items():
        if not ok:
            continue
        o0 = evaluate_blocks(s0, m0, j0, cfg, backend=name)
        o1 = evaluate_blocks(s1, m1, j1, cfg, backend=name)
        assert np.array_equal(o0, o1), name


def test_native_backends_equal_reference_on_site_graphs():
    """C and numba equal the reference on site scenarios where pipelines cross sites: the
    three-region example and a 6-site variant (blocks of sites), over sampled layouts with PP
    outermost. Not vacuous: some configurations' pipelines tile the sites."""
    from trainscape.model.links import pipeline_site_span

    r6 = raw(THREE)
    r6["cluster"]["gpus"] = 6 * 2048
    r6["cluster"]["tiers"][1]["size"] = 256
    r6["cluster"]["sites"] = [{"name": f"s{k}", "gpus": 2048,
                               **({"gpu": "a100-sxm-80gb"} if k == 4 else {})}
                              for k in range(6)]
    r6["cluster"]["links"] = [{"sites": [f"s{a}", f"s{b}"], "bandwidth_GBps": 5.0 + a + 3 * b,
                               "latency_us": 1000.0 * (1 + a * b),
                               "oversubscription": 1.0 + b}
                              for a in range(6) for b in range(a + 1, 6)]
    r6["space"]["pp"] = [1, 3, 6, 18]
    r6["space"]["order"] = ["tp-cp-dp-pp", "tp-cp-pp-dp", "tp-pp-cp-dp"]
    tiled = 0
    for r in (raw(THREE), r6):
        r["space"]["order"] = ["tp-cp-dp-pp", "tp-cp-pp-dp", "tp-pp-cp-dp"]
        sc = validate(r)
        sys, mdl, job = pack(sc)
        cfg = sc.space.sample(300, seed=0)
        want = reference.evaluate_batch(sys, mdl, job, cfg)
        for i in range(cfg.shape[1]):
            f, tiles = pipeline_site_span(sys, mdl, job, cfg, i)
            tiled += f > 1 and tiles
        for name in ("c", "numba"):
            if not available_backends()[name][0]:
                continue
            got = evaluate_blocks(sys, mdl, job, cfg, backend=name)
            np.testing.assert_allclose(got, want, rtol=1e-9, atol=0, err_msg=name)
    assert tiled > 20


# ---- validation: exit 2 with the field path ---------------------------------------------------


def _cli_error(r: dict, tmp_path: Path) -> str:
    p = tmp_path / "s.json"  # (a scenario file may be JSON)
    p.write_text(json.dumps(r))
    res = CliRunner().invoke(main, ["evaluate", str(p)])
    assert res.exit_code == 2, res.output
    assert "Traceback" not in res.output
    return res.output


def _mutate(fn) -> dict:
    r = raw(THREE)
    fn(r)
    return r


BAD = [
    ("cluster.links[1].sites[1]", "unknown site",
     lambda r: r["cluster"]["links"][1]["sites"].__setitem__(1, "eu-west")),
    ("cluster.links", "us-east - us-west has no link",
     lambda r: r["cluster"]["links"].pop(2)),
    ("cluster.sites[2].name", "duplicate site name",
     lambda r: r["cluster"]["sites"][2].__setitem__("name", "us-east")),
    ("cluster.gpus", "the sites hold 12288 GPUs",
     lambda r: r["cluster"].__setitem__("gpus", 16384)),
    ("cluster.sites[1].gpus", "same number of GPUs",
     lambda r: (r["cluster"]["sites"][1].__setitem__("gpus", 8192),
                r["cluster"].__setitem__("gpus", 16384))),
    ("cluster.links[2].sites", "a second link between",
     lambda r: r["cluster"]["links"][2].__setitem__("sites", ["us-central", "us-east"])),
    ("cluster.links[0].sites", "two different sites",
     lambda r: r["cluster"]["links"][0].__setitem__("sites", ["us-east", "us-east"])),
    ("cluster.sites[2].gpu", "unknown gpu preset",
     lambda r: r["cluster"]["sites"][2].__setitem__("gpu", "tpu-v9")),
    ("cluster.sites[2].tiers", "same inner tier sizes",
     lambda r: r["cluster"]["sites"][2]["tiers"][1].__setitem__("size", 256)),
    ("cluster.tiers", "tier sizes hold 2048 GPUs per site",
     lambda r: (r["cluster"]["tiers"][1].__setitem__("size", 256),
                [t.__setitem__("size", 256) for t in r["cluster"]["sites"][2]["tiers"][1:]])),
    ("cluster.links", "needs [[cluster.sites]]",
     lambda r: r["cluster"].pop("sites")),
    ("cluster.links[0].latency_us", "",
     lambda r: r["cluster"]["links"][0].__setitem__("latency_us", -1.0)),
    ("cluster.sites", "",
     lambda r: r["cluster"].__setitem__("sites", r["cluster"]["sites"][:1])),
]


@pytest.mark.parametrize("path,words,change", BAD, ids=[b[0] + ":" + b[1] for b in BAD])
def test_bad_site_graphs_exit_2_with_the_field_path(path, words, change, tmp_path):
    out = _cli_error(_mutate(change), tmp_path)
    assert path in out and words in out, out


def test_bad_site_graph_raises_scenario_error_in_the_api():
    with pytest.raises(ScenarioError) as exc:
        validate(_mutate(lambda r: r["cluster"]["links"].pop(0)))
    assert exc.value.path == "cluster.links"
    assert "us-east - us-central" in str(exc.value)


# ---- the three-region example through the CLI -------------------------------------------------


def test_three_region_evaluate_json_reports_each_site_link():
    """``links``: the tiers (node, datacenter, sites) then one entry per [[cluster.links]]; the
    [config] has DP outermost, so the ring over the sites carries DP's outer level and every
    ring link carries the same bytes (the site tier's), busy for bytes / its own rate."""
    res = CliRunner().invoke(main, ["evaluate", str(THREE), "--json"])
    assert res.exit_code == 0, res.output
    out = json.loads(res.output)
    names = [x["name"] for x in out["links"]]
    assert names == ["node", "datacenter", "sites", "us-east-us-central", "us-central-us-west",
                     "us-east-us-west"]
    site_tier = out["links"][2]
    assert site_tier["by_dimension"]["dp"] > 0
    rates = {"us-east-us-central": 50e9 * 0.85 / 16, "us-central-us-west": 50e9 * 0.85 / 16,
             "us-east-us-west": 25e9 * 0.85 / 32}
    for x in out["links"][3:]:
        assert x["bytes_per_step"] == pytest.approx(site_tier["bytes_per_step"], rel=1e-12)
        assert x["busy_s"] == pytest.approx(x["bytes_per_step"] / rates[x["name"]], rel=1e-9)
        assert x["in_ring"]
    assert [x["on_path"] for x in out["links"][3:]] == [True, True, False]
    assert any("slowest site" in n for n in out["notes"])


def test_three_region_pipeline_across_sites_loads_the_path_links():
    """PP outermost over the three sites (pp 6, two stages per site): the pipeline crosses
    east-central and central-west, never the slow east-west link (1F1B: no wrap)."""
    res = CliRunner().invoke(main, ["evaluate", str(THREE), "--json", "--config",
                                    "tp=8,cp=1,pp=6,schedule=1f1b,vpp=1,recompute=full,zero=1,"
                                    "order=tp-cp-dp-pp"])
    assert res.exit_code == 0, res.output
    links = {x["name"]: x for x in json.loads(res.output)["links"]}
    assert links["us-east-us-central"]["by_dimension"]["pp"] > 0
    assert links["us-central-us-west"]["by_dimension"]["pp"] > 0
    assert links["us-east-us-west"]["by_dimension"]["pp"] == 0


def test_three_region_runs_through_evaluate_search_and_explore(tmp_path):
    """The example runs through the three commands (small budgets); the notes say the step is
    paced by the slowest site; explore skips the single-tier sensitivity grid with a reason."""
    r = CliRunner()
    res = r.invoke(main, ["evaluate", str(THREE)])
    assert res.exit_code == 0, res.output
    assert "paced by the slowest site" in res.output and "A100" in res.output
    res = r.invoke(main, ["search", str(THREE), "--budget", "200", "--json"])
    assert res.exit_code == 0, res.output
    best = json.loads(res.output)["top"][0]
    assert best["feasible"] and math.isfinite(best["step_time_s"])
    res = r.invoke(main, ["explore", str(THREE), "--out-dir", str(tmp_path / "rep"),
                          "--time-budget", "60"])
    assert res.exit_code == 0, res.output
    assert "sensitivity grid skipped" in res.output
    assert (tmp_path / "rep" / "summary.json").exists()


def test_ranges_documented_for_sites():
    from trainscape.spec.ranges import DOCUMENTED, MAX_SITES

    assert MAX_SITES == L.MAX_SITES
    assert any("cluster.sites" in field for field, _ in DOCUMENTED)


def test_two_building_as_sites_keeps_its_numbers():
    """Golden numbers are unchanged: the site form of the two-building example evaluates to the
    tier-only form's step time (evaluate, C backend)."""
    import trainscape

    a = trainscape.evaluate(validate(raw(TWO)))
    b = trainscape.evaluate(validate(two_sites_raw()))
    assert a.to_dict() == b.to_dict()


# ---- robustness: random site graphs hold the reliability contract -----------------------------

from hypothesis import given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402


@st.composite
def site_graphs(draw):
    """The three-region example with a random graph: 1..9 sites (some names repeated or
    unknown), random GPU counts and types, a random subset of the pairs linked (sometimes a
    pair twice, a self-link or an unknown name), random link fields in and out of range."""
    r = raw(THREE)
    r["config"].pop("dp")  # derived from the GPU count
    if draw(st.booleans()):
        # well formed: 2..8 sites of 4096 GPUs, every pair linked (one perhaps dropped),
        # fields in range
        n = draw(st.integers(2, L.MAX_SITES))
        r["cluster"]["sites"] = [{"name": f"s{k}", "gpus": 4096, **(
            {"gpu": draw(st.sampled_from(["a100-sxm-80gb", "h200-141gb", "b200"]))}
            if draw(st.booleans()) else {})} for k in range(n)]
        r["cluster"]["gpus"] = 4096 * n
        r["job"]["global_batch"] = 512 * n
        r["config"] = {"tp": 8, "pp": 2, "schedule": "1f1b", "vpp": 1, "recompute": "full",
                       "zero": 1, "order": draw(st.sampled_from(["tp-cp-pp-dp", "tp-cp-dp-pp"]))}
        pairs = [(a, b) for a in range(n) for b in range(a + 1, n)]
        if n >= 4 and draw(st.booleans()):
            pairs.pop(draw(st.integers(0, len(pairs) - 1)))
        r["cluster"]["links"] = [
            {"sites": [f"s{a}", f"s{b}"],
             "bandwidth_GBps": draw(st.floats(1e-3, 1e3)),
             "latency_us": draw(st.floats(0.0, 1e5)),
             "efficiency": draw(st.floats(0.05, 1.0)),
             "oversubscription": draw(st.floats(1.0, 64.0)),
             **({"transport": {"protocol": "tcp", "channels": 4, "window_MiB": 16.0}}
                if draw(st.booleans()) else {})}
            for a, b in pairs]
        return r
    n = draw(st.integers(1, 9))
    names = [draw(st.sampled_from(["a", "b", "c", "d", "e", "f", "g", "h", "i", "a"]))
             for _ in range(n)]
    per = draw(st.sampled_from([4096, 2048, 4095]))
    sites = []
    for name in names:
        s = {"name": name, "gpus": draw(st.sampled_from([per, per, per, 1, 8192]))}
        if draw(st.booleans()):
            s["gpu"] = draw(st.sampled_from(["a100-sxm-80gb", "h200-141gb", "b200", "nope"]))
        sites.append(s)
    r["cluster"]["sites"] = sites
    r["cluster"]["gpus"] = draw(st.sampled_from([sum(s["gpus"] for s in sites), 12288]))
    r["cluster"]["tiers"][1]["size"] = max(1, per // 8)
    links = []
    pool = names + ["zz"]
    for _ in range(draw(st.integers(0, 12))):
        links.append({"sites": [draw(st.sampled_from(pool)), draw(st.sampled_from(pool))],
                      "bandwidth_GBps": draw(st.sampled_from([0.5, 50.0, 1e-9, 1e9])),
                      "latency_us": draw(st.sampled_from([0.0, 9000.0, -1.0, 1e12])),
                      "oversubscription": draw(st.sampled_from([1.0, 16.0, 0.5]))})
    r["cluster"]["links"] = links
    r["cluster"]["sites"][0].pop("tiers", None)
    return r


@settings(max_examples=60, deadline=None)
@given(r=site_graphs())
def test_random_site_graphs_validate_or_fail_with_a_field_path(r):
    """Every random site graph either validates and evaluates to finite numbers, or raises one
    ScenarioError naming a field under ``cluster`` (never another exception)."""
    import trainscape

    try:
        sc = validate(r)
    except ScenarioError as exc:
        assert exc.path.startswith("cluster") or exc.path.startswith("config"), str(exc)
        return
    try:
        res = trainscape.evaluate(sc)
    except ScenarioError as exc:  # the [config] may not fit the new graph
        assert exc.path, str(exc)
        return
    assert math.isfinite(res.step_time_s) and res.step_time_s > 0
    for link in trainscape.api.link_report(sc):
        assert math.isfinite(link["bytes_per_step"]) and math.isfinite(link["busy_s"])


def test_a_paced_window_past_the_float_range_is_no_window():
    # a link latency so small (1e-310 s) that its window could never bind: rescaling the window
    # to the ring's latency would overflow, so the paced record has no window (0: no limit),
    # not an infinite one, and its rate is the link's own bandwidth bound
    tiny = S.Link(25e9, 1e-310, 0.85, 32.0, 16 * 64 * 1048576.0, 1.0)
    slow = S.Link(50e9, 9e-3, 0.85, 16.0, 0.0, 0.0)
    paced = S.paced_link([tiny, slow], 23e-3, 23e-3)
    assert paced.window_bytes == 0.0
    assert S.link_rate(paced) == 25e9 * 0.85 / 32.0
