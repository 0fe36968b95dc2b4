"""Placement orders in a design space: which permutations of the parallel dimensions differ.

An order is a permutation of ``layout.DIMS`` (innermost first), stored as its lexicographic
rank (``layout.order_index``). A dimension of degree 1 has no group to place, and the rank
stride of every other dimension is the product of the degrees inside it (Megatron-LM's
``RankGenerator``; :func:`trainscape.model.network.placement_strides`), which a degree-1
dimension does not change. So two orders that differ only in where their degree-1 dimensions
sit cost exactly the same; a space keeps one of them, the *canonical* order: the dimensions of
degree > 1 in their relative order, then the degree-1 dimensions in ``layout.DIMS`` order.

Which dimensions have degree > 1 is a 5-bit *mask* (bit ``d`` for ``layout.DIMS[d]``); the
canonical orders of a space depend only on it.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence

from .. import layout as L

N_MASKS = 1 << L.N_DIMS


def degree_mask(tp: int, cp: int, ep: int, dpx: int, pp: int) -> int:
    """Bit ``d`` set when dimension ``layout.DIMS[d]`` has degree > 1 (``dpx = dp / ep``)."""
    mask = 0
    for d, deg in enumerate((tp, cp, ep, dpx, pp)):
        if deg > 1:
            mask |= 1 << d
    return mask


def canonical_perm(perm: Sequence[int], mask: int) -> tuple[int, ...]:
    """The canonical permutation equivalent to ``perm`` (dimension indices, innermost first)."""
    used = tuple(d for d in perm if (mask >> d) & 1)
    rest = tuple(d for d in range(L.N_DIMS) if not (mask >> d) & 1)
    return used + rest


def canonical_order(order: int, mask: int) -> int:
    """Canonical order index of ``order`` for a degree mask."""
    return L.order_index(canonical_perm(perm_of(order), mask))


_PERMS = tuple(itertools.permutations(range(L.N_DIMS)))  # lexicographic: index == rank


def perm_of(order: int) -> tuple[int, ...]:
    """Dimension indices, innermost first, of an order index."""
    return _PERMS[order]


def order_allowed(names: Sequence[str], mask: int) -> bool:
    """A written order may leave out ``ep`` and dimensions of degree 1, nothing else
    (the rule of :meth:`trainscape.spec.ConfigSpec.check_order`; ``dp`` there is the
    user-facing degree ``ep * dp/ep``)."""
    user_dp = (mask >> L.DIM_DP) & 1 or (mask >> L.DIM_EP) & 1
    for d, name in enumerate(L.DIMS):
        if name in names or name == "ep":
            continue
        degree_gt1 = user_dp if name == "dp" else (mask >> d) & 1
        if degree_gt1:
            return False
    return True


def order_sets(orders: str | Sequence[str]) -> list[tuple[int, ...]]:
    """Per degree mask (0..31), the sorted canonical order indices a space allows.

    ``orders`` is ``"all"`` (every distinct placement) or a list of order strings.
    """
    from ..spec.config import complete_order, parse_order

    out: list[tuple[int, ...]] = []
    for mask in range(N_MASKS):
        found: set[int] = set()
        if orders == "all":
            for perm in _PERMS:
                found.add(L.order_index(canonical_perm(perm, mask)))
        else:
            for text in orders:
                names = parse_order(text)
                if not order_allowed(names, mask):
                    continue
                perm = tuple(L.DIMS.index(n) for n in complete_order(names))
                found.add(L.order_index(canonical_perm(perm, mask)))
        out.append(tuple(sorted(found)))
    return out


def order_label(order: int, mask: int) -> str:
    """A short order string a person (and :class:`~trainscape.spec.ConfigSpec`) reads back to
    the same placement: the dimensions of degree > 1, innermost first; ``dp`` is kept right
    after ``ep`` when ``ep > 1`` and ``dp / ep = 1`` (the written order needs it then)."""
    names = []
    user_dp = (mask >> L.DIM_DP) & 1 or (mask >> L.DIM_EP) & 1
    for d in perm_of(order):
        if (mask >> d) & 1:
            names.append(L.DIMS[d])
            if d == L.DIM_EP and not (mask >> L.DIM_DP) & 1:
                names.append("dp")
    if not names:
        return "tp"  # a single GPU: nothing to place
    if user_dp and "dp" not in names:  # pragma: no cover -- ep > 1 always adds it above
        names.append("dp")
    return "-".join(names)
