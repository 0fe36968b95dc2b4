"""The C backend: ``trainscape.native._llm`` (cffi, API mode) wrapped for NumPy.

Loading checks that the compiled library was built from the current layout: every C enum value
must equal :mod:`trainscape.layout`'s index (a stale build fails loudly instead of reading the
wrong fields). Calls validate dtypes, shapes and contiguity *before* entering C, pass NumPy
buffers with ``ffi.from_buffer`` (no copies) and run with the GIL released (cffi's default for
API-mode calls). The kernel validates block values itself; its negative codes become
``ValueError`` naming the field.
"""

from __future__ import annotations

import numpy as np

from .. import layout as L

try:  # the extension is optional: the numba and python backends work without it
    from ._llm import ffi, lib
except ImportError as exc:  # pragma: no cover - exercised when the build was skipped
    ffi = lib = None
    IMPORT_ERROR: str | None = f"trainscape.native._llm is not built ({exc})"
else:
    IMPORT_ERROR = None


class NativeLayoutError(RuntimeError):
    """The compiled library disagrees with layout.py (rebuild it)."""


def check_layout() -> None:
    """Raise :class:`NativeLayoutError` unless every C enum / constant equals layout.py's."""
    if lib is None:
        raise ImportError(IMPORT_ERROR)
    problems = []
    for pyname, fields, prefix in L.GROUPS:
        for i, field in enumerate(fields):
            cname = L.c_name(prefix, field)
            got = getattr(lib, cname, None)
            if got != i:
                problems.append(f"{cname}={got} but layout.{pyname} has {field!r} at {i}")
        count = getattr(lib, prefix + "COUNT", None)
        if count != len(fields):
            problems.append(f"{prefix}COUNT={count} but layout.{pyname} has {len(fields)}")
    for name in ("MAX_TIERS", "MAX_SITES", "N_SYS_SCALARS", "N_TIER", "SYS_TIER_BASE",
                 "SYS_SITE_LINK_BASE", "N_SYS", "N_MODEL",
                 "N_JOB", "N_CFG", "N_OUT", "N_DIMS", "N_ORDERS"):
        got = getattr(lib, "TS_" + name, None)
        if got != getattr(L, name):
            problems.append(f"TS_{name}={got} but layout.{name}={getattr(L, name)}")
    got_hash = getattr(lib, "TS_LAYOUT_HASH", None)
    if got_hash is not None and got_hash != L.layout_hash():
        problems.append(f"TS_LAYOUT_HASH={got_hash:#x} but layout.layout_hash()="
                        f"{L.layout_hash():#x}")
    if problems:
        raise NativeLayoutError(
            "trainscape.native._llm was built from a different layout; rebuild it "
            "(pip install -e . or python src/trainscape/native/build_llm.py): " + "; ".join(problems)
        )


if lib is not None:
    check_layout()

_BLOCKS = (("system", L.N_SYS), ("model", L.N_MODEL), ("job", L.N_JOB))
_I32 = np.dtype(np.int32)
_F64 = np.dtype(np.float64)
_BLOCK_FIELDS = {1: "system", 2: "model", 3: "job"}


def field_path(block: int, index: int) -> str:
    """``system.tiers[1].bandwidth``, ``model.hidden`` ... for a block number and field index."""
    if block == 1:
        if index >= L.SYS_SITE_LINK_BASE:
            pair, field = divmod(index - L.SYS_SITE_LINK_BASE, L.N_TIER)
            a, b = divmod(pair, L.MAX_SITES)
            return f"system.site_links[{a}][{b}].{L.TIER_FIELDS[field]}"
        if index >= L.SYS_TIER_BASE:
            tier, field = divmod(index - L.SYS_TIER_BASE, L.N_TIER)
            return f"system.tiers[{tier}].{L.TIER_FIELDS[field]}"
        return f"system.{L.SYSTEM_FIELDS[index]}"
    if block == 2:
        return f"model.{L.MODEL_FIELDS[index]}"
    return f"job.{L.JOB_FIELDS[index]}"


def _field_rule(block: int, index: int) -> str:
    if block == 1 and index == L.SYS_N_TIERS:
        return f"an integer in 1..{L.MAX_TIERS}"
    if block == 1 and index == L.SYS_N_SITES:
        return f"0 or an integer in 2..{L.MAX_SITES}"
    if block == 1 and index >= L.SYS_TIER_BASE:
        field = (index - L.SYS_TIER_BASE) % L.N_TIER
        return "a finite number >= 0" if field in (L.TIER_LATENCY, L.TIER_WINDOW_BYTES,
                                                   L.TIER_HANDSHAKE_RTTS,
                                                   L.TIER_COMM_DTYPE_BYTES) \
            else "a finite number > 0"
    if block == 1:
        if index in (L.SYS_GPUS, L.SYS_PEAK_FLOPS, L.SYS_HBM_BANDWIDTH, L.SYS_GEMM_EFFICIENCY_MAX,
                     L.SYS_ATTENTION_EFFICIENCY, L.SYS_MEMORY_EFFICIENCY,
                     L.SYS_LINEAR_PEAK_FLOPS, L.SYS_LINEAR_EFFICIENCY_MAX):
            return "a finite number > 0"
        if index == L.SYS_TP_OVERLAP_EXPOSED:
            return "a finite number in [0, 1]"
        return "a finite number >= 0"
    if block == 2:
        if index in (L.MDL_LAYERS, L.MDL_HIDDEN, L.MDL_HEADS, L.MDL_KV_HEADS, L.MDL_HEAD_DIM,
                     L.MDL_VOCAB):
            return "a number in [1, 2**53]"
        return "a number in [0, 2**53]"
    if index in (L.JOB_SEQ_LEN, L.JOB_GLOBAL_BATCH):
        return "a number in [1, 2**53]"
    if index in (L.JOB_PIPELINE_EDGE_LAYERS, L.JOB_RECOMPUTE_LAYERS,
                 L.JOB_PIPELINE_FIRST_STAGE_LAYERS, L.JOB_PIPELINE_LAST_STAGE_LAYERS,
                 L.JOB_DP_REPLICAS):
        return "a number in [0, 2**53]"
    return "a finite number >= 0"


def raise_for_code(code: int, sys, mdl, job) -> None:
    """Turn a negative kernel return code into a ValueError naming the field."""
    if code >= 0:
        return
    if code == lib.TS_ERR_ARG:
        raise ValueError("native kernel: bad argument (NULL buffer, n < 0 or threads < 0)")
    rest = -code - lib.TS_ERR_FIELD_BASE
    block, index = divmod(rest, lib.TS_ERR_BLOCK_STRIDE)
    if block not in _BLOCK_FIELDS:
        raise ValueError(f"native kernel: unknown error code {code}")
    value = float((sys, mdl, job)[block - 1][index])
    raise ValueError(
        f"{field_path(block, index)}: got {value!r}, expected {_field_rule(block, index)}"
    )


def _check_block(name: str, block, size: int) -> None:
    if not isinstance(block, np.ndarray):
        raise TypeError(f"{name} block: expected a numpy.ndarray, got {type(block).__name__}")
    if block.dtype != _F64 or block.shape != (size,):
        raise ValueError(
            f"{name} block: expected float64 of shape ({size},), got {block.dtype} {block.shape}"
        )
    if not block.flags.c_contiguous:
        raise ValueError(f"{name} block: must be C-contiguous")


def _check_inputs(sys, mdl, job, cfg, out, n_out_cols=None) -> int:
    for (name, size), block in zip(_BLOCKS, (sys, mdl, job)):
        _check_block(name, block, size)
    if not isinstance(cfg, np.ndarray):
        raise TypeError(f"configs: expected a numpy.ndarray, got {type(cfg).__name__}")
    if cfg.dtype != _I32 or cfg.ndim != 2 or cfg.shape[0] != L.N_CFG:
        raise ValueError(f"configs: expected int32 of shape ({L.N_CFG}, n), got {cfg.dtype} "
                         f"{cfg.shape}")
    if not cfg.flags.c_contiguous:
        raise ValueError("configs: must be C-contiguous (one contiguous row per config field); "
                         "use numpy.ascontiguousarray")
    n = cfg.shape[1]
    if out is not None:
        if not isinstance(out, np.ndarray):
            raise TypeError(f"out: expected a numpy.ndarray, got {type(out).__name__}")
        if out.dtype != _F64 or out.shape != (L.N_OUT, n):
            raise ValueError(f"out: expected float64 of shape ({L.N_OUT}, {n}), got {out.dtype} "
                             f"{out.shape}")
        if not out.flags.c_contiguous or not out.flags.writeable:
            raise ValueError("out: must be C-contiguous and writeable")
    return n


def _require() -> None:
    if lib is None:
        raise ImportError(IMPORT_ERROR)


def _threads(threads) -> int:
    if threads is None:
        return 0
    if isinstance(threads, bool) or not isinstance(threads, (int, np.integer)) or threads < 1:
        raise ValueError(f"threads: got {threads!r}, expected an integer >= 1 or None (all cores)")
    return int(threads)


def evaluate_batch(sys, mdl, job, cfg, out=None, threads=None):
    """Cost every configuration column of ``cfg`` (``int32 (N_CFG, n)``, C-contiguous) with the
    C kernel; returns ``out`` (``float64 (N_OUT, n)``). ``threads``: worker threads, ``None`` for
    all cores."""
    _require()
    n = _check_inputs(sys, mdl, job, cfg, out)
    nt = _threads(threads)
    if out is None:
        out = np.empty((L.N_OUT, n), dtype=np.float64)
    if n == 0:
        code = lib.ts_check_blocks(ffi.from_buffer("double[]", sys), ffi.from_buffer("double[]", mdl),
                                   ffi.from_buffer("double[]", job))
        raise_for_code(code, sys, mdl, job)
        return out
    code = lib.ts_llm_evaluate_batch(
        ffi.from_buffer("double[]", sys),
        ffi.from_buffer("double[]", mdl),
        ffi.from_buffer("double[]", job),
        ffi.from_buffer("int32_t[]", cfg),
        n,
        ffi.from_buffer("double[]", out, require_writable=True),
        nt,
    )
    raise_for_code(code, sys, mdl, job)
    return out


def _config_column(cfg_column) -> np.ndarray:
    cfg = cfg_column if isinstance(cfg_column, np.ndarray) else np.asarray(cfg_column)
    if cfg.dtype.kind not in "iu" or cfg.shape != (L.N_CFG,):
        raise ValueError(f"config: expected integers of shape ({L.N_CFG},), got {cfg.dtype} "
                         f"{cfg.shape}")
    if cfg.dtype != _I32:
        info = np.iinfo(np.int32)
        if cfg.min() < info.min or cfg.max() > info.max:
            raise ValueError("config: values must fit in int32")
        return np.ascontiguousarray(cfg, dtype=np.int32)
    return cfg if cfg.flags.c_contiguous else np.ascontiguousarray(cfg)


def cost(sys, mdl, job, cfg_column) -> np.ndarray:
    """Cost one configuration (``int32 (N_CFG,)``) with ``ts_llm_cost``; returns ``(N_OUT,)``."""
    _require()
    cfg = _config_column(cfg_column)
    for (name, size), block in zip(_BLOCKS, (sys, mdl, job)):
        _check_block(name, block, size)
    out = np.empty(L.N_OUT, dtype=np.float64)
    code = lib.ts_llm_cost(
        ffi.from_buffer("double[]", sys),
        ffi.from_buffer("double[]", mdl),
        ffi.from_buffer("double[]", job),
        ffi.from_buffer("int32_t[]", cfg),
        ffi.from_buffer("double[]", out, require_writable=True),
    )
    raise_for_code(code, sys, mdl, job)
    return out


def config_error(sys, mdl, job, cfg_column) -> int:
    """The kernel's ``config_error`` code of one configuration (0 = valid)."""
    _require()
    cfg = _config_column(cfg_column)
    for (name, size), block in zip(_BLOCKS, (sys, mdl, job)):
        _check_block(name, block, size)
    code = lib.ts_llm_config_error(
        ffi.from_buffer("double[]", sys),
        ffi.from_buffer("double[]", mdl),
        ffi.from_buffer("double[]", job),
        ffi.from_buffer("int32_t[]", cfg),
    )
    raise_for_code(code, sys, mdl, job)
    return int(code)


def max_threads() -> int:
    """Threads a batch uses by default (every core)."""
    _require()
    return int(lib.ts_max_threads(0))
