"""A design space: axes of config values, constraints applied while enumerating, and a
mixed-radix index over exactly the configurations that pass them.

Structure (what makes enumeration by index cheap and invalid points free):

* The *core* axes decide validity: ``tp cp pp dp ep mbs vpp schedule sp tp_overlap``. Their
  product is tabulated once (a few thousand rows at most for real spaces) and every row is
  checked with the kernel's own :func:`trainscape.model.llm.config_error`; only valid rows are
  kept. ``dp`` is derived as ``gpus / (tp * cp * pp)`` unless it is an axis. Equivalent rows
  are collapsed to one canonical row (:mod:`trainscape.space.canonical`): with ``tp = 1``,
  ``sp`` and ``tp_overlap`` change nothing, so only one value of each is kept; without a
  pipeline (``pp = 1``) every schedule but DualPipe (two parameter copies) and every ``vpp``
  cost the same, so one of them is kept.
* The *free* axes never make a configuration invalid: ``order`` (one canonical order per
  distinct placement, see :mod:`trainscape.space.orders`), ``recompute``, ``zero``,
  ``dp_overlap``. Under a core row they form a mixed-radix number
  ``((order_slot * R + recompute) * Z + zero) * D + dp_overlap``.
* A row without a data-parallel group (``cp * dp = 1``: nothing to shard, no gradient to
  reduce) is *single*: ``zero`` and ``dp_overlap`` change nothing there, so it keeps only the
  first listed value of each (``Z_r = D_r = 1``; ``Z_r = Z``, ``D_r = D`` otherwise).
* Row ``r`` holds ``weight[r] = n_orders(mask[r]) * R * Z_r * D_r`` configurations; ``cum`` is
  the running sum, so index ``g`` lives in the row ``r`` with ``cum[r] <= g < cum[r + 1]``.

The size is known once the core table is built (before any cost is computed), memory is
O(core rows) whatever the size, and the same arrays drive the numba and C sweep kernels.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from .. import layout as L
from . import canonical as C
from . import orders as O
from .core_enum import CoreCandidates

#: Axes that decide validity, tabulated as the core table (rows are values, not indices).
CORE_FIELDS = ("tp", "cp", "pp", "dp", "ep", "mbs", "vpp", "schedule", "sp", "tp_overlap")
#: Axes under a core row, in mixed-radix order (outermost first); ``order`` comes first.
FREE_FIELDS = ("order", "recompute", "zero", "dp_overlap")
N_CORE = len(CORE_FIELDS)
C_TP, C_CP, C_PP, C_DP, C_EP, C_MBS, C_VPP, C_SCHEDULE, C_SP, C_TP_OVERLAP = range(N_CORE)
#: Config column of each core field.
CORE_CFG = np.array([L.CONFIG_FIELDS.index(f) for f in CORE_FIELDS], dtype=np.int64)

#: Most core combinations checked in the kernel, after the GPU-count and batch constraints
#: have pruned the plain product (:mod:`.core_enum`; 10 int32 per row, checked in chunks).
MAX_CORE_CANDIDATES = 200_000_000
_CHUNK = 1 << 18


class SpaceError(ValueError):
    """A design space that cannot be enumerated (empty, too large). ``str()`` is one line."""


def _err(path: str, problem: str, got: Any = None, allowed: str | None = None):
    from ..spec.errors import ScenarioError

    return ScenarioError.at(path, problem, got, allowed, show_got=got is not None)


# ---------------------------------------------------------------------------------------------
# Axis values from a scenario
# ---------------------------------------------------------------------------------------------


def _powers_of_two_upto(limit: int) -> list[int]:
    out, v = [], 1
    while v <= limit:
        out.append(v)
        v *= 2
    return out


def default_axes(scenario) -> dict[str, Any]:
    """The space searched when a scenario has no ``[space]``: powers of two for tp (within a
    node, dividing the heads), pp (up to 32 and the layers), cp in {1, 2}, ep over the
    powers of two dividing the experts (MoE), mbs in {1, 2}, the 1F1B / interleaved / ZB-H1
    schedules, every recompute mode, ZeRO 1 and every placement order."""
    m = scenario.model
    node = scenario.cluster.tiers[0].size
    gpus = scenario.cluster.gpus
    axes: dict[str, Any] = {
        "tp": [t for t in _powers_of_two_upto(min(node, gpus)) if m.heads % t == 0],
        "cp": [c for c in (1, 2) if gpus % c == 0],
        # uneven splits are costed (the slowest stage holds ceil), so any pp up to the layers
        "pp": [p for p in _powers_of_two_upto(min(32, gpus)) if p <= m.layers],
        "mbs": [1, 2],
        "schedule": ["1f1b", "interleaved", "zb-h1"],
        "recompute": list(L.RECOMPUTE),
        "zero": [1],
        "order": "all",
    }
    if m.experts > 0:
        axes["ep"] = [e for e in _powers_of_two_upto(min(m.experts, gpus)) if m.experts % e == 0]
    return axes


def resolve_axes(scenario, space: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """Every config axis with its list of values (user-facing values: strings for enums,
    bools for switches; ``dp`` is ``None`` when derived; ``sp`` is ``None`` for the rule
    "on when tp > 1"; ``order`` is ``"all"`` or a list of strings).

    ``space`` defaults to the scenario's ``[space]`` (or :func:`default_axes` without one).
    Axes left out keep the value of ``[config]``, or the ConfigSpec default. ``vpp`` left out
    is ``{1, 2}`` when the interleaved schedule is among the schedules (it needs vpp >= 2).
    """
    from ..spec.config import DEFAULT_ORDER, ConfigSpec

    declared = space is not None or scenario.space is not None  # else the default axes
    if space is None:
        space = scenario.space.axes() if scenario.space is not None else default_axes(scenario)
    unknown = [k for k in space if k not in L.CONFIG_FIELDS]
    if unknown:
        raise _err(f"space.{unknown[0]}", "unknown axis", None, ", ".join(L.CONFIG_FIELDS))
    base = scenario.config if scenario.config is not None else ConfigSpec()
    if scenario.job.pipeline_layout is not None and scenario.config is not None:
        # a Megatron-Core layout is laid out for [config]'s pp and vpp (the spec read it
        # there): a space keeps them, and says so where it names others
        for name in ("pp", "vpp"):
            want = getattr(base, name)
            if declared and space.get(name) is not None and list(space[name]) != [want]:
                raise _err(f"space.{name}", f"job.pipeline_layout is laid out for config.{name} "
                           f"= {want}", space[name], f"[{want}], or left out")
        space = {**space, "pp": [base.pp], "vpp": [base.vpp]}
    axes: dict[str, Any] = {}
    for name in L.CONFIG_FIELDS:
        if name in space and space[name] is not None:
            value = space[name]
            if name == "order":
                axes[name] = "all" if value == "all" else list(value)
            else:
                if isinstance(value, (str, bytes)) or not isinstance(value, Sequence):
                    raise _err(f"space.{name}", "expected a list of values", value,
                               "a non-empty list")
                if len(value) == 0:
                    raise _err(f"space.{name}", "empty list: the space has no value for this "
                               "axis", value, "a non-empty list")
                axes[name] = list(dict.fromkeys(value))  # drop repeats, keep the order
        elif name == "dp":
            axes[name] = None
        elif name == "sp":
            axes[name] = None
        elif name == "order":
            axes[name] = [base.order if scenario.config is not None else DEFAULT_ORDER]
        elif name == "vpp":
            schedules = space.get("schedule") or [base.schedule]
            vpps = [1]
            if "interleaved" in schedules:
                vpps.append(base.vpp if base.vpp > 1 else 2)
            axes[name] = vpps
        else:
            axes[name] = [getattr(base, name)]
    _check_axis_values(axes)
    return axes


def _check_axis_values(axes: dict[str, Any]) -> None:
    for name in ("tp", "cp", "pp", "dp", "ep", "mbs", "vpp"):
        vals = axes[name]
        if vals is None:
            continue
        for v in vals:
            if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v < 1:
                raise _err(f"space.{name}", "expected positive integers", v, "integers >= 1")
    for name, allowed in (("schedule", L.SCHEDULES), ("recompute", L.RECOMPUTE)):
        for v in axes[name]:
            if v not in allowed:
                raise _err(f"space.{name}", "unknown value", v, ", ".join(allowed))
    for v in axes["zero"]:
        if isinstance(v, bool) or v not in (0, 1, 2, 3):
            raise _err("space.zero", "unknown ZeRO stage", v, "0, 1, 2, 3")
    for name in ("sp", "tp_overlap", "dp_overlap"):
        if axes[name] is None:
            continue
        for v in axes[name]:
            if not isinstance(v, (bool, np.bool_)) and v not in (0, 1):
                raise _err(f"space.{name}", "expected true or false", v, "true, false")
    if axes["order"] != "all":
        from ..spec.config import parse_order

        for i, text in enumerate(axes["order"]):
            try:
                parse_order(text)
            except (ValueError, TypeError) as exc:
                raise _err(f"space.order[{i}]", f"not a placement order: {exc}", text,
                           "distinct names from " + ", ".join(L.DIMS) + " joined by '-', "
                           "or \"all\"") from None


def _encode(name: str, values) -> np.ndarray:
    if name == "schedule":
        return np.array([L.SCHEDULES.index(v) for v in values], dtype=np.int32)
    if name == "recompute":
        return np.array([L.RECOMPUTE.index(v) for v in values], dtype=np.int32)
    return np.array([int(v) for v in values], dtype=np.int32)


# ---------------------------------------------------------------------------------------------
# The space
# ---------------------------------------------------------------------------------------------


@dataclass
class DesignSpace:
    """The valid configurations of a scenario's design space, enumerable by index.

    Build with :func:`design_space`. ``size`` is the number of valid, distinct configurations;
    ``enumerate(start, stop)`` and ``sample(n, seed=...)`` return ``int32 (layout.N_CFG, n)``
    config columns.
    """

    axes: dict[str, Any]
    raw_size: int  # the plain product of the axis value counts (orders: all 120 or the list)
    core: np.ndarray  # int32 (N_CORE, rows): values of CORE_FIELDS per valid row
    mask: np.ndarray  # int32 (rows,): degree mask of each row
    cum: np.ndarray  # int64 (rows + 1,): first global index of each row
    order_off: np.ndarray  # int32 (32,): offset of each mask's canonical orders in order_flat
    order_cnt: np.ndarray  # int32 (32,)
    order_flat: np.ndarray  # int32
    recompute: np.ndarray  # int32 codes of the recompute axis
    zero: np.ndarray  # int32
    dp_overlap: np.ndarray  # int32
    single: np.ndarray  # int32 (rows,): 1 when the row has no data-parallel group (cp*dp = 1)
    core_rejections: dict[int, int] = field(default_factory=dict)  # config_error code -> count
    core_raw: int = 0  # core combinations checked
    rows_without_order: int = 0  # valid core rows no listed order can place
    gpus: int = 0

    # -- size -------------------------------------------------------------------------------
    @property
    def size(self) -> int:
        """Number of valid, distinct configurations."""
        return int(self.cum[-1])

    def __len__(self) -> int:
        return self.size

    @property
    def free_radix(self) -> int:
        """Configurations per order under a core row with a data-parallel group
        (``R * Z * D``)."""
        return len(self.recompute) * len(self.zero) * len(self.dp_overlap)

    def row_radix(self, rows) -> tuple[np.ndarray, np.ndarray]:
        """``(Z_r, D_r)`` of core rows: the zero and dp_overlap values each row enumerates
        (1 and 1 for a single row, see the module doc)."""
        single = self.single[rows] != 0
        return (np.where(single, 1, len(self.zero)).astype(np.int64),
                np.where(single, 1, len(self.dp_overlap)).astype(np.int64))

    @property
    def is_empty(self) -> bool:
        return self.size == 0

    # -- decoding -----------------------------------------------------------------------------
    def decode(self, index) -> np.ndarray:
        """Config columns ``int32 (N_CFG, n)`` of global indices (each in ``[0, size)``)."""
        g = np.asarray(index, dtype=np.int64).reshape(-1)
        if g.size and (g.min() < 0 or g.max() >= self.size):
            bad = int(g[(g < 0) | (g >= self.size)][0])
            raise IndexError(f"config index {bad} outside the space [0, {self.size})")
        rows = np.searchsorted(self.cum, g, side="right") - 1
        rem = g - self.cum[rows]
        nz, nd = self.row_radix(rows)
        nr = len(self.recompute)
        dpo = rem % nd
        rem //= nd
        z = rem % nz
        rem //= nz
        r = rem % nr
        slot = rem // nr
        cfg = np.empty((L.N_CFG, g.size), dtype=np.int32)
        cfg[CORE_CFG] = self.core[:, rows]
        masks = self.mask[rows]
        cfg[L.CFG_ORDER] = self.order_flat[self.order_off[masks] + slot]
        cfg[L.CFG_RECOMPUTE] = self.recompute[r]
        cfg[L.CFG_ZERO] = self.zero[z]
        cfg[L.CFG_DP_OVERLAP] = self.dp_overlap[dpo]
        return cfg

    def enumerate(self, start: int = 0, stop: int | None = None) -> np.ndarray:
        """Config columns of indices ``start .. stop-1`` (clipped to the space), in order."""
        stop = self.size if stop is None else min(int(stop), self.size)
        start = max(0, int(start))
        if stop <= start:
            return np.zeros((L.N_CFG, 0), dtype=np.int32)
        return self.decode(np.arange(start, stop, dtype=np.int64))

    def sample_indices(self, n: int, seed: int | None = 0) -> np.ndarray:
        """``n`` global indices drawn uniformly (with replacement) with NumPy's PCG64."""
        if self.is_empty:
            raise SpaceError("cannot sample an empty design space")
        rng = np.random.Generator(np.random.PCG64(seed))
        return rng.integers(0, self.size, size=int(n), dtype=np.int64)

    def sample(self, n: int, seed: int | None = 0) -> np.ndarray:
        """``n`` configurations drawn uniformly from the valid space, reproducible for a seed."""
        return self.decode(self.sample_indices(n, seed))

    def index_of(self, cfg: np.ndarray) -> np.ndarray:
        """Global index of each config column, ``-1`` where it is not in the space (orders
        are compared after canonicalization)."""
        cfg = np.asarray(cfg)
        lookup = self._row_lookup()
        out = np.full(cfg.shape[1], -1, dtype=np.int64)
        rec = {int(v): i for i, v in enumerate(self.recompute)}
        zer = {int(v): i for i, v in enumerate(self.zero)}
        dpo = {int(v): i for i, v in enumerate(self.dp_overlap)}
        for j in range(cfg.shape[1]):
            key = self._canon_core_key(tuple(int(v) for v in cfg[CORE_CFG, j]))
            row = lookup.get(key)
            if row is None:
                row = getattr(self, "_alias", {}).get(key)
            if row is None:
                continue
            m = int(self.mask[row])
            o = O.canonical_order(int(cfg[L.CFG_ORDER, j]), m)
            off, cnt = int(self.order_off[m]), int(self.order_cnt[m])
            slots = self.order_flat[off:off + cnt]
            k = np.searchsorted(slots, o)
            if k >= cnt or slots[k] != o:
                continue
            r = rec.get(int(cfg[L.CFG_RECOMPUTE, j]))
            z = zer.get(int(cfg[L.CFG_ZERO, j]))
            d = dpo.get(int(cfg[L.CFG_DP_OVERLAP, j]))
            if r is None or z is None or d is None:
                continue
            nz, nd = len(self.zero), len(self.dp_overlap)
            if self.single[row]:
                z, d, nz, nd = 0, 0, 1, 1
            local = ((k * len(self.recompute) + r) * nz + z) * nd + d
            out[j] = int(self.cum[row]) + int(local)
        return out

    def _canon_core_key(self, key: tuple[int, ...]) -> tuple[int, ...]:
        if key[C_TP] == 1:
            key = list(key)
            key[C_SP] = self._sp_canon_tp1
            key[C_TP_OVERLAP] = self._tpo_canon_tp1
            key = tuple(key)
        return key

    def _row_lookup(self) -> dict:
        cached = getattr(self, "_lookup", None)
        if cached is None:
            cached = {tuple(int(v) for v in self.core[:, r]): r for r in range(self.core.shape[1])}
            self._lookup = cached
        return cached

    # -- people -------------------------------------------------------------------------------
    def config_dicts(self, cfg: np.ndarray) -> list[dict[str, Any]]:
        """Config columns as plain dicts with user-facing values (short order strings)."""
        return [config_dict(cfg[:, j]) for j in range(cfg.shape[1])]

    def describe(self) -> str:
        """One line: axis value counts, raw product and the valid, distinct size."""
        parts = []
        for name in L.CONFIG_FIELDS:
            v = self.axes[name]
            if name == "order":
                parts.append("order " + ("all" if v == "all" else str(len(v))))
            elif v is not None and len(v) > 1:
                parts.append(f"{name} {len(v)}")
        return (f"{' x '.join(parts) or 'one point'}: {self.raw_size:,} combinations, "
                f"{self.size:,} valid and distinct")

    def explain_empty(self) -> str:
        """Why the space has no valid configuration: the constraint that removed the last
        candidates, and how many each constraint rejected."""
        if self.size > 0:
            return f"the space has {self.size:,} valid configurations"
        if self.core_raw == 0:
            return "the space has no combination of axis values"
        if not self.core_rejections:
            return (f"no listed placement order covers the parallel dimensions in use for any "
                    f"of the {self.rows_without_order:,} valid degree combinations "
                    "(space.order: every dimension of degree > 1 except ep must be named)")
        last = max(self.core_rejections, key=abs)
        field_name, msg = _rejection_message(last)
        path = f"config.{field_name}" if field_name in L.CONFIG_FIELDS else field_name
        counts = "; ".join(
            f"{_short(_rejection_message(c))}: {n:,}"
            for c, n in sorted(self.core_rejections.items(), key=lambda kv: -kv[1])
        )
        return (f"every one of the {self.core_raw:,} combinations of "
                f"{', '.join(f for f in CORE_FIELDS if self._varies(f))} is invalid; the last "
                f"were removed by '{path}: {msg}' (rejected by each constraint: {counts})")

    def _varies(self, name: str) -> bool:
        v = self.axes.get(name)
        return v is not None and len(v) > 1 or name in ("tp", "pp")

    def check_nonempty(self) -> None:
        """Raise a one-line ScenarioError at ``space`` when the space is empty."""
        if self.size == 0:
            raise _err("space", "empty design space: " + self.explain_empty())


#: the rejection count key of a layout the kernel accepts but the search leaves out: expert
#: parallelism folded over TP x DP (``ep`` divides ``tp * dp``, not ``dp``; llm.moe_folded)
FOLDED_EP_NOT_SEARCHED = -20


def _rejection_message(code: int) -> tuple[str, str]:
    """``(field, message)`` of a rejection count key: a config_error code, or
    :data:`FOLDED_EP_NOT_SEARCHED`."""
    from ..model.llm import config_error_message

    if code == FOLDED_EP_NOT_SEARCHED:
        return ("ep", "must divide dp in a design space (a layout folding EP over TP x DP at "
                      "expert TP 1 is costed as a [config], e.g. by evaluate, but not searched)")
    return config_error_message(code)


def _short(fm: tuple[str, str]) -> str:
    f, m = fm
    return f"{f} {m}"


def config_dict(col: np.ndarray) -> dict[str, Any]:
    """One config column as a dict of user-facing values (order as a short string)."""
    tp, cp, pp, dp, ep = (int(col[i]) for i in (L.CFG_TP, L.CFG_CP, L.CFG_PP, L.CFG_DP, L.CFG_EP))
    dpx = dp // ep if ep > 0 and dp % ep == 0 else dp
    mask = O.degree_mask(tp, cp, ep, dpx, pp)
    out: dict[str, Any] = {}
    for i, name in enumerate(L.CONFIG_FIELDS):
        v = int(col[i])
        if name == "schedule":
            out[name] = L.SCHEDULES[v] if 0 <= v < len(L.SCHEDULES) else v
        elif name == "recompute":
            out[name] = L.RECOMPUTE[v] if 0 <= v < len(L.RECOMPUTE) else v
        elif name in ("sp", "tp_overlap", "dp_overlap"):
            out[name] = bool(v)
        elif name == "order":
            out[name] = O.order_label(v, mask) if 0 <= v < L.N_ORDERS else v
        else:
            out[name] = v
    return out


# ---------------------------------------------------------------------------------------------
# Building the core table
# ---------------------------------------------------------------------------------------------


def _config_error_codes(sys, mdl, job, cfg) -> np.ndarray:
    from .kernels import config_codes

    return config_codes(sys, mdl, job, cfg)


def selective_is_none(job) -> bool:
    """Whether "selective" recompute costs exactly what "none" does for this job: selective
    recomputation drops only the stored attention scores (Korthikanti et al. §5), which
    FlashAttention never stores, unless the job adds Megatron-Core recompute modules
    (``job.recompute_modules``). The space then keeps one of the two."""
    return (job[L.JOB_FLASH_ATTENTION] > 0 and job[L.JOB_RECOMPUTE_LAYERNORM] == 0
            and job[L.JOB_RECOMPUTE_MOE_ACT] == 0 and job[L.JOB_RECOMPUTE_MLP] == 0
            and job[L.JOB_RECOMPUTE_MOE] == 0 and job[L.JOB_RECOMPUTE_SHARED_EXPERTS] == 0)


def design_space(scenario, space: Mapping[str, Any] | None = None) -> DesignSpace:
    """The design space of ``scenario`` (its ``[space]``, or ``space`` given as a dict of
    axis -> values, or :func:`default_axes`). Constraints are the kernel's
    :func:`~trainscape.model.llm.config_error`; the result may be empty (see
    :meth:`DesignSpace.explain_empty`)."""
    from ..spec.pack import pack

    axes = resolve_axes(scenario, space)
    sys, mdl, job = pack(scenario)
    gpus = int(scenario.cluster.gpus)

    # core axis value lists (encoded)
    vals: list[np.ndarray] = []
    for name in CORE_FIELDS:
        if name == "dp" and axes["dp"] is None:
            vals.append(np.zeros(1, dtype=np.int32))  # placeholder: derived
        elif name == "sp" and axes["sp"] is None:
            vals.append(np.full(1, -1, dtype=np.int32))  # placeholder: rule tp > 1
        else:
            vals.append(_encode(name, axes[name]))
    sp_vals = vals[C_SP]
    tpo_vals = vals[C_TP_OVERLAP]
    sp_canon = 0 if (sp_vals == 0).any() else int(sp_vals[0])
    tpo_canon = int(tpo_vals[0])
    lens = [len(v) for v in vals]
    core_raw = math.prod(lens)
    cand = CoreCandidates(vals, axes["dp"] is None, gpus, mdl, job)
    if cand.n_candidates > MAX_CORE_CANDIDATES:
        # sweep, search and explore all start from this table of valid core rows: say so, and
        # which axes to narrow (the longest value lists first)
        widest = sorted(((n, f) for f, n in zip(CORE_FIELDS, lens) if n > 1), reverse=True)
        hint = ", ".join(f"space.{f} ({n} values)" for n, f in widest[:3])
        raise _err("space", f"too many combinations of {', '.join(CORE_FIELDS)} to tabulate "
                   f"(sweep, search and explore all tabulate them; {cand.n_candidates:,} are "
                   f"left after the GPU-count and batch constraints); give fewer values for "
                   f"{hint}", core_raw,
                   f"at most {MAX_CORE_CANDIDATES:,} after those constraints")

    rows_chunks = []
    rejections: dict[int, int] = dict(cand.rejections)
    for cols in cand.chunks(_CHUNK):
        if axes["sp"] is None:
            cols[C_SP] = (cols[C_TP] > 1).astype(np.int32)
            keep = np.ones(cols.shape[1], dtype=bool)
        else:
            keep = (cols[C_TP] > 1) | (cols[C_SP] == sp_canon)
        keep &= (cols[C_TP] > 1) | (cols[C_TP_OVERLAP] == tpo_canon)
        cols = cols[:, keep]
        cfg = np.zeros((L.N_CFG, cols.shape[1]), dtype=np.int32)
        cfg[CORE_CFG] = cols
        codes = _config_error_codes(sys, mdl, job, cfg)
        # the search keeps expert parallelism inside data parallelism (ep | dp): a folded
        # layout (llm.moe_folded, ep | tp * dp only) is costed when given as a config, not
        # searched, so the spaces and their samples stay those of the unfolded model
        codes = np.where((codes == 0) & (cols[C_DP] % np.maximum(cols[C_EP], 1) != 0),
                         FOLDED_EP_NOT_SEARCHED, codes).astype(codes.dtype)
        bad = codes != 0
        if bad.any():
            u, c = np.unique(codes[bad], return_counts=True)
            for code, n in zip(u.tolist(), c.tolist()):
                rejections[code] = rejections.get(code, 0) + n
        rows_chunks.append(cols[:, ~bad])
    core = (np.concatenate(rows_chunks, axis=1) if rows_chunks
            else np.zeros((N_CORE, 0), dtype=np.int32)).astype(np.int32)
    core, alias = C.collapse_core_rows(core)

    # orders per degree mask
    sets = O.order_sets(axes["order"])
    order_cnt = np.array([len(s) for s in sets], dtype=np.int32)
    order_off = np.zeros(O.N_MASKS, dtype=np.int32)
    order_off[1:] = np.cumsum(order_cnt)[:-1]
    order_flat = np.array([o for s in sets for o in s], dtype=np.int32)

    ep = core[C_EP].astype(np.int64)
    dpx = np.where(ep > 0, core[C_DP] // np.maximum(ep, 1), core[C_DP])
    mask = ((core[C_TP] > 1).astype(np.int32) << L.DIM_TP
            | (core[C_CP] > 1).astype(np.int32) << L.DIM_CP
            | (ep > 1).astype(np.int32) << L.DIM_EP
            | (dpx > 1).astype(np.int32) << L.DIM_DP
            | (core[C_PP] > 1).astype(np.int32) << L.DIM_PP).astype(np.int32)
    n_orders = order_cnt[mask]
    placeable = n_orders > 0
    rows_without_order = int((~placeable).sum())
    placeable_rows = np.cumsum(placeable) - 1  # new index of each placeable row
    placeable_rows = np.where(placeable, placeable_rows, -1)
    core = np.ascontiguousarray(core[:, placeable])
    mask = np.ascontiguousarray(mask[placeable])
    n_orders = n_orders[placeable].astype(np.int64)

    rec = _encode("recompute", axes["recompute"])
    if selective_is_none(job) and L.RECOMPUTE_NONE in rec and L.RECOMPUTE_SELECTIVE in rec:
        rec = rec[rec != L.RECOMPUTE_SELECTIVE]
    zer = _encode("zero", axes["zero"])
    dpo = _encode("dp_overlap", axes["dp_overlap"])
    single = C.single_rows(core)
    weight = n_orders * len(rec) * np.where(single, 1, len(zer) * len(dpo))
    cum = np.zeros(core.shape[1] + 1, dtype=np.int64)
    np.cumsum(weight, out=cum[1:])

    n_order_raw = L.N_ORDERS if axes["order"] == "all" else len(axes["order"])
    raw_size = math.prod(lens) * n_order_raw * len(rec) * len(zer) * len(dpo)
    ds = DesignSpace(
        axes=axes, raw_size=raw_size, core=core, mask=mask, cum=cum,
        order_off=order_off, order_cnt=order_cnt, order_flat=order_flat,
        recompute=rec, zero=zer, dp_overlap=dpo, single=single, core_rejections=rejections,
        core_raw=core_raw, rows_without_order=rows_without_order, gpus=gpus,
    )
    ds._sp_canon_tp1 = 0 if axes["sp"] is None else sp_canon
    ds._tpo_canon_tp1 = tpo_canon
    # index_of finds a collapsed row's configurations under the row it collapsed to
    ds._alias = {key: int(placeable_rows[r]) for key, r in alias.items() if placeable[r]}
    return ds


def size_of(scenario) -> int:
    """Valid, distinct configurations of the scenario's space."""
    return design_space(scenario).size
