"""Per-table planner constraints (issue 17 item 4): allowed sharding types, allowed compute
kernels (memory tiers), the least column-wise shard width, pinned ranks.

They follow TorchRec's ``ParameterConstraints`` (``torchrec/distributed/planner/types.py``,
read at pytorch/torchrec 021edd4): ``sharding_types`` and ``compute_kernels`` (the options the
enumerator may propose for a table) and ``min_partition`` ("CW sharding, min CW dim to
shard"). Pinned ``ranks`` are trainscape's own (TorchRec pins through a hand-written plan):
every shard of the table lives on one of these ranks, so row-wise and data-parallel (which
touch every rank) need the whole world, and table-row-wise a whole node.

A :class:`Constraints` object answers, per table, whether a form (kind, shards, stride, base
rank, tier) is allowed; the planner asks it in every method (greedy, beam, evolve's balancing,
refinement and local search) and keeps only plans that satisfy it (:meth:`satisfied`).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from . import layout as D

#: Names ``sharding_types`` accepts: trainscape's (= TorchRec's ``ShardingType`` values) plus
#: ``table_column_wise`` (column-wise shards on consecutive ranks of one node, stride 1).
SHARDING_NAMES = D.SHARDING + ("table_column_wise",)
BIT_TWCW = 1 << len(D.SHARDING)
ALL_KINDS = (1 << len(SHARDING_NAMES)) - 1
ALL_TIERS = (1 << D.N_MT) - 1
#: TorchRec ``EmbeddingComputeKernel`` values -> trainscape tiers (docs/dlrm.md, tiers table)
KERNEL_OF_TIER = {"hbm": "fused", "uvm_cache": "fused_uvm_caching", "ddr": "fused_uvm",
                  "dense": "dense", "key_value": "key_value"}
TIER_OF_NAME = {**{t: t for t in D.MEMORY_TIERS}, **{k: t for t, k in KERNEL_OF_TIER.items()}}
#: the constraint fields, as the scenario and the tables CSV spell them
FIELDS = ("sharding_types", "compute_kernels", "min_partition", "ranks")


class ConstraintError(ValueError):
    """A bad constraint value: ``field`` and the message (the caller adds the path)."""

    def __init__(self, field_: str, problem: str, got, allowed: str):
        super().__init__(problem)
        self.field, self.problem, self.got, self.allowed = field_, problem, got, allowed


def kinds_mask(names) -> int:
    m = 0
    for n in names:
        if n not in SHARDING_NAMES:
            raise ConstraintError("sharding_types", "unknown sharding type", n,
                                  ", ".join(SHARDING_NAMES))
        m |= 1 << SHARDING_NAMES.index(n)
    if not m:
        raise ConstraintError("sharding_types", "empty list", [], "one or more of "
                              + ", ".join(SHARDING_NAMES))
    return m


def tiers_mask(names) -> int:
    m = 0
    for n in names:
        if n not in TIER_OF_NAME:
            raise ConstraintError("compute_kernels", "unknown compute kernel", n,
                                  ", ".join(list(KERNEL_OF_TIER.values())
                                            + list(D.MEMORY_TIERS)))
        m |= 1 << D.MEMORY_TIERS.index(TIER_OF_NAME[n])
    if not m:
        raise ConstraintError("compute_kernels", "empty list", [], "one or more of "
                              + ", ".join(KERNEL_OF_TIER.values()))
    return m


def parse_ranks_text(text: str) -> list[int]:
    """``"0|1|8-15"`` (or spaces / semicolons / commas between items) -> ranks; ``a-b`` is a
    range with both ends."""
    out: list[int] = []
    for item in text.replace(";", "|").replace(",", "|").replace(" ", "|").split("|"):
        item = item.strip()
        if not item:
            continue
        lo, sep, hi = item.partition("-")
        try:
            a = int(lo)
            b = int(hi) if sep else a
        except ValueError:
            raise ConstraintError("ranks", "not a rank or a range of ranks", item,
                                  "ranks such as 0|1|8-15") from None
        if a < 0 or b < a or b - a > 2**16:
            raise ConstraintError("ranks", "bad range of ranks", item, "a-b with 0 <= a <= b")
        out.extend(range(a, b + 1))
    if not out:
        raise ConstraintError("ranks", "empty list", text, "ranks such as 0|1|8-15")
    return out


def split_names(text: str) -> list[str]:
    """A CSV cell listing names: ``|``, ``;``, spaces or commas between them."""
    return [s for s in text.replace(";", "|").replace(",", "|").replace(" ", "|").split("|")
            if s.strip()]


def footprint(kind: int, k: int, stride: int, base: int, w: int, node: int,
              group: int = 0) -> np.ndarray:
    """Ranks holding a shard of a table in this form (the reference's placement): a
    table-row-wise table's row group (``group`` ranks, 0: the node) and every column block's
    row group of a grid (block j on group ``(base // g + j * stride) mod ceil(w / g)``)."""
    if kind == D.SH_TW:
        return np.array([base])
    if kind == D.SH_CW:
        return (base + np.arange(k) * stride) % w
    if kind in (D.SH_TWRW, D.SH_GRID):
        g = group or node
        n_groups = -(-w // g)
        blocks = k if kind == D.SH_GRID else 1
        out = []
        for j in range(max(blocks, 1)):
            lo = ((base // g + j * stride) % n_groups) * g
            out.append(np.arange(lo, min(w, lo + g)))
        return np.unique(np.concatenate(out))
    return np.arange(w)


@dataclass
class Constraints:
    """Per-table constraints of one scenario; tables without any take every form."""

    world: int
    node: int
    dims: np.ndarray  # (T,) int64
    kinds: np.ndarray  # (T,) bitmask over SHARDING_NAMES
    tiers: np.ndarray  # (T,) bitmask over MEMORY_TIERS
    min_part: np.ndarray  # (T,) least column-wise shard width (0: none)
    pins: dict = field(default_factory=dict)  # table -> sorted unique ranks (a strict subset)

    def __post_init__(self):
        self._mask = {t: np.isin(np.arange(self.world), r) for t, r in self.pins.items()}

    @classmethod
    def none(cls, n_tables: int, world: int, node: int, dims) -> "Constraints":
        return cls(world, node, np.asarray(dims, np.int64), np.full(n_tables, ALL_KINDS),
                   np.full(n_tables, ALL_TIERS), np.zeros(n_tables, np.int64), {})

    @property
    def active(self) -> bool:
        return bool(self.pins) or bool((self.kinds != ALL_KINDS).any()) \
            or bool((self.tiers != ALL_TIERS).any()) or bool(self.min_part.any())

    def constrained(self, t: int) -> bool:
        return (t in self.pins or self.kinds[t] != ALL_KINDS or self.tiers[t] != ALL_TIERS
                or self.min_part[t] > 0)

    # -- one form ---------------------------------------------------------------------------

    def form_ok(self, t: int, kind: int, k: int, stride: int, tier: int) -> bool:
        """Kind, shard width and tier allowed (the ranks apart; table-column-wise forms are
        those with stride 1, placed inside one node by :meth:`ranks_ok`)."""
        if not (int(self.tiers[t]) >> tier) & 1:
            return False
        km = int(self.kinds[t])
        if kind in (D.SH_CW, D.SH_GRID) and self.min_part[t] > 0 \
                and self.dims[t] // max(k, 1) < self.min_part[t]:
            return False  # a grid's column blocks are column shards too
        if kind == D.SH_CW:
            return bool(km & (1 << D.SH_CW)) or (bool(km & BIT_TWCW) and stride == 1)
        return bool((km >> kind) & 1)

    def ranks_ok(self, t: int, kind: int, k: int, stride: int, base: int,
                 group: int = 0) -> bool:
        w = self.world
        if kind == D.SH_CW and not (int(self.kinds[t]) >> D.SH_CW) & 1:
            # allowed as table-column-wise only: the k shards on consecutive ranks of a node
            if not (0 <= base and base + k <= w and base // self.node == (base + k - 1)
                    // self.node):
                return False
        mask = self._mask.get(t)
        if mask is None:
            return True
        return bool(mask[footprint(kind, k, stride, base, w, self.node, group)].all())

    def ok(self, t, kind, k, stride, base, tier, group: int = 0) -> bool:
        return self.form_ok(t, kind, k, stride, tier) \
            and self.ranks_ok(t, kind, k, stride, base, group)

    def allowed_bases(self, t: int, kind: int, k: int, stride: int,
                      group: int = 0) -> np.ndarray | None:
        """The base ranks (``rank`` plan column) allowed for this form; None when any is
        (memoized: the constraints never change)."""
        key = (int(t), int(kind), int(k), int(stride), int(group))
        memo = self.__dict__.setdefault("_bases", {})
        if key not in memo:
            memo[key] = self._allowed_bases(*key)
        return memo[key]

    def _allowed_bases(self, t: int, kind: int, k: int, stride: int,
                       group: int = 0) -> np.ndarray | None:
        w, node = self.world, self.node
        twcw_only = kind == D.SH_CW and not (int(self.kinds[t]) >> D.SH_CW) & 1
        mask = self._mask.get(t)
        if mask is None and not twcw_only:
            return None
        if kind in (D.SH_RW, D.SH_DP):
            return np.zeros(1 if mask is None or mask.all() else 0, np.int64)
        if kind == D.SH_GRID or (kind == D.SH_TWRW and group):
            g = group or node
            cand = np.arange(0, w, g, dtype=np.int64)
            ok = np.array([mask[footprint(kind, k, stride, int(b), w, node, group)].all()
                           for b in cand], bool)
            return cand[ok]
        if kind == D.SH_TWRW:
            cand = np.arange(0, w, node, dtype=np.int64)
            ok = np.array([mask[lo:min(w, lo + node)].all() for lo in cand], bool) \
                if mask is not None else np.ones(len(cand), bool)
            return cand[ok]
        cand = self.pins[t].astype(np.int64) if mask is not None else np.arange(w, dtype=np.int64)
        if kind == D.SH_TW:
            return cand
        # column-wise: the shard ranks of every base at once (footprint)
        rs = (cand[:, None] + np.arange(k, dtype=np.int64)[None, :] * stride) % w
        ok = mask[rs].all(axis=1) if mask is not None else np.ones(len(cand), bool)
        if twcw_only:
            ok &= (cand + k <= w) & (cand // node == (cand + k - 1) // node)
        return cand[ok]

    # -- plans ------------------------------------------------------------------------------

    @staticmethod
    def entry(plan: np.ndarray, t: int) -> tuple[int, int, int, int, int, int]:
        """``(kind, k, base, stride, tier, group)`` of table ``t`` (``k`` 1 unless the form
        has several column shards or blocks)."""
        kind = int(plan[D.PL_KIND, t])
        k = int(plan[D.PL_SHARDS, t]) if kind in (D.SH_CW, D.SH_GRID) else 1
        return (kind, k, int(plan[D.PL_RANK, t]), int(plan[D.PL_STRIDE, t]),
                int(plan[D.PL_TIER, t]), int(plan[D.PL_GROUP, t]))

    def table_ok(self, plan: np.ndarray, t: int) -> bool:
        kind, k, base, stride, tier, group = self.entry(plan, t)
        return self.ok(t, kind, k, stride, base, tier, group)

    def violations(self, plan: np.ndarray) -> list[tuple[int, str]]:
        """(table, field) of every table whose entry breaks one of its constraints."""
        out = []
        for t in self.constrained_tables():
            kind, k, base, stride, tier, group = self.entry(plan, t)
            if not (int(self.tiers[t]) >> tier) & 1:
                out.append((t, "compute_kernels"))
            elif not self.form_ok(t, kind, k, stride, tier):
                out.append((t, "min_partition" if kind == D.SH_CW and self.min_part[t] > 0
                            and self.dims[t] // max(k, 1) < self.min_part[t]
                            else "sharding_types"))
            elif not self.ranks_ok(t, kind, k, stride, base, group):
                out.append((t, "ranks" if t in self.pins else "sharding_types"))
        return out

    def constrained_tables(self) -> np.ndarray:
        if not hasattr(self, "_ct"):
            m = (self.kinds != ALL_KINDS) | (self.tiers != ALL_TIERS) | (self.min_part > 0)
            m[list(self.pins)] = True
            self._ct = np.flatnonzero(m)
        return self._ct

    def satisfied(self, plan: np.ndarray) -> bool:
        return all(self.table_ok(plan, int(t)) for t in self.constrained_tables())

    # -- making plans that satisfy them -----------------------------------------------------

    def forms(self, t: int, first=None):
        """Allowed (kind, k, stride, tier, bases) of table ``t``, ``first`` (a form tuple
        (kind, k, stride, tier)) first when allowed, then table-wise, column-wise (2, 4, ...
        shards spread, then node-local; 1 shard), table-row-wise, row-wise, data-parallel,
        each in the tiers hbm, uvm_cache, ddr, dense, key_value; ``bases`` None (any) or the
        allowed base ranks (never empty)."""
        w, dim = self.world, int(self.dims[t])
        shapes = [(D.SH_TW, 1, 0)]
        k = 2
        while k <= w and dim % k == 0:
            shapes.append((D.SH_CW, k, max(1, w // k)))
            if k <= self.node:
                shapes.append((D.SH_CW, k, 1))
            k *= 2
        shapes += [(D.SH_CW, 1, 1), (D.SH_TWRW, 1, 0), (D.SH_RW, 1, 0), (D.SH_DP, 1, 0)]
        cands = [(kind, k, s, tier) for kind, k, s in shapes for tier in range(D.N_MT)]
        if first is not None:
            cands.insert(0, tuple(int(x) for x in first))
        seen = set()
        for f in cands:
            if f in seen:
                continue
            seen.add(f)
            kind, k, s, tier = f
            if kind == D.SH_TWRW and not 1 < self.node < w:
                continue
            if not self.form_ok(t, kind, k, s, tier):
                continue
            bases = self.allowed_bases(t, kind, k, s)
            if bases is not None and len(bases) == 0:
                continue
            yield kind, k, s, tier, bases

    def _spread(self, kind: int, k: int) -> float:
        """Ranks a form's lookups spread over."""
        return float({D.SH_CW: max(k, 1), D.SH_TWRW: self.node, D.SH_RW: self.world,
                      D.SH_DP: self.world}.get(kind, 1))

    def repair(self, plan: np.ndarray, fits=None) -> np.ndarray:
        """``plan`` with every table that breaks a constraint moved to an allowed form: its
        own kind and shards in an allowed tier and place when there is one, else the allowed
        form of :meth:`forms` spread over the nearest number of ranks (then its own tier
        first, then the order of :meth:`forms`) among those for which ``fits(t, kind, k,
        tier)`` holds when given and some form does (the planners move it on from there)."""
        out = np.array(plan, dtype=np.int32, copy=True)
        for t in self.constrained_tables():
            t = int(t)
            if self.table_ok(out, t):
                continue
            kind, k, base, stride, tier, group = self.entry(out, t)
            if kind == D.SH_GRID or group:  # repaired among the plain forms
                kind, k, stride, group = D.SH_TWRW, 1, 0, 0
            best = None
            for pref_tier in [tier] + list(range(D.N_MT)):
                if self.form_ok(t, kind, k, stride, pref_tier) and (
                        fits is None or fits(t, kind, k, pref_tier)):
                    bases = self.allowed_bases(t, kind, k, stride)
                    if bases is None or len(bases):
                        best = (kind, k, stride, pref_tier, bases)
                        break
            if best is None:
                # the allowed form spread over about as many ranks as the one asked for (a
                # hot table the type chooser spread row-wise stays spread: table-row-wise
                # or column-wise, not table-wise), in its tier when allowed
                forms = list(self.forms(t))
                ok = [f for f in forms if fits is None or fits(t, f[0], f[1], f[3])] or forms
                want = self._spread(kind, k)
                best = min(ok, key=lambda f: (abs(np.log(self._spread(f[0], f[1]) / want)),
                                              f[3] != tier), default=None)
            if best is None:  # Constraints.check ruled this out at load
                continue
            kind, k, stride, tier, bases = best
            if bases is not None and len(bases):
                base = int(bases[np.argmin(np.abs(bases - base))])
            out[D.PL_KIND, t], out[D.PL_SHARDS, t], out[D.PL_STRIDE, t] = kind, k, stride
            out[D.PL_TIER, t], out[D.PL_RANK, t] = tier, base % self.world
            out[D.PL_GROUP, t] = 0
        return out


__all__ = ["Constraints", "ConstraintError", "SHARDING_NAMES", "KERNEL_OF_TIER", "FIELDS",
           "kinds_mask", "tiers_mask", "parse_ranks_text", "split_names", "footprint"]
