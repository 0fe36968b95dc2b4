"""Cold start of ``trainscape shard``: answer in seconds while evolve's numba kernels compile.

The evolutionary planner runs numba kernels (:mod:`trainscape.dlrm.balance`,
:mod:`trainscape.dlrm.incremental`) that take one to two minutes to compile on an empty cache
-- the first run after an install or after a change to their sources (the cache is keyed on
the source hash, :mod:`trainscape.native.numba_cache`). The greedy and beam planners need no numba
when the C extension is present (every plan is costed by ``trainscape.native._dlrm``).

So when evolve is asked for and its kernels are not in the cache, ``shard`` (by default)
answers with the C beam planner, says so in the report (``method``, ``requested_method``,
``note``) and starts ``python -m trainscape.dlrm.coldstart`` in the background, which compiles
the kernels into the cache by planning a small scenario; the next call runs evolve.
``--wait-compile`` (or ``TRAINSCAPE_COLD_START=wait``) compiles in the foreground instead;
``TRAINSCAPE_COLD_START=no-background`` answers with beam without starting the compile.

Readiness is a marker file written into the kernels' cache directories once an evolve run of
this source has finished, plus numba's own index of the two largest kernels (numba drops it
when a source file's time stamp changes).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

MARKER = "trainscape-evolve-ready"
NOTE = ("evolve's numba kernels are not compiled yet (first run after an install or a source "
        "change); answered with the C beam planner while they compile in the background "
        "(about 1-2 min; --wait-compile waits for them instead)")


def _dirs() -> list[Path]:
    from . import balance, incremental

    return [Path(balance._njit.cache_dir), Path(incremental._njit.cache_dir)]


def _indexed(dispatcher) -> bool:
    """Whether numba's on-disk index of ``dispatcher`` holds compiled code for this source."""
    try:
        return bool(dispatcher._cache._cache_file._load_index())
    except Exception:  # numba internals moved: rely on the marker alone
        return True


def evolve_ready() -> bool:
    """True when evolve's kernels load from the cache (no compile on the next plan)."""
    from . import balance, incremental

    if not all((d / MARKER).exists() for d in _dirs()):
        return False
    return _indexed(balance.balance_phase) and _indexed(incremental._evolve)


def mark_ready() -> None:
    """Record that evolve's kernels of this source are in the cache."""
    for d in _dirs():
        try:
            d.mkdir(parents=True, exist_ok=True)
            (d / MARKER).write_text("ok\n", encoding="utf-8")
        except OSError:  # read-only cache: the next run compiles again, nothing worse
            pass


def mode() -> str:
    """``TRAINSCAPE_COLD_START``: ``background`` (default), ``no-background`` or ``wait``."""
    v = os.environ.get("TRAINSCAPE_COLD_START", "background")
    return v if v in ("background", "no-background", "wait") else "background"


def start_background_compile() -> None:
    """Compile evolve's kernels in a detached process (output discarded)."""
    subprocess.Popen([sys.executable, "-m", "trainscape.dlrm.coldstart"],
                     stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                     stderr=subprocess.DEVNULL, start_new_session=True)


def warm() -> None:
    """Compile (or load) evolve's kernels by planning a small scenario with every planner
    phase, then write the readiness marker."""
    from . import load
    from .planner import plan

    tables = [{"name": f"t{i}", "rows": 1000 * (i + 1) ** 2, "dim": (16, 64, 128)[i % 3],
               "pooling": 1.0 + 3 * i} for i in range(24)]
    raw = {"name": "warm", "model": {"tables": tables, "interaction": "dcn",
                                     "dense_arch": [64, 32], "over_arch": [64, 1]},
           "job": {"global_batch": 4096},
           "cluster": {"preset": "dgx-h100-superpod", "gpus": 16}}
    plan(load(raw), method="evolve", iterations=4000)
    mark_ready()



def choose_method(method: str, backend: str | None, wait: bool) -> str:
    """The planner ``shard`` runs for ``method``: ``beam`` in place of a cold ``evolve`` when
    the C extension can cost the plans (see the module docstring), else ``method``."""
    if method != "evolve" or wait or mode() == "wait" or backend in ("numba", "python"):
        return method
    from .evaluation import native_available

    if not native_available() or evolve_ready():
        return method
    if mode() == "background":
        start_background_compile()
    return "beam"


if __name__ == "__main__":
    warm()
