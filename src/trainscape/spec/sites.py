"""``[[cluster.sites]]`` and ``[[cluster.links]]``: validation, and what packing derives.

A cluster with sites is a graph: each site has ``gpus`` GPUs of one type on its inner tiers
(``[[cluster.tiers]]``, or the site's own ``tiers``), and links join site pairs. The kernels keep
their tier model: packing (:func:`site_plan`, used by :func:`trainscape.spec.pack.pack_system`)
appends one outermost *site* tier whose parameters come from the graph by the rules of
:mod:`trainscape.model.sites` (best ring, best path, slowest site), and stores the links in path
order for the pipeline's stage boundaries.

What the model cannot cost honestly is refused here (exit 2, one field path):

* every site has the same GPU count, and the same inner tier sizes whose product is that count
  (the kernels place one layout, mixed-radix over uniform tiers, in every site; uneven sites and
  uneven stage splits are not modelled yet);
* the sites' GPUs sum to ``cluster.gpus``;
* site names are unique, links name known sites, join two different ones, once per pair;
* a ring through every site exists (collectives over the sites run on it); when none does the
  message names a missing pair that would close one.
"""

from __future__ import annotations

from typing import Any, NamedTuple

from .. import layout as L
from ..model import sites as S
from .errors import fail

# (annotations name the spec.models classes as strings: this module is imported by it)
ClusterSpec = GpuSpec = Scenario = TierSpec = Any

GB = 1e9
US = 1e-6


def link_params(link: Any) -> S.Link:
    """A ``[[cluster.links]]`` entry (or a tier) as :class:`~trainscape.model.sites.Link` in SI
    units (the same conversion as :func:`trainscape.spec.pack.pack_system` for tiers)."""
    window = link.transport.window_bytes if link.transport is not None else 0.0
    handshake = link.transport.handshake_rtts if link.transport is not None else 0.0
    return S.Link(link.bandwidth_GBps * GB, link.latency_us * US, link.efficiency,
                  link.oversubscription, window, handshake)


def site_links(cluster: ClusterSpec) -> dict[tuple[int, int], S.Link]:
    """``{(a, b): Link}`` by site index, both orders (links are symmetric)."""
    index = {s.name: i for i, s in enumerate(cluster.sites or [])}
    out = {}
    for link in cluster.links or []:
        a, b = index[link.sites[0]], index[link.sites[1]]
        out[(a, b)] = out[(b, a)] = link_params(link)
    return out


def site_tiers(cluster: ClusterSpec, i: int) -> list[TierSpec]:
    """The inner tiers of site ``i``: its own, else ``cluster.tiers``."""
    site = cluster.sites[i]
    return site.tiers if site.tiers is not None else cluster.tiers


def _tiers_path(cluster: ClusterSpec, i: int) -> str:
    return f"sites[{i}].tiers" if cluster.sites[i].tiers is not None else "tiers"


def check_site_graph(cluster: ClusterSpec) -> None:
    """Raise :func:`~trainscape.spec.errors.fail` (a path under ``cluster``) for the first thing
    the site graph's model cannot cost (see the module docstring)."""
    if cluster.sites is None:
        raise fail("links", "[[cluster.links]] join sites: the cluster needs [[cluster.sites]]",
                    None, "[[cluster.sites]] (name, gpus), or no links", show_got=False)
    sites = cluster.sites
    names = [s.name for s in sites]
    for i, name in enumerate(names):
        if name in names[:i]:
            raise fail(f"sites[{i}].name", "duplicate site name", name,
                       "a name no other site has")
    if not cluster.links:
        raise fail("links", "a site graph needs links between its sites", None,
                   "[[cluster.links]] with sites = [a, b], bandwidth_GBps, latency_us",
                   show_got=False)
    seen: dict[frozenset, int] = {}
    for k, link in enumerate(cluster.links):
        for j, name in enumerate(link.sites):
            if name not in names:
                raise fail(f"links[{k}].sites[{j}]", "unknown site", name, ", ".join(names))
        if link.sites[0] == link.sites[1]:
            raise fail(f"links[{k}].sites", "a link joins two different sites", link.sites,
                       "two names of [[cluster.sites]]")
        pair = frozenset(link.sites)
        if pair in seen:
            raise fail(f"links[{k}].sites", f"a second link between {link.sites[0]} and "
                       f"{link.sites[1]} (links[{seen[pair]}] is the first)", link.sites,
                       "one link per site pair")
        seen[pair] = k
    total = sum(s.gpus for s in sites)
    if total != cluster.gpus:
        raise fail("gpus", f"the sites hold {total} GPUs ({' + '.join(str(s.gpus) for s in sites)})",
                   cluster.gpus, f"{total}, the sum of cluster.sites[].gpus")
    for i, s in enumerate(sites):
        if s.gpus != sites[0].gpus:
            raise fail(f"sites[{i}].gpus", "every site must hold the same number of GPUs (the "
                       "model places one layout in every site; uneven sites are not modelled)",
                       s.gpus, f"{sites[0].gpus}, as sites[0]")
    sizes0 = [t.size for t in site_tiers(cluster, 0)]
    if len(sizes0) > L.MAX_TIERS - 1:
        raise fail(_tiers_path(cluster, 0), f"at most {L.MAX_TIERS - 1} tiers inside a site "
                   "(the site tier is the last of the kernels' tiers)", len(sizes0),
                   f"1 to {L.MAX_TIERS - 1} tiers")
    for i in range(len(sites)):
        sizes = [t.size for t in site_tiers(cluster, i)]
        if sizes != sizes0:
            raise fail(_tiers_path(cluster, i), "every site needs the same inner tier sizes "
                       "(the model places one layout in every site)", sizes,
                       f"sizes {sizes0}, as sites[0]")
        cap = 1
        for x in sizes:
            cap *= x
        if cap != sites[i].gpus:
            raise fail(_tiers_path(cluster, i), f"the tier sizes hold {cap} GPUs per site, but "
                       f"sites[{i}].gpus = {sites[i].gpus}", sizes,
                       f"tier sizes whose product is {sites[i].gpus}")
    links = site_links(cluster)
    n = len(sites)
    if S.best_cycle(n, links) is None:
        pair = S.missing_pair_for_ring(n, links)
        if pair is not None:
            a, b = names[pair[0]], names[pair[1]]
            raise fail("links", f"no ring through every site (collectives over the sites run "
                       f"on one): the pair {a} - {b} has no link", [lk.label for lk in cluster.links],
                       f"a [[cluster.links]] with sites = [\"{a}\", \"{b}\"]")
        missing = [f"{names[a]} - {names[b]}" for a in range(n) for b in range(a + 1, n)
                   if (a, b) not in links]
        raise fail("links", "no ring through every site (collectives over the sites run on "
                   "one): pairs without a link: " + ", ".join(missing),
                   [lk.label for lk in cluster.links], "links that close a ring through every site")


# ---- packing ---------------------------------------------------------------------------------


class SitePlan(NamedTuple):
    """What packing derives from a site graph."""

    cycle: tuple[int, ...]  # the ring collectives run on (site indices)
    path: tuple[int, ...]  # the order ranks fill the sites in
    ring: S.Link  # the site tier's parameters (model.sites.ring_tier)
    matrix: list  # links between the a-th and b-th site along the path (Link or None)
    gpu: Any  # the GpuSpec that paces the step (paced_gpu)
    tiers: list  # the inner tiers that pace the step (paced_tiers)


def resolve_site_gpus(scenario: Scenario) -> list[GpuSpec]:
    """Each site's GPU: ``cluster.gpu``, or the site's preset resolved for the job's dtype and
    stack as ``cluster.gpu`` is (:func:`trainscape.presets.resolve_gpu`)."""
    from .. import presets

    c = scenario.cluster
    gpu_spec = type(c.gpu)  # spec.models.GpuSpec
    out = []
    for s in c.sites or []:
        if s.gpu is None:
            out.append(c.gpu)
            continue
        table = presets.resolve_gpu(s.gpu, dtype=scenario.job.dtype, stack=scenario.job.stack,
                                    calibrated=c.gpu.calibrated)
        table.pop("sources", None)
        table["calibrated"] = c.gpu.calibrated
        out.append(gpu_spec(**table))
    return out


def gpu_rate(gpu: GpuSpec, dtype: str) -> float:
    """Achievable dense rate of a GPU for ``dtype`` (TFLOP/s): peak x GEMM efficiency (the linear
    layers' curve for FP8, as :func:`trainscape.spec.pack.pack_system` packs it)."""
    eff = gpu.gemm_efficiency_max
    if dtype == "fp8" and gpu.fp8_gemm_efficiency_max is not None:
        eff = gpu.fp8_gemm_efficiency_max
    return (gpu.peak_for(dtype) or 0.0) * eff


def paced_gpu(scenario: Scenario, gpus: list[GpuSpec]) -> GpuSpec:
    """The GPU the kernels cost every rank with: the slowest type present
    (:func:`~trainscape.model.sites.slowest_gpu`) for every compute constant, with the least
    HBM bandwidth of the types present, the HBM capacity and reserve of the type with the least
    usable HBM (:func:`~trainscape.model.sites.smallest_memory`), and price and power averaged
    over the GPUs (:func:`~trainscape.model.sites.weighted_mean`, so the cost per step is the
    cluster's). One type: ``cluster.gpu`` itself."""
    counts = [s.gpus for s in scenario.cluster.sites]
    if len({g.model_dump_json() for g in gpus}) == 1:
        return gpus[0]
    slow = gpus[S.slowest_gpu([gpu_rate(g, scenario.job.dtype) for g in gpus])]
    small = gpus[S.smallest_memory([g.hbm_gb - g.hbm_reserve_gb for g in gpus])]
    price = None
    if any(g.price_per_hour_usd is not None for g in gpus):
        price = S.weighted_mean([g.price_per_hour_usd or 0.0 for g in gpus], counts)
    power = None
    if any(g.drawn_power_w is not None for g in gpus):
        power = S.weighted_mean([g.drawn_power_w or 0.0 for g in gpus], counts)
    # the slowest type's peaks at the clock its power limit leaves (GpuSpec.peak_for), so the
    # averaged power below cannot rescale them
    peaks = {k: slow.peak_for(k) for k in slow.peak_tflops}
    return slow.model_copy(update={
        "peak_tflops": peaks, "power_limit_w": None,
        "hbm_gb": small.hbm_gb, "hbm_reserve_gb": small.hbm_reserve_gb,
        "hbm_bandwidth_GBps": min(g.hbm_bandwidth_GBps for g in gpus),
        "price_per_hour_usd": price, "power_w": power,
        "name": " / ".join(dict.fromkeys(g.name or g.preset or "gpu" for g in gpus)),
    })


def paced_tiers(cluster: ClusterSpec) -> list[TierSpec]:
    """The inner tiers the kernels cost every site with: tier by tier, the slowest site's (the
    lowest :func:`~trainscape.model.sites.link_rate`; the higher latency on a tie) -- the step
    waits for the slowest site. All sites' tiers have the same sizes (checked)."""
    per_site = [site_tiers(cluster, i) for i in range(len(cluster.sites))]
    out = []
    for j in range(len(per_site[0])):
        options = [tiers[j] for tiers in per_site]
        out.append(min(options, key=lambda t: (S.link_rate(link_params(t)), -t.latency_us)))
    return out


def check_site_gpus(scenario: Scenario) -> None:
    """Raise :func:`~trainscape.spec.errors.fail` (a path from the scenario's root) for a site GPU
    that is not a known preset or has no peak rate for the job's dtype."""
    from .. import presets

    for i, s in enumerate(scenario.cluster.sites or []):
        if s.gpu is None:
            continue
        if s.gpu not in presets.names("gpu"):  # (SiteSpec made any other name of one its id)
            raise fail(f"cluster.sites[{i}].gpu", "unknown gpu preset", s.gpu,
                       presets.gpu_names_allowed())
    for i, g in enumerate(resolve_site_gpus(scenario)):
        for dtype in {scenario.job.dtype, "bf16"} if scenario.job.dtype == "fp8" \
                else {scenario.job.dtype}:
            if g.peak_for(dtype) is None:
                raise fail(f"cluster.sites[{i}].gpu", f"this GPU has no peak rate for {dtype} "
                           "(job.dtype)", scenario.cluster.sites[i].gpu,
                           "a GPU preset with a peak for the job's dtype")


def site_plan(scenario: Scenario) -> SitePlan:
    """Everything :func:`trainscape.spec.pack.pack_system` needs for a cluster with sites."""
    c = scenario.cluster
    n = len(c.sites)
    links = site_links(c)
    cycle = S.best_cycle(n, links)
    path = S.best_path(n, links)
    ring = S.ring_tier(cycle, links)
    matrix = S.path_link_matrix(path, links)
    gpus = resolve_site_gpus(scenario)
    gpu = paced_gpu(scenario, gpus)
    return SitePlan(cycle, path, ring, matrix, gpu, paced_tiers(c))


def site_notes(scenario: Scenario, blocks: tuple | None = None) -> tuple[str, ...]:
    """What the site-graph rules assumed, one line each, for ``evaluate`` (empty without
    sites). ``blocks``: the scenario's packed ``(sys, mdl, job)``, to say whether the
    ``[config]``'s pipeline stages tile the sites."""
    c = scenario.cluster
    if c.sites is None:
        return ()
    names = [s.name for s in c.sites]
    n = len(names)
    links = site_links(c)
    cycle = S.best_cycle(n, links)
    path = S.best_path(n, links)
    slow = min(S.cycle_pairs(cycle), key=lambda p: S.link_rate(links[p]))
    notes = [
        "sites: collectives across sites run on the ring " + " -> ".join(names[k] for k in cycle)
        + f" -> {names[cycle[0]]}, paced by its slowest link ({names[slow[0]]} - "
        f"{names[slow[1]]}); ranks fill the sites in the order " + ", ".join(names[k] for k in path)
        + " (pipeline stage boundaries pay the link they cross)",
        "sites: the step is paced by the slowest site -- every rank is costed with the slowest "
        "GPU type present and the smallest HBM, each inner tier as the slowest site's (a "
        "conservative rule: faster or larger sites are not given more work)",
    ]
    if scenario.config is not None and blocks is not None:
        from ..model.links import pipeline_site_span

        sys, mdl, job, cfg = blocks
        f, tiles = pipeline_site_span(sys, mdl, job, cfg, 0)
        if not tiles:
            notes.append(f"sites: the pipeline spans {f:g} sites and its stages do not tile them "
                         "(a stage straddles two sites): its site crossings are charged at the "
                         "ring's slowest link")
    gpus = resolve_site_gpus(scenario)
    if len({g.model_dump_json() for g in gpus}) > 1:
        paced = paced_gpu(scenario, gpus)
        notes.append(f"sites: GPU types {paced.name}; compute as {gpu_label(gpus, scenario)}, "
                     f"HBM {paced.hbm_gb:g} GB")
    return tuple(notes)


def gpu_label(gpus: list, scenario: Scenario) -> str:
    """The name of the slowest GPU type present (:func:`paced_gpu`'s compute constants)."""
    slow = gpus[S.slowest_gpu([gpu_rate(g, scenario.job.dtype) for g in gpus])]
    return slow.name or slow.preset or "gpu"


def tier_names(scenario: Scenario) -> list[str]:
    """Names of the packed tiers, innermost first: ``cluster.tiers``, or with sites the paced
    inner tiers and ``"sites"`` (the derived site tier)."""
    c = scenario.cluster
    if c.sites is None:
        return [t.name for t in c.tiers]
    return [t.name for t in paced_tiers(c)] + ["sites"]


def site_link_report(scenario: Scenario, sys, mdl, job, cfg, loads) -> list[dict]:
    """``evaluate --json``'s entries for the site links (after the tiers'):
    ``{name, sites, bytes_per_step, busy_s, by_dimension, in_ring, on_path}`` per
    ``[[cluster.links]]`` entry, from :func:`trainscape.model.links.site_link_loads`."""
    from ..model.links import site_link_loads

    c = scenario.cluster
    n = len(c.sites)
    links = site_links(c)
    cycle = S.best_cycle(n, links)
    path = S.best_path(n, links)
    pos = {site: k for k, site in enumerate(path)}
    ring = [(pos[a], pos[b]) for a, b in S.cycle_pairs(cycle)]
    per = site_link_loads(sys, mdl, job, cfg, 0, loads, ring)
    index = {s.name: i for i, s in enumerate(c.sites)}
    ring_sets = {frozenset(p) for p in S.cycle_pairs(cycle)}
    out = []
    for link in c.links:
        a, b = index[link.sites[0]], index[link.sites[1]]
        pa, pb = pos[a], pos[b]
        total, busy, by_dim = per[(min(pa, pb), max(pa, pb))]
        out.append({"name": link.label, "sites": list(link.sites), "bytes_per_step": total,
                    "busy_s": busy, "by_dimension": by_dim,
                    "in_ring": frozenset((a, b)) in ring_sets,
                    "on_path": abs(pa - pb) == 1})
    return out
