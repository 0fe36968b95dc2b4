"""trainscape: an analytical cost model of distributed LLM and DLRM training, and search over
how to lay a training job out on a hierarchical GPU network.

The Python API::

    import trainscape
    scenario = trainscape.load("examples/gpt3-175b-a100.toml")
    result = trainscape.evaluate(scenario)            # the scenario's [config]
    result.step_time_s, result.mfu, result.breakdown
    columns = trainscape.evaluate_batch(scenario, scenario.space.sample(10_000, seed=0))
    trainscape.available_backends()                    # {"c": (True, "loaded ..."), ...}

See :mod:`trainscape.layout` for the packed blocks the kernels read.
"""

from .api import (
    Result,
    available_backends,
    default_backend,
    evaluate,
    evaluate_batch,
    evaluate_columns,
    load,
)
from .space import design_space as _design_space
from .spec import ConfigSpec, Scenario, ScenarioError
from .spec.models import use_design_space_builder as _use_design_space_builder

# the scenario schema builds its [space] with the design-space package above it
_use_design_space_builder(_design_space)

__version__ = "0.1.0"


def best_for_allocation(scenario, gpus, **kwargs):
    """The best feasible layout of ``scenario`` for ``gpus`` GPUs (a scheduler's question):
    see :func:`trainscape.embed.best.best_for_allocation` (keywords ``sites``, ``gpu_type``,
    ``objective``, ``constraints``, ``backend``). Imported on first use."""
    from .embed.best import best_for_allocation as query

    return query(scenario, gpus, **kwargs)


__all__ = [
    "ConfigSpec",
    "Result",
    "Scenario",
    "ScenarioError",
    "__version__",
    "available_backends",
    "best_for_allocation",
    "default_backend",
    "evaluate",
    "evaluate_batch",
    "evaluate_columns",
    "load",
]
