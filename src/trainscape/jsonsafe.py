"""JSON output without NaN or Infinity (the reliability contract).

``json.dumps`` writes ``NaN`` / ``Infinity`` for non-finite floats -- not JSON, and a lie where
the number means "no value". Every JSON trainscape prints or writes goes through :func:`dumps`:
a non-finite float becomes ``null`` (the field's status says why: an infeasible plan has no
step time), NumPy scalars and arrays become plain values, and ``allow_nan=False`` guards the
rest.
"""

from __future__ import annotations

import math
from typing import Any


def finite(obj: Any) -> Any:
    """``obj`` with every non-finite float replaced by None (dicts, lists, tuples, NumPy)."""
    if isinstance(obj, bool) or obj is None or isinstance(obj, (str, int)):
        return obj
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else None
    if isinstance(obj, dict):
        return {k: finite(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [finite(v) for v in obj]
    tolist = getattr(obj, "tolist", None)  # NumPy scalars and arrays
    if tolist is not None:
        return finite(tolist())
    return obj


def dumps(obj: Any, default=None, **kwargs) -> str:
    """``json.dumps`` of :func:`finite` ``(obj)`` with ``allow_nan=False``."""
    import json

    def _default(o):
        return finite(default(o)) if default is not None else str(o)

    return json.dumps(finite(obj), allow_nan=False, default=_default, **kwargs)
