"""The pure-Python reference backend: the cost model evaluated one configuration at a time.

This is the spec the native backends are held to. It loops over configuration columns and
calls :func:`trainscape.model.llm.evaluate_config`, the scalar model itself.
"""

from __future__ import annotations

import numpy as np

from ..layout import N_CFG, N_JOB, N_MODEL, N_OUT, N_SYS
from .llm import evaluate_config


def check_blocks(sys, mdl, job, cfg):
    """Shapes and dtypes every backend requires (raises ``ValueError`` naming the block)."""
    for name, block, size in (("system", sys, N_SYS), ("model", mdl, N_MODEL), ("job", job, N_JOB)):
        if block.dtype != np.float64 or block.shape != (size,):
            raise ValueError(
                f"{name} block: expected float64 of shape ({size},), got {block.dtype} {block.shape}"
            )
    if cfg.dtype != np.int32 or cfg.ndim != 2 or cfg.shape[0] != N_CFG:
        raise ValueError(
            f"configs: expected int32 of shape ({N_CFG}, n), got {cfg.dtype} {cfg.shape}"
        )


def evaluate_batch(sys, mdl, job, cfg, out=None):
    """Cost every configuration column of ``cfg``; returns ``out`` of shape ``(N_OUT, n)``."""
    check_blocks(sys, mdl, job, cfg)
    n = cfg.shape[1]
    if out is None:
        out = np.empty((N_OUT, n), dtype=np.float64)
    for i in range(n):
        evaluate_config(sys, mdl, job, cfg, i, out)
    return out
