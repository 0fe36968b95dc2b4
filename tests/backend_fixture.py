"""The ``backend`` fixture: a test using it runs once per loaded kernel backend (c, numba,
python). Import it into ``tests/conftest.py``::

    from backend_fixture import backend, warm_backends  # noqa: F401

Backends that did not load (no C compiler at install time) are not parametrized; which loaded
and why the others did not is printed in the pytest header by ``backend_report``.
"""

from __future__ import annotations

import numpy as np
import pytest

from trainscape.backends import BACKENDS, available_backends

LOADED = tuple(name for name, (ok, _) in available_backends().items() if ok)


def backend_report() -> str:
    """One line: every backend and whether it loaded (for ``pytest_report_header``)."""
    return "trainscape backends: " + ", ".join(
        f"{name}={'ok' if ok else 'unavailable (' + why + ')'}"
        for name, (ok, why) in available_backends().items()
    )


@pytest.fixture(scope="session")
def warm_backends():
    """Compile (or load from numba's cache) every loaded backend once, so test timings and
    hypothesis deadlines do not include the numba compile."""
    from trainscape import layout as L
    from trainscape.backends import evaluate_blocks

    sys = np.zeros(L.N_SYS)
    sys[[L.SYS_GPUS, L.SYS_N_TIERS, L.SYS_PEAK_FLOPS, L.SYS_HBM_BYTES, L.SYS_HBM_BANDWIDTH,
         L.SYS_GEMM_EFFICIENCY_MAX, L.SYS_ATTENTION_EFFICIENCY, L.SYS_MEMORY_EFFICIENCY]] = \
        [1, 1, 1e15, 8e10, 3e12, 0.8, 0.5, 0.8]
    sys[[L.SYS_LINEAR_PEAK_FLOPS, L.SYS_LINEAR_EFFICIENCY_MAX]] = [1e15, 0.8]
    sys[L.SYS_TIER_BASE:L.SYS_TIER_BASE + 5] = [8, 4e11, 2e-6, 0.8, 1.0]
    mdl = np.zeros(L.N_MODEL)
    mdl[[L.MDL_LAYERS, L.MDL_HIDDEN, L.MDL_FFN_HIDDEN, L.MDL_HEADS, L.MDL_KV_HEADS,
         L.MDL_HEAD_DIM, L.MDL_VOCAB]] = [2, 256, 1024, 4, 4, 64, 1000]
    job = np.zeros(L.N_JOB)
    job[[L.JOB_SEQ_LEN, L.JOB_GLOBAL_BATCH, L.JOB_ACTIVATION_BYTES, L.JOB_PARAM_BYTES,
         L.JOB_GRAD_BYTES, L.JOB_COMM_BYTES, L.JOB_GRAD_COMM_BYTES,
         L.JOB_LINEAR_INPUT_BYTES, L.JOB_LOGITS_EXTRA_BYTES,
         L.JOB_LINEAR_PARAM_COMM_BYTES]] = [128, 4, 2, 2, 4, 2, 4, 2, 4, 2]
    cfg = np.ones((L.N_CFG, 1), dtype=np.int32)
    cfg[[L.CFG_SCHEDULE, L.CFG_RECOMPUTE, L.CFG_ZERO, L.CFG_SP, L.CFG_ORDER, L.CFG_TP_OVERLAP,
         L.CFG_DP_OVERLAP], 0] = 1, 0, 0, 0, 0, 0, 0
    for name in LOADED:
        evaluate_blocks(sys, mdl, job, cfg, backend=name)
    return LOADED


@pytest.fixture(params=LOADED)
def backend(request, warm_backends) -> str:
    """Name of a loaded backend (``"c"``, ``"numba"``, ``"python"``); pass it as
    ``backend=...`` to :func:`trainscape.backends.evaluate_blocks` (or the API)."""
    return request.param


__all__ = ["BACKENDS", "LOADED", "backend", "backend_report", "warm_backends"]
