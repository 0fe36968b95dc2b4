"""Published runs from a user's CSV files: ``trainscape validate --runs FILE``.

The files have the calibration set's shared column layout (``docs/validate-runs.md``; the
calibration data's README): one row per published run with its model, layout, GPU, software
stack and a measured step time, tokens/s or model TFLOP/s. Each row is read by the reader the
shipped rows go through (:func:`.published.run_of`: the same defaults for unprinted settings,
each named in the row's assumptions) and costed on the same constants. Every cell is checked
here first, so a bad file ends in :class:`RunsFileError` -- one message naming the file, the row
(line and case) and the column, and what the column allows -- never a traceback deep in the
reader or the model.

GPUs without a cluster preset of their own run on the DGX H100 SuperPOD fabric (8 x 400 Gb/s
InfiniBand per 8-GPU node), the node tier at the GPU's own NVLink bandwidth, as
``scripts/transfer_check.py`` costs them; the row's assumptions say so.
"""

from __future__ import annotations

import csv
import io
import math
import re
from pathlib import Path
from typing import Any

from .. import presets
from ..spec.errors import ScenarioError
from ..spec.models import DTYPES
from ..spec.readers import MAX_CSV_BYTES, read_text
from . import Runner
from .published import (DEFAULT_CLUSTER, GPU_CLUSTER, OVERLAP_COLUMNS, SP_VALUES, PublishedRun,
                        _leading_int, mark_older_releases, measured_columns, model_preset_id,
                        run_of)

#: columns every row must fill (the transformer's may come from a model preset instead:
#: :data:`ARCHITECTURE_COLUMNS`)
REQUIRED = ("case", "gpu", "framework", "dtype", "model", "layers", "hidden", "heads", "vocab",
            "mlp", "gpus", "tp", "seq_len", "global_batch", "metric", "value")
#: the transformer's columns (-> the model preset's field) that a row naming a model preset in
#: ``model`` may leave empty: :func:`preset_architecture` fills each from the preset
ARCHITECTURE_COLUMNS = {"layers": "layers", "hidden": "hidden", "ffn_hidden": "ffn_hidden",
                        "heads": "heads", "kv_heads": "kv_heads", "vocab": "vocab", "mlp": "mlp",
                        "experts": "experts", "top_k": "top_k", "expert_ffn": "expert_ffn_hidden"}
#: what every row needs, for a message
REQUIRED_TEXT = (", ".join(c for c in REQUIRED if c not in ARCHITECTURE_COLUMNS)
                 + ", and the transformer's " + ", ".join(c for c in REQUIRED
                                                          if c in ARCHITECTURE_COLUMNS)
                 + " unless 'model' names a model preset")
#: the other columns of the shared layout (empty or absent: not stated by the source)
OPTIONAL = ("source", "version", "ref", "system", "fp8_recipe", "ffn_hidden", "kv_heads",
            "experts", "top_k", "expert_ffn", "cp", "pp", "dp", "ep", "etp", "vpp", "schedule",
            "mbs", "grad_accum", "sp", "zero", "fsdp", "recompute", "step_time_s", "tokens_per_s",
            "tokens_per_s_per_gpu", "model_tflops_per_gpu", "hw_tflops_per_gpu", "mfu_pct",
            "hfu_pct", "peak_tflops", "notes", "peak_memory_gib", "memory_measure",
            "inter_node_GBps", "tp_overlap", "dp_overlap")
#: integer columns that must be at least 1 where filled (``REQUIRED`` ones always are)
POSITIVE_INTS = ("layers", "hidden", "heads", "vocab", "gpus", "tp", "seq_len", "global_batch",
                 "kv_heads", "cp", "pp", "dp", "ep", "etp", "vpp", "mbs", "grad_accum", "fsdp")
#: integer columns that may be 0 (0: a dense model / no dense MLP)
NON_NEGATIVE_INTS = ("ffn_hidden", "experts", "top_k", "expert_ffn")
#: the largest integer a count column takes (beyond it no configuration is costable)
MAX_INT = 2**31 - 1
#: MLP kinds the reader knows (squared-ReLU costs as GeLU, GeGLU as SwiGLU: same GEMMs)
MLPS = ("swiglu", "gelu", "squared-relu", "geglu")
#: ``recompute`` texts: what the cell must start with
RECOMPUTE_PREFIXES = ("full", "selective", "none")
#: ``recompute`` cells that state "no recomputation" in other words
RECOMPUTE_NONE = ("no", "off", "false", "disabled", "0")
#: other ``sp`` texts, read as the SP_VALUES word they mean
SP_WORDS = {"on": "true", "1": "true", "enabled": "true",
            "off": "false", "0": "false", "disabled": "false"}
#: ``recompute`` texts that only switch activation checkpointing on, read as full recompute:
#: every stack's plain switch checkpoints whole layers -- torch.utils.checkpoint per block
#: (FSDP stacks' ``activation_checkpointing: true``), Megatron-LM's ``--checkpoint-activations``
#: before ``--recompute-granularity`` -- and selective recompute is always named
RECOMPUTE_ON = re.compile(r"(yes|true|on|enabled|1|ac|activation[ _-]*checkpoint(ing)?|"
                          r"checkpoint[ _-]*activations?|grad(ient)?[ _-]*checkpoint(ing)?)"
                          r"(\s*\(.*\))?")
#: what published tables print in a cell the source does not state (compared without case):
#: an optional column's cell holding one is read as empty
NOT_STATED = ("-", "\u2013", "\u2014", "n/a", "na", "?", "unknown", "not stated")
#: the published step times a row may imply (seconds): a measurement outside them is a typo
#: (and an error against it would not be a finite number)
STEP_RANGE_S = (1e-6, 1e7)
#: hardware TFLOP/s per GPU (recompute counted): the measurement a row may give last, converted
#: with the model's hardware FLOPs of the row's layout (:func:`runner_for`)
HW_METRIC = "hw_tflops_per_gpu"
#: utilization a row may give instead of a rate, read against a dense peak (:func:`utilization_
#: rate`): ``mfu_pct`` (model FLOPs, taken as model TFLOP/s after every direct measurement) and
#: ``hfu_pct`` (hardware FLOPs, taken as hardware TFLOP/s, the last of all)
MFU_METRIC, HFU_METRIC = "mfu_pct", "hfu_pct"
#: the dense peaks (TFLOP/s per GPU) a ``peak_tflops`` cell may hold: from a GPU of a hundredth
#: of an A100 to a hundred times a B200 (a figure outside is a typo or a unit slip)
PEAK_TFLOPS_RANGE = (1.0, 1e6)
#: the per-GPU peak memory a row may state (GiB): a MiB to 4 TiB
MEMORY_RANGE_GIB = (2.0**-10, 4096.0)
#: the per-GPU bandwidth between nodes a row may state (GB/s, one direction): 10 Mb/s to
#: 80 Tb/s per GPU (a figure outside is a unit slip: Gb/s for GB/s is 8x, still inside)
INTER_NODE_RANGE_GBPS = (1e-3, 1e4)
#: ZeRO stages (the leading integer of the ``zero`` cell)
ZERO_STAGES = (0, 1, 2, 3)


class RunsFileError(ValueError):
    """A runs file that cannot be read as published runs; the message locates the problem."""


def reason(exc: Exception) -> str:
    """One line for why the reader or the scenario's validation refused a row: a pydantic
    error's first problem with its field path (``spec.errors``), else the message's first
    line."""
    from pydantic import ValidationError

    from ..spec.errors import from_validation_error

    if isinstance(exc, ValidationError):
        exc = from_validation_error(exc)
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


def shown(path: str | Path) -> str:
    """A path as a message shows it: as given, or quoted with escapes when it holds a character
    that is not printable (a control character would split the one-line message)."""
    text = str(path)
    return text if text.isprintable() else repr(text)


def csv_paths(paths: list[str]) -> list[tuple[Path, bool]]:
    """The CSV files named by ``paths``, each with whether it was named itself: a file as
    given, a directory as its ``*.csv`` files in name order."""
    out: list[tuple[Path, bool]] = []
    for p in paths:
        path = Path(p)
        if path.is_dir():
            found = sorted(q for q in path.glob("*.csv") if q.is_file())
            if not found:
                raise RunsFileError(f"{shown(p)}: a directory without *.csv files")
            out += [(q, False) for q in found]
        elif path.exists():
            out.append((path, True))
        else:
            raise RunsFileError(f"{shown(p)}: no such file or directory")
    return out


def read_table(path: Path) -> tuple[list[str], list[dict[str, str]]]:
    """The header and rows of one CSV file: a regular file of at most
    :data:`~trainscape.spec.readers.MAX_CSV_BYTES`, read without blocking
    (:func:`~trainscape.spec.readers.read_text`: a FIFO or a device such as ``/dev/zero`` is
    refused, not read forever)."""
    try:
        text = read_text(path, "runs CSV", MAX_CSV_BYTES)
    except ScenarioError as exc:
        allowed = f" (expected {exc.allowed})" if exc.allowed else ""
        raise RunsFileError(f"{shown(path)}: cannot be read as CSV: {exc.problem}{allowed}") \
            from None
    try:
        reader = csv.DictReader(io.StringIO(text, newline=""))
        header = list(reader.fieldnames or [])
        return header, list(reader)
    except csv.Error as exc:
        raise RunsFileError(f"{shown(path)}: cannot be read as CSV: {exc}")


def missing_columns(header: list[str]) -> list[str]:
    """The required columns a header lacks (the transformer's may be absent: rows naming a
    model preset take them from it, and :func:`check_row` asks the others for them)."""
    return [c for c in REQUIRED if c not in header and c not in ARCHITECTURE_COLUMNS]


def layout_rows(path: Path, header: list[str], rows: list[dict]) -> list[dict[str, str]]:
    """The rows of a file in the shared layout, every column of it present (absent ones
    empty)."""
    missing = missing_columns(header)
    if missing:
        raise RunsFileError(f"{shown(path)}: column {missing[0]!r} missing; every row needs "
                            + REQUIRED_TEXT)
    if not rows:
        raise RunsFileError(f"{shown(path)}: no rows")
    out = []
    for row in rows:
        if None in row:  # more cells than the header has columns
            out.append(row)  # located by check_row
            continue
        out.append({**{c: "" for c in OPTIONAL + tuple(ARCHITECTURE_COLUMNS)},
                    **{k: (v or "").strip() for k, v in row.items()}})
    return out


def _integer(text: str) -> int | None:
    try:
        value = float(text)
    except ValueError:
        return None
    if not math.isfinite(value) or value != int(value):
        return None
    return int(value)


def _positive_number(text: str) -> float | None:
    try:
        value = float(text)
    except ValueError:
        return None
    return value if math.isfinite(value) and value > 0 else None


#: ``zero`` texts that name a stage without starting with its digit (lower-cased, searched in
#: order): the calibration layout writes ``3 (FSDP ...)``, ``1 (distributed optimizer)``
ZERO_WORDS = ((r"zero[-_ ]?(?:stage[-_ ]?)?([0-3])", None), (r"fsdp|fully[-_ ]shard", 3),
              (r"distributed[-_ ]?optimi[sz]er|dist[-_]?opt", 1), (r"\bddp\b", 0),
              (r"^\s*(?:none|no|off|false)\s*$", 0))  # a cell saying no sharding at all


def zero_stage(text: str) -> int | None:
    """The ZeRO stage a ``zero`` cell states: its leading digit, or a name of a stage
    (:data:`ZERO_WORDS`); None when it states none."""
    stage = _leading_int(text)
    if stage is not None:
        return stage
    low = text.lower()
    for pattern, stage in ZERO_WORDS:
        found = re.search(pattern, low)
        if found:
            return int(found.group(1)) if stage is None else stage
    return None


#: columns whose values are names compared without case (``dtype`` ``BF16``, ``mlp``
#: ``SwiGLU`` / ``squared_relu``): lower case, ``_`` and spaces as ``-``
CASELESS = ("dtype", "mlp")
#: ``dtype`` cells naming a training precision in a table's words (after :data:`CASELESS`
#: normalization), read as the layout's dtype: mixed-precision spellings of the 16-bit types
#: (PyTorch Lightning's ``bf16-mixed``, Composer's ``amp_bf16``), and FP8 named with its
#: recipe (``MXFP8``, ``FP8-CS``, ``fp8_delayed``), whose text then stands for an empty
#: ``fp8_recipe`` (the reader takes MXFP8, current or delayed scaling from it)
DTYPE_WORDS = ((re.compile(r"(?:amp-)?(?:bf16|bfloat16)(?:-mixed(?:-precision)?)?"), "bf16"),
               (re.compile(r"(?:amp-)?(?:fp16|float16|half)(?:-mixed(?:-precision)?)?"), "fp16"),
               (re.compile(r"(?:mx)?fp8(?:-[a-z0-9()-]+)?"), "fp8"))


def normalized_cells(row: dict[str, Any]) -> dict[str, Any]:
    """``row`` with its cells in the forms the reader compares: an optional column's
    :data:`NOT_STATED` mark empty, the :data:`CASELESS` names lower case, the other words of
    ``sp`` and the overlap switches (:data:`SP_WORDS`) and ``recompute``'s plain on-switches
    (:data:`RECOMPUTE_ON`) as the layout writes them (``zero``'s words are
    :func:`zero_stage`'s). A row with more cells than its header, which :func:`check_row`
    refuses, is returned as it is."""
    if None in row:
        return row
    out = {k: ("" if k in OPTIONAL and v.strip().lower() in NOT_STATED else v)
           for k, v in row.items()}
    out.update({c: re.sub(r"[_ ]+", "-", out[c].strip().lower()) for c in CASELESS})
    for pattern, dtype in DTYPE_WORDS:
        if out["dtype"] != dtype and pattern.fullmatch(out["dtype"]):
            if dtype == "fp8" and not out.get("fp8_recipe", "").strip():
                out["fp8_recipe"] = row["dtype"].strip()
            out["dtype"] = dtype
            break
    for column in ("sp",) + OVERLAP_COLUMNS:
        out[column] = SP_WORDS.get(out[column].strip().lower(), out[column])
    if RECOMPUTE_ON.fullmatch(out["recompute"].strip().lower()):
        out["recompute"] = f"full ({out['recompute'].strip()})"
    return out


def preset_architecture(row: dict[str, Any]) -> tuple[dict[str, Any], str | None]:
    """``row`` with its empty transformer cells (:data:`ARCHITECTURE_COLUMNS`) taken from the
    model preset its ``model`` names, and the sentence saying which (None, and ``row`` as it
    is, when it leaves none empty or names no preset). A printed cell is kept: the row is the
    run's own account of the model."""
    if None in row:  # more cells than columns: check_row refuses it
        return row, None
    empty = [c for c in ARCHITECTURE_COLUMNS if not row[c]]
    pid = model_preset_id(row["model"]) if empty else None
    if pid is None:
        return row, None
    preset = presets.get("model", pid)
    # a dense preset's zero experts say what an empty MoE cell says already
    empty = [c for c in empty
             if not (c in NON_NEGATIVE_INTS and c != "ffn_hidden"
                     and preset[ARCHITECTURE_COLUMNS[c]] == 0)]
    if not empty:
        return row, None
    filled = dict(row)
    for column in empty:
        filled[column] = str(preset[ARCHITECTURE_COLUMNS[column]])
    taken = ", ".join(f"{c} {filled[c]}" for c in empty)
    return filled, (f"architecture not printed: {taken} from the {pid} model preset "
                    f"({preset['name']}; its sources in presets/models.toml)")


def check_row(row: dict[str, Any], where: str) -> None:
    """Raise :class:`RunsFileError` at the first cell of ``row`` that is not what its column
    allows (``where`` locates the row: file, line and case)."""
    if None in row:
        raise RunsFileError(f"{where}: more cells than the header has columns")

    def bad(column: str, allowed: str) -> RunsFileError:
        return RunsFileError(f"{where}: column {column!r}: {row[column]!r}: {allowed}")

    for column in REQUIRED:
        if not row[column]:
            hint = (" (or name a model preset in 'model' to take the architecture from it: "
                    + ", ".join(presets.names("model")) + ")"
                    if column in ARCHITECTURE_COLUMNS else "")
            raise RunsFileError(f"{where}: column {column!r} is empty; it is required{hint}")
    for column in POSITIVE_INTS + NON_NEGATIVE_INTS:
        if not row[column]:
            continue
        value = _integer(row[column])
        low = 1 if column in POSITIVE_INTS else 0
        if value is None or not low <= value <= MAX_INT:
            raise bad(column, f"an integer from {low} to {MAX_INT}")
    try:
        presets.preset_id("gpu", row["gpu"])
    except presets.UnknownPreset:
        raise bad("gpu", presets.gpu_names_allowed()) from None
    if row["dtype"] not in DTYPES:
        fp4 = " (FP4 training is not modelled)" if "fp4" in row["dtype"] else ""
        raise bad("dtype", "one of " + ", ".join(DTYPES) + ", or a table's spelling of one "
                  "(bf16-mixed, amp_bf16, MXFP8, FP8-CS)" + fp4)
    if row["mlp"] not in MLPS:
        raise bad("mlp", "one of " + ", ".join(MLPS))
    metrics = measured_columns() + (HW_METRIC, MFU_METRIC, HFU_METRIC)
    if row["metric"] not in metrics:
        raise bad("metric", "one of " + ", ".join(metrics))
    for column in ("value",) + metrics:
        if row[column] and _positive_number(row[column]) is None:
            raise bad(column, "a finite number above 0")
    for column in (MFU_METRIC, HFU_METRIC):
        # the value cell holds a utilization when the metric names one
        cell = row["value"] if row["metric"] == column and not row[column] else row[column]
        if cell and not _positive_number(cell) <= 100.0:
            raise bad(column, "a percentage above 0 and at most 100")
    # the number columns with a range: (range, what the number is)
    for column, (low, high), what in (
            ("peak_tflops", PEAK_TFLOPS_RANGE,
             "dense TFLOP/s per GPU: the peak the row's mfu_pct / hfu_pct divides by"),
            ("peak_memory_gib", MEMORY_RANGE_GIB, "GiB per GPU"),
            ("inter_node_GBps", INTER_NODE_RANGE_GBPS,
             "GB/s per GPU between nodes, one direction: a node's NIC line rate over its GPUs")):
        number = _positive_number(row[column]) if row[column] else low
        if number is None or not low <= number <= high:
            raise bad(column, f"a number from {low:g} to {high:g} ({what})")
    recompute = row["recompute"].lower()
    if recompute and not (recompute.startswith(RECOMPUTE_PREFIXES)
                          or recompute.strip() in RECOMPUTE_NONE):
        raise bad("recompute", "empty (not stated), text starting with "
                  + ", ".join(RECOMPUTE_PREFIXES) + ", or one of " + ", ".join(RECOMPUTE_NONE)
                  + " (none)")
    for column in ("sp",) + OVERLAP_COLUMNS:
        if row[column] and row[column].lower() not in SP_VALUES:
            raise bad(column, "empty (not stated) or one of "
                      + ", ".join(SP_VALUES + tuple(SP_WORDS)))
    if row["zero"] and zero_stage(row["zero"]) not in ZERO_STAGES:
        raise bad("zero", "empty (not stated), text starting with a ZeRO stage ("
                  + ", ".join(map(str, ZERO_STAGES)) + "), or one naming it: ZeRO-N, FSDP (3), "
                  "distributed optimizer (1), DDP (0)")
    if _integer(row["experts"] or "0"):
        for column in ("top_k", "expert_ffn"):
            if not _integer(row[column] or "0"):
                raise RunsFileError(f"{where}: column {column!r} is empty or 0; an MoE row "
                                    "(experts > 0) needs it")
    elif not _integer(row["ffn_hidden"] or "0"):
        raise RunsFileError(f"{where}: column 'ffn_hidden' is empty or 0; a dense row "
                            "(experts empty or 0) needs its MLP width")
    split = 1
    for column in ("tp", "cp", "pp"):
        split *= _integer(row[column] or "1")
    gpus_n = _integer(row["gpus"])
    if gpus_n % split:
        raise bad("gpus", f"a multiple of tp x cp x pp = {split}")
    dp = _integer(row["dp"] or "0")
    if dp and split * dp != gpus_n and (gpus_n // split) % dp:
        raise bad("dp", f"gpus / (tp x cp x pp) = {gpus_n // split}, or a divisor of it (data-"
                  "parallel replicas beside a printed fsdp degree)")


def check_step(step: float, where: str, measurement: str) -> None:
    """Raise :class:`RunsFileError` unless the published step a measurement implies lies in
    :data:`STEP_RANGE_S`."""
    if not (math.isfinite(step) and STEP_RANGE_S[0] <= step <= STEP_RANGE_S[1]):
        raise RunsFileError(f"{where}: the measurement ({measurement}) is a step of {step:.3g} "
                            f"s; allowed: {STEP_RANGE_S[0]:g} to {STEP_RANGE_S[1]:g} s")


#: the fabric each cluster preset :func:`place` lends is, in a row's words
FABRIC_WORDS = {"dgx-h100-superpod": "DGX H100 SuperPOD fabric (8 x 400 Gb/s per node)",
                "dgx-a100-superpod": "DGX A100 SuperPOD fabric (8 x 200 Gb/s per node)"}


def place(run: PublishedRun) -> None:
    """A GPU without a cluster preset of its own runs on the fabric of the GPU whose fit it
    takes (``calibrated_from``: an A800 on the DGX A100 SuperPOD's, an H800 on the DGX H100
    SuperPOD's), else on the DGX H100 SuperPOD's, its node tier at the GPU's own NVLink (said
    in the run's assumptions)."""
    if run.gpu in GPU_CLUSTER:
        return
    nvlink = presets.gpu(run.gpu)["nvlink_bandwidth_GBps"]
    donor = presets.calibration_donor(run.gpu)
    cluster = GPU_CLUSTER.get(donor, DEFAULT_CLUSTER) if donor else DEFAULT_CLUSTER
    if cluster not in FABRIC_WORDS:
        cluster = DEFAULT_CLUSTER
    run.cluster_preset = cluster
    run.cluster_overrides = {**run.cluster_overrides, "tier0_bandwidth_GBps": nvlink}
    run.assumptions.append(f"no cluster preset for {run.gpu}: {FABRIC_WORDS[cluster]} with "
                           f"{nvlink:g} GB/s NVLink assumed")


def _read_row(row: dict[str, Any], where: str, path: Path, line: int,
              seen: dict[str, str]) -> tuple[dict[str, str], PublishedRun]:
    """Row ``line`` of runs file ``path`` (``where`` locates it) as ``(its cells as read, its
    published run)``; :class:`RunsFileError` at the first thing that is not what the layout
    allows. ``seen`` (case id -> file and line) holds the case ids read so far."""
    written = row
    row, architecture = preset_architecture(normalized_cells(row))
    check_row(row, where)
    if row["case"] in seen:
        raise RunsFileError(f"{where}: column 'case': {row['case']!r} repeats "
                            f"{seen[row['case']]}; every case id must be unique")
    seen[row["case"]] = f"{shown(path)}: line {line}"
    source = row["source"] or path.stem
    gpu = presets.preset_id("gpu", row["gpu"])
    filled = {**row, "source": source, "gpu": gpu}
    if filled["zero"] and not filled["zero"].lstrip()[:1].isdigit():
        # the reader takes a stage from the cell's leading digit (the layout's form)
        filled["zero"] = f"{zero_stage(filled['zero'])} ({filled['zero']})"
    if not filled[filled["metric"]]:
        filled[filled["metric"]] = filled["value"]
    utilization_notes: list[str] = []
    direct = any(filled[c] for c in measured_columns())
    if not direct and filled[MFU_METRIC]:
        rate = utilization_rate(filled, MFU_METRIC, where, utilization_notes)
        filled["model_tflops_per_gpu"] = repr(rate)
        direct = True
    hardware_rate = None
    if not direct:
        hardware_rate = float(filled[HW_METRIC]) if filled[HW_METRIC] else \
            utilization_rate(filled, HFU_METRIC, where, utilization_notes)
        # read as model TFLOP/s until runner_for converts it
        filled["model_tflops_per_gpu"] = repr(hardware_rate)
    try:
        run = run_of(source, filled)
    except (KeyError, ValueError, ArithmeticError) as exc:
        raise RunsFileError(f"{where}: not a costable run: {reason(exc)}")
    check_step(run.published_step_s, where,
               f"{filled['metric']} = {filled['value']}")
    run.assumptions += utilization_notes
    if architecture:
        run.assumptions.append(architecture)
    run.shipped = False
    run.origin = where
    if row["recompute"] != written.get("recompute", "") and row["recompute"]:
        run.assumptions.append(f"recompute {written['recompute']!r}: activation "
                               "checkpointing switched on, read as full recompute "
                               "(whole layers; selective recompute is named)")
    if row["dtype"] != written["dtype"].strip().lower():
        recipe = " (its recipe from the name)" if row["fp8_recipe"] and not written.get(
            "fp8_recipe", "").strip() else ""
        run.assumptions.append(f"dtype {written['dtype']!r} read as {row['dtype']}{recipe}")
    if gpu != row["gpu"]:
        run.assumptions.append(f"gpu {row['gpu']!r} read as the {gpu} preset (another "
                               "name of it: presets/aliases.toml)")
    if filled["peak_memory_gib"]:
        run.published_memory_gib = float(filled["peak_memory_gib"])
        run.memory_measure = filled["memory_measure"].lower()
    if hardware_rate is not None:
        run.hardware_tflops = hardware_rate
    place(run)
    return filled, run


def read_row(row: dict[str, str], where: str) -> PublishedRun:
    """One row of the layout (every column present) as a published run, read as a runs file's
    row is (:func:`read_runs`: utilization and hardware-rate measurements converted, the GPU's
    cluster placed); ``where`` locates it in a :class:`RunsFileError`. A run measured in
    hardware TFLOP/s alone gets its published step from :func:`hardware_step` once a runner
    holds it (:func:`runner_for` does both)."""
    return _read_row(row, where, Path(where), 0, {})[1]


def utilization_rate(row: dict[str, str], column: str, where: str, notes: list[str]) -> float:
    """TFLOP/s per GPU of a row measured as a utilization (``column``: ``mfu_pct`` or
    ``hfu_pct``, percent of a dense peak), the sentence saying how it was read appended to
    ``notes``; :class:`RunsFileError` where the peak it divides by cannot be known.

    The peak is the row's ``peak_tflops`` where it states one; else, for a 16-bit row, the GPU
    preset's dense peak in the row's dtype at its rated power -- the datasheet figure MFU is
    quoted against (PaLM, Chowdhery et al. 2022, Appendix B: observed throughput over the
    theoretical peak). An FP8 row must state it: sources divide FP8 runs by the BF16 peak
    (torchtitan ``tools/utils.py`` ``get_peak_flops``: the dense BF16 datasheet figure for any
    dtype) or by the FP8 one (llm-foundry's ``collect_results.py``), a factor of two apart."""
    percent = float(row[column])
    if row["peak_tflops"]:
        peak = float(row["peak_tflops"])
        whose = "the row's peak_tflops"
    elif row["dtype"] == "fp8":
        raise RunsFileError(
            f"{where}: column 'peak_tflops' is empty; an fp8 row measured in {column} needs "
            "the dense peak (TFLOP/s per GPU) its utilization divides by: sources divide FP8 "
            "runs by the BF16 or by the FP8 peak")
    else:
        peak = float(presets.gpu(row["gpu"])["peak_tflops"][row["dtype"]])
        whose = f"the {row['gpu']} preset's dense {row['dtype']} peak"
    rate = percent / 100.0 * peak
    kind = "model" if column == MFU_METRIC else "hardware"
    notes.append(f"{column} {percent:g} read against {whose}, {peak:g} TFLOP/s: {rate:.4g} "
                 f"{kind} TFLOP/s per GPU")
    return rate


def no_readable_row(unreadable: list[str]) -> RunsFileError:
    """The error of a ``--keep-going`` read that found no row it could take: the first
    row's located message, and how many more there were."""
    more = f" (and {len(unreadable) - 1} more)" if len(unreadable) > 1 else ""
    return RunsFileError(f"no readable row: {unreadable[0]}{more}")


def read_runs(paths: list[str], skipped: list[tuple[str, str]] | None = None,
              unreadable: list[str] | None = None) -> list[PublishedRun]:
    """Every row of the CSV files (or directories of them) in ``paths`` as a published run,
    with the shipped set's counting rule: where a source repeats a layout across NeMo releases
    only the newest counts. A row's ``source`` (its file's name when empty) is its summary
    group. With ``skipped`` (a list), a CSV found in a directory whose header lacks a required
    column is passed over and listed there as ``(file, why)``, not refused (a file named
    itself always must be in the layout); a directory with no file in it is refused. With
    ``unreadable`` (a list), a row that is not what the layout allows is passed over and its
    located message listed there (``validate --keep-going``), not refused; a file with no
    readable row still is."""
    runs: list[PublishedRun] = []
    seen: dict[str, str] = {}
    files = csv_paths(paths)
    for path, named in files:
        may_skip = not named and skipped is not None
        try:
            header, table = read_table(path)
        except RunsFileError:
            if not may_skip:
                raise
            header, table = [], []  # unreadable: no header of the layout
        missing = missing_columns(header)
        if missing and may_skip:  # a CSV of another layout beside the runs files of a folder
            skipped.append((shown(path), f"not in the published-runs layout (no "
                                       f"{missing[0]!r} column)"))
            continue
        rows = layout_rows(path, header, table)
        file_runs = []
        for line, row in enumerate(rows, start=2):
            where = f"{shown(path)}: line {line}" + (f" (case {row.get('case')!r})"
                                               if row.get("case") else "")
            try:
                file_runs.append(_read_row(row, where, path, line, seen))
            except RunsFileError as exc:
                if unreadable is None:
                    raise
                unreadable.append(str(exc))
        mark_older_releases(file_runs)
        runs += [run for _, run in file_runs]
    if not runs and unreadable:
        raise no_readable_row(unreadable)
    if not runs:
        raise RunsFileError(", ".join(map(shown, paths)) + ": no CSV file in the published-"
                            "runs layout (every row needs " + REQUIRED_TEXT + ")")
    return runs


def runner_for(paths: list[str], skipped: list[tuple[str, str]] | None = None,
               unreadable: list[str] | None = None) -> Runner:
    """A :class:`~trainscape.calibration.Runner` over the runs of ``paths``
    (:func:`read_runs`, ``skipped`` and ``unreadable`` as there), each run's scenario and layout
    validated now, so a row the model's input ranges reject is a located
    :class:`RunsFileError` rather than an error mid-report (a valid layout the model calls
    infeasible is a failed row of the report, as in the shipped set) -- or, with
    ``unreadable``, listed there and left out."""
    from ..spec import ConfigSpec

    runs = read_runs(paths, skipped, unreadable)
    runner = Runner(runs)
    costable = []
    for run in runs:
        try:
            runner.scenario(run)
            ConfigSpec(**run.config)
        except ValueError as exc:
            message = (f"{run.origin or repr(run.case)}: not a costable run: "
                       f"{reason(exc)}")
            if unreadable is None:
                raise RunsFileError(message) from None
            unreadable.append(message)
            continue
        costable.append(run)
    if len(costable) < len(runs):
        if not costable:
            raise no_readable_row(unreadable)
        runner = Runner(costable)
    return hardware_steps(runner)


def hardware_steps(runner: Runner) -> Runner:
    """``runner``, each of its runs measured in hardware TFLOP/s alone given its published step
    (:func:`hardware_step`)."""
    for run in runner.runs:
        if run.hardware_tflops is not None:
            hardware_step(runner, run)
    return runner


def hardware_step(runner: Runner, run: PublishedRun) -> None:
    """The published step of a run measured in hardware TFLOP/s per GPU alone: the model's
    hardware FLOPs per GPU and step for the run's layout (recomputation counted, causal
    attention's skipped half not: ``model.llm``'s convention) over the published rate. A layout
    the model cannot cost keeps the model-FLOPs reading, and says so."""
    from .. import layout as L
    from ..backends import evaluate_blocks

    runner.settle_layout(run)  # the hardware FLOPs count the recompute the run ran
    out = evaluate_blocks(*runner.packed(run), backend="python")[:, 0]
    if L.STATUS[int(out[L.OUT_STATUS])] == "invalid_config":
        run.assumptions.append("hardware TFLOP/s read as model TFLOP/s: the layout is not one "
                               "the model can cost, so its hardware FLOPs are unknown")
        return
    flops_per_gpu = float(out[L.OUT_HW_TFLOPS_PER_GPU] * out[L.OUT_STEP_TIME_S]) * 1e12
    run.published_step_s = flops_per_gpu / (run.hardware_tflops * 1e12)
    run.assumptions = [a for a in run.assumptions if not a.startswith("TFLOP/s convention")]
    run.assumptions.append(f"hardware TFLOP/s converted with the model's hardware FLOPs for "
                           f"this layout ({flops_per_gpu:.4g} per GPU and step, recompute "
                           "counted): the published step depends on the model's FLOP count")
    check_step(run.published_step_s, run.origin or repr(run.case),
               f"{HW_METRIC} = {run.hardware_tflops:g}")
