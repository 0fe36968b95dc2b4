"""Hierarchical network: tiers, placement orders and how a communication group spans the tiers.

A cluster is a list of tiers from the inside out (node, data center, region ...). Tier ``i`` has
a fan-out ``size`` (GPUs per node for tier 0; sub-domains per domain above it), so a tier-``i``
domain holds ``span(i) = size_0 * ... * size_i`` consecutive ranks. Ranks are laid out in mixed
radix by the placement ``order`` (innermost dimension first, as Megatron-LM's ``RankGenerator``
and Llama 3's [TP, CP, PP, DP] order do), so a dimension's *stride* is the product of the degrees
placed inside it.

A communication group is the set of ranks that differ only in up to three dimensions (``a``,
``b``, ``c``; unused ones have degree 1). How many of its members live inside one tier-``i``
domain decides which tiers a collective crosses and with what fan-out -- the per-dimension
decomposition of ASTRA-sim's analytical backend (Won et al., ISPASS 2023, "ASTRA-sim2.0", §IV:
multi-dimensional topologies, one collective phase per dimension).

Plain scalar code: the numba backend compiles these very functions.
"""

from __future__ import annotations

import math

from ..layout import (
    DIMS,
    MAX_SITES,
    MAX_TIERS,
    N_DIMS,
    N_TIER,
    SYS_N_SITES,
    SYS_N_TIERS,
    SYS_TIER_BASE,
    TIER_BANDWIDTH,
    TIER_COMM_DTYPE_BYTES,
    TIER_EFFICIENCY,
    TIER_HANDSHAKE_RTTS,
    TIER_LATENCY,
    TIER_OVERSUBSCRIPTION,
    TIER_SIZE,
    TIER_WINDOW_BYTES,
)


def tier_field(sys, tier, field):
    """Field ``field`` (a ``TIER_*`` index) of network tier ``tier`` in the system block."""
    return sys[SYS_TIER_BASE + tier * N_TIER + field]


def n_tiers(sys):
    """Number of network tiers in use."""
    return int(sys[SYS_N_TIERS])


def n_sites(sys):
    """Sites of a ``[[cluster.sites]]`` graph (0: none -- the outermost tier is uniform)."""
    return int(sys[SYS_N_SITES])


def site_link_tier(a, b):
    """The "tier" index under which the link between the ``a``-th and ``b``-th site along the
    sites' pipeline path is stored (``layout.SYS_SITE_LINK_BASE``): a tier record, so every
    ``tier_*`` accessor of this module reads it."""
    return MAX_TIERS + a * MAX_SITES + b


def tier_span(sys, tier):
    """Ranks in one tier-``tier`` domain: the product of the tier sizes up to and including it.

    The outermost tier is treated as unbounded, so every group fits in it.
    """
    if tier >= n_tiers(sys) - 1:
        return math.inf
    span = 1.0
    for i in range(tier + 1):
        span *= tier_field(sys, i, TIER_SIZE)
    return span


def next_tier_span(sys, tier, inner_span):
    """Span of tier ``tier`` from the span of the tier inside it (``1`` inside tier 0): the
    incremental form of :func:`tier_span` for walks from the innermost tier outwards."""
    if tier >= n_tiers(sys) - 1:
        return math.inf
    return inner_span * tier_field(sys, tier, TIER_SIZE)


def tier_capacity(sys):
    """Ranks the whole tier hierarchy can hold (the product of all tier sizes)."""
    span = 1.0
    for i in range(n_tiers(sys)):
        span *= tier_field(sys, i, TIER_SIZE)
    return span


def transport_window_bandwidth(sys, tier):
    """Bytes/s one GPU's transport can keep in flight on tier ``tier``: ``window / RTT``.

    A sender has at most ``window_bytes`` (channels or queue pairs x per-channel window or
    buffer) unacknowledged at a time, and each byte is acknowledged one round trip (twice the
    tier's one-way latency) later, so the throughput is bounded by the bandwidth-delay
    product: ``window / RTT`` (RFC 7323 §1.1, TCP window scaling: "the maximum throughput is
    window / RTT"; likewise RDMA with a fixed number of outstanding bytes per queue pair).
    No limit (``inf``) without a window (0) or without latency."""
    window = tier_field(sys, tier, TIER_WINDOW_BYTES)
    rtt = 2.0 * tier_field(sys, tier, TIER_LATENCY)
    if window <= 0.0 or rtt <= 0.0:
        return math.inf
    # plain floats: a latency too small for the window to bind gives inf, without numpy's
    # overflow warning on stderr
    return float(window) / float(rtt)


def tier_comm_dtype_bytes(sys, tier):
    """Bytes per element the data-parallel traffic crossing tier ``tier`` is sent in (its
    ``comm_dtype``, block scales included), 0 when the tier sends the job's own width; see
    :func:`~trainscape.model.collectives.wire_bytes`."""
    return tier_field(sys, tier, TIER_COMM_DTYPE_BYTES)


def tier_link_bandwidth(sys, tier):
    """Bytes/s one GPU gets on tier ``tier``'s own links when every GPU uses them at once.

    ``bandwidth * efficiency / oversubscription``: an oversubscription of ``o`` means the links
    leaving a domain carry ``1/o`` of what its GPUs could inject (Llama 3, arXiv 2407.21783
    §3.3.1: 1:7 oversubscription above the 3072-GPU pods). Collectives of one dimension run in
    every group at once, so all GPUs of a domain contend for those links. Held to the
    transport's in-flight bound, :func:`transport_window_bandwidth` (each GPU's own flows).
    """
    bw = (
        tier_field(sys, tier, TIER_BANDWIDTH)
        * tier_field(sys, tier, TIER_EFFICIENCY)
        / tier_field(sys, tier, TIER_OVERSUBSCRIPTION)
    )
    return min(bw, transport_window_bandwidth(sys, tier))


def tier_path_bandwidth(sys, tier):
    """Bytes/s per GPU for traffic whose outermost crossed tier is ``tier``.

    Traffic leaving a node goes through the NIC and every fabric level up to ``tier``, so it is
    held to the slowest of tiers 1..``tier``; tier-0 traffic stays on the scale-up links.
    """
    if tier == 0:
        return tier_link_bandwidth(sys, 0)
    bw = tier_link_bandwidth(sys, 1)
    for i in range(2, tier + 1):
        bw = min(bw, tier_link_bandwidth(sys, i))
    return bw


def boundary_link_bandwidth(sys, tier, inner_members):
    """Bytes/s per sending GPU on tier ``tier``'s links for traffic that only the GPUs at a
    group's edge put on them (pipeline stage boundaries).

    A tier-``tier`` link leaves a tier-(``tier``-1) domain; oversubscription ``o`` means those
    links carry ``1/o`` of what *all* of the domain's GPUs could inject (Llama 3, arXiv
    2407.21783 §3.3.1). When the domain holds ``inner_members`` consecutive members of the group
    (pipeline stages), only the GPUs of one of them -- ``1 / inner_members`` of the domain --
    send across at a time, so each gets ``min(1, inner_members / o)`` of its line rate:
    ``bandwidth * efficiency / max(o / inner_members, min(o, 1))``. With ``inner_members`` 1
    (every GPU sends) this is :func:`tier_link_bandwidth`. Held to
    :func:`transport_window_bandwidth` as well.
    """
    o = tier_field(sys, tier, TIER_OVERSUBSCRIPTION)
    factor = o / inner_members
    floor = o if o < 1.0 else 1.0
    if factor < floor:
        factor = floor
    bw = tier_field(sys, tier, TIER_BANDWIDTH) * tier_field(sys, tier, TIER_EFFICIENCY) / factor
    return min(bw, transport_window_bandwidth(sys, tier))


def tier_latency(sys, tier):
    """Seconds for one message across tier ``tier``: the one-way latency plus
    ``handshake_rtts`` round trips before the data moves (a TCP connection's three-way
    handshake costs one RTT before the first byte, RFC 9293 §3.5; RDMA's queue pairs are set
    up once, 0)."""
    lat = tier_field(sys, tier, TIER_LATENCY)
    return lat + tier_field(sys, tier, TIER_HANDSHAKE_RTTS) * 2.0 * lat


# ---------------------------------------------------------------------------------------------
# Placement orders
# ---------------------------------------------------------------------------------------------


def order_dim_at(order, position):
    """The dimension (a ``DIM_*`` index) at ``position`` (0 = innermost) of placement ``order``.

    ``order`` is the lexicographic rank of a permutation of the ``N_DIMS`` dimensions, decoded
    with the factorial number system (Lehmer code); a bit mask tracks the dimensions used.
    """
    used = 0
    rank = order
    dim = 0
    for pos in range(position + 1):
        radix = 1
        for k in range(1, N_DIMS - pos):
            radix *= k
        digit = rank // radix
        rank = rank - digit * radix
        dim = nth_unused_dim(used, digit)
        used |= 1 << dim
    return dim


def nth_unused_dim(used, digit):
    """The ``digit``-th dimension (from 0, innermost order) whose bit is clear in mask ``used``:
    one step of decoding a Lehmer code."""
    seen = -1
    for d in range(N_DIMS):
        if (used >> d) & 1 == 0:
            seen += 1
            if seen == digit:
                return d
    return 0


def order_permutation(order):
    """All dimensions of ``order``, innermost first (a tuple; for people and tests)."""
    return tuple(order_dim_at(order, p) for p in range(N_DIMS))


def order_names(index: int) -> tuple[str, ...]:
    """Dimension names, innermost first, of an order index (inverse of
    :func:`trainscape.layout.order_from_names`), decoded as the kernels decode it."""
    return tuple(DIMS[d] for d in order_permutation(index))


def placement_strides(order, deg_tp, deg_cp, deg_ep, deg_dp, deg_pp):
    """Rank stride of every dimension under placement ``order``: the product of the degrees
    placed inside it. Returns ``(s_tp, s_cp, s_ep, s_dp, s_pp)``.

    ``deg_dp`` is the data-parallel degree outside expert parallelism (``dp / ep``).
    """
    s_tp = 1.0
    s_cp = 1.0
    s_ep = 1.0
    s_dp = 1.0
    s_pp = 1.0
    stride = 1.0
    # one pass of the Lehmer decode of order_dim_at: digit k picks the k-th unused dimension
    radix = 1
    for k in range(1, N_DIMS):
        radix *= k
    used = 0
    rank = order
    for pos in range(N_DIMS):
        digit = rank // radix
        rank -= digit * radix
        if pos < N_DIMS - 1:
            radix //= N_DIMS - 1 - pos
        d = nth_unused_dim(used, digit)
        used |= 1 << d
        if d == 0:
            s_tp = stride
            stride *= deg_tp
        elif d == 1:
            s_cp = stride
            stride *= deg_cp
        elif d == 2:
            s_ep = stride
            stride *= deg_ep
        elif d == 3:
            s_dp = stride
            stride *= deg_dp
        else:
            s_pp = stride
            stride *= deg_pp
    return s_tp, s_cp, s_ep, s_dp, s_pp


# ---------------------------------------------------------------------------------------------
# Groups over tiers
# ---------------------------------------------------------------------------------------------


def dim_members_within(span, degree, stride):
    """Distinct coordinates of one dimension (``degree`` values, ``stride`` apart) in ``span``
    consecutive ranks: ``min(degree, max(1, floor(span / stride)))``."""
    if span >= stride * degree:
        return degree
    inside = math.floor(span / stride)
    if inside < 1.0:
        return 1.0
    return inside


def group_members_within(span, n_a, s_a, n_b, s_b, n_c, s_c):
    """Members of a group (dimensions a, b, c with degrees ``n_*`` and strides ``s_*``) that
    share one aligned block of ``span`` ranks."""
    return (
        dim_members_within(span, n_a, s_a)
        * dim_members_within(span, n_b, s_b)
        * dim_members_within(span, n_c, s_c)
    )


def group_fanout(sys, tier, n_a, s_a, n_b, s_b, n_c, s_c):
    """Fan-out of the group at ``tier``: how many tier-(``tier``-1) sub-groups one tier-``tier``
    sub-group joins. The product of the fan-outs over all tiers is the group size."""
    inner = 1.0
    if tier > 0:
        inner = group_members_within(tier_span(sys, tier - 1), n_a, s_a, n_b, s_b, n_c, s_c)
    outer = group_members_within(tier_span(sys, tier), n_a, s_a, n_b, s_b, n_c, s_c)
    return outer / inner


def group_top_tier(sys, n_a, s_a, n_b, s_b, n_c, s_c):
    """Outermost tier the group crosses (-1 for a group of one rank): walking outwards, the
    last tier at which the group's members inside one domain grow."""
    n = n_a * n_b * n_c
    top = -1
    inner = 1.0
    span = 1.0
    for i in range(n_tiers(sys)):
        span = next_tier_span(sys, i, span)
        members = group_members_within(span, n_a, s_a, n_b, s_b, n_c, s_c)
        if members > inner:
            top = i
        inner = members
        if members >= n:
            break
    return top
