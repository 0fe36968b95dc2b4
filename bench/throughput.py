#!/usr/bin/env python3
"""Throughput of the kernel backends on the Llama-3-405B example (configs/s).

The same seeded random batch of valid configurations is costed by every loaded backend (c,
numba, python) after a warm-up, on one thread and on all cores; ratios are to the pure-Python
reference. "procs" is the yardstick of the all-cores figure: one separate one-thread process
per core, all at once, costing the same batch (nothing shared; what this machine gives now;
``--no-independent`` skips it). The measurement lives in :mod:`trainscape.cli.bench` (also
``trainscape bench``).

    python bench/throughput.py                 # table
    python bench/throughput.py --json          # {"c": {"1": .., "all": .., "procs": ..}, "numba": ..., "python": ...}
    python bench/throughput.py -n 200000 --backend c
"""

from __future__ import annotations

import sys
from pathlib import Path

try:
    import trainscape  # noqa: F401
except ImportError:  # run from a checkout without installing
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from trainscape.cli.bench import _click_command  # noqa: E402

if __name__ == "__main__":
    _click_command()(prog_name="throughput.py")
