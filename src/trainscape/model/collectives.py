"""Collective communication costs over the hierarchical network (alpha-beta model).

Each collective is costed per algorithm as latency terms plus bytes over the bottleneck
bandwidth of each tier it crosses, and the cheapest algorithm wins, as NCCL's tuner picks the
algorithm with the lowest predicted time (NVIDIA/nccl ``src/graph/tuning.cc``,
``ncclTopoGetAlgoTime``). Bus-bandwidth factors follow nccl-tests ``doc/PERFORMANCE.md``:
all-reduce moves ``2(n-1)/n`` of the buffer per rank, all-gather / reduce-scatter / all-to-all
``(n-1)/n``.

Algorithms:
- flat ring over all members, every step paced by the slowest (outermost) tier crossed;
- double binary tree (Sanders, Speck, Träff 2009; NCCL 2.4): ``2*ceil(log2 n)`` latency steps,
  each rank sends and receives the whole buffer once up and once down;
- hierarchical: reduce-scatter inside the innermost tier, then the next tier on the shard, ...,
  and all-gather back (ASTRA-sim's multi-dimensional collectives; "2D" / hierarchical
  all-reduce of Jia et al. 2018 and Ying et al. 2018) -- each tier moves only ``1/prod(inner
  fan-outs)`` of the data;
- direct all-to-all: every pair exchanges its share at once; each tier's links carry the bytes
  that must cross it.

A group is given as up to three dimensions ``(n_a, s_a, n_b, s_b, n_c, s_c)`` -- degree and
rank stride each; see :mod:`trainscape.model.network`. ``nbytes`` is the full buffer per rank
(the all-reduce input, the all-gather output, the reduce-scatter input, the all-to-all send
buffer).
"""

from __future__ import annotations

import math

from ..layout import SYS_HBM_BANDWIDTH, SYS_MEMORY_EFFICIENCY
from .network import (
    boundary_link_bandwidth,
    dim_members_within,
    group_members_within,
    group_top_tier,
    n_sites,
    n_tiers,
    next_tier_span,
    site_link_tier,
    tier_comm_dtype_bytes,
    tier_latency,
    tier_link_bandwidth,
    tier_path_bandwidth,
    tier_span,
)


def ring_all_reduce_time(n, nbytes, latency, bandwidth):
    """Ring all-reduce of ``nbytes`` over ``n`` ranks: ``2(n-1)`` steps, each moving
    ``nbytes/n`` (Patarasuk & Yuan 2009; nccl-tests PERFORMANCE.md busBw factor 2(n-1)/n)."""
    if n <= 1.0:
        return 0.0
    return 2.0 * (n - 1.0) * latency + 2.0 * (n - 1.0) / n * nbytes / bandwidth


def ring_all_gather_time(n, nbytes, latency, bandwidth):
    """Ring all-gather (or reduce-scatter) with ``nbytes`` output per rank: ``n-1`` steps of
    ``nbytes/n`` (nccl-tests PERFORMANCE.md busBw factor (n-1)/n)."""
    if n <= 1.0:
        return 0.0
    return (n - 1.0) * latency + (n - 1.0) / n * nbytes / bandwidth


def tree_all_reduce_time(n, nbytes, latency, bandwidth):
    """Double-binary-tree all-reduce: reduce up and broadcast down a tree of depth
    ``ceil(log2 n)``, pipelined so each rank sends the buffer once per phase."""
    if n <= 1.0:
        return 0.0
    depth = math.ceil(math.log2(n))
    return 2.0 * depth * latency + 2.0 * nbytes / bandwidth


def group_size(n_a, n_b, n_c):
    """Ranks in a group of up to three dimensions."""
    return n_a * n_b * n_c


# ---- compression of the data-parallel traffic per tier ([[cluster.tiers]] comm_dtype) -------
# A tier with a comm_dtype carries the data-parallel collectives' bytes that cross it in that
# format: each rank quantizes what it sends over the tier and dequantizes what it receives,
# as ZeRO++ does for the weights' all-gather (qwZ) and the gradients' reduce-scatter (qgZ)
# (Wang et al. 2023, "ZeRO++: Extremely Efficient Collective Communication for Giant Model
# Training", arXiv 2306.10209, §3.1 and §3.3: block-based quantization, dequantized on arrival
# and reduced in full precision) and as DeepSeek-V3 sends FP8 with per-128-element scales
# (arXiv 2412.19437, §3.3.2). The tier's width per element, scales included, is packed by
# :func:`trainscape.spec.pack.comm_dtype_bytes`; 0 means the traffic keeps the job's width.


def wire_bytes(comm_dtype_bytes, elem_bytes):
    """Bytes per element a tier whose ``comm_dtype`` is ``comm_dtype_bytes`` wide (0: none)
    puts on its links for traffic of ``elem_bytes`` per element: the narrower of the two. A
    tier never inflates: traffic already as narrow as its format (bf16 gradients on a bf16
    tier, an FP8 weight gather on an fp8 tier, whose scales make it 1.03125 bytes) is sent
    as it is."""
    if comm_dtype_bytes > 0.0 and comm_dtype_bytes < elem_bytes:
        return comm_dtype_bytes
    return elem_bytes


def codec_time(sys, elements, elem_bytes, wire):
    """Quantize ``elements`` before sending them (read ``elem_bytes``, write ``wire`` bytes
    each) and dequantize them on arrival (read ``wire``, write ``elem_bytes``): memory-bound
    kernels at the achieved HBM bandwidth (the roofline of ``llm.memory_bound_time``),
    ``2 * elements * (elem_bytes + wire) / (hbm_bandwidth * memory_efficiency)``. ZeRO++ runs
    its quantization and dequantization as such fused CUDA kernels beside the collective
    (Wang et al. 2023, arXiv 2306.10209, §4: "optimized quantization kernels")."""
    return 2.0 * elements * (elem_bytes + wire) \
        / (sys[SYS_HBM_BANDWIDTH] * sys[SYS_MEMORY_EFFICIENCY])


def compressed_ring_time(sys, tier, f, nbytes, elem_bytes, reduce, latency, bandwidth):
    """A ring all-reduce (``reduce``) or all-gather / reduce-scatter of ``f`` ranks on
    ``nbytes`` of ``elem_bytes`` per element at tier ``tier`` (its ``latency`` and path
    ``bandwidth``), the data sent in the tier's :func:`wire_bytes`: the ring's bandwidth term
    on ``nbytes / elem_bytes * wire`` bytes plus :func:`codec_time` of every element a rank
    sends (``2(f-1)/f`` of them for an all-reduce, ``(f-1)/f`` for a gather: each step
    quantizes the chunk it sends and dequantizes the one it receives, nccl-tests
    ``doc/PERFORMANCE.md`` bus factors). Without compression the plain ring."""
    if f <= 1.0:
        return 0.0
    wire = wire_bytes(tier_comm_dtype_bytes(sys, tier), elem_bytes)
    if wire >= elem_bytes:
        if reduce:
            return ring_all_reduce_time(f, nbytes, latency, bandwidth)
        return ring_all_gather_time(f, nbytes, latency, bandwidth)
    elements = nbytes / elem_bytes
    if reduce:
        return ring_all_reduce_time(f, elements * wire, latency, bandwidth) \
            + codec_time(sys, 2.0 * (f - 1.0) / f * elements, elem_bytes, wire)
    return ring_all_gather_time(f, elements * wire, latency, bandwidth) \
        + codec_time(sys, (f - 1.0) / f * elements, elem_bytes, wire)


def compressed_tree_time(sys, tier, n, nbytes, elem_bytes, latency, bandwidth):
    """:func:`tree_all_reduce_time` of ``n`` ranks at tier ``tier`` in the tier's
    :func:`wire_bytes`: each rank sends the whole buffer up and down once, so ``2 * nbytes /
    elem_bytes`` elements pass through :func:`codec_time`."""
    if n <= 1.0:
        return 0.0
    wire = wire_bytes(tier_comm_dtype_bytes(sys, tier), elem_bytes)
    if wire >= elem_bytes:
        return tree_all_reduce_time(n, nbytes, latency, bandwidth)
    elements = nbytes / elem_bytes
    return tree_all_reduce_time(n, elements * wire, latency, bandwidth) \
        + codec_time(sys, 2.0 * elements, elem_bytes, wire)


def hierarchical_terms(sys, nbytes, elem_bytes, reduce, tiers, n_a, s_a, n_b, s_b, n_c, s_c):
    """The hierarchical algorithm's sum over the tiers ``0 .. tiers - 1`` (see
    :func:`hierarchical_time`), and the latency, path bandwidth and index of the outermost of
    them the group crosses: ``(sum, latency, bandwidth, tier)`` (tier -1: none). Each tier's
    ring carries ``elem_bytes`` per element, or the tier's ``comm_dtype``
    (:func:`compressed_ring_time`; ``elem_bytes`` 0: never compressed)."""
    n = group_size(n_a, n_b, n_c)
    hier = 0.0
    inner = 1.0  # members inside one domain of the tier below
    span = 1.0
    nic = math.inf  # slowest link from tier 1 up to here
    lat = 0.0
    bw = 0.0
    top = -1
    for i in range(tiers):
        span = next_tier_span(sys, i, span)
        members = group_members_within(span, n_a, s_a, n_b, s_b, n_c, s_c)
        if i == 0:
            path = tier_link_bandwidth(sys, 0)
        else:
            nic = min(nic, tier_link_bandwidth(sys, i))
            path = nic  # == tier_path_bandwidth(sys, i)
        f = members / inner
        if f > 1.0:
            lat = tier_latency(sys, i)
            bw = path
            top = i
            hier += compressed_ring_time(sys, i, f, nbytes / inner, elem_bytes, reduce, lat, bw)
        inner = members
        if members >= n:
            break
    return hier, lat, bw, top


def hierarchical_time(sys, nbytes, elem_bytes, reduce, n_a, s_a, n_b, s_b, n_c, s_c):
    """Walk the tiers from the inside out once and cost the collective both ways.

    At tier ``i`` the group joins ``f_i`` sub-groups (its fan-out there); the hierarchical
    algorithm runs a ring of ``f_i`` ranks on ``nbytes / (f_0 ... f_{i-1})`` at that tier's
    latency and path bandwidth. The walk stops once every member is inside the current tier.
    Returns ``(hierarchical, flat)``: the hierarchical sum, and the cheapest flat algorithm over
    all ``n`` members at the outermost tier crossed (ring, and the tree for an all-reduce).
    ``reduce`` selects all-reduce (else all-gather / reduce-scatter). ``elem_bytes``: bytes per
    element of the traffic, for the tiers' ``comm_dtype`` (0: never compressed); a flat
    algorithm is paced by the outermost tier it crosses and is sent in that tier's format.
    """
    n = group_size(n_a, n_b, n_c)
    hier, lat, bw, top = hierarchical_terms(sys, nbytes, elem_bytes, reduce, n_tiers(sys), n_a,
                                            s_a, n_b, s_b, n_c, s_c)
    if top < 0:
        return hier, 0.0
    if reduce:
        flat = min(compressed_ring_time(sys, top, n, nbytes, elem_bytes, True, lat, bw),
                   compressed_tree_time(sys, top, n, nbytes, elem_bytes, lat, bw))
    else:
        flat = compressed_ring_time(sys, top, n, nbytes, elem_bytes, False, lat, bw)
    return hier, flat


def compressed_all_reduce_time(sys, nbytes, elem_bytes, n_a, s_a, n_b, s_b, n_c, s_c):
    """Cheapest of ring, tree and hierarchical all-reduce of ``nbytes`` per rank of
    ``elem_bytes`` per element, each tier crossed in its ``comm_dtype`` (data-parallel
    traffic; :func:`hierarchical_time`)."""
    if group_size(n_a, n_b, n_c) <= 1.0 or nbytes <= 0.0:
        return 0.0
    hier, flat = hierarchical_time(sys, nbytes, elem_bytes, True, n_a, s_a, n_b, s_b, n_c, s_c)
    return min(flat, hier)


def compressed_all_gather_time(sys, nbytes, elem_bytes, n_a, s_a, n_b, s_b, n_c, s_c):
    """Cheapest of ring and hierarchical all-gather (or reduce-scatter) with ``nbytes`` per
    rank of ``elem_bytes`` per element, each tier crossed in its ``comm_dtype``."""
    if group_size(n_a, n_b, n_c) <= 1.0 or nbytes <= 0.0:
        return 0.0
    hier, flat = hierarchical_time(sys, nbytes, elem_bytes, False, n_a, s_a, n_b, s_b, n_c, s_c)
    return min(flat, hier)


def all_reduce_time(sys, nbytes, n_a, s_a, n_b, s_b, n_c, s_c):
    """Cheapest of ring, tree and hierarchical all-reduce of ``nbytes`` per rank (never
    compressed: :func:`compressed_all_reduce_time` without an element width)."""
    return compressed_all_reduce_time(sys, nbytes, 0.0, n_a, s_a, n_b, s_b, n_c, s_c)


def all_gather_time(sys, nbytes, n_a, s_a, n_b, s_b, n_c, s_c):
    """Cheapest of ring and hierarchical all-gather with ``nbytes`` output per rank (never
    compressed).

    Reduce-scatter with ``nbytes`` input per rank costs the same (it is the all-gather run
    backwards), see :func:`reduce_scatter_time`.
    """
    return compressed_all_gather_time(sys, nbytes, 0.0, n_a, s_a, n_b, s_b, n_c, s_c)


def reduce_scatter_time(sys, nbytes, n_a, s_a, n_b, s_b, n_c, s_c):
    """Reduce-scatter of ``nbytes`` input per rank: the all-gather's cost (same traffic)."""
    return all_gather_time(sys, nbytes, n_a, s_a, n_b, s_b, n_c, s_c)


# ---- sites: the outermost tier of a cluster with two or more (job.sync) -------------------
# The hierarchical collective (hierarchical_time) splits into the part inside one site (the
# tiers below the outermost) and the ring over the sites at the outermost tier; cross-site
# synchronisation strategies (DiLoCo, delayed reduction) charge the two parts differently.


def site_members(sys, n_a, s_a, n_b, s_b, n_c, s_c):
    """Members of the group inside one site: those sharing one domain of the tier below the
    outermost (all of them when the cluster has fewer than two tiers)."""
    t = n_tiers(sys)
    if t < 2:
        return group_size(n_a, n_b, n_c)
    return group_members_within(tier_span(sys, t - 2), n_a, s_a, n_b, s_b, n_c, s_c)


def within_site_time(sys, nbytes, elem_bytes, reduce, n_a, s_a, n_b, s_b, n_c, s_c):
    """The part of a collective inside each site. A group inside one site: the synchronous
    collective (cheapest of flat and hierarchical, :func:`compressed_all_reduce_time` /
    :func:`compressed_all_gather_time`). A group across sites: the tiers of the hierarchical
    algorithm below the outermost (:func:`hierarchical_time`'s terms for ``i < n_tiers - 1``),
    which leave each member with its ``1 / site_members`` shard for the cross-site ring
    (:func:`cross_site_time`; the 2D / hierarchical all-reduce of Jia et al. 2018,
    arXiv 1807.11205 §3, with sites as the outer dimension, as DiLoCo's outer all-reduce,
    Douillard et al. 2023, arXiv 2311.08105). ``elem_bytes``: the traffic's width per element
    for the tiers' ``comm_dtype`` (0: never compressed)."""
    n = group_size(n_a, n_b, n_c)
    if n <= 1.0 or nbytes <= 0.0:
        return 0.0
    t = n_tiers(sys)
    if t < 2 or site_members(sys, n_a, s_a, n_b, s_b, n_c, s_c) >= n:
        hier, flat = hierarchical_time(sys, nbytes, elem_bytes, reduce, n_a, s_a, n_b, s_b, n_c,
                                       s_c)
        return min(flat, hier)
    # the tiers below the outermost (a group whose members stay inside one domain of a tier
    # adds nothing beyond it)
    return hierarchical_terms(sys, nbytes, elem_bytes, reduce, t - 1, n_a, s_a, n_b, s_b, n_c,
                              s_c)[0]


def cross_site_time(sys, nbytes, elem_bytes, n_a, s_a, n_b, s_b, n_c, s_c):
    """The site-tier part of a data-parallel reduction: a ring all-reduce over the ``f`` sites
    the group spans of each member's ``nbytes / site_members`` shard, at the outermost tier's
    latency and path bandwidth -- :func:`hierarchical_time`'s term at the outermost tier
    (an all-reduce's; a reduce-scatter plus an all-gather there move the same bytes), in that
    tier's ``comm_dtype`` for traffic of ``elem_bytes`` per element
    (:func:`compressed_ring_time`). 0 for a group inside one site or a cluster of fewer than
    two tiers."""
    t = n_tiers(sys)
    n = group_size(n_a, n_b, n_c)
    if t < 2 or n <= 1.0 or nbytes <= 0.0:
        return 0.0
    inner = site_members(sys, n_a, s_a, n_b, s_b, n_c, s_c)
    f = n / inner
    if f <= 1.0:
        return 0.0
    nic = math.inf
    for i in range(1, t):
        nic = min(nic, tier_link_bandwidth(sys, i))
    return compressed_ring_time(sys, t - 1, f, nbytes / inner, elem_bytes, True,
                                tier_latency(sys, t - 1), nic)


def all_to_all_time(sys, nbytes, n_a, s_a, n_b, s_b, n_c, s_c):
    """Direct all-to-all: each rank sends ``nbytes/n`` to every member.

    The share of a rank's buffer bound for members outside its tier-(i-1) domain but inside its
    tier-i domain is ``(g_i - g_{i-1}) / n`` with ``g_i`` the members within tier ``i``. Tier-0
    traffic uses the scale-up links; tier ``i >= 1`` links carry everything that crosses tier
    ``i`` or above. The busiest link sets the time, plus one latency of the outermost tier
    (all pairs are in flight at once). (:func:`routed_all_to_all_time` without a node limit.)
    """
    return routed_all_to_all_time(sys, nbytes, 1.0, 0.0, n_a, s_a, n_b, s_b, n_c, s_c)


def node_limited_share(copies, max_nodes, n, node_members):
    """Fraction of the node-leaving bytes of an MoE all-to-all that node-limited routing keeps.

    Each token's buffer holds ``copies`` (top-k) copies spread evenly over the ``n`` members,
    so ``copies * (n - node_members) / n`` of them leave the node. Node-limited routing sends a
    token to experts on at most ``max_nodes`` nodes (DeepSeek-V3 tech report, arXiv 2412.19437,
    §2.1.2) and crosses the scale-out network once per destination node, forwarding to the
    experts there over NVLink (§3.2.2; deepseek-ai/DeepEP internode dispatch): at most
    ``max_nodes`` copies of a token leave its node. The share is
    ``min(1, max_nodes / (copies * (n - node_members) / n))``; 1 without a limit
    (``max_nodes`` 0) or when no copy leaves the node.
    """
    leave = copies * (n - node_members) / n
    if max_nodes <= 0.0 or leave <= max_nodes:
        return 1.0
    return max_nodes / leave


def routed_all_to_all_time(sys, nbytes, copies, max_nodes, n_a, s_a, n_b, s_b, n_c, s_c):
    """:func:`all_to_all_time` of an MoE dispatch or combine whose buffer holds ``copies``
    copies of each token, routed to at most ``max_nodes`` nodes (0: no limit): the traffic on
    the links above the node (tier >= 1) is scaled by :func:`node_limited_share`; the
    scale-up (tier-0) traffic is not (the forwarding inside the node is not charged)."""
    n = group_size(n_a, n_b, n_c)
    if n <= 1.0 or nbytes <= 0.0:
        return 0.0
    worst = 0.0
    inner = 1.0
    span = 1.0
    lat = 0.0
    share = 1.0
    for i in range(n_tiers(sys)):
        span = next_tier_span(sys, i, span)
        members = group_members_within(span, n_a, s_a, n_b, s_b, n_c, s_c)
        if members > inner:
            lat = tier_latency(sys, i)
        if i == 0:
            # scale-up links carry the traffic to members in the same node
            t = (members - 1.0) / n * nbytes / tier_link_bandwidth(sys, 0)
        else:
            if i == 1:
                share = node_limited_share(copies, max_nodes, n, inner)
            # tier-i links carry every byte bound outside the rank's tier-(i-1) domain
            t = (n - inner) / n * nbytes * share / tier_link_bandwidth(sys, i)
        worst = max(worst, t)
        inner = members
        if members >= n:
            break
    return lat + worst


def p2p_time(sys, nbytes, n_a, s_a, n_b, s_b, n_c, s_c):
    """One point-to-point transfer of ``nbytes`` between neighbours of a group (a pipeline
    stage boundary, a ring-attention step), at the outermost tier the group crosses."""
    top = group_top_tier(sys, n_a, s_a, n_b, s_b, n_c, s_c)
    if top < 0 or nbytes <= 0.0:
        return 0.0
    return tier_latency(sys, top) + nbytes / tier_path_bandwidth(sys, top)



def pipeline_boundary_transfers(sys, nbytes, p, s_pp):
    """Stage-boundary transfers of ``nbytes`` along a pipeline of ``p`` stages ``s_pp`` ranks
    apart, each charged at the tier it really crosses. Returns ``(route, t_top, t_max)``:
    ``route`` the sum of the ``p - 1`` boundary transfer times from the first stage to the
    last, ``t_top`` one transfer across the outermost tier the pipeline spans (the boundary
    from the last device back to the first, which an interleaved schedule also crosses), and
    ``t_max`` the slowest boundary's transfer.

    Stages are consecutive along the pipeline, so with ``g_i`` stages inside one tier-``i``
    domain (``g_{-1} = 1``) the boundaries whose outermost crossed tier is ``i`` number
    ``p / g_{i-1} - p / g_i`` (they sum to ``p - 1``): with PP outermost over 2 buildings of
    ``p / 2`` stages each, one boundary crosses the buildings. A transfer crossing tier ``i``
    pays that tier's latency and the slowest link from the NIC (tier 1) up to tier ``i``, each
    link at :func:`~trainscape.model.network.boundary_link_bandwidth` with the stages of its
    inner domain (only the boundary's GPUs send across it); tier-0 traffic stays on the
    scale-up links. The per-dimension decomposition is ASTRA-sim's (Won et al., ISPASS 2023,
    §IV); the point-to-point cost is the alpha-beta one of :func:`p2p_time`.
    """
    if p <= 1.0 or nbytes <= 0.0:
        return 0.0, 0.0, 0.0
    route = 0.0
    t_top = 0.0
    t_max = 0.0
    inner = 1.0
    span = 1.0
    nic = math.inf
    path_inner = math.inf  # the NIC path below the current tier (tiers 1 .. i-1)
    span_inner = 1.0  # ranks in one domain of the tier below the current one
    for i in range(n_tiers(sys)):
        span = next_tier_span(sys, i, span)
        members = dim_members_within(span, p, s_pp)
        if i == 0:
            path = boundary_link_bandwidth(sys, 0, inner)
        else:
            nic = min(nic, boundary_link_bandwidth(sys, i, inner))
            path = nic
        if members > inner:
            f = members / inner
            d = site_stride(s_pp, span_inner)
            if i >= 1 and i == n_tiers(sys) - 1 and site_path_applies(sys, f, d):
                # the outermost tier of a site graph: the links the stages really cross
                s_route, s_wrap, s_max = site_path_transfers(sys, nbytes, inner, f, d,
                                                             path_inner)
                route += s_route
                t_top = s_wrap
                if s_max > t_max:
                    t_max = s_max
            else:
                t = tier_latency(sys, i) + nbytes / path
                route += (p / inner - p / members) * t
                t_top = t
                if t > t_max:
                    t_max = t
        path_inner = nic
        span_inner = span
        inner = members
        if members >= p:
            break
    return route, t_top, t_max


def site_stride(s_pp, site_span):
    """Sites between consecutive stages of a pipeline whose stages are ``s_pp`` ranks apart on
    sites of ``site_span`` ranks: ``s_pp / site_span`` when a stage stride spans whole sites, else
    1 (consecutive stages share a site or sit in neighbouring ones)."""
    if s_pp > site_span:
        return s_pp / site_span
    return 1.0


def site_path_applies(sys, f, d):
    """Whether a pipeline whose stages span ``f`` sites, ``d`` sites apart
    (:func:`site_stride`), is costed on the site links (:func:`site_path_transfers`): the
    cluster has a site graph (``n_sites`` > 0), ``f`` and ``d`` are whole numbers, ``f >= 2``,
    and blocks of ``f * d`` sites tile the sites. Otherwise the outermost tier's own (derived)
    parameters apply."""
    ns = n_sites(sys)
    if ns < 2 or f < 2.0 or d < 1.0 or f > ns or d > ns:
        return False
    k = int(f)
    dd = int(d)
    if k != f or dd != d or k * dd > ns:
        return False
    return ns % (k * dd) == 0


def site_link_transfer(sys, nbytes, inner, a, b, nic):
    """One stage-boundary transfer of ``nbytes`` from the ``a``-th to the ``b``-th site along
    the sites' path: the link's latency (:func:`~trainscape.model.network.tier_latency`, with
    its transport's handshake) plus the bytes at the slower of the NIC path inside the site
    (``nic``) and the link's own bandwidth for the stage-boundary GPUs
    (:func:`~trainscape.model.network.boundary_link_bandwidth` with the ``inner`` stages of a
    site) -- the alpha-beta point-to-point cost of :func:`p2p_time` on the link really
    crossed."""
    link = site_link_tier(a, b)
    bw = boundary_link_bandwidth(sys, link, inner)
    if nic < bw:
        bw = nic
    return tier_latency(sys, link) + nbytes / bw


def site_path_transfers(sys, nbytes, inner, f, d, nic):
    """Site crossings of pipelines that span ``f`` sites: ``(route, wrap, worst)``.

    Ranks are laid out site after site along the best Hamiltonian path over the sites
    (:func:`trainscape.model.sites.best_path`, the order the system block stores the sites in),
    so a pipeline of ``f`` sites ``d`` apart (:func:`site_stride`; 1 when stages fill sites in
    turn) visits sites ``c, c + d, ..., c + (f-1) d`` of a block of ``f d`` consecutive sites
    (``c`` its offset in the block) and crosses the links between them once each (``f - 1``
    crossings, as the tier walk counts them), each at :func:`site_link_transfer` -- it pays the
    link it crosses, not the slowest of the graph. Every pipeline runs the same schedule in lock step (the data-parallel reduction
    joins them), so the slowest block paces the fill: ``route`` is the largest block sum.
    ``wrap`` is the transfer from a block's last site back to its first (the interleaved
    schedule's wrap, :func:`pipeline_boundary_transfers`' ``t_top``), the largest over blocks;
    ``worst`` the slowest path crossing (the steady-state stall of
    :func:`~trainscape.model.pipeline.pipeline_comm_time`). Point-to-point alpha-beta cost per
    transfer as in :func:`p2p_time`; the per-link decomposition is CrossPipe's (arXiv
    2507.00217 §3: each cross-DC stage boundary pays its own link's latency and bandwidth)."""
    ns = n_sites(sys)
    k = int(f)
    dd = int(d)
    route = 0.0
    wrap = 0.0
    worst = 0.0
    for first in range(ns):
        if (first // dd) % k != 0:
            continue  # not the first site of a pipeline
        r = 0.0
        for j in range(k - 1):
            a = first + j * dd
            t = site_link_transfer(sys, nbytes, inner, a, a + dd, nic)
            r += t
            if t > worst:
                worst = t
        if r > route:
            route = r
        w = site_link_transfer(sys, nbytes, inner, first + (k - 1) * dd, first, nic)
        if w > wrap:
            wrap = w
    return route, wrap, worst
