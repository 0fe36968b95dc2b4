"""Plans in TorchRec's terms: export a trainscape plan as a ``ShardingPlan`` document, import one.

The document is JSON shaped like TorchRec's own objects (pytorch/torchrec,
``torchrec/distributed/types.py``: ``ShardingPlan`` -> ``EmbeddingModuleShardingPlan`` ->
``ParameterSharding``; ``torchrec/distributed/sharding_plan.py`` for the shard sizes, offsets
and placements)::

    {"format": "torchrec.ShardingPlan", "world_size": W, "local_world_size": L,
     "compute_device": "cuda",
     "plan": {"<module path>": {"<table>": {
         "sharding_type": "table_wise", "compute_kernel": "fused", "ranks": [3],
         "sharding_spec": {"shards": [{"shard_offsets": [0, 0], "shard_sizes": [rows, dim],
                                       "placement": "rank:3/cuda:3"}]},
         "cache_params": null}}}}

Mapping (trainscape -> TorchRec):

- sharding: ``table_wise``, ``row_wise``, ``column_wise``, ``table_row_wise``,
  ``data_parallel``, ``grid_shard`` keep their names (TorchRec ``ShardingType`` values).
  TorchRec's table-row-wise and grid row groups are the node (local world size); a plan
  with another ``group`` has no TorchRec form and is refused on export, naming the table.
- memory tier -> compute kernel (TorchRec ``EmbeddingComputeKernel``): ``hbm`` -> ``fused``,
  ``uvm_cache`` -> ``fused_uvm_caching`` (``cache_params.load_factor`` = the job's
  ``uvm_cache_fraction``), ``ddr`` -> ``fused_uvm``, ``dense`` -> ``dense``, ``key_value`` ->
  ``key_value``. TorchRec's ``quant*`` kernels serve inference only; quantized training tables
  are the ``fused`` kernel with ``job.embedding_dtype`` fp16 / int8.
- ranks and shards as TorchRec's constructors place them: row-wise rows in blocks of
  ``ceil(rows / n)`` (``_calculate_rw_shard_sizes_and_offsets``), column-wise equal column
  blocks at offsets ``j * dim / k`` on ranks ``rank + j * stride`` (mod W), table-row-wise the
  rows over the ranks of one node, grid ``k`` column blocks each row-wise over one node, block
  ``j`` on the node of rank ``rank + j * stride`` (TorchRec ``sharding_plan.grid_shard``:
  ranks node by node, shards block-major, ``_calculate_grid_shard_sizes_and_offsets``),
  data-parallel ``sharding_spec`` null and every rank listed.
  Placements read ``rank:R/cuda:(R mod L)`` (``sharding_plan.placement``).

``table_column_wise`` imports as ``column_wise`` (TorchRec's table-column-wise sharding is its
column-wise sharding with the shards inside one host group). A document TorchRec can hold
that trainscape does not model (another kernel, uneven column
shards, ranks that are no arithmetic progression, ...) is refused with the field path and
what is allowed. :func:`to_torchrec` builds the real TorchRec objects when ``torchrec`` is
installed.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import numpy as np

from . import layout as D
from .spec import DlrmScenario, fail

FORMAT = "torchrec.ShardingPlan"
DEFAULT_MODULE = "embedding_bag_collection"
KERNEL_OF_TIER = {"hbm": "fused", "uvm_cache": "fused_uvm_caching", "ddr": "fused_uvm",
                  "dense": "dense", "key_value": "key_value"}
TIER_OF_KERNEL = {v: k for k, v in KERNEL_OF_TIER.items()}


def _placement(rank: int, local: int) -> str:
    return f"rank:{rank}/cuda:{rank % local}"


def rw_shard_sizes(rows: int, n: int) -> list[int]:
    """Rows of each of ``n`` row-wise shards as TorchRec cuts them: blocks of ``ceil(rows/n)``,
    the last partial, then empty ones (``sharding_plan._calculate_rw_shard_sizes_and_offsets``)."""
    block = math.ceil(rows / n)
    last = rows // block
    return [block if r < last else (rows - block * last if r == last else 0) for r in range(n)]


def _node_ranks(sc: DlrmScenario, rank: int) -> list[int]:
    lo = (rank // sc.node_size) * sc.node_size
    return list(range(lo, min(sc.world, lo + sc.node_size)))


def _cw_ranks(sc: DlrmScenario, rank: int, k: int, stride: int) -> list[int]:
    return [(rank + j * stride) % sc.world for j in range(k)]


def _grid_ranks(sc: DlrmScenario, rank: int, k: int, stride: int) -> list[int]:
    """Ranks of a grid table (group: the node): block by block, the ranks of node
    ``(rank // L + j * stride) mod nodes``."""
    local = sc.node_size
    n_nodes = -(-sc.world // local)
    out: list[int] = []
    for j in range(k):
        out.extend(_node_ranks(sc, ((rank // local + j * stride) % n_nodes) * local))
    return out


def canonical(sc: DlrmScenario, plan: np.ndarray) -> np.ndarray:
    """``plan`` with the fields that do not change the placement normalised: stride mod W for
    column-wise tables of several shards (0 otherwise), the node's first rank for table-row-wise,
    rank 0 for row-wise / data-parallel. Two plans place every shard alike iff their canonical
    forms are equal."""
    p = np.array(plan, dtype=np.int32, copy=True)
    w = sc.world
    for i in range(sc.n_tables):
        kind = int(p[D.PL_KIND, i])
        if kind in (D.SH_CW, D.SH_GRID) and p[D.PL_SHARDS, i] > 1:
            p[D.PL_STRIDE, i] = int(p[D.PL_STRIDE, i]) % w
        else:
            p[D.PL_STRIDE, i] = 0
        if kind in (D.SH_TWRW, D.SH_GRID):
            if int(p[D.PL_GROUP, i]) == sc.node_size:
                p[D.PL_GROUP, i] = 0
            g = int(p[D.PL_GROUP, i]) or sc.node_size
            if kind == D.SH_GRID and p[D.PL_SHARDS, i] > 1:
                p[D.PL_STRIDE, i] = int(p[D.PL_STRIDE, i]) % -(-w // g)  # counts groups
            p[D.PL_RANK, i] = (int(p[D.PL_RANK, i]) // g) * g
        else:
            p[D.PL_GROUP, i] = 0
        if kind in (D.SH_RW, D.SH_DP):
            p[D.PL_RANK, i] = 0
    return p


def _cache_params(sc: DlrmScenario, tier: str) -> dict | None:
    """TorchRec ``CacheParams`` of a cached tier: ``load_factor`` (the cached share), and for
    a key_value table whose misses the scenario prefetches from its SSD
    ``prefetch_pipeline`` (``CacheParams.prefetch_pipeline``, read by TorchRec's estimator,
    ``shard_estimators._is_prefetch_pipelined``)."""
    if tier not in ("uvm_cache", "key_value"):
        return None
    out: dict = {"load_factor": float(sc.job[D.DJOB_UVM_CACHE_FRACTION])}
    if tier == "key_value" and sc.job[D.DJOB_SSD_BYTES] > 0 and \
            sc.job[D.DJOB_PREFETCH_DEPTH] >= 1:
        out["prefetch_pipeline"] = True
    return out


def export_plan(sc: DlrmScenario, plan: np.ndarray, module: str = DEFAULT_MODULE) -> dict:
    """The TorchRec ``ShardingPlan`` document of ``plan`` (see the module docstring)."""
    w, local = sc.world, sc.node_size
    params: dict[str, Any] = {}
    for i, name in enumerate(sc.table_names):
        kind = int(plan[D.PL_KIND, i])
        rank = int(plan[D.PL_RANK, i])
        group = int(plan[D.PL_GROUP, i])
        if kind in (D.SH_TWRW, D.SH_GRID) and group not in (0, local):
            raise fail(f"tables[{name}].group", "TorchRec's table_row_wise and grid_shard "
                       f"split rows over one node (local world size {local}); no TorchRec "
                       "form for this row group", group, f"0 or {local}")
        if kind == D.SH_GRID and w % local:
            raise fail(f"tables[{name}].type", "grid_shard needs whole nodes for TorchRec",
                       D.SHARDING[kind], f"a world that is a multiple of {local}")
        tier = D.MEMORY_TIERS[int(plan[D.PL_TIER, i])]
        rows, dim = int(sc.tables[D.TAB_ROWS, i]), int(sc.tables[D.TAB_DIM, i])
        shards: list[tuple[list[int], list[int], int]] | None  # (offsets, sizes, rank)
        if kind == D.SH_TW:
            ranks = [rank]
            shards = [([0, 0], [rows, dim], rank)]
        elif kind == D.SH_CW:
            k = int(plan[D.PL_SHARDS, i])
            ranks = _cw_ranks(sc, rank, k, int(plan[D.PL_STRIDE, i]))
            width = dim // k
            shards = [([0, j * width], [rows, width], r) for j, r in enumerate(ranks)]
        elif kind in (D.SH_RW, D.SH_TWRW):
            ranks = list(range(w)) if kind == D.SH_RW else _node_ranks(sc, rank)
            sizes = rw_shard_sizes(rows, len(ranks))
            offs = np.concatenate([[0], np.cumsum(sizes)[:-1]]).astype(int).tolist()
            shards = [([o, 0], [s, dim], r) for o, s, r in zip(offs, sizes, ranks)]
        elif kind == D.SH_GRID:
            k = int(plan[D.PL_SHARDS, i])
            ranks = _grid_ranks(sc, rank, k, int(plan[D.PL_STRIDE, i]))
            width = dim // k
            sizes = rw_shard_sizes(rows, local)
            offs = np.concatenate([[0], np.cumsum(sizes)[:-1]]).astype(int).tolist()
            shards = [([o, j * width], [s, width], ranks[j * local + m])
                      for j in range(k) for m, (o, s) in enumerate(zip(offs, sizes))]
        else:
            ranks = list(range(w))
            shards = None
        params[name] = {
            "sharding_type": D.SHARDING[kind],
            "compute_kernel": KERNEL_OF_TIER[tier],
            "ranks": ranks,
            "sharding_spec": None if shards is None else {"shards": [
                {"shard_offsets": o, "shard_sizes": s, "placement": _placement(r, local)}
                for o, s, r in shards]},
            "cache_params": _cache_params(sc, tier),
        }
    return {"format": FORMAT, "world_size": w, "local_world_size": local,
            "compute_device": "cuda", "plan": {module: params}}


def _int_list(where: str, v: Any) -> list[int]:
    if not isinstance(v, list) or not v or not all(
            isinstance(x, int) and not isinstance(x, bool) for x in v):
        raise fail(where, "must be a non-empty list of integers", v)
    return v


def _shards(where: str, ps: dict, n: int) -> list[tuple[list[int], list[int]]] | None:
    spec = ps.get("sharding_spec")
    if spec is None:
        return None
    if not isinstance(spec, dict) or not isinstance(spec.get("shards"), list):
        raise fail(f"{where}.sharding_spec", "must be {\"shards\": [...]} or null", spec)
    out = []
    for j, s in enumerate(spec["shards"]):
        w2 = f"{where}.sharding_spec.shards[{j}]"
        if not isinstance(s, dict):
            raise fail(w2, "must be an object with shard_offsets and shard_sizes", s)
        off = _int_list(f"{w2}.shard_offsets", s.get("shard_offsets"))
        size = _int_list(f"{w2}.shard_sizes", s.get("shard_sizes"))
        if len(off) != 2 or len(size) != 2:
            raise fail(w2, "offsets and sizes must be [row, column] pairs", s)
        out.append((off, size))
    if len(out) != n:
        raise fail(f"{where}.sharding_spec.shards", f"one shard per rank expected ({n})",
                   len(out))
    return out


def import_plan(sc: DlrmScenario, doc: Any, module: str | None = None) -> np.ndarray:
    """The int32 ``(N_PLAN, T)`` plan of a TorchRec ``ShardingPlan`` document ``doc`` for the
    tables of ``sc``; raises :class:`ScenarioError` (field path, what is allowed) for anything
    trainscape cannot cost as given."""
    if not isinstance(doc, dict) or not isinstance(doc.get("plan"), dict) or not doc["plan"]:
        raise fail("plan", "a TorchRec plan document needs a non-empty \"plan\" object "
                   "(module path -> table -> ParameterSharding)", type(doc).__name__)
    w = sc.world
    if "world_size" in doc and doc["world_size"] != w:
        raise fail("world_size", "differs from the scenario's GPUs", doc["world_size"], str(w))
    mods = doc["plan"]
    if module is None:
        if len(mods) != 1:
            raise fail("plan", "several modules; name one", ", ".join(mods))
        module = next(iter(mods))
    if module not in mods or not isinstance(mods[module], dict):
        raise fail(f"plan.{module}", "no such module plan", module, ", ".join(mods))
    params = mods[module]
    index = {n: i for i, n in enumerate(sc.table_names)}
    for name in params:
        if name not in index:
            raise fail(f"plan.{module}.{name}", "not a table of the scenario", name)
    missing = [n for n in sc.table_names if n not in params]
    if missing:
        raise fail(f"plan.{module}", "tables without a sharding", ", ".join(missing[:5]))
    plan = np.zeros((D.N_PLAN, sc.n_tables), dtype=np.int32)
    for name, ps in params.items():
        where = f"plan.{module}.{name}"
        i = index[name]
        if not isinstance(ps, dict):
            raise fail(where, "must be a ParameterSharding object", ps)
        st = ps.get("sharding_type")
        if st == "table_column_wise":
            # TorchRec's TwCwPooledEmbeddingSharding is its column-wise sharding with the
            # shards on one host group (sharding/twcw_sharding.py), costed alike by the
            # estimator: trainscape's column-wise with the ranks as given
            st = "column_wise"
        if st not in D.SHARDING:
            raise fail(f"{where}.sharding_type", "not modelled", st,
                       ", ".join(D.SHARDING + ("table_column_wise",)))
        kern = ps.get("compute_kernel")
        if kern not in TIER_OF_KERNEL:
            raise fail(f"{where}.compute_kernel", "not modelled", kern,
                       ", ".join(TIER_OF_KERNEL))
        kind = D.SHARDING.index(st)
        rows, dim = int(sc.tables[D.TAB_ROWS, i]), int(sc.tables[D.TAB_DIM, i])
        if ps.get("ranks") is None and kind in (D.SH_RW, D.SH_DP):
            ranks = list(range(w))  # TorchRec: ranks unused for row-wise / data-parallel
        else:
            ranks = _int_list(f"{where}.ranks", ps.get("ranks"))
        if any(not 0 <= r < w for r in ranks):
            raise fail(f"{where}.ranks", f"rank out of range for {w} ranks", ranks,
                       f"0..{w - 1}")
        shards = _shards(where, ps, len(ranks))
        rank, k, stride = ranks[0], 1, 0
        if kind == D.SH_TW:
            if len(ranks) != 1:
                raise fail(f"{where}.ranks", "a table-wise table has one rank", ranks)
            want = [([0, 0], [rows, dim])]
        elif kind == D.SH_CW:
            k = len(ranks)
            if dim % k:
                raise fail(f"{where}.ranks", f"{k} equal column shards must divide dim {dim}",
                           k, f"divisors of {dim}")
            stride = (ranks[1] - ranks[0]) % w if k > 1 else 0
            if ranks != _cw_ranks(sc, rank, k, stride):
                raise fail(f"{where}.ranks", "column shards must sit on rank0 + j * stride "
                           "(mod W)", ranks)
            want = [([0, j * (dim // k)], [rows, dim // k]) for j in range(k)]
        elif kind == D.SH_GRID:
            local = sc.node_size
            if w % local or len(ranks) % local:
                raise fail(f"{where}.ranks", f"grid_shard lists whole nodes of {local} ranks",
                           ranks, f"multiples of {local} ranks on a world of whole nodes")
            k = len(ranks) // local
            if dim % k:
                raise fail(f"{where}.ranks", f"{k} equal column blocks must divide dim {dim}",
                           k, f"divisors of {dim}")
            stride = (ranks[local] // local - ranks[0] // local) % (w // local) if k > 1 else 0
            if ranks[0] % local or ranks != _grid_ranks(sc, rank, k, stride):
                raise fail(f"{where}.ranks", "grid blocks must sit on whole nodes, node0 + j * "
                           "stride (mod the nodes), ranks in order", ranks)
            sizes = rw_shard_sizes(rows, local)
            offs = np.concatenate([[0], np.cumsum(sizes)[:-1]]).astype(int).tolist()
            want = [([o, j * (dim // k)], [s, dim // k]) for j in range(k)
                    for o, s in zip(offs, sizes)]
        elif kind in (D.SH_RW, D.SH_TWRW):
            exp = list(range(w)) if kind == D.SH_RW else _node_ranks(sc, rank)
            if ranks != exp:
                raise fail(f"{where}.ranks", "row-wise spans all ranks, table-row-wise the "
                           "ranks of one node, in order", ranks, str(exp))
            sizes = rw_shard_sizes(rows, len(exp))
            offs = np.concatenate([[0], np.cumsum(sizes)[:-1]]).astype(int).tolist()
            want = [([o, 0], [s, dim]) for o, s in zip(offs, sizes)]
        else:
            if ranks != list(range(w)):
                raise fail(f"{where}.ranks", "data-parallel lists every rank", ranks)
            want = None
        if shards is not None and want is not None and [
                (list(o), list(s)) for o, s in shards] != want:
            raise fail(f"{where}.sharding_spec.shards", "shard sizes / offsets differ from "
                       "the even split trainscape models", shards[:2], str(want[:2]))
        plan[D.PL_KIND, i] = kind
        plan[D.PL_SHARDS, i] = k
        plan[D.PL_RANK, i] = rank
        plan[D.PL_STRIDE, i] = stride
        plan[D.PL_TIER, i] = D.MEMORY_TIERS.index(TIER_OF_KERNEL[kern])
    return plan


def load_plan_file(sc: DlrmScenario, path: str | Path, module: str | None = None) -> np.ndarray:
    """:func:`import_plan` of a JSON file (a bad file is a :class:`ScenarioError`)."""
    try:
        doc = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError) as exc:
        raise fail("from_torchrec", "cannot read the plan file", str(path),
                   show_got=True) from exc
    except json.JSONDecodeError as exc:
        raise fail("from_torchrec", f"not JSON ({exc.msg} at line {exc.lineno})",
                   str(path)) from exc
    return import_plan(sc, doc, module)


def entries_to_plan(sc: DlrmScenario, entries: list[dict]) -> np.ndarray:
    """The plan of a ``shard`` report's ``plan`` entries (table, type, shards, ranks, tier)."""
    plan = np.zeros((D.N_PLAN, sc.n_tables), dtype=np.int32)
    index = {n: i for i, n in enumerate(sc.table_names)}
    for e in entries:
        i = index[e["table"]]
        kind = D.SHARDING.index(e["type"])
        ranks = e["ranks"] if isinstance(e["ranks"], list) else [0]
        k = int(e["shards"])
        group = int(e.get("group", 0))
        plan[D.PL_KIND, i] = kind
        plan[D.PL_SHARDS, i] = k
        plan[D.PL_RANK, i] = ranks[0]
        if kind == D.SH_GRID:
            g = group or sc.node_size
            plan[D.PL_STRIDE, i] = (ranks[g] // g - ranks[0] // g) % -(-sc.world // g) \
                if k > 1 else 0
        else:
            plan[D.PL_STRIDE, i] = (ranks[1] - ranks[0]) % sc.world if k > 1 else 0
        plan[D.PL_TIER, i] = D.MEMORY_TIERS.index(e["tier"])
        plan[D.PL_GROUP, i] = group
    return plan


def to_torchrec(doc: dict):
    """TorchRec's own ``ShardingPlan`` of a document (needs ``torchrec``): the objects
    ``DistributedModelParallel(plan=...)`` takes."""
    from torch.distributed._shard.sharding_spec import EnumerableShardingSpec, ShardMetadata
    from torchrec.distributed.embedding_types import EmbeddingComputeKernel
    from torchrec.distributed.types import (
        CacheParams,
        EmbeddingModuleShardingPlan,
        ParameterSharding,
        ShardingPlan,
        ShardingType,
    )

    out = {}
    for module, params in doc["plan"].items():
        mod = EmbeddingModuleShardingPlan()
        for name, ps in params.items():
            spec = None
            if ps["sharding_spec"] is not None:
                spec = EnumerableShardingSpec([
                    ShardMetadata(shard_offsets=s["shard_offsets"], shard_sizes=s["shard_sizes"],
                                  placement=s["placement"])
                    for s in ps["sharding_spec"]["shards"]])
            cache = ps.get("cache_params")
            mod[name] = ParameterSharding(
                sharding_type=ShardingType(ps["sharding_type"]).value,
                compute_kernel=EmbeddingComputeKernel(ps["compute_kernel"]).value,
                ranks=list(ps["ranks"]), sharding_spec=spec,
                cache_params=CacheParams(load_factor=cache["load_factor"],
                                         prefetch_pipeline=cache.get("prefetch_pipeline"))
                if cache else None)
        out[module] = mod
    return ShardingPlan(out)


def from_torchrec(plan) -> dict:
    """A document from TorchRec's ``ShardingPlan`` object (the inverse of :func:`to_torchrec`
    for the fields trainscape reads)."""
    mods = {}
    for module, params in plan.plan.items():
        d = {}
        for name, ps in params.items():
            spec = ps.sharding_spec
            d[name] = {
                "sharding_type": ps.sharding_type, "compute_kernel": ps.compute_kernel,
                "ranks": list(ps.ranks) if ps.ranks is not None else None,
                "sharding_spec": None if spec is None else {"shards": [
                    {"shard_offsets": list(s.shard_offsets), "shard_sizes": list(s.shard_sizes),
                     "placement": str(s.placement)} for s in spec.shards]},
                "cache_params": (
                    {"load_factor": ps.cache_params.load_factor,
                     **({"prefetch_pipeline": True}
                        if getattr(ps.cache_params, "prefetch_pipeline", None) else {})}
                    if ps.cache_params is not None else None),
            }
        mods[module] = d
    return {"format": FORMAT, "plan": mods}


def plan_result(sc: DlrmScenario, plan: np.ndarray, backend=None):
    """A :class:`~trainscape.dlrm.planner.PlanResult` costing a given (imported) plan under
    trainscape's model, for the ``shard`` report (method ``torchrec-plan``)."""
    import time

    from . import evaluate
    from .bounds import lower_bound_parts
    from .planner import PlanResult

    t0 = time.perf_counter()
    res = evaluate(sc, plan, backend=backend)
    return PlanResult(method="torchrec-plan", plan=plan, step_time_s=res["step_time_s"],
                      result=res, lower_bound_s=lower_bound_parts(sc)["lower_bound_s"],
                      elapsed_s=time.perf_counter() - t0, evaluations=1)
