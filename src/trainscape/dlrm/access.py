"""How often a table's lookups hit its HBM cache, from how skewed they are.

A table's ``hit_rate`` (the UVM cache's, and the SSD tier's misses) may be given directly, or
derived here from a Zipf exponent of its row accesses (``zipf_alpha``) and the share of its
rows the cache holds (``job.uvm_cache_fraction``). This runs once per table when a scenario is
packed; the kernels read the resulting hit rate.
"""

from __future__ import annotations

import functools
import math

import numpy as np

#: Terms of the generalized harmonic number summed exactly before the integral tail.
HARMONIC_EXACT_TERMS = 10_000


def generalized_harmonic(n, alpha):
    """``H(n, alpha) = sum_{k=1..n} k^-alpha`` for ``n`` up to 2^40: the first
    :data:`HARMONIC_EXACT_TERMS` terms summed, the rest by the midpoint rule
    ``integral_{K+1/2}^{n+1/2} x^-alpha dx`` (Euler-Maclaurin: its error is about
    ``alpha (alpha + 1) / 24 * K^-(alpha + 2)``, below 1e-9 of the sum here)."""
    n = math.floor(n)
    if n <= 0:
        return 0.0
    k = min(n, HARMONIC_EXACT_TERMS)
    head = _harmonic_head(k, float(alpha))
    if n == k:
        return head
    a, b = k + 0.5, n + 0.5
    if alpha == 1.0:
        return head + math.log(b / a)
    return head + (b ** (1.0 - alpha) - a ** (1.0 - alpha)) / (1.0 - alpha)


@functools.lru_cache(maxsize=4096)
def _harmonic_head(k, alpha):
    """``sum_{i=1..k} i^-alpha``, smallest terms first (a table set shares a few of these)."""
    return float(np.sum(np.arange(k, 0, -1, dtype=np.float64) ** -alpha))


def zipf_cache_hit_rate(rows, cached_rows, alpha):
    """Hit rate of a cache holding the ``cached_rows`` most popular of ``rows`` embedding rows
    when the row ids of the lookups follow a Zipf law of exponent ``alpha`` (the i-th most
    popular row is looked up in proportion to ``i^-alpha``): the share of lookups the head
    takes, ``H(C, alpha) / H(N, alpha)`` -- the hit ratio of an ideal frequency-ordered cache
    under a Zipf-like demand (Breslau et al., "Web Caching and Zipf-like Distributions:
    Evidence and Implications", INFOCOM 1999, §3). Embedding lookups are heavy-tailed in this
    way (Acun et al., "Understanding Training Efficiency of Deep Learning Recommendation Models
    at Scale", HPCA 2021, §4; Sethi et al., "RecShard", ASPLOS 2022, §2.2). ``alpha = 0`` is
    uniform access: the hit rate is the cached share."""
    if rows <= 0.0:
        return 0.0
    c = min(max(math.floor(cached_rows), 0.0), rows)
    return generalized_harmonic(c, alpha) / generalized_harmonic(rows, alpha)
