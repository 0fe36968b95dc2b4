"""The scenario's per-table constraints (``[[model.tables]]`` fields, ``[constraints.NAME]``,
the tables CSV's optional columns) checked against the cluster and packed into a
:class:`trainscape.dlrm.constraints.Constraints`.

Every error names the table and the field where it was given: ``tables[cat_3].ranks``,
``constraints[cat_3].min_partition`` or ``model.tables_csv line 5 column ranks``. A table whose
constraints leave no form (say row-wise only, pinned to two of 64 ranks), or whose every
allowed form needs more memory per rank than a rank has, is an error too: no planner could
honour it.
"""

from __future__ import annotations

import numpy as np

from . import constraints as C
from . import layout as D
from .reference import dense_memory_bytes, uniform_storage_ddr, uniform_storage_hbm

GB = 1e9


def _fail(path, problem, got=None, allowed=None, show_got=True):
    from ..spec.errors import ScenarioError

    return ScenarioError.at(path, problem, got, allowed, show_got)


def build_constraints(sc, origins: dict[str, str]) -> C.Constraints | None:
    """The scenario's constraints (None when no table has any)."""
    spec = sc.spec
    w, node = sc.world, sc.node_size
    index = {n: i for i, n in enumerate(sc.table_names)}
    given: dict[int, dict] = {}
    where: dict[tuple[int, str], str] = {}
    for i, t in enumerate(spec.model.tables):
        for f in C.FIELDS:
            v = getattr(t, f)
            if v is not None:
                given.setdefault(i, {})[f] = v
                where[i, f] = (origins[t.name] + f) if t.name in origins else \
                    f"tables[{t.name}].{f}"
    for name, cs in (spec.constraints or {}).items():
        if name not in index:
            raise _fail(f"constraints[{name}]", "no such table", name,
                        ", ".join(sc.table_names[:8]) + (" ..." if sc.n_tables > 8 else ""))
        i = index[name]
        for f in C.FIELDS:
            v = getattr(cs, f)
            if v is not None:
                given.setdefault(i, {})[f] = v
                where[i, f] = f"constraints[{name}].{f}"
    if not given:
        return None
    n = sc.n_tables
    cons = C.Constraints.none(n, w, node, sc.tables[D.TAB_DIM].astype(np.int64))
    pins = {}
    for i, g in given.items():
        try:
            if "sharding_types" in g:
                cons.kinds[i] = C.kinds_mask(g["sharding_types"])
            if "compute_kernels" in g:
                cons.tiers[i] = C.tiers_mask(g["compute_kernels"])
        except C.ConstraintError as e:  # the schema already holds the names; kept as a guard
            raise _fail(where[i, e.field], e.problem, e.got, e.allowed) from None
        if "min_partition" in g:
            mp = int(g["min_partition"])
            cons.min_part[i] = mp
        if "ranks" in g:
            r = np.unique(np.asarray(g["ranks"], np.int64))
            bad = r[(r < 0) | (r >= w)]
            if len(bad):
                raise _fail(where[i, "ranks"], f"rank out of range for {w} ranks",
                            int(bad[0]), f"0..{w - 1}")
            if len(r) < w:
                pins[i] = r
    cons = C.Constraints(w, node, cons.dims, cons.kinds, cons.tiers, cons.min_part, pins)
    if not cons.active:
        return None
    _check_feasible(sc, cons, given, where)
    return cons


def _per_rank_bytes(sc, t: int, kind: int, k: int, tier: int) -> tuple[float, float]:
    """HBM and DDR bytes the table's state puts on each rank holding a shard of it (the
    kernel's ``uniform_storage_*`` of the shard; buffers left out: a lower bound)."""
    rows, dim = float(sc.tables[D.TAB_ROWS, t]), float(sc.tables[D.TAB_DIM, t])
    w, node = sc.world, sc.node_size
    if kind == D.SH_CW:
        dim = dim / k
    elif kind == D.SH_TWRW:
        rows = float(np.ceil(rows / node))
    elif kind == D.SH_RW:
        rows = float(np.ceil(rows / w))
    return (float(uniform_storage_hbm(tier, rows, dim, sc.job)),
            float(uniform_storage_ddr(tier, rows, dim, sc.job)))


def _check_feasible(sc, cons: C.Constraints, given: dict, where: dict) -> None:
    from .. import layout as L

    name = sc.table_names
    hbm_cap = (sc.sys[L.SYS_HBM_BYTES] - sc.sys[L.SYS_HBM_RESERVE_BYTES]
               - dense_memory_bytes(sc.job))
    ddr_cap = sc.job[D.DJOB_DDR_BYTES]
    single = {}  # rank -> least bytes (hbm, ddr) of the tables pinned to it alone
    for t in (int(x) for x in cons.constrained_tables()):
        forms = list(cons.forms(t))
        g = given.get(t, {})
        if not forms:
            field_ = "sharding_types"
            relaxed = []
            if "ranks" in g:
                relaxed.append(("ranks", C.Constraints(cons.world, cons.node, cons.dims,
                                                       cons.kinds, cons.tiers, cons.min_part,
                                                       {})))
            if "min_partition" in g:
                relaxed.append(("min_partition", C.Constraints(
                    cons.world, cons.node, cons.dims, cons.kinds, cons.tiers,
                    np.zeros_like(cons.min_part), cons.pins)))
            for f, other in relaxed:
                if next(iter(other.forms(t)), None) is not None:
                    field_ = f
                    break
            if field_ not in g:
                field_ = next(iter(g))
            types = [SHN for b, SHN in enumerate(C.SHARDING_NAMES) if (cons.kinds[t] >> b) & 1]
            extra = []
            if t in cons.pins:
                extra.append(f"ranks {_short(cons.pins[t])} of {cons.world}")
            if cons.min_part[t]:
                extra.append(f"min_partition {cons.min_part[t]} of dim {cons.dims[t]}")
            raise _fail(where[t, field_], "no sharding satisfies the table's constraints "
                        f"(sharding_types {', '.join(types)}"
                        + (f"; {'; '.join(extra)}" if extra else "") + ")",
                        g[field_], _hint(field_), show_got=field_ != "sharding_types")
        fits = []
        for kind, k, _, tier, _ in forms:
            h, d = _per_rank_bytes(sc, t, kind, k, tier)
            fits.append((h, d, h <= hbm_cap and d <= ddr_cap))
        if not any(f[2] for f in fits):
            field_ = "compute_kernels" if "compute_kernels" in g else next(iter(g))
            h, d, _ = min(fits, key=lambda f: max(f[0] / max(hbm_cap, 1.0),
                                                   f[1] / max(ddr_cap, 1.0)))
            raise _fail(where[t, field_], f"table {name[t]} fits no rank in any allowed form: "
                        f"at least {h / GB:.4g} GB HBM and {d / GB:.4g} GB DDR per rank, a rank "
                        f"has {hbm_cap / GB:.4g} GB HBM (after the dense part and the "
                        f"reservation) and {ddr_cap / GB:.4g} GB DDR", g[field_],
                        "a tier or sharding that spreads the table (uvm_cache / ddr, "
                        "column_wise, row_wise)")
        if t in cons.pins and len(cons.pins[t]) == 1:
            # a necessary condition: what the tables pinned to this rank alone hold, each in
            # its smallest allowed form, fits the rank's HBM + DDR
            r = int(cons.pins[t][0])
            need = single.get(r, 0.0) + min(f[0] + f[1] for f in fits if f[2])
            single[r] = need
            if need > hbm_cap + ddr_cap:
                raise _fail(where[t, "ranks"], f"the tables pinned to rank {r} alone need at "
                            f"least {need / GB:.4g} GB, more than the rank holds "
                            f"({hbm_cap / GB:.4g} GB HBM + {ddr_cap / GB:.4g} GB DDR)",
                            [r], "more ranks, or fewer tables pinned to this one")


def _short(r) -> str:
    r = [int(x) for x in r]
    return "[" + ", ".join(map(str, r[:6])) + (", ..." if len(r) > 6 else "") + "]"


def _hint(field_: str) -> str:
    return {"ranks": "ranks that hold a whole shard set: every rank for row_wise / "
                     "data_parallel, a whole node for table_row_wise",
            "min_partition": "at most the table's dim (column_wise with fewer, wider shards)",
            }.get(field_, "a sharding type the other constraints allow (table_wise, "
                          "column_wise, ...)")
