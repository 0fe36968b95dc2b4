"""Named hardware, cluster and model presets, read from the TOML files next to this module.

Every numeric value in the data files carries the public source it comes from (a ``sources``
table per preset; one ``source`` string per network tier). See ``docs/presets.md``.

Kinds and where they live:

- ``gpu``     -- ``gpus.toml``, one top-level table per preset id.
- ``cluster`` -- ``clusters.toml``, one top-level table per preset id, ``tiers`` innermost first.
- ``model``   -- ``models.toml``, the top-level tables other than ``dlrm`` (LLM presets).
- ``dlrm``    -- ``models.toml``, the tables under ``[dlrm.<id>]``.

Each accessor returns a fresh deep copy, so callers may mutate the result (apply overrides).
Only the standard library is imported; parsed files are cached.
"""

from __future__ import annotations

import copy
import functools
import re
import tomllib
from importlib import resources

__all__ = [
    "KINDS",
    "UnknownPreset",
    "cluster",
    "dlrm",
    "calibrated_constants",
    "calibrated_dtypes",
    "calibration_donor",
    "fit_origin",
    "resolve_gpu",
    "stack_profile",
    "get",
    "gpu_names_allowed",
    "llm_param_counts",
    "gpu",
    "model",
    "names",
    "normalized_name",
    "preset_id",
    "summary_rows",
]

#: The preset kinds, in the order the CLI lists them.
KINDS = ("gpu", "cluster", "model", "dlrm", "stack")

_FILES = {
    "gpu": "gpus.toml",
    "cluster": "clusters.toml",
    "model": "models.toml",
    "dlrm": "models.toml",
    "stack": "stacks.toml",
}
#: Key in models.toml that holds the DLRM presets (so it is not an LLM preset id).
_DLRM_KEY = "dlrm"
#: Other names of presets, per kind: ``aliases.toml`` (GPUs: how tables and nvidia-smi spell
#: them)
_ALIASES_FILE = "aliases.toml"


class UnknownPreset(KeyError):
    """A preset name that does not exist; the message lists the names that do."""

    def __init__(self, kind: str, name: object, available: list[str]):
        self.kind = kind
        self.name = name
        self.available = list(available)
        self.message = (
            f"unknown {kind} preset {name!r}; available {kind} presets: "
            + ", ".join(self.available)
        )
        super().__init__(self.message)

    def __str__(self) -> str:  # KeyError would print the repr of the message
        return self.message


@functools.lru_cache(maxsize=None)
def _parse(filename: str) -> dict:
    """Parse one data file shipped inside the package (cached; never handed out directly)."""
    with resources.files(__name__).joinpath(filename).open("rb") as fh:
        return tomllib.load(fh)


def _check_kind(kind: str) -> None:
    if kind not in _FILES:
        raise ValueError(f"preset kind {kind!r} is not one of {', '.join(KINDS)}")


def _table(kind: str) -> dict:
    """The mapping preset id -> raw table for one kind (cached object: do not mutate)."""
    _check_kind(kind)
    doc = _parse(_FILES[kind])
    if kind == "dlrm":
        return doc.get(_DLRM_KEY, {})
    if kind == "model":
        return {k: v for k, v in doc.items() if k != _DLRM_KEY}
    return doc


def names(kind: str) -> list[str]:
    """Preset ids of one kind (``"gpu"``, ``"cluster"``, ``"model"``, ``"dlrm"``, ``"stack"``),
    file order."""
    return list(_table(kind))


def normalized_name(text: str) -> str:
    """``text`` as names are compared: its letters and digits alone, lower case, a leading
    ``nvidia`` dropped ("NVIDIA H100 80GB HBM3" and ``h100-80gb-hbm3`` -> ``h10080gbhbm3``;
    "Llama 3.1 405B" and ``llama3.1-405b`` -> ``llama31405b``)."""
    name = re.sub(r"[^a-z0-9]+", "", text.lower())
    return name[len("nvidia"):] if name.startswith("nvidia") else name


@functools.lru_cache(maxsize=None)
def _names_of(kind: str) -> dict[str, str]:
    """Every normalized name of every preset of ``kind`` -> its id: the ids, the GPUs' and the
    models' ``name`` fields ("NVIDIA H200", "Llama 3 70B"), and the other names of
    ``aliases.toml``."""
    table = _table(kind)
    found: dict[str, str] = {}
    for pid in table:
        found[normalized_name(pid)] = pid
    if kind in ("gpu", "model"):
        for pid, preset in table.items():
            found.setdefault(normalized_name(str(preset.get("name", pid))), pid)
    for alias, pid in _parse(_ALIASES_FILE).get(kind, {}).items():
        found.setdefault(normalized_name(alias), pid)
    return found


def preset_id(kind: str, name: object) -> str:
    """The id of the preset of ``kind`` that ``name`` names: the id itself, or another name of
    it -- a GPU's datasheet ``name`` or an ``aliases.toml`` entry -- compared as
    :func:`normalized_name`. ``UnknownPreset`` (listing the ids) for a name of none."""
    table = _table(kind)
    if isinstance(name, str):
        if name in table:
            return name
        pid = _names_of(kind).get(normalized_name(name))
        if pid is not None:
            return pid
    raise UnknownPreset(kind, name, list(table))


def gpu_names_allowed() -> str:
    """What a GPU name may be, for an error message: the ids, or another name of one."""
    return (", ".join(names("gpu")) + ", or another name of one of them (a datasheet name such "
            "as 'H100 SXM5 80GB', an nvidia-smi name such as 'NVIDIA A100-SXM4-40GB': "
            "presets/aliases.toml)")


def get(kind: str, name: str) -> dict:
    """A deep copy of preset ``name`` of ``kind`` (an id or another name of one:
    :func:`preset_id`); ``UnknownPreset`` if there is none."""
    return copy.deepcopy(_table(kind)[preset_id(kind, name)])


#: Job dtypes a ``calibrated.toml`` GPU table may hold a sub-table for (``[<gpu>.fp8]``).
CALIBRATED_DTYPES = ("bf16", "fp16", "fp8")
#: Sub-tables of a ``calibrated.toml`` GPU table that are not constants.
_CALIBRATED_META = ("provenance",)
#: The software-stack profiles (``stacks.toml``) and the default one.
STACKS = ("megatron-core", "pytorch-fsdp", "jax-xla", "megatron-lm")
DEFAULT_STACK = "megatron-core"
#: GPU constants a stack profile may scale (``stacks.toml`` documents why each may differ).
STACK_SCALABLE = ("gemm_efficiency_max", "attention_efficiency", "memory_efficiency",
                  "layer_overhead_us", "step_overhead_ms")
#: GPU constants a stack profile's ``[<stack>.tp_overlap]`` table replaces: those of the
#: stack's own TP-overlap mechanism (``stacks.toml`` derives each)
STACK_TP_OVERLAP = ("tp_overlap_exposed", "tp_overlap_slowdown")
#: the scalable constants that are fractions of a peak or a bandwidth (at most 1)
FRACTION_FIELDS = ("gemm_efficiency_max", "attention_efficiency", "memory_efficiency")
#: every constant a resolution step may push past 1 that must stay a fraction: the scalable
#: ones, and those a ratio transfer (:func:`_transferred_items`) also carries
_CAPPED_FIELDS = FRACTION_FIELDS + ("fp8_gemm_efficiency_max", "legacy_attention_fraction")
#: gpus.toml keys that say how to resolve a preset (:func:`calibration_donor`), not constants
_RESOLUTION_KEYS = ("calibrated_from", "calibration_transfer")


def _at_most_one(key: str, value: object) -> tuple[object, bool]:
    """``value`` capped at 1 when ``key`` is a fraction (:data:`_CAPPED_FIELDS`), and whether
    it was: a multiplier or ratio fitted on one GPU's values can push another's past the whole
    peak or bandwidth."""
    if key in _CAPPED_FIELDS and isinstance(value, float) and value > 1.0:
        return 1.0, True
    return value, False


def gpu(name: str, calibrated: bool = True, dtype: str | None = None,
        stack: str | None = None) -> dict:
    """GPU preset: name, peak_tflops {bf16, fp16[, fp8]} (dense), hbm_gb, hbm_bandwidth_GBps,
    nvlink_bandwidth_GBps, gemm_efficiency_max, gemm_half_flops, attention_efficiency,
    memory_efficiency, hbm_reserve_gb, sources -- as :func:`resolve_gpu` resolves it.

    With ``calibrated`` (the default), constants fitted against published training runs for
    this GPU type (``calibrated.toml``, written by ``scripts/calibrate.py``) replace the
    microbenchmark values, and their ``sources`` entries say so; ``dtype`` picks the fit's
    per-dtype table where there is one, ``stack`` a software-stack profile."""
    return resolve_gpu(name, dtype=dtype, stack=stack, calibrated=calibrated)


def _calibration_note(provenance: dict) -> str:
    return (f"calibrated by {provenance.get('script', 'scripts/calibrate.py')} against "
            + "; ".join(provenance.get("sources", [])))


def resolve_gpu(name: str, dtype: str | None = None, stack: str | None = None,
                calibrated: bool = True, explicit: dict | None = None) -> dict:
    """The constants of GPU preset ``name`` for a job in ``dtype`` on software ``stack``: the
    one function every entry point (scenario files, ``--set``, the Python API, ``validate``,
    ``trainscape presets gpu``) resolves a GPU through.

    Resolution order, each step overriding the one before:

    1. ``gpus.toml`` -- the microbenchmark (stock) values;
    2. ``calibrated.toml [<name>]`` -- constants fitted for this GPU type (all dtypes), or,
       for a type without a fit, its ``calibrated_from`` donor's, transferred
       (:func:`_transferred_items`);
    3. ``calibrated.toml [<name>.<dtype>]`` -- constants fitted for this dtype (likewise);
    4. ``stacks.toml [<stack>.scale]`` -- a software-stack profile's multipliers, and its
       ``[<stack>.tp_overlap]`` constants of the stack's own TP overlap;
    5. ``explicit`` -- fields the user wrote in the scenario (never scaled).

    Steps 2 and 3 only with ``calibrated``. ``UnknownPreset`` for an unknown GPU; an unknown
    ``dtype`` or ``stack`` resolves as if none were given (the scenario's validation reports
    it with its field path). The result's ``sources`` say where each replaced value came from.
    """
    name = preset_id("gpu", name)
    preset = get("gpu", name)
    sources = preset.setdefault("sources", {})
    for key in _RESOLUTION_KEYS:
        preset.pop(key, None)
        sources.pop(key, None)
    # the streaming microbenchmark's value, kept apart before the fits lower memory_efficiency
    preset["stream_memory_efficiency"] = preset["memory_efficiency"]
    sources["stream_memory_efficiency"] = ("the stock memory_efficiency (gpus.toml), never "
                                           "fitted: " + sources.get("memory_efficiency", ""))
    if calibrated:
        for key, value, note in _calibrated_items(name, dtype):
            preset[key] = value
            sources[key] = note
    profile = stack_profile(stack if isinstance(stack, str) and stack in STACKS
                            else DEFAULT_STACK)
    for key, factor in profile.get("scale", {}).items():
        preset[key] = preset.get(key, 0.0) * factor
        sources[key] = (sources.get(key, "") + f"; x {factor:g} for the {profile['id']} stack "
                        "profile (stacks.toml)").lstrip("; ")
        preset[key], capped = _at_most_one(key, preset[key])
        if capped:
            sources[key] += " (capped at 1)"
    for key, value in profile.get("tp_overlap", {}).items():
        if key not in STACK_TP_OVERLAP:
            continue  # only the overlap constants (tests/test_gpu_constants.py holds the file)
        preset[key] = value
        sources[key] = (f"the {profile['id']} stack's own TP overlap (stacks.toml): "
                        + profile.get("sources", {}).get("tp_overlap", ""))
    for key, value in (explicit or {}).items():
        preset[key] = value
        if key in sources:
            sources[key] = "set in the scenario"
    return preset


def _own_calibrated_items(name: str, dtype: str | None) -> list[tuple[str, object, str]]:
    """(field, value, source note) of the constants fitted for ``name`` itself, in resolution
    order: the GPU table's, then its ``dtype`` sub-table's."""
    table = calibrated_constants(name)
    out = []
    base_note = _calibration_note(table.get("provenance", {}))
    for key, value in table.items():
        if key in _CALIBRATED_META or isinstance(value, dict):
            continue
        out.append((key, value, base_note))
    sub = table.get(dtype) if isinstance(dtype, str) and dtype in CALIBRATED_DTYPES else None
    if isinstance(sub, dict):
        prov = sub.get("provenance", table.get("provenance", {}))
        note = _calibration_note(prov) + f" ({dtype} jobs)"
        for key, value in sub.items():
            if key in _CALIBRATED_META or isinstance(value, dict):
                continue
            out.append((key, value, note))
    return out


def calibration_donor(name: str) -> str | None:
    """The calibrated GPU whose fit GPU ``name`` takes (``calibrated_from`` in ``gpus.toml``),
    or None: no donor named, or the donor has no fit. A GPU with a donor may also have a fit of
    its own for the fields its own runs pin (B200 and GB200: ``scripts/calibrate.py``'s
    Blackwell fit); those override the transferred values (:func:`_calibrated_items`)."""
    donor = get("gpu", name).get("calibrated_from")
    return donor if isinstance(donor, str) and calibrated_constants(donor) else None


def _transferred_items(name: str, donor: str, dtype: str | None) -> list[tuple[str, object, str]]:
    """The donor's fitted constants carried to GPU ``name`` by its ``calibration_transfer``:
    ``"copy"`` (a part of the donor's die) keeps them as they are; ``"ratio"`` (another
    generation) carries each as the ratio of the donor's fitted value to the donor's stock
    value, times ``name``'s own stock value -- the share of a microbenchmark's figure the
    training stacks reach, not the figure. Where the donor's stock value is 0 or absent
    (``layer_overhead_us``: a time, not an efficiency) the fitted value is copied."""
    own = get("gpu", name)
    stock = get("gpu", donor)
    ratio_rule = own.get("calibration_transfer") == "ratio"
    why = own.get("sources", {}).get("calibrated_from", "")
    out = []
    for key, value, note in _own_calibrated_items(donor, dtype):
        base = stock.get(key)
        mine = own.get(key)
        moved = value
        how = "copied"
        if ratio_rule and isinstance(base, (int, float)) and base > 0 \
                and isinstance(mine, (int, float)) and isinstance(value, (int, float)):
            moved = mine * (value / base)
            how = f"x {value / base:.3g} of this GPU's stock value {mine:g}"
        moved, capped = _at_most_one(key, moved)
        if capped:
            how += " (capped at 1)"
        out.append((key, moved, f"{note}; transferred from {donor} ({how}): {why}"))
    return out


def _calibrated_items(name: str, dtype: str | None) -> list[tuple[str, object, str]]:
    """(field, value, source note) of the fitted constants for ``name`` in resolution order:
    its donor's, transferred (:func:`calibration_donor`, :func:`_transferred_items`), where it
    names one; then its own fit's (the GPU table's, then its ``dtype`` sub-table's), which
    override them field by field."""
    donor = calibration_donor(name)
    own = _own_calibrated_items(name, dtype)
    if donor is not None:
        return _transferred_items(name, donor, dtype) + own
    return own


def calibrated_constants(name: str) -> dict:
    """Fitted constants (and their ``provenance``) for GPU ``name``; empty if none. Per-dtype
    fits are sub-tables keyed by dtype (``CALIBRATED_DTYPES``), each with an optional
    ``provenance`` of its own."""
    try:
        table = _parse("calibrated.toml")
    except FileNotFoundError:
        return {}
    return copy.deepcopy(table.get(name, {}))


def calibrated_dtypes(name: str) -> list[str]:
    """The dtypes with a fitted sub-table for GPU ``name`` or for its donor
    (:func:`calibration_donor`) when it takes another GPU's fit (file order, the donor's
    first)."""
    donor = calibration_donor(name)
    tables = ([calibrated_constants(donor)] if donor else []) + [calibrated_constants(name)]
    return list(dict.fromkeys(k for t in tables for k, v in t.items()
                              if k in CALIBRATED_DTYPES and isinstance(v, dict)))


def stack_profile(stack: str) -> dict:
    """A software-stack profile from ``stacks.toml``: ``id``, ``name``, ``description`` and
    ``scale`` (GPU constant -> multiplier; only ``STACK_SCALABLE`` keys), ``tp_overlap`` (GPU
    constant -> value; only ``STACK_TP_OVERLAP`` keys, empty for a stack whose TP overlap is
    Transformer Engine's). ``ValueError`` for a stack that is not one of ``STACKS``."""
    if stack not in STACKS:
        raise ValueError(f"stack {stack!r} is not one of {', '.join(STACKS)}")
    table = copy.deepcopy(_parse("stacks.toml").get(stack, {}))
    table["id"] = stack
    table.setdefault("scale", {})
    table.setdefault("tp_overlap", {})
    return table


def cluster(name: str) -> dict:
    """Cluster preset: name, gpu (a gpu preset id), host_ddr_gb, host_to_device_GBps, sources,
    tiers (innermost first; each name, size, bandwidth_GBps, latency_us, efficiency,
    oversubscription, source)."""
    return get("cluster", name)


def model(name: str) -> dict:
    """LLM preset: name, layers, hidden, ffn_hidden, heads, kv_heads, head_dim, vocab, mlp,
    experts, top_k, expert_ffn_hidden, moe_every, first_dense_layers (MoE), shared_experts,
    sources."""
    return get("model", name)


def dlrm(name: str) -> dict:
    """DLRM preset: name, dense_in_features, dense_arch, over_arch, interaction, dcn_layers,
    dcn_low_rank, embedding_dim, global_batch, tables (each name, rows, dim, pooling), sources."""
    return get("dlrm", name)


# --------------------------------------------------------------------------------------------
# Summary rows for `trainscape presets [kind]`.
# --------------------------------------------------------------------------------------------


def llm_param_counts(m: dict) -> tuple[float, float]:
    """(total, active-per-token) parameter counts of an LLM preset dict.

    Transformer block weights as in Narayanan et al. SC'21 section 5.1 (12·h² per GPT layer),
    generalised to GQA and SwiGLU: attention Q,O = 2·h·a·d, K,V = 2·h·a_kv·d (d = head_dim);
    MLP = 3·h·f (SwiGLU) or 2·h·f (GeLU); an MoE layer holds ``experts + shared_experts``
    expert MLPs of width ``expert_ffn_hidden`` (``top_k + shared_experts`` active) and a
    router h·experts; after the ``first_dense_layers`` leading dense ones, every
    ``moe_every``-th layer is an MoE layer (``model.llm.moe_layer_count``). Input embedding and
    output projection counted separately (v·h each). Norms and biases are ignored.
    """
    from ..model.llm import moe_layer_count  # the model's own count (a light module)

    h, a, akv, d = m["hidden"], m["heads"], m["kv_heads"], m["head_dim"]
    mats = 3 if m["mlp"] == "swiglu" else 2
    attn = 2 * h * a * d + 2 * h * akv * d
    dense_mlp = mats * h * m["ffn_hidden"]
    n_moe = moe_layer_count(m["layers"], m["experts"], m["moe_every"],
                            m.get("first_dense_layers", 0))
    n_dense = m["layers"] - n_moe
    expert = mats * h * m["expert_ffn_hidden"]
    moe_total = (m["experts"] + m["shared_experts"]) * expert + h * m["experts"]
    moe_active = (m["top_k"] + m["shared_experts"]) * expert + h * m["experts"]
    emb = 2 * m["vocab"] * h
    total = m["layers"] * attn + n_dense * dense_mlp + n_moe * moe_total + emb
    active = m["layers"] * attn + n_dense * dense_mlp + n_moe * moe_active + emb
    return float(total), float(active)


def _gpu_row(pid: str, g: dict) -> dict:
    pk = g["peak_tflops"]
    return {
        "id": pid,
        "name": g["name"],
        "bf16_tflops": pk.get("bf16"),
        "fp8_tflops": pk.get("fp8"),
        "hbm_gb": g["hbm_gb"],
        "hbm_GBps": g["hbm_bandwidth_GBps"],
        "nvlink_GBps": g["nvlink_bandwidth_GBps"],
        "gemm_eff": g["gemm_efficiency_max"],
        "attn_eff": g["attention_efficiency"],
        "mem_eff": g["memory_efficiency"],
        "overhead_us": g.get("layer_overhead_us", 0.0),
        "step_ms": g.get("step_overhead_ms", 0.0),
        "legacy_attn": g.get("legacy_attention_fraction", 1.0),
        # a board power limit below power_w derates the tflops columns' rated peaks
        # (model.power; GpuSpec.peak_for)
        "limit_w": g.get("power_limit_w"),
        "fit": fit_origin(pid),
    }


def fit_origin(name: str) -> str:
    """Where GPU ``name``'s calibrated constants come from, in a word or three: ``"own"`` (its
    ``calibrated.toml`` table), ``"<donor> (copy)"`` / ``"<donor> (ratio)"`` (a donor's fit,
    :func:`calibration_donor`), ``"<donor> (ratio) + own"`` (a donor's fit with fields of
    its own fitted over it), or ``"stock"`` (microbenchmark values only)."""
    donor = calibration_donor(name)
    own = bool(calibrated_constants(name))
    if donor is not None:
        how = f"{donor} ({get('gpu', name).get('calibration_transfer', 'copy')})"
        return how + " + own" if own else how
    return "own" if own else "stock"


def _stack_row(pid: str, s: dict) -> dict:
    """A software-stack profile: its multipliers on the GPU constants (1 where it has none)."""
    scale = s.get("scale", {})
    short = {"gemm_efficiency_max": "x_gemm_eff", "attention_efficiency": "x_attn_eff",
             "memory_efficiency": "x_mem_eff", "layer_overhead_us": "x_overhead",
             "step_overhead_ms": "x_step"}
    overlap = s.get("tp_overlap", {})
    return {"id": pid, "name": s.get("name", pid),
            **{short[key]: float(scale.get(key, 1.0)) for key in STACK_SCALABLE},
            # the stack's own TP-overlap constants (exposed / slowdown), or the GPU's
            # Transformer-Engine-derived ones
            "tp_overlap": (f"{overlap['tp_overlap_exposed']:g} / "
                           f"{overlap['tp_overlap_slowdown']:g}" if overlap else "GPU (TE)")}


def _cluster_row(pid: str, c: dict) -> dict:
    gpus = 1
    for t in c["tiers"]:
        gpus *= int(t["size"])
    tiers = " | ".join(
        f"{t['name']} x{t['size']} {t['bandwidth_GBps']:g} GB/s"
        + (f" 1:{t['oversubscription']:g}" if t.get("oversubscription", 1.0) != 1.0 else "")
        for t in c["tiers"]
    )
    return {"id": pid, "name": c["name"], "gpu": c["gpu"], "max_gpus": gpus, "tiers": tiers}


def _model_row(pid: str, m: dict) -> dict:
    total, active = llm_param_counts(m)
    moe = f"{m['experts']}x top{m['top_k']}" if m["experts"] else "-"
    if m.get("first_dense_layers"):
        moe += f", {m['first_dense_layers']} dense first"
    return {
        "id": pid,
        "name": m["name"],
        "params_b": round(total / 1e9, 1),
        "active_b": round(active / 1e9, 1),
        "layers": m["layers"],
        "hidden": m["hidden"],
        "heads": m["heads"],
        "kv_heads": m["kv_heads"],
        "vocab": m["vocab"],
        "moe": moe,
    }


def _dlrm_row(pid: str, d: dict) -> dict:
    rows = sum(int(t["rows"]) for t in d["tables"])
    emb_gb = sum(int(t["rows"]) * int(t["dim"]) for t in d["tables"]) * 4 / 1e9
    return {
        "id": pid,
        "name": d["name"],
        "tables": len(d["tables"]),
        "rows": rows,
        "emb_gb_fp32": round(emb_gb, 1),
        "dim": d["embedding_dim"],
        "global_batch": d["global_batch"],
    }


_ROWS = {"gpu": _gpu_row, "cluster": _cluster_row, "model": _model_row, "dlrm": _dlrm_row,
         "stack": _stack_row}


def summary_rows(kind: str) -> list[dict]:
    """One dict of key figures per preset of ``kind`` (same keys in every row, file order)."""
    if kind == "gpu":  # the values the model uses: calibrated where a fit exists
        rows = []
        for pid in names("gpu"):
            base = _gpu_row(pid, gpu(pid))
            rows.append({"id": pid, "dtype": "all", **base})
            for d in calibrated_dtypes(pid):  # a per-dtype fit: one more row where it differs
                row = _gpu_row(pid, gpu(pid, dtype=d))
                if row != base:
                    rows.append({"id": pid, "dtype": d, **row})
        return rows
    table = _table(kind)
    return [_ROWS[kind](pid, copy.deepcopy(v)) for pid, v in table.items()]
