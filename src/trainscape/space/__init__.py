"""Design spaces: axes of config values, constraints applied while enumerating, configurations
encoded as int32 columns and enumerable by index.

>>> import trainscape
>>> from trainscape.space import design_space
>>> sc = trainscape.load("examples/llama3-405b-2bldg.toml")
>>> ds = design_space(sc)
>>> ds.size, ds.describe()
>>> cfg = ds.sample(1000, seed=1)          # int32 (layout.N_CFG, 1000)
>>> cfg = ds.enumerate(0, 4096)            # the first 4096 configurations, in index order
"""

from .design import (
    CORE_FIELDS,
    FREE_FIELDS,
    DesignSpace,
    SpaceError,
    config_dict,
    default_axes,
    design_space,
    resolve_axes,
)

__all__ = [
    "CORE_FIELDS",
    "FREE_FIELDS",
    "DesignSpace",
    "SpaceError",
    "config_dict",
    "default_axes",
    "design_space",
    "resolve_axes",
]
