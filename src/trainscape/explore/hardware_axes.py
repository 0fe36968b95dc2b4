"""The hardware axes of a scenario's ``[space]`` and the hardware values a result row was
costed with: what co-design (:mod:`.hardware`) and the plain sweep / search rows
(:func:`trainscape.explore.report.hardware_columns`) both read."""

from __future__ import annotations

from typing import Any


def hardware_axes(scenario) -> dict[str, list]:
    """The hardware axes of ``scenario``'s ``[space]`` (path -> values), empty when none."""
    sp = scenario.space
    if sp is None or not sp.hardware:
        return {}
    return {k: list(v) for k, v in sp.hardware.items()}


def flatten_values(values: dict[str, Any]) -> dict[str, Any]:
    """A table value sets several fields at once (coupled values, e.g. a tier's size and its
    cost): ``{"cluster.tiers[0]": {"size": 72, "cost_per_gpu_hour_usd": 0.5}}`` becomes
    ``{"cluster.tiers[0].size": 72, "cluster.tiers[0].cost_per_gpu_hour_usd": 0.5}``."""
    out: dict[str, Any] = {}
    for k, v in values.items():
        if isinstance(v, dict):
            for kk, vv in flatten_values({f"{k}.{sub}": x for sub, x in v.items()}).items():
                out[kk] = vv
        else:
            out[k] = v
    return out


def scenario_hardware_values(scenario) -> dict[str, Any]:
    """The hardware a plain sweep or search costed every row with, as co-design names its
    columns: ``cluster.gpu`` (the preset, else the GPU's name), ``cluster.gpus``, and the
    scenario's own value of each hardware axis path of its ``[space]`` (table values flattened;
    a path the scenario does not set is left out)."""
    from ..spec.load import parse_path

    gpu = scenario.cluster.gpu
    out: dict[str, Any] = {"cluster.gpu": gpu.preset or gpu.name or "custom",
                           "cluster.gpus": int(scenario.cluster.gpus)}
    raw = scenario.raw_dump()
    for path, values in hardware_axes(scenario).items():
        if path in out:
            continue
        sample = flatten_values({path: values[0]})
        for sub in sample:
            node: Any = raw
            for part in parse_path(sub):
                try:
                    node = node[part]
                except (KeyError, IndexError, TypeError):
                    node = None
                    break
            if node is not None and not isinstance(node, (dict, list)):
                out[sub] = node
    return out
