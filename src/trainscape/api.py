"""The Python API for people: load a scenario, cost one configuration, get a Result.

>>> import trainscape
>>> sc = trainscape.load("examples/gpt3-175b-a100.toml", overrides=["job.global_batch=1536"])
>>> r = trainscape.evaluate(sc, {"tp": 8, "pp": 8, "schedule": "interleaved", "vpp": 2})
>>> r.step_time_s, r.mfu, r.breakdown["bubble_s"]

Batches of configurations go through :func:`evaluate_columns` (packed blocks in, result columns
out), the single place that calls a kernel backend.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import numpy as np

from . import layout as L
from .spec import ConfigSpec, Scenario, ScenarioError, load_scenario, pack, pack_configs

from .backends import BACKENDS, available_backends, default_backend  # noqa: F401 (re-exported)


def load(source: str | Path | Mapping, overrides: Iterable[str] = ()) -> Scenario:
    """A validated Scenario from a TOML/JSON file or a raw dict, with presets merged and
    ``overrides`` (``"path=value"`` strings, e.g. ``"cluster.tiers[1].bandwidth_GBps=100"``)
    applied. Raises :class:`ScenarioError` with a one-line message naming the field."""
    if isinstance(source, Scenario):
        if overrides:
            return load(source.raw_dump(), overrides)
        return source
    return load_scenario(source, overrides)


def evaluate_columns(sys: np.ndarray, mdl: np.ndarray, job: np.ndarray, cfg: np.ndarray,
                     backend: str | None = None, threads: int | None = None) -> np.ndarray:
    """Cost packed configuration columns; returns ``float64 (layout.N_OUT, n)``.

    The one call site of the kernels. ``backend``: ``"c"``, ``"numba"``, ``"python"`` (the
    reference) or ``None`` for the fastest that loaded (:func:`available_backends` says which
    did, and why one did not).
    """
    from .backends import evaluate_blocks

    if backend is not None and backend not in BACKENDS:
        raise ScenarioError.at("backend", "unknown backend", backend, ", ".join(BACKENDS))
    return evaluate_blocks(sys, mdl, job, cfg, backend=backend, threads=threads)


def evaluate_batch(scenario: Scenario, configs: Any, backend: str | None = None,
                   threads: int | None = None) -> dict[str, np.ndarray]:
    """Cost many configurations of ``scenario`` at once; returns one NumPy column per output
    field (``layout.OUTPUT_FIELDS``), in the order of ``configs``.

    ``configs``: an ``int32`` array of shape ``(layout.N_CFG, n)`` (as
    ``scenario.space``-based samplers and enumerators return), a dict of equal-length columns
    keyed by config field, or a list of config dicts / :class:`ConfigSpec`.
    """
    sys, mdl, job = pack(scenario)
    if isinstance(configs, np.ndarray):
        cfg = configs
    elif isinstance(configs, Mapping):
        cfg = pack_configs(configs, gpus=scenario.cluster.gpus)
    else:
        cfg = pack_configs([c if isinstance(c, ConfigSpec) else ConfigSpec(**c) for c in configs],
                           gpus=scenario.cluster.gpus)
    out = evaluate_columns(sys, mdl, job, np.ascontiguousarray(cfg, dtype=np.int32),
                           backend=backend, threads=threads)
    return {name: out[i] for i, name in enumerate(L.OUTPUT_FIELDS)}


class _ResultBase:
    """Methods shared by :class:`Result` (its fields are generated from the layout)."""

    @property
    def breakdown(self) -> dict[str, float]:
        """The step-time terms in seconds (``layout.BREAKDOWN_FIELDS``); they sum to the step."""
        return {k: getattr(self, k) for k in L.BREAKDOWN_FIELDS}

    @property
    def memory(self) -> dict[str, float]:
        """The memory parts in GiB (``layout.MEMORY_FIELDS``); they sum to ``memory_gib``."""
        return {k: getattr(self, k) for k in L.MEMORY_FIELDS}

    def to_dict(self) -> dict[str, Any]:
        """Every output field under its layout name, plus ``config`` and ``scenario``."""
        out = {k: getattr(self, k) for k in L.OUTPUT_FIELDS}
        out["config"] = dict(self.config)
        out["scenario"] = self.scenario_name
        return out

    @classmethod
    def from_column(cls, column: np.ndarray, config: Mapping[str, Any],
                    scenario_name: str = "") -> Result:
        """A Result from one output column (``column[OUT_*]``)."""
        values: dict[str, Any] = {}
        for i, name in enumerate(L.OUTPUT_FIELDS):
            v = float(column[i])
            if name == "status":
                code = int(v)
                values[name] = L.STATUS[code] if 0 <= code < len(L.STATUS) else f"code {code}"
            elif name == "feasible":
                values[name] = v == 1.0
            elif name == "microbatches":
                values[name] = int(v)
            else:
                values[name] = v
        return cls(**values, config=dict(config), scenario_name=scenario_name)


def _result_field_type(name: str) -> type:
    return {"status": str, "feasible": bool, "microbatches": int}.get(name, float)


#: One costed configuration: every ``layout.OUTPUT_FIELDS`` name as an attribute (``status`` as
#: its ``layout.STATUS`` string, ``feasible`` a bool, ``microbatches`` an int, the rest floats
#: in seconds, GiB, TFLOP/s, tokens/s or a fraction), plus ``config`` (dict) and
#: ``scenario_name``.
Result = dataclasses.make_dataclass(
    "Result",
    [(name, _result_field_type(name)) for name in L.OUTPUT_FIELDS]
    + [("config", dict), ("scenario_name", str)],
    bases=(_ResultBase,),
    frozen=True,
    namespace={"__module__": __name__},
)
Result.__doc__ = "One costed configuration; fields named as ``layout.OUTPUT_FIELDS``."


def _as_config(scenario: Scenario, config: ConfigSpec | Mapping | None) -> Scenario:
    if config is None:
        if scenario.config is None:
            raise ScenarioError.at("config", "the scenario has no [config] and none was "
                                   "given", None, "a [config] table or a config argument",
                                   show_got=False)
        return scenario
    return scenario.with_config(config)


def link_report(scenario: Scenario | str | Path | Mapping,
                config: ConfigSpec | Mapping | None = None) -> list[dict[str, Any]]:
    """What each network tier carries in one step of a configuration, innermost tier first:
    ``[{name, bytes_per_step, busy_s, by_dimension}]`` -- bytes one GPU puts on the tier's
    links per step and how long they keep its share busy (before overlap); see
    :mod:`trainscape.model.links`. With ``[[cluster.sites]]`` the tiers end with ``sites`` (the
    derived site tier) and one entry per ``[[cluster.links]]`` follows, with its ``sites``
    (:func:`trainscape.spec.sites.site_link_report`). Empty for an invalid configuration."""
    from .model.links import link_loads

    if not isinstance(scenario, Scenario):
        scenario = load(scenario)
    scenario = _as_config(scenario, config)
    sys, mdl, job = pack(scenario)
    cfg = pack_configs([scenario.config])
    loads = link_loads(sys, mdl, job, cfg, 0)
    if loads is None:
        return []
    from .spec.sites import site_link_report, tier_names

    out = [{"name": name, "bytes_per_step": total, "busy_s": busy, "by_dimension": by_dim}
           for name, (total, busy, by_dim) in zip(tier_names(scenario), loads)]
    if scenario.cluster.sites is not None:
        out += site_link_report(scenario, sys, mdl, job, cfg, loads)
    return out


def pipeline_split(scenario: Scenario | str | Path | Mapping,
                   config: ConfigSpec | Mapping | None = None) -> dict[str, Any] | None:
    """How a configuration's pipeline holds the model: the transformer layers of the first
    device, of the busiest middle one and of the last one (``model.llm.pipeline_stages``: the
    even split, ``job.pipeline_edge_layers`` or the stated
    ``job.pipeline_first/last_stage_layers``), how many of each are the model's leading dense
    layers (``model.llm.leading_dense_layers``; ``*_dense``, fractional where a chunk's share
    is), the multi-token prediction blocks beside them on the device holding the loss, and
    whether that is the first device (V placements); the middle count is 0 with two devices.
    None without a pipeline. Raises :class:`ScenarioError` for an invalid configuration, as
    :func:`evaluate` does."""
    from .model.llm import (config_error, leading_dense_chunks, leading_dense_layers,
                             pipeline_stages)

    if not isinstance(scenario, Scenario):
        scenario = load(scenario)
    scenario = _as_config(scenario, config)
    sys, mdl, job = pack(scenario)
    cfg = pack_configs([scenario.config])
    pp = int(cfg[L.CFG_PP, 0])
    if pp <= 1 or config_error(sys, mdl, job, cfg, 0) != 0:  # (validated: a guard only)
        return None
    schedule, vpp = int(cfg[L.CFG_SCHEDULE, 0]), int(cfg[L.CFG_VPP, 0])
    first, middle, last, loss_first = pipeline_stages(mdl, job, schedule, pp, vpp)
    dense = leading_dense_layers(mdl[L.MDL_FIRST_DENSE_LAYERS], first, middle, last, pp,
                                 leading_dense_chunks(schedule, pp, vpp), loss_first)
    return {"devices": pp, "first": int(first), "middle": int(middle), "last": int(last),
            "first_dense": float(dense[0]), "middle_dense": float(dense[1]),
            "last_dense": float(dense[2]),
            "mtp_layers": int(mdl[L.MDL_MTP_LAYERS]), "loss_on_first_device": bool(loss_first)}


def site_notes(scenario: Scenario | str | Path | Mapping,
               config: ConfigSpec | Mapping | None = None) -> list[str]:
    """What the ``[[cluster.sites]]`` rules assumed for this scenario and configuration, one
    line each (empty without sites): the ring and path over the sites, the slowest-site rule,
    a pipeline whose stages do not tile the sites (:func:`trainscape.spec.sites.site_notes`)."""
    from .spec.sites import site_notes as notes

    if not isinstance(scenario, Scenario):
        scenario = load(scenario)
    if scenario.cluster.sites is None:
        return []
    scenario = _as_config(scenario, config)
    return list(notes(scenario, (*pack(scenario), pack_configs([scenario.config]))))


def evaluate(scenario: Scenario | str | Path | Mapping,
             config: ConfigSpec | Mapping | None = None,
             backend: str | None = None) -> Result:
    """Cost one configuration of ``scenario``: its ``[config]``, or ``config`` (a ConfigSpec or
    a dict of config fields; fields left out take their defaults, ``dp`` is derived from the
    GPU count). Raises :class:`ScenarioError` if the configuration is invalid."""
    if not isinstance(scenario, Scenario):
        scenario = load(scenario)
    scenario = _as_config(scenario, config)
    sys, mdl, job = pack(scenario)
    cfg = pack_configs([scenario.config])
    out = evaluate_columns(sys, mdl, job, cfg, backend=backend)
    return Result.from_column(out[:, 0], scenario.config.as_dict(), scenario.name)


def error_band(scenario: Scenario | str | Path | Mapping,
               result: Result | None = None) -> dict[str, Any]:
    """How far the model was from published runs it was never fitted on, for ``scenario``'s
    GPU preset, software stack and kind of model, dense or MoE
    (:mod:`trainscape.calibration.bands`): ``{"band": ..., "text": ...}``. ``band`` is None
    when no band speaks for the scenario (a GPU that is not a preset or whose constants were
    changed, or fewer than ``bands.MIN_ROWS`` such runs, whose count, median and range the text
    then quotes) and ``text`` says why; otherwise ``band`` holds the runs' kind, count, median
    and 10th / 90th
    percentile errors (``predicted / published - 1``) and their sources, and, with a costed
    ``result`` of a valid configuration, ``step_time_low_s`` / ``step_time_high_s``: the step a
    run erring like the middle 8 in 10 of them would take."""
    from .calibration.bands import scenario_band

    if not isinstance(scenario, Scenario):
        scenario = load(scenario)
    band, why = scenario_band(scenario)
    if band is None:
        return {"band": None, "text": why}
    predicted = None
    if result is not None and result.status != "invalid_config":
        predicted = result.step_time_s
    return {"band": band.as_dict(predicted), "text": band.sentence(predicted)}
