"""Sites and links: what a ``[[cluster.sites]]`` graph means for the kernels' tier model.

The kernels cost collectives over a stack of uniform tiers (:mod:`trainscape.model.network`).
A cluster of sites joined by per-pair links is not uniform at its outermost level, so at pack
time (:mod:`trainscape.spec.sites`) these rules derive, from the site graph, the parameters of
the outermost (site) tier and the order the sites are laid out in. Each rule is one small
function on plain numbers, with its source:

* a ring over the sites runs on the best Hamiltonian cycle (:func:`best_cycle`) and is paced by
  its slowest link (:func:`ring_tier`); its per-step latency is the mean of the cycle's link
  latencies, so a trip round the ring costs their sum;
* pipeline stages are laid out site after site along the best Hamiltonian path
  (:func:`best_path`); each stage boundary that crosses sites pays the link it crosses (the
  kernels read the links in path order, :func:`trainscape.model.collectives.site_path_transfers`);
  a pair the graph does not join directly is reached along the path (:func:`series_link`);
* the step is paced by the slowest site: the compute constants of the slowest GPU type present
  (:func:`slowest_gpu`) and the memory capacity of the smallest HBM (:func:`smallest_memory`) --
  a conservative rule (a faster site waits for the slowest one at every synchronisation).

Latencies in seconds, bandwidths in bytes/s per GPU (SI, as the packed blocks).
"""

from __future__ import annotations

import math

import itertools
from typing import NamedTuple


class Link(NamedTuple):
    """One link's parameters as the packed tier record holds them (``layout.TIER_FIELDS``)."""

    bandwidth: float  # line rate per GPU, bytes/s
    latency: float  # one-way, seconds
    efficiency: float = 0.8
    oversubscription: float = 1.0
    window_bytes: float = 0.0  # bytes in flight per GPU (0: no limit)
    handshake_rtts: float = 0.0  # round trips before each message's data (TCP 1, RDMA 0)


def link_rate(link: Link) -> float:
    """Bytes/s one GPU gets on ``link`` when every GPU uses it: ``bandwidth * efficiency /
    oversubscription``, held to ``window / RTT`` (the same rule as
    :func:`~trainscape.model.network.tier_link_bandwidth`: Llama 3, arXiv 2407.21783 §3.3.1, and
    the bandwidth-delay product, RFC 7323 §1.1)."""
    bw = link.bandwidth * link.efficiency / link.oversubscription
    rtt = 2.0 * link.latency
    if link.window_bytes > 0.0 and rtt > 0.0:
        bw = min(bw, link.window_bytes / rtt)
    return bw


def message_latency(link: Link) -> float:
    """Seconds for one message across ``link``: its latency plus ``handshake_rtts`` round trips
    (as :func:`~trainscape.model.network.tier_latency`; TCP handshake, RFC 9293 §3.5)."""
    return link.latency * (1.0 + 2.0 * link.handshake_rtts)


def paced_link(links: list[Link], latency: float, msg_latency: float) -> Link:
    """A tier record whose per-GPU rate is the slowest of ``links`` (:func:`link_rate`) and whose
    latency and message latency are the given ones.

    Bandwidth, efficiency and oversubscription are the slowest link's own (so the kernels'
    sharing rules -- oversubscription, stage-boundary senders -- apply to it unchanged); its
    transport window is rescaled so that ``window / (2 latency)`` stays the slowest link's own
    bound (no window where that bound is past the float range -- a latency so small that the
    window could never bind); the handshake count is set so that ``latency (1 + 2 handshake)``
    is ``msg_latency``."""
    slow = min(links, key=link_rate)
    window = 0.0
    if slow.window_bytes > 0.0 and slow.latency > 0.0:
        window = slow.window_bytes * (latency / slow.latency)
        if not math.isfinite(window):
            window = 0.0
    handshake = 0.0
    if latency > 0.0:
        handshake = max(0.0, (msg_latency / latency - 1.0) / 2.0)
    return Link(slow.bandwidth, latency, slow.efficiency, slow.oversubscription, window,
                handshake)


# ---- rings: the best Hamiltonian cycle -------------------------------------------------------


def hamiltonian_cycles(n: int):
    """Every ring through ``n`` sites once, each undirected cycle once: ``(0, p...)`` for the
    permutations ``p`` of ``1 .. n-1`` with ``p[0] < p[-1]`` ((n-1)!/2 of them; 2520 at n = 8).
    Two sites: the one ring ``(0, 1)`` (0 -> 1 -> 0 over their link)."""
    if n == 2:
        yield (0, 1)
        return
    for p in itertools.permutations(range(1, n)):
        if p[0] < p[-1]:
            yield (0, *p)


def cycle_pairs(cycle: tuple[int, ...]) -> list[tuple[int, int]]:
    """The site pairs a ring crosses, in order (``(a, b)``, then ``(b, c)`` ... back to the
    start); a ring of two crosses its one link both ways."""
    n = len(cycle)
    return [(cycle[k], cycle[(k + 1) % n]) for k in range(n)]


def best_cycle(n: int, links: dict) -> tuple[int, ...] | None:
    """The ring a collective over all ``n`` sites should run on, or None when no ring through
    every site exists in the graph (``links``: ``{(a, b): Link}``, both orders present).

    NCCL's ring moves every chunk over every link of the ring: each of the ``2(n-1)`` steps of a
    ring all-reduce sends ``S/n`` on every link at once, so every link carries the same bytes
    and the slowest link paces the ring (Patarasuk & Yuan 2009, "Bandwidth optimal all-reduce
    algorithms", §3; NCCL ``src/graph/rings.cc`` / ``search.cc`` search the rings whose slowest
    link is fastest). The best cycle therefore maximises its bottleneck :func:`link_rate`, then
    minimises the sum of its message latencies (what a chunk's trip round the ring waits);
    remaining ties go to the lexicographically first cycle. Exhaustive: ``n`` is at most
    ``layout.MAX_SITES``."""
    return best_route(hamiltonian_cycles(n), cycle_pairs, links)


def best_route(routes, pairs_of, links: dict):
    """The first of ``routes`` (site orders) whose site pairs (``pairs_of(route)``) all have a
    link and whose slowest :func:`link_rate` is fastest, then whose sum of
    :func:`message_latency` is least; None when no route is complete. The rule of
    :func:`best_cycle` and :func:`best_path`."""
    best = None
    best_key = None
    for route in routes:
        pairs = pairs_of(route)
        if any(p not in links for p in pairs):
            continue
        key = (-min(link_rate(links[p]) for p in pairs),
               sum(message_latency(links[p]) for p in pairs))
        if best_key is None or key < best_key:
            best, best_key = route, key
    return best


def ring_tier(cycle: tuple[int, ...], links: dict) -> Link:
    """The outermost tier's parameters for collectives over the sites: the ring of ``cycle``.

    Rate: the cycle's slowest link (:func:`best_cycle`: every link of a ring carries the same
    bytes). Latency: the mean of its links' latencies, so that the kernels' ``2(n-1)`` latency
    steps of a ring all-reduce (:func:`~trainscape.model.collectives.ring_all_reduce_time`)
    cost ``2(n-1)/n`` times the cycle's total -- a chunk's dependency chain crosses the cycle's
    links one after another, so each trip round the ring waits for the sum of their latencies
    (NCCL's ring: step ``k`` of a rank waits for the chunk its predecessor received at step
    ``k-1``; ``src/device/all_reduce.h`` runRing; the per-step latency times the step count of
    ``src/graph/tuning.cc``). With identical links this is the tier-only cluster's tier.
    """
    pairs = cycle_pairs(cycle)
    ring = [links[p] for p in pairs]
    n = len(ring)
    latency = sum(link.latency for link in ring) / n
    msg = sum(message_latency(link) for link in ring) / n
    return paced_link(ring, latency, msg)


# ---- pipelines: the best Hamiltonian path ----------------------------------------------------


def hamiltonian_paths(n: int):
    """Every order of the ``n`` sites, each undirected path once (``p[0] < p[-1]``)."""
    for p in itertools.permutations(range(n)):
        if p[0] < p[-1]:
            yield p


def best_path(n: int, links: dict) -> tuple[int, ...] | None:
    """The order the sites are laid out in: ranks fill the sites one after another along this
    path, so consecutive pipeline stages cross from one site to the next on it (stages laid out
    site after site, as CrossPipe places pipeline stages over data centres, arXiv 2507.00217
    §3, and Atlas / BubbleTea keep each pipeline's cross-DC hops on consecutive DCs, arXiv
    2411.14458 §4). The best path maximises its slowest link's :func:`link_rate` (the
    steady-state stall of a pipeline is set by its slowest boundary,
    :func:`~trainscape.model.pipeline.pipeline_comm_time`), then minimises the sum of its
    message latencies (the fill and drain cross every boundary); ties go to the first path.
    None when the graph has no path through every site."""
    return best_route(hamiltonian_paths(n), path_pairs, links)


def path_pairs(path: tuple[int, ...]) -> list[tuple[int, int]]:
    """The site pairs a path crosses, in order."""
    return [(path[k], path[k + 1]) for k in range(len(path) - 1)]


def series_link(route: list[Link]) -> Link:
    """A transfer between two sites the graph does not join directly, relayed over the links of
    ``route`` one after another: latencies add, and the slowest link paces the bytes (store-and-
    forward of a pipelined stream: alpha-beta cost of a multi-hop route, the sum of the hop
    latencies plus the bytes over the bottleneck; Hockney 1994, "The communication challenge
    for MPP")."""
    latency = sum(link.latency for link in route)
    msg = sum(message_latency(link) for link in route)
    return paced_link(route, latency, msg)


def path_link_matrix(path: tuple[int, ...], links: dict) -> list[list[Link | None]]:
    """The links between the ``a``-th and ``b``-th site along ``path`` (the system block's
    order): the direct link where there is one, else the route along the path between them
    (:func:`series_link`); None on the diagonal."""
    n = len(path)
    out: list[list[Link | None]] = [[None] * n for _ in range(n)]
    for a in range(n):
        for b in range(n):
            if a == b:
                continue
            pair = (path[a], path[b])
            if pair in links:
                out[a][b] = links[pair]
            else:
                lo, hi = min(a, b), max(a, b)
                out[a][b] = series_link([links[(path[k], path[k + 1])] for k in range(lo, hi)])
    return out


def missing_pair_for_ring(n: int, links: dict) -> tuple[int, int] | None:
    """A site pair whose link would close a ring through every site (the first in order), or
    None when one already exists or no single link would make one."""
    if best_cycle(n, links) is not None:
        return None
    for a in range(n):
        for b in range(a + 1, n):
            if (a, b) in links:
                continue
            trial = dict(links)
            trial[(a, b)] = trial[(b, a)] = Link(1.0, 0.0)
            if best_cycle(n, trial) is not None:
                return a, b
    return None


# ---- the step is paced by the slowest site ---------------------------------------------------


def slowest_gpu(rates: list[float]) -> int:
    """Index of the slowest GPU type present: the lowest achievable dense rate (peak for the
    job's dtype x GEMM efficiency). Synchronous data-parallel training waits at every gradient
    reduction for the slowest replica, and a pipeline runs at the pace of its slowest stage
    (Narayanan et al. SC'21 §3: the pipeline's throughput is set by its slowest stage), so with
    equal work per GPU the slowest type sets the step -- conservative: it ignores giving the
    faster sites more work (uneven splits are not modelled yet). First index on ties."""
    return min(range(len(rates)), key=lambda i: rates[i])


def smallest_memory(usable_bytes: list[float]) -> int:
    """Index of the GPU type with the least usable HBM (capacity - reserve): every site holds
    the same shard of the model (the layout is the same everywhere), so the configuration must
    fit the smallest memory. First index on ties."""
    return min(range(len(usable_bytes)), key=lambda i: usable_bytes[i])


def weighted_mean(values: list[float], weights: list[float]) -> float:
    """``sum(v w) / sum(w)``: a per-GPU quantity (price per GPU-hour, power) over sites of
    ``weights`` GPUs each, so that ``gpus x mean`` is the cluster's total."""
    total = sum(weights)
    return sum(v * w for v, w in zip(values, weights)) / total if total > 0 else 0.0
