"""Scenario inputs: validated, typed models; loading with presets and overrides; packing.

The public names: :class:`Scenario` and its parts, :class:`ScenarioError`,
:func:`load_scenario`, and the packers ``pack_system``, ``pack_model``, ``pack_job``,
``pack_configs``.
"""

from .config import ConfigSpec, complete_order, parse_order
from .errors import ScenarioError
from .load import apply_overrides, load_scenario, parse_assignments, read_raw, validate
from .models import (
    ClusterSpec,
    GpuSpec,
    JobSpec,
    ModelSpec,
    Scenario,
    SpaceSpec,
    TierSpec,
)
from .pack import encode_order, pack, pack_configs, pack_job, pack_model, pack_system

__all__ = [
    "ClusterSpec",
    "ConfigSpec",
    "GpuSpec",
    "JobSpec",
    "ModelSpec",
    "Scenario",
    "ScenarioError",
    "SpaceSpec",
    "TierSpec",
    "apply_overrides",
    "complete_order",
    "encode_order",
    "load_scenario",
    "pack",
    "pack_configs",
    "pack_job",
    "pack_model",
    "pack_system",
    "parse_assignments",
    "parse_order",
    "read_raw",
    "validate",
]
