"""The candidate set of a scenario as a flat ``int32`` "space vector" (the C library's
``ts_llm_best`` input; layout in ``csrc/trainscape_embed.h`` and docs/embedding.md).

It holds the axes of :func:`trainscape.space.design.resolve_axes`, not the candidates
themselves: the candidates of a GPU count (factorizations over tp, cp, pp, dp times the other
axes, filtered by the model's checks) are built from it by the kernel at query time, exactly as
:func:`trainscape.space.design_space` builds them.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from typing import Any

import numpy as np

from .. import layout as L

#: Space vector axes: config columns in layout order without ``order``.
AXES = tuple(f for f in L.CONFIG_FIELDS if f != "order")
#: Axes whose count may be 0 (``dp``: derived from the GPU count; ``sp``: on when tp > 1).
OPTIONAL_AXES = ("dp", "sp")


def _err(path: str, problem: str, got: Any = None, allowed: str | None = None):
    from ..spec.errors import ScenarioError

    return ScenarioError.at(path, problem, got, allowed, show_got=got is not None)


def constrained_axes(scenario, constraints: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """The scenario's resolved axes (its ``[space]``, or the default axes) restricted by
    ``constraints`` (axis -> allowed values): an axis the space lists keeps the values in both
    (in the space's order); an axis it does not list (fixed by ``[config]`` or derived, as
    ``dp``) takes the constraint's values. Empty intersections are errors naming the axis."""
    from ..space.design import resolve_axes

    axes = resolve_axes(scenario)
    if not constraints:
        return axes
    if not isinstance(constraints, Mapping):
        raise _err("constraints", "expected a mapping of axis -> allowed values",
                   type(constraints).__name__, "a dict such as {'tp': [4, 8]}")
    listed = scenario.space.axes() if scenario.space is not None else None
    merged = dict(axes)
    for name, allowed in constraints.items():
        if name not in L.CONFIG_FIELDS:
            raise _err(f"constraints.{name}", "unknown axis", None, ", ".join(L.CONFIG_FIELDS))
        if name == "order":
            if allowed != "all" and (isinstance(allowed, str) or not hasattr(allowed, "__iter__")):
                raise _err("constraints.order", "expected a list of order strings or \"all\"",
                           allowed, "a list such as ['tp-cp-pp-dp']")
            merged[name] = "all" if allowed == "all" else list(allowed)
            continue
        if isinstance(allowed, (str, bytes)) or not hasattr(allowed, "__iter__"):
            raise _err(f"constraints.{name}", "expected a list of values", allowed,
                       "a non-empty list")
        allowed = list(allowed)
        current = axes[name]
        varies = listed is not None and listed.get(name) is not None
        if current is None or not varies:
            merged[name] = allowed
        else:
            keep = [v for v in current if v in allowed]
            if not keep:
                raise _err(f"constraints.{name}", "no value of the scenario's space is allowed",
                           allowed, "values among " + ", ".join(map(str, current)))
            merged[name] = keep
    # re-validate the values with the space's own rules, naming the constraint
    from ..spec.errors import ScenarioError

    try:
        return resolve_axes(scenario, merged)
    except ScenarioError as exc:
        path = exc.path or ""
        axis = path.split(".", 1)[-1].split("[", 1)[0]
        if path.startswith("space.") and axis in constraints:
            raise ScenarioError(str(exc).replace("space.", "constraints.", 1),
                                path="constraints." + path[len("space."):],
                                problem=exc.problem, got_text=exc.got_text,
                                allowed=exc.allowed) from None
        raise


def _encode(name: str, values) -> list[int]:
    if name == "schedule":
        return [L.SCHEDULES.index(v) for v in values]
    if name == "recompute":
        return [L.RECOMPUTE.index(v) for v in values]
    return [int(v) for v in values]


def space_vector(axes: Mapping[str, Any]) -> np.ndarray:
    """The ``int32`` space vector of resolved axes (see the module docstring)."""
    out: list[int] = []
    for name in AXES:
        values = axes[name]
        if values is None:
            if name not in OPTIONAL_AXES:  # pragma: no cover - resolve_axes fills every axis
                raise _err(f"space.{name}", "missing axis")
            out.append(0)
            continue
        enc = _encode(name, values)
        out.append(len(enc))
        out.extend(enc)
    orders = axes["order"]
    out.extend(_order_tables("all" if orders == "all" else tuple(orders)))
    return np.array(out, dtype=np.int32)


@functools.lru_cache(maxsize=64)
def _order_tables(orders: str | tuple[str, ...]) -> tuple[int, ...]:
    """The order part of a space vector: 32 counts, then each mask's canonical orders
    (:func:`trainscape.space.orders.order_sets`, ~25 ms for "all": cached, a scheduler asks
    about the same jobs again and again)."""
    from ..space import orders as O

    sets = O.order_sets(orders)
    return tuple(len(s) for s in sets) + tuple(o for s in sets for o in s)
