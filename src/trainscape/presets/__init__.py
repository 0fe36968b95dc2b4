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
import tomllib
from importlib import resources

__all__ = [
    "KINDS",
    "UnknownPreset",
    "cluster",
    "dlrm",
    "calibrated_constants",
    "get",
    "llm_param_counts",
    "gpu",
    "model",
    "names",
    "summary_rows",
]

#: The preset kinds, in the order the CLI lists them.
KINDS = ("gpu", "cluster", "model", "dlrm")

_FILES = {
    "gpu": "gpus.toml",
    "cluster": "clusters.toml",
    "model": "models.toml",
    "dlrm": "models.toml",
}
#: Key in models.toml that holds the DLRM presets (so it is not an LLM preset id).
_DLRM_KEY = "dlrm"


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
    """Preset ids of one kind (``"gpu"``, ``"cluster"``, ``"model"``, ``"dlrm"``), file order."""
    return list(_table(kind))


def get(kind: str, name: str) -> dict:
    """A deep copy of preset ``name`` of ``kind``; ``UnknownPreset`` if there is none."""
    table = _table(kind)
    if not isinstance(name, str) or name not in table:
        raise UnknownPreset(kind, name, list(table))
    return copy.deepcopy(table[name])


def gpu(name: str, calibrated: bool = True) -> dict:
    """GPU preset: name, peak_tflops {bf16, fp16[, fp8]} (dense), hbm_gb, hbm_bandwidth_GBps,
    nvlink_bandwidth_GBps, gemm_efficiency_max, gemm_half_flops, attention_efficiency,
    memory_efficiency, hbm_reserve_gb, sources.

    With ``calibrated`` (the default), constants fitted against published training runs for
    this GPU type (``calibrated.toml``, written by ``scripts/calibrate.py``) replace the
    microbenchmark values, and their ``sources`` entries say so."""
    preset = get("gpu", name)
    if calibrated:
        fitted = calibrated_constants(name)
        provenance = fitted.pop("provenance", {})
        for key, value in fitted.items():
            preset[key] = value
            preset.setdefault("sources", {})[key] = (
                f"calibrated by {provenance.get('script', 'scripts/calibrate.py')} against "
                + "; ".join(provenance.get("sources", []))
            )
    return preset


def calibrated_constants(name: str) -> dict:
    """Fitted constants (and their ``provenance``) for GPU ``name``; empty if none."""
    try:
        table = _parse("calibrated.toml")
    except FileNotFoundError:
        return {}
    return copy.deepcopy(table.get(name, {}))


def cluster(name: str) -> dict:
    """Cluster preset: name, gpu (a gpu preset id), host_ddr_gb, host_to_device_GBps, sources,
    tiers (innermost first; each name, size, bandwidth_GBps, latency_us, efficiency,
    oversubscription, source)."""
    return get("cluster", name)


def model(name: str) -> dict:
    """LLM preset: name, layers, hidden, ffn_hidden, heads, kv_heads, head_dim, vocab, mlp,
    experts, top_k, expert_ffn_hidden, moe_every, shared_experts, sources."""
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
    router h·experts; every ``moe_every``-th layer is an MoE layer. Input embedding and
    output projection counted separately (v·h each). Norms and biases are ignored.
    """
    h, a, akv, d = m["hidden"], m["heads"], m["kv_heads"], m["head_dim"]
    mats = 3 if m["mlp"] == "swiglu" else 2
    attn = 2 * h * a * d + 2 * h * akv * d
    dense_mlp = mats * h * m["ffn_hidden"]
    n_moe = m["layers"] // m["moe_every"] if m["moe_every"] > 0 and m["experts"] > 0 else 0
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
    }


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


_ROWS = {"gpu": _gpu_row, "cluster": _cluster_row, "model": _model_row, "dlrm": _dlrm_row}


def summary_rows(kind: str) -> list[dict]:
    """One dict of key figures per preset of ``kind`` (same keys in every row, file order)."""
    if kind == "gpu":  # the values the model uses: calibrated where a fit exists
        return [_gpu_row(pid, gpu(pid)) for pid in names("gpu")]
    table = _table(kind)
    return [_ROWS[kind](pid, copy.deepcopy(v)) for pid, v in table.items()]
