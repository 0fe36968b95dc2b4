"""DLRM scenario inputs: tables, dense model, job, cluster, an optional plan; and packing.

A DLRM scenario (TOML/JSON or a dict)::

    name = "..."
    [model]                      # or preset = "dlrm-mlperf" (trainscape.presets.dlrm)
    tables_csv = "criteo_1tb_tables.csv"   # relative to the scenario file; or tables = [...]
    dense_in_features = 13
    dense_arch = [512, 256, 128]
    over_arch = [1024, 1024, 512, 256, 1]
    interaction = "dcn"          # dot | dcn
    [job]
    global_batch = 65536
    embedding_dtype = "fp32"     # fp32 | fp16 | int8
    comm_dtype = "fp16"          # fp32 | bf16 | fp16 | fp8 (pooled embeddings, forward)
    optimizer = "rowwise_adagrad"
    [cluster]                    # the LLM scenario's [cluster] (trainscape.spec.ClusterSpec)
    preset = "zionex"
    gpus = 128
    [ssd]                        # optional: an SSD tier for key_value tables (per GPU)
    capacity_gb = 3840
    bandwidth_GBps = 6.0
    prefetch_depth = 1           # batches the misses are prefetched ahead (0: no pipeline)
    [plan.cat_0]                 # optional: a plan to evaluate (per table)
    type = "row_wise"
    group = 4                    # table_row_wise / grid_shard: ranks per row group (0: node)

The cluster reuses :class:`trainscape.spec.ClusterSpec` (GPU preset, tiers, ``host_ddr_gb``
per node, ``host_to_device_GBps`` per GPU) and :func:`trainscape.spec.pack_system`.
Errors are :class:`trainscape.spec.ScenarioError` with one line naming the table and field,
e.g. ``tables[cat_9].shards: 3 does not divide dim 128 (got 3; allowed: divisors of 128)``.
"""

from __future__ import annotations

import copy
import csv
from dataclasses import dataclass, field
from pathlib import Path
from types import SimpleNamespace
from typing import Annotated, Any, Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from ..spec.errors import ScenarioError, from_validation_error
from ..spec.models import ClusterSpec, expand_presets
from ..spec import ranges as R
from ..spec.pack import pack_system
from . import constraints as _C
from . import layout as D

GB = 1e9

# every numeric field has a documented range (spec/ranges.py, README "Input ranges")
PosInt = R.Dim
Fraction = R.Share
_KERNEL_NAMES = tuple(_C.TIER_OF_NAME)
# the constraint fields' types, on a table and in [constraints.NAME] alike
ShardingTypes = Annotated[list[Literal[_C.SHARDING_NAMES]], Field(min_length=1)]
ComputeKernels = Annotated[list[Literal[_KERNEL_NAMES]], Field(min_length=1)]
PinnedRanks = Annotated[list[Annotated[int, Field(ge=0, le=R.MAX_DLRM_GPUS)]],
                        Field(min_length=1, max_length=R.MAX_DLRM_GPUS)]


class _Spec(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)


class TableSpec(_Spec):
    """One embedding table: ``pooling`` is lookups per sample (multi-hot size)."""

    name: str
    rows: R.Rows
    dim: R.EmbDim
    pooling: R.Pooling = 1.0
    hit_rate: Fraction | None = None  # UVM cache hit rate (default: job.uvm_hit_rate)
    # or derived from a Zipf exponent of the row accesses (dlrm/access.py)
    zipf_alpha: R.ZipfAlpha | None = None

    @model_validator(mode="after")
    def _one_hit_source(self) -> "TableSpec":
        if self.hit_rate is not None and self.zipf_alpha is not None:
            raise fail("zipf_alpha", "give hit_rate or zipf_alpha, not both (the hit rate is "
                       "derived from zipf_alpha)", self.zipf_alpha, "leave one out")
        return self

    # planner constraints (dlrm/constraints.py; TorchRec ParameterConstraints)
    sharding_types: ShardingTypes | None = None
    compute_kernels: ComputeKernels | None = None
    min_partition: R.EmbDim | None = None
    ranks: PinnedRanks | None = None


class ConstraintSpec(_Spec):
    """``[constraints.NAME]``: the constraint fields of a table given by the tables CSV (or
    anywhere else); they override the table's own."""

    sharding_types: ShardingTypes | None = None
    compute_kernels: ComputeKernels | None = None
    min_partition: R.EmbDim | None = None
    ranks: PinnedRanks | None = None


class ReservationSpec(_Spec):
    """``[reservation]``: storage held back on every rank before the tables are placed.
    ``percentage`` is TorchRec's storage reservation percentage
    (``torchrec/distributed/planner/storage_reservations.py``,
    ``_reserve_storage_percentage``: each device keeps ``(1 - percentage)`` of its HBM and of
    its DDR; ``HeuristicalStorageReservation(percentage)`` applies it before its dense and
    input estimates, which trainscape's kernels cost themselves); ``hbm_gb`` / ``ddr_gb`` are
    held back on top, per rank."""

    percentage: Annotated[float, Field(ge=0.0, lt=1.0, allow_inf_nan=False)] = 0.0
    hbm_gb: R.HbmGbOrZero = 0.0
    ddr_gb: R.DdrGb = 0.0


class DenseSpec(_Spec):
    """Dense part (Naumov et al. 2019 §3; DLRM-DCNv2: Wang et al. 2021 cross layers)."""

    preset: str | None = None
    name: str | None = None
    tables_csv: str | None = None
    tables: Annotated[list[TableSpec], Field(max_length=R.MAX_TABLES)] | None = None
    embedding_dim: R.EmbDim | None = None  # dim for tables that do not give one (CSV)
    dense_in_features: PosInt = 13
    dense_arch: list[PosInt] = Field(default_factory=lambda: [512, 256, 128], min_length=1)
    over_arch: list[PosInt] = Field(default_factory=lambda: [1024, 1024, 512, 256, 1],
                                    min_length=1)
    interaction: Literal[D.INTERACTIONS] = "dot"
    dcn_layers: R.DimOrZero = 3
    dcn_low_rank: PosInt = 512
    global_batch: R.Batch | None = None  # from a preset; job.global_batch wins


class JobSpec(_Spec):
    global_batch: R.Batch | None = None
    embedding_dtype: Literal["fp32", "fp16", "int8"] = "fp32"
    comm_dtype: Literal["fp32", "bf16", "fp16", "fp8"] = "fp32"
    bwd_comm_dtype: Literal["fp32", "bf16", "fp16", "fp8"] | None = None
    grad_comm_dtype: Literal["fp32", "bf16", "fp16"] = "fp32"
    dense_dtype: Literal["bf16", "fp16", "fp8"] = "bf16"
    optimizer: Literal[D.OPTIMIZERS] = "rowwise_adagrad"
    index_bytes: Literal[4, 8] = 8
    lookup_efficiency: R.Efficiency | None = None  # default: the GPU's memory_efficiency
    dense_efficiency: R.Efficiency = 0.5
    uvm_cache_fraction: Fraction = 0.2
    uvm_hit_rate: Fraction = 0.9
    # Zipf exponent of every table's row accesses, for tables without hit_rate / zipf_alpha
    # of their own: their hit rate is derived from it (dlrm/access.py) instead of uvm_hit_rate
    zipf_alpha: R.ZipfAlpha | None = None
    bwd_multiplier: R.PosFactor = 2.0
    dp_update_factor: R.Factor = 9.22


class PlanEntry(_Spec):
    type: str
    shards: R.DlrmGpuCount = 1
    rank: Annotated[int, Field(ge=0, le=R.MAX_DLRM_GPUS)] = 0
    stride: Annotated[int, Field(ge=0, le=R.MAX_DLRM_GPUS)] | None = None
    tier: str = "hbm"
    group: Annotated[int, Field(ge=0, le=R.MAX_DLRM_GPUS)] = 0


class SsdSpec(_Spec):
    """An SSD tier behind the key_value kernel (ZionEX's HBM + DDR + SSD hierarchy), per GPU:
    capacity for the key_value tables' rows and optimizer state, read/write bandwidth, and
    how many batches ahead the misses are prefetched (TorchRec ``prefetch_pipeline``)."""

    capacity_gb: R.HbmGb
    bandwidth_GBps: R.Bandwidth
    prefetch_depth: R.DimOrZero = 1


class PlannerSpec(_Spec):
    method: Literal["greedy", "beam", "evolve"] = "evolve"
    beam_width: R.BeamWidth = 8
    seed: R.Seed = 0
    iterations: R.Iterations = 200000
    time_limit_s: R.Seconds = 8.0


class DlrmScenarioSpec(_Spec):
    name: str = ""
    description: str | None = None
    model: DenseSpec
    job: JobSpec = Field(default_factory=JobSpec)
    cluster: ClusterSpec
    plan: dict[str, PlanEntry] | None = None
    ssd: SsdSpec | None = None
    planner: PlannerSpec = Field(default_factory=PlannerSpec)
    constraints: dict[str, ConstraintSpec] | None = None
    reservation: ReservationSpec = Field(default_factory=ReservationSpec)


@dataclass
class DlrmScenario:
    """A validated, packed DLRM scenario: the blocks the kernels read plus names for people."""

    name: str
    spec: DlrmScenarioSpec
    table_names: list[str]
    sys: np.ndarray
    job: np.ndarray
    tables: np.ndarray  # (N_TAB, T)
    plan: np.ndarray | None = None  # (N_PLAN, T) when the scenario gives one
    extra: dict = field(default_factory=dict)
    #: per-table planner constraints (None: none given)
    constraints: "_C.Constraints | None" = None

    @property
    def world(self) -> int:
        return int(self.job[D.DJOB_WORLD])

    @property
    def n_tables(self) -> int:
        return self.tables.shape[1]

    @property
    def node_size(self) -> int:
        return int(min(self.sys[_tier0_size_index()], self.world))


def _tier0_size_index() -> int:
    from .. import layout as L

    return L.SYS_TIER_BASE + L.TIER_SIZE


def fail(path: str, problem: str, got: Any = None, allowed: str | None = None,
         show_got: bool = True) -> ScenarioError:
    return ScenarioError.at(path, problem, got, allowed, show_got)


# --------------------------------------------------------------------------------------------
# Tables from CSV
# --------------------------------------------------------------------------------------------


def table_hit_rate(table: TableSpec, job: JobSpec) -> float:
    """The hit rate a table's cache lookups get: its own ``hit_rate``; else derived from its
    ``zipf_alpha`` (or the job's) and the cached share of its rows,
    ``job.uvm_cache_fraction`` (:func:`trainscape.dlrm.access.zipf_cache_hit_rate`); else
    ``job.uvm_hit_rate``."""
    from .access import zipf_cache_hit_rate

    if table.hit_rate is not None:
        return float(table.hit_rate)
    alpha = table.zipf_alpha if table.zipf_alpha is not None else job.zipf_alpha
    if alpha is not None:
        return zipf_cache_hit_rate(table.rows, job.uvm_cache_fraction * table.rows, alpha)
    return float(job.uvm_hit_rate)


def read_tables_csv(path: Path, default_dim: int | None,
                    lines: dict[str, int] | None = None) -> list[dict]:
    """Tables from a CSV with columns ``table|name, rows, dim, pooling|multi_hot[, hit_rate]``
    (``#`` lines are comments). The file must be a regular UTF-8 file of at most
    ``readers.MAX_CSV_BYTES``; a cell that is not a finite number (or not an integer where one
    is needed: ``rows = 1.5``) is an error naming the CSV line and column. Optional
    constraint columns ``sharding_types``, ``compute_kernels`` (lists separated by ``|``),
    ``min_partition``, ``ranks`` (``0|4|8-15``): see ``docs/dlrm.md``. ``lines``, when
    given, receives each table's CSV line number."""
    from ..spec.readers import MAX_CSV_BYTES, read_text

    text = read_text(path, "tables CSV", MAX_CSV_BYTES, field="model.tables_csv")
    numbered = [(n, ln) for n, ln in enumerate(text.splitlines(), start=1)
                if ln.strip() and not ln.lstrip().startswith("#")]
    if not numbered:
        raise fail("model.tables_csv", f"tables CSV {path} has no header line", None,
                   "a header such as table,rows,dim,pooling", show_got=False)
    if len(numbered) - 1 > R.MAX_TABLES:
        raise fail("model.tables_csv", f"too many tables ({len(numbered) - 1})", None,
                   f"at most {R.MAX_TABLES}", show_got=False)
    reader = csv.DictReader([ln for _, ln in numbered])
    out = []
    for i, row in enumerate(reader):
        line = numbered[i + 1][0] if i + 1 < len(numbered) else len(numbered)
        name = (row.get("table") or row.get("name") or f"t{i}").strip()
        where = f"model.tables_csv line {line}"

        def num(key, cast, required=True, default=None):
            text = row.get(key)
            if text is None or text.strip() == "":
                if required:
                    raise fail(f"{where} column {key}", "missing in CSV", None, show_got=False)
                return default
            text = text.strip()
            if cast is int:
                try:
                    return int(text)
                except ValueError:
                    pass
            try:
                v = float(text)
            except ValueError:
                raise fail(f"{where} column {key}", "not a number", text,
                           "an integer" if cast is int else "a finite number") from None
            if not np.isfinite(v):
                raise fail(f"{where} column {key}", "must be a finite number", text,
                           "an integer" if cast is int else "a finite number")
            if cast is int:
                if v != int(v):
                    raise fail(f"{where} column {key}", "expected an integer", text, "an integer")
                return int(v)
            return v

        pool_key = "pooling" if "pooling" in row else "multi_hot"
        entry = {"name": name, "rows": num("rows", int),
                 "dim": num("dim", int, default_dim is None, default_dim),
                 "pooling": float(num(pool_key, float, False, 1.0))}
        hr = num("hit_rate", float, False, None)
        if hr is not None:
            entry["hit_rate"] = hr
        za = num("zipf_alpha", float, False, None)
        if za is not None:
            entry["zipf_alpha"] = za
        for key in _C.FIELDS:  # optional constraint columns (docs/dlrm.md, Constraints)
            cell = (row.get(key) or "").strip()
            if not cell:
                continue
            try:
                if key == "sharding_types":
                    entry[key] = _C.split_names(cell)
                    _C.kinds_mask(entry[key])
                elif key == "compute_kernels":
                    entry[key] = _C.split_names(cell)
                    _C.tiers_mask(entry[key])
                elif key == "ranks":
                    entry[key] = _C.parse_ranks_text(cell)
                else:
                    entry[key] = num(key, int)
                    if not 1 <= entry[key] <= R.MAX_EMB_DIM:
                        raise _C.ConstraintError(key, "out of range", cell,
                                                 f"1 to {R.MAX_EMB_DIM}")
            except _C.ConstraintError as e:
                raise fail(f"{where} column {key}", e.problem, e.got, e.allowed) from None
        if lines is not None:
            lines[name] = line
        out.append(entry)
    return out


# --------------------------------------------------------------------------------------------
# Loading
# --------------------------------------------------------------------------------------------


def expand(raw: dict) -> dict:
    """Merge the DLRM model preset and the cluster / GPU presets (copy)."""
    out = copy.deepcopy(raw)
    model = out.get("model")
    if isinstance(model, dict) and model.get("preset") is not None:
        from .. import presets

        try:
            base = presets.dlrm(model["preset"])
        except presets.UnknownPreset:
            raise fail("model.preset", "unknown dlrm preset", model["preset"],
                       ", ".join(presets.names("dlrm"))) from None
        base.pop("sources", None)
        out["model"] = {**base, **model}
    if isinstance(out.get("cluster"), dict):
        # stock GPU constants: the calibrated.toml fits are fitted on LLM training runs (their
        # memory_efficiency absorbs LLM elementwise kernels), not on embedding lookups
        out["cluster"] = expand_presets({"cluster": out["cluster"]}, calibrated=False)["cluster"]
    return out


def load(source: str | Path | dict, base_dir: str | Path | None = None) -> DlrmScenario:
    """Read, validate and pack a DLRM scenario; ``ScenarioError`` (one line) on bad input."""
    if isinstance(source, dict):
        raw = copy.deepcopy(source)
        base = Path(base_dir) if base_dir else Path.cwd()
        default_name = ""
    else:
        from ..spec.load import read_raw

        raw = read_raw(source)
        base = Path(source).parent
        default_name = Path(source).stem
    raw = expand(raw)
    model = raw.get("model")
    origins: dict[str, str] = {}
    if isinstance(model, dict) and model.get("tables_csv") is not None and not model.get("tables"):
        if not isinstance(model["tables_csv"], str) or not model["tables_csv"].strip():
            raise fail("model.tables_csv", "expected a file name", model["tables_csv"],
                       "a path to a CSV file (relative to the scenario file)")
        csv_path = Path(model["tables_csv"])
        if not csv_path.is_absolute():
            csv_path = base / csv_path
        lines: dict[str, int] = {}
        model["tables"] = read_tables_csv(csv_path, model.get("embedding_dim"), lines)
        origins = {n: f"model.tables_csv line {ln} column " for n, ln in lines.items()}
    if isinstance(model, dict) and isinstance(model.get("tables"), list):
        for t in model["tables"]:
            if isinstance(t, dict) and "dim" not in t and model.get("embedding_dim"):
                t["dim"] = model["embedding_dim"]
    try:
        spec = DlrmScenarioSpec.model_validate(raw)
    except ValidationError as exc:
        err = from_validation_error(exc, DlrmScenarioSpec)
        raise _name_tables(err, raw) from None
    if not spec.name:
        spec.name = default_name
    return build(spec, origins)


def _name_tables(err: ScenarioError, raw: dict) -> ScenarioError:
    """Rewrite ``model.tables[3].dim`` as ``tables[cat_3].dim`` in an error."""
    import re

    m = re.match(r"model\.tables\[(\d+)\]", err.path or "")
    if not m:
        return err
    i = int(m.group(1))
    try:
        name = raw["model"]["tables"][i]["name"]
    except (KeyError, IndexError, TypeError):
        return err
    new_path = f"tables[{name}]" + err.path[m.end():]
    return ScenarioError(str(err).replace(err.path, new_path, 1), path=new_path)


def dense_params_flops(m: DenseSpec, dims: list[int]) -> tuple[float, float, float]:
    """(parameters, forward FLOPs per sample, activation bytes per sample) of the dense part.

    MLP layer ``a -> b``: ``a*b + b`` parameters, ``2*a*b`` FLOPs (Naumov et al. §3). Dot
    interaction over ``F = T + 1`` vectors of dim ``d``: ``F(F-1)/2`` dot products of ``2d``
    FLOPs, output ``d + F(F-1)/2``. DCN-v2 low-rank cross layer over the concatenation of width
    ``n``: ``2*n*r + n`` parameters and ``4*n*r`` FLOPs (Wang et al. 2021, DCN-V2 §3, eq. 1 with
    the low-rank ``U V^T``), output width ``n``. Activations: fp32, every layer output kept.
    """
    params = 0.0
    flops = 0.0
    acts = 0.0
    width = m.dense_in_features
    for b in m.dense_arch:
        params += width * b + b
        flops += 2.0 * width * b
        acts += b
        width = b
    if m.interaction == "dot":
        f = len(dims) + 1
        pairs = f * (f - 1) / 2
        flops += pairs * 2.0 * width
        width = width + pairs
        acts += width
    else:
        n = width + sum(dims)
        # the same per layer: times the layer count, not a loop of up to 2^24 Python steps
        # (exact alike below 2^53)
        params += m.dcn_layers * (2.0 * n * m.dcn_low_rank + n)
        flops += m.dcn_layers * (4.0 * n * m.dcn_low_rank)
        acts += m.dcn_layers * (n + m.dcn_low_rank)
        width = n
    for b in m.over_arch:
        params += width * b + b
        flops += 2.0 * width * b
        acts += b
        width = b
    return params, flops, 4.0 * 2.0 * acts


def table_state_bytes(rows: float, dim: float, job: np.ndarray) -> float:
    return rows * dim * job[D.DJOB_EMB_BYTES] + rows * job[D.DJOB_OPT_ROW_BYTES] \
        + rows * dim * job[D.DJOB_OPT_ELEM_BYTES]


def build(spec: DlrmScenarioSpec, origins: dict[str, str] | None = None) -> DlrmScenario:
    """Pack a validated spec; the cross-field checks (tables fit, dot dims, plan, constraints)
    live here. ``origins``: per table read from the tables CSV, the error path prefix of its
    cells (``model.tables_csv line N column ``)."""
    m, j, c = spec.model, spec.job, spec.cluster
    if not m.tables:
        raise fail("model.tables", "no embedding tables (give tables or tables_csv)", None,
                   show_got=False)
    names = [t.name for t in m.tables]
    seen = set()
    for t in m.tables:
        if t.name in seen:
            raise fail(f"tables[{t.name}].name", "duplicate table name", t.name)
        seen.add(t.name)
    batch = j.global_batch or m.global_batch
    if batch is None:
        raise fail("job.global_batch", "missing required field", show_got=False)
    world = c.gpus
    if world > R.MAX_DLRM_GPUS:
        raise fail("cluster.gpus", "too many ranks for a DLRM scenario", world,
                   f"1 to {R.MAX_DLRM_GPUS}")
    if batch % world != 0:
        raise fail("job.global_batch", f"must be a multiple of cluster.gpus = {world}", batch,
                   f"multiples of {world}")
    if m.interaction == "dot":
        for t in m.tables:
            if t.dim != m.dense_arch[-1]:
                raise fail(f"tables[{t.name}].dim", "the dot interaction needs every table dim "
                           f"equal to model.dense_arch[-1] = {m.dense_arch[-1]}", t.dim,
                           f"{m.dense_arch[-1]} (or interaction = \"dcn\")")
    gpu = c.gpu
    # the LLM system block of the dense part: no attention, so the native-kernel default
    sys = pack_system(SimpleNamespace(cluster=c, job=SimpleNamespace(dtype=j.dense_dtype,
                                                                     attention_kernel="native")))
    if gpu.peak_for(j.dense_dtype) is None:
        raise fail("job.dense_dtype", "the GPU has no peak rate for this dtype", j.dense_dtype,
                   ", ".join(gpu.peak_tflops))
    node = c.tiers[0].size
    if c.host_ddr_gb is None:
        raise fail("cluster.host_ddr_gb", "missing (host DDR per node, GB)", show_got=False)
    if c.host_to_device_GBps is None or c.host_to_device_GBps <= 0:
        raise fail("cluster.host_to_device_GBps", "missing or zero (per GPU, GB/s)",
                   c.host_to_device_GBps)
    params, flops, acts = dense_params_flops(m, [t.dim for t in m.tables])
    opt_row = 4.0 if j.optimizer == "rowwise_adagrad" else 0.0
    opt_elem = 8.0 if j.optimizer == "adam" else 0.0
    dense_opt = {"rowwise_adagrad": 4.0, "adam": 8.0, "sgd": 0.0}[j.optimizer]
    job = np.zeros(D.N_DJOB)
    job[D.DJOB_WORLD] = world
    job[D.DJOB_GLOBAL_BATCH] = batch
    job[D.DJOB_EMB_BYTES] = D.DTYPE_BYTES[j.embedding_dtype]
    job[D.DJOB_INDEX_BYTES] = j.index_bytes
    job[D.DJOB_COMM_FWD_BYTES] = D.DTYPE_BYTES[j.comm_dtype]
    job[D.DJOB_COMM_BWD_BYTES] = D.DTYPE_BYTES[j.bwd_comm_dtype or j.comm_dtype]
    job[D.DJOB_GRAD_COMM_BYTES] = D.DTYPE_BYTES[j.grad_comm_dtype]
    job[D.DJOB_OPT_ROW_BYTES] = opt_row
    job[D.DJOB_OPT_ELEM_BYTES] = opt_elem
    job[D.DJOB_LOOKUP_EFFICIENCY] = (j.lookup_efficiency if j.lookup_efficiency is not None
                                     else gpu.memory_efficiency)
    job[D.DJOB_H2D_BANDWIDTH] = c.host_to_device_GBps * GB
    job[D.DJOB_DDR_BYTES] = c.host_ddr_gb * GB / node
    job[D.DJOB_UVM_CACHE_FRACTION] = j.uvm_cache_fraction
    job[D.DJOB_BWD_MULTIPLIER] = j.bwd_multiplier
    job[D.DJOB_DP_UPDATE_FACTOR] = j.dp_update_factor
    job[D.DJOB_DENSE_PARAMS] = params
    job[D.DJOB_DENSE_FLOPS_PER_SAMPLE] = flops
    job[D.DJOB_DENSE_ACT_BYTES_PER_SAMPLE] = acts
    job[D.DJOB_DENSE_EFFICIENCY] = j.dense_efficiency
    job[D.DJOB_DENSE_STATE_BYTES] = 8.0 + dense_opt
    if spec.ssd is not None:
        job[D.DJOB_SSD_BYTES] = spec.ssd.capacity_gb * GB
        job[D.DJOB_SSD_BANDWIDTH] = spec.ssd.bandwidth_GBps * GB
        job[D.DJOB_PREFETCH_DEPTH] = spec.ssd.prefetch_depth
    if job[D.DJOB_LOOKUP_EFFICIENCY] <= 0:
        raise fail("job.lookup_efficiency", "must be > 0", j.lookup_efficiency, "(0, 1]")
    _reserve(spec.reservation, sys, job)

    tables = np.zeros((D.N_TAB, len(m.tables)))
    for i, t in enumerate(m.tables):
        tables[D.TAB_ROWS, i] = t.rows
        tables[D.TAB_DIM, i] = t.dim
        tables[D.TAB_POOLING, i] = t.pooling
        tables[D.TAB_HIT_RATE, i] = table_hit_rate(t, j)

    # a table larger than all memory of all ranks cannot be placed by any plan
    hbm = sys[_sys_index("SYS_HBM_BYTES")] - sys[_sys_index("SYS_HBM_RESERVE_BYTES")]
    total = world * (hbm + job[D.DJOB_DDR_BYTES])
    for i, t in enumerate(m.tables):
        need = table_state_bytes(t.rows, t.dim, job)
        if need > total:
            raise fail(f"tables[{t.name}].rows", f"the table needs {need / GB:.4g} GB with its "
                       f"optimizer state, more than the {total / GB:.4g} GB of HBM + DDR of all "
                       f"{world} ranks", t.rows, f"tables up to {total / GB:.4g} GB")
    sc = DlrmScenario(name=spec.name, spec=spec, table_names=names, sys=sys, job=job,
                      tables=tables)
    from .constraints_spec import build_constraints

    sc.constraints = build_constraints(sc, origins or {})
    if spec.plan is not None:
        sc.plan = plan_from_entries(sc, spec.plan)
    return sc


def _reserve(r: ReservationSpec, sys: np.ndarray, job: np.ndarray) -> None:
    """Apply ``[reservation]`` to the packed blocks, so that every kernel and planner sees
    the smaller capacities: HBM usable = ``(1 - percentage) x HBM - reserve - hbm_gb``
    (the GPU's own ``hbm_reserve_gb`` stays; HBM "GB" are GiB as for ``hbm_gb``), DDR per
    rank = ``(1 - percentage) x DDR - ddr_gb`` (GB = 1e9 bytes as ``host_ddr_gb``; TorchRec
    ``_reserve_storage_percentage``, see :class:`ReservationSpec`)."""
    hbm_i, res_i = _sys_index("SYS_HBM_BYTES"), _sys_index("SYS_HBM_RESERVE_BYTES")
    if r.percentage or r.hbm_gb:
        from ..spec.pack import hbm_capacity_bytes  # "GB" of HBM are GiB, as hbm_reserve_gb

        sys[res_i] += r.percentage * sys[hbm_i] + hbm_capacity_bytes(r.hbm_gb)
        if sys[hbm_i] - sys[res_i] <= 0:
            field_ = "reservation.hbm_gb" if r.hbm_gb else "reservation.percentage"
            gib = 2.0**30
            raise fail(field_, f"leaves no HBM on a rank ({sys[hbm_i] / gib:.4g} GiB, "
                       f"{sys[res_i] / gib:.4g} GiB reserved in all with the GPU's own "
                       "hbm_reserve_gb)", r.hbm_gb if r.hbm_gb else r.percentage,
                       f"less than the {sys[hbm_i] / gib:.4g} GiB of HBM per rank")
    if r.percentage or r.ddr_gb:
        ddr = (1.0 - r.percentage) * job[D.DJOB_DDR_BYTES] - r.ddr_gb * GB
        if ddr < 0:
            raise fail("reservation.ddr_gb", f"more than the {job[D.DJOB_DDR_BYTES] / GB:.4g} GB "
                       "of host DDR per rank", r.ddr_gb,
                       f"0 to {(1.0 - r.percentage) * job[D.DJOB_DDR_BYTES] / GB:.4g}")
        job[D.DJOB_DDR_BYTES] = ddr


def _sys_index(name: str) -> int:
    from .. import layout as L

    return getattr(L, name)


# --------------------------------------------------------------------------------------------
# Plans: entries <-> int32 columns
# --------------------------------------------------------------------------------------------


def plan_from_entries(sc: DlrmScenario, entries: dict[str, PlanEntry | dict]) -> np.ndarray:
    """An int32 ``(N_PLAN, T)`` plan from per-table entries (type, shards, rank, stride, tier);
    tables not listed are table-wise on rank 0 in HBM. One-line errors name table and field."""
    plan = np.zeros((D.N_PLAN, sc.n_tables), dtype=np.int32)
    plan[D.PL_SHARDS] = 1
    index = {n: i for i, n in enumerate(sc.table_names)}
    for name, e in entries.items():
        if name not in index:
            raise fail(f"plan[{name}]", "no such table", name,
                       ", ".join(sc.table_names[:8]) + (" ..." if sc.n_tables > 8 else ""))
        if isinstance(e, dict):
            try:
                e = PlanEntry.model_validate(e)
            except ValidationError as exc:
                raise from_validation_error(exc, PlanEntry, prefix=f"tables[{name}]") from None
        i = index[name]
        set_entry(sc, plan, i, e.type, e.shards, e.rank, e.stride, e.tier, e.group)
    return plan


def set_entry(sc: DlrmScenario, plan: np.ndarray, i: int, type_: str, shards: int = 1,
              rank: int = 0, stride: int | None = None, tier: str = "hbm",
              group: int = 0) -> None:
    """Validate and write one table's plan entry (column ``i``)."""
    name = sc.table_names[i]
    where = f"tables[{name}]"
    if type_ not in D.SHARDING:
        raise fail(f"{where}.type", "unknown sharding type", type_, ", ".join(D.SHARDING))
    if tier not in D.MEMORY_TIERS:
        raise fail(f"{where}.tier", "unknown memory tier", tier, ", ".join(D.MEMORY_TIERS))
    world = sc.world
    if not 0 <= rank < world:
        raise fail(f"{where}.rank", f"rank out of range for {world} ranks", rank,
                   f"0..{world - 1}")
    dim = int(sc.tables[D.TAB_DIM, i])
    kind = D.SHARDING.index(type_)
    if kind in (D.SH_CW, D.SH_GRID):
        if shards > world:
            raise fail(f"{where}.shards", f"more column shards than ranks ({world})", shards,
                       f"1..{world}")
        if dim % shards != 0:
            raise fail(f"{where}.shards", f"{shards} does not divide dim {dim}", shards,
                       f"divisors of {dim}")
        if stride is None:
            # column-wise: shards spread over the world; grid: blocks on consecutive groups
            stride = max(1, world // shards) if kind == D.SH_CW else 1
    elif shards != 1:
        raise fail(f"{where}.shards", "only column_wise and grid_shard tables have shards "
                   f"(type {type_})", shards, "1")
    if kind in (D.SH_TWRW, D.SH_GRID):
        if group < 0 or group > world or (group > 0 and world % group != 0):
            raise fail(f"{where}.group", f"a row group must divide the {world} ranks", group,
                       f"0 (the node) or a divisor of {world}")
    elif group != 0:
        raise fail(f"{where}.group", "only table_row_wise and grid_shard tables have row "
                   f"groups (type {type_})", group, "0")
    plan[D.PL_KIND, i] = kind
    plan[D.PL_SHARDS, i] = shards
    plan[D.PL_RANK, i] = rank
    plan[D.PL_STRIDE, i] = stride or 0
    plan[D.PL_TIER, i] = D.MEMORY_TIERS.index(tier)
    plan[D.PL_GROUP, i] = group


def plan_entries(sc: DlrmScenario, plan: np.ndarray) -> list[dict]:
    """Per table: name, type, shards, ranks (the ranks holding it), tier -- for people."""
    world = sc.world
    node = sc.node_size
    out = []
    for i, name in enumerate(sc.table_names):
        kind = int(plan[D.PL_KIND, i])
        rank = int(plan[D.PL_RANK, i])
        k = int(plan[D.PL_SHARDS, i])
        if kind == D.SH_TW:
            ranks = [rank]
        elif kind == D.SH_CW:
            ranks = [(rank + j * int(plan[D.PL_STRIDE, i])) % world for j in range(k)]
        elif kind in (D.SH_TWRW, D.SH_GRID):
            ranks = []
            grp = int(plan[D.PL_GROUP, i])
            g = grp or node
            n_groups = -(-world // g)
            for j in range(k if kind == D.SH_GRID else 1):
                gj = (rank // g + j * int(plan[D.PL_STRIDE, i])) % n_groups
                ranks.extend(group_ranks(sc, gj * g, grp))
        else:
            ranks = "all"
        e = {"table": name, "type": D.SHARDING[kind], "shards": k, "ranks": ranks,
             "tier": D.MEMORY_TIERS[int(plan[D.PL_TIER, i])]}
        if kind in (D.SH_TWRW, D.SH_GRID) and int(plan[D.PL_GROUP, i]) > 0:
            e["group"] = int(plan[D.PL_GROUP, i])
        out.append(e)
    return out


def group_ranks(sc: DlrmScenario, rank: int, group: int) -> list[int]:
    """The ranks of the row group holding ``rank`` (``group`` 0: its node), as
    :func:`trainscape.dlrm.reference.row_group_bounds` cuts them."""
    node, world = sc.node_size, sc.world
    g = node if group <= 0 else group
    lo = (rank // g) * g
    return list(range(lo, min(world, lo + g)))


def check_plan_array(sc: DlrmScenario, plan: np.ndarray) -> None:
    """Raise a one-line error for the first bad entry of an int32 plan."""
    plan = np.asarray(plan)
    if plan.shape != (D.N_PLAN, sc.n_tables):
        raise fail("plan", "wrong shape", plan.shape, f"({D.N_PLAN}, {sc.n_tables})")
    for i in range(sc.n_tables):
        kind = int(plan[D.PL_KIND, i])
        tier = int(plan[D.PL_TIER, i])
        name = sc.table_names[i]
        if not 0 <= kind < len(D.SHARDING):
            raise fail(f"tables[{name}].type", "unknown sharding type", kind,
                       ", ".join(f"{k}={n}" for k, n in enumerate(D.SHARDING)))
        if not 0 <= tier < len(D.MEMORY_TIERS):
            raise fail(f"tables[{name}].tier", "unknown memory tier", tier,
                       ", ".join(f"{k}={n}" for k, n in enumerate(D.MEMORY_TIERS)))
        stride = int(plan[D.PL_STRIDE, i])
        if stride < 0:
            raise fail(f"tables[{name}].stride", "must be >= 0", stride, ">= 0")
        set_entry(sc, plan.copy(), i, D.SHARDING[kind], int(plan[D.PL_SHARDS, i])
                  if kind in (D.SH_CW, D.SH_GRID) else 1, int(plan[D.PL_RANK, i]), stride,
                  D.MEMORY_TIERS[tier], int(plan[D.PL_GROUP, i])
                  if kind in (D.SH_TWRW, D.SH_GRID) else 0)


def tables_total_bytes(sc: DlrmScenario) -> float:
    return float(sum(table_state_bytes(sc.tables[D.TAB_ROWS, i], sc.tables[D.TAB_DIM, i], sc.job)
                     for i in range(sc.n_tables)))


__all__ = ["DlrmScenario", "DlrmScenarioSpec", "TableSpec", "PlanEntry", "ConstraintSpec",
           "ReservationSpec", "load", "build",
           "plan_from_entries", "plan_entries", "set_entry", "check_plan_array",
           "read_tables_csv", "dense_params_flops"]
