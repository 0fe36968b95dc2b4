"""What a sweep or a search returns, and what outlives one run: the objectives and their
result columns, the rows found (:class:`Rows`) and the result (:class:`SweepResult`, with the
explanation when nothing is feasible), checkpoints of an interrupted sweep, and costing chosen
indices of a design space. The sweep runner (:mod:`.sweep`), the searches (:mod:`.search`), the
Dask runner (:mod:`.distributed`), the reports and the command line all build on this module.
"""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from .. import layout as L
from .reduce import Reduced

#: Objectives: result column -> +1 minimized, -1 maximized.
OBJECTIVES = {
    "step_time_s": 1.0,
    "tokens_per_s": -1.0,
    "mfu": -1.0,
    "model_tflops_per_gpu": -1.0,
    "memory_gib": 1.0,
    "cost_per_step_usd": 1.0,
    "tokens_per_usd": -1.0,
    "tokens_per_joule": -1.0,
}
OBJECTIVE_ALIASES = {"step_time": "step_time_s", "time": "step_time_s", "step": "step_time_s",
                     "throughput": "tokens_per_s", "tokens": "tokens_per_s",
                     "memory": "memory_gib", "mem": "memory_gib", "cost": "cost_per_step_usd"}
CHECKPOINT_VERSION = 1


def objective_column(name: str) -> tuple[str, int, float]:
    """``(column name, OUT_* index, sign)`` of an objective name; ScenarioError if unknown."""
    from ..spec.errors import ScenarioError

    col = OBJECTIVE_ALIASES.get(name, name)
    if col not in OBJECTIVES:
        raise ScenarioError.at("--objective", "unknown objective", name,
                               ", ".join([*OBJECTIVES, *OBJECTIVE_ALIASES]))
    return col, L.OUTPUT_FIELDS.index(col), OBJECTIVES[col]


@dataclass
class Rows:
    """Configurations with their result columns: ``index`` (global indices), ``cfg`` int32
    ``(N_CFG, n)``, ``out`` float64 ``(N_OUT, n)``."""

    index: np.ndarray
    cfg: np.ndarray
    out: np.ndarray

    def __len__(self) -> int:
        return int(self.index.size)

    def records(self, kind: str = "") -> list[dict[str, Any]]:
        """One dict per row: config fields (user-facing values), every output, ``index``."""
        from ..space import config_dict

        recs = []
        for j in range(len(self)):
            r: dict[str, Any] = {}
            if kind:
                r["kind"] = kind
                r["rank"] = j + 1
            r["index"] = int(self.index[j])
            r.update(config_dict(self.cfg[:, j]))
            for i, name in enumerate(L.OUTPUT_FIELDS):
                v = float(self.out[i, j])
                if name == "status":
                    r[name] = L.STATUS[int(v)]
                elif name == "feasible":
                    r[name] = v == 1.0
                else:
                    r[name] = v
            recs.append(r)
        return recs


@dataclass
class SweepResult:
    """What a sweep found. ``top``: the K best feasible configurations by the objective;
    ``front``: the Pareto front of step time vs memory per GPU (sorted by step time);
    ``by_order``: the best configuration per placement order (sorted by the objective)."""

    scenario_name: str
    objective: str
    space_size: int
    top: Rows
    front: Rows
    by_order: Rows
    evaluated: int
    feasible: int
    out_of_memory: int
    invalid: int
    min_memory_gib: float
    elapsed_s: float
    backend: str
    workers: int
    complete: bool = True
    resumed_from: int = 0
    extra: dict = field(default_factory=dict)

    @property
    def rate(self) -> float:
        """Configurations per second over this run (resumed work excluded)."""
        done = self.evaluated - self.resumed_from
        return done / self.elapsed_s if self.elapsed_s > 0 else float("nan")

    def records(self) -> list[dict[str, Any]]:
        return self.top.records("top") + self.front.records("pareto")

    def no_feasible_reason(self, hbm_gib: float) -> str | None:
        if self.feasible > 0:
            return None
        if self.evaluated == 0:
            return "the space is empty"
        return (f"no feasible configuration: all {self.evaluated - self.invalid:,} valid "
                f"configurations exceed the GPU memory (the smallest needs "
                f"{self.min_memory_gib:.1f} GiB per GPU; the GPU has {hbm_gib:.1f} GiB); "
                "allow more memory savings (recompute full, zero 3, larger tp/pp) or more GPUs")




def fingerprint(scenario, space, objective: str, k: int) -> str:
    """Identity of a sweep: the scenario, the space's axes and size, the objective and K."""
    data = {
        "scenario": scenario.model_dump(mode="json", exclude={"name", "description"}),
        "axes": space.axes,
        "size": space.size,
        "objective": objective,
        "k": k,
        "version": CHECKPOINT_VERSION,
    }
    return hashlib.sha256(json.dumps(data, sort_keys=True, default=str).encode()).hexdigest()[:20]


def save_checkpoint(path: Path, fp: str, done: int, red: Reduced) -> None:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "wb") as f:
        np.savez(f, fingerprint=np.array(fp), done=np.array([done], np.int64), **red.to_arrays())
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def load_checkpoint(path: Path, fp: str) -> tuple[int, Reduced]:
    from ..spec.errors import ScenarioError

    try:
        with np.load(path, allow_pickle=False) as z:
            got = str(z["fingerprint"])
            if got != fp:
                raise ScenarioError.at("--resume", "the checkpoint belongs to a different sweep "
                                       "(scenario, space, objective or --top changed)", str(path),
                                       "run without --resume to start afresh")
            return int(z["done"][0]), Reduced.from_arrays(z)
    except (OSError, KeyError, ValueError) as exc:
        if isinstance(exc, ScenarioError):
            raise
        raise ScenarioError.at("--resume", f"cannot read the checkpoint: {exc}", str(path),
                               show_got=True) from None


def default_checkpoint(fp: str) -> Path:
    return Path(".trainscape") / f"sweep-{fp}.npz"


class SweepInterrupted(Exception):
    """Ctrl-C during a sweep; the checkpoint (if any) holds everything finished."""

    def __init__(self, done: int, size: int, checkpoint: Path | None):
        self.done, self.size, self.checkpoint = done, size, checkpoint
        where = f"; resume with --resume (checkpoint {checkpoint})" if checkpoint else ""
        super().__init__(f"sweep interrupted after {done:,} of {size:,} configurations{where}")


def evaluate_indices(space, blocks, idx: np.ndarray, backend: str | None = None) -> Rows:
    """Decode global indices and cost them (full result columns)."""
    from ..backends import evaluate_blocks

    idx = np.asarray(idx, dtype=np.int64)
    cfg = space.decode(idx)
    if idx.size == 0:
        return Rows(idx, cfg, np.zeros((L.N_OUT, 0)))
    be = "python" if backend == "python" else None
    if be is None:
        try:
            out = evaluate_blocks(*blocks, cfg)
        except Exception:  # noqa: BLE001 -- fall back to the reference, always present
            out = evaluate_blocks(*blocks, cfg, backend="python")
    else:
        out = evaluate_blocks(*blocks, cfg, backend="python")
    return Rows(idx, cfg, out)


__all__ = ["CHECKPOINT_VERSION", "OBJECTIVES", "OBJECTIVE_ALIASES", "Rows", "SweepInterrupted",
           "SweepResult", "default_checkpoint", "evaluate_indices", "fingerprint",
           "load_checkpoint", "objective_column", "save_checkpoint"]
