"""C throughput with and without a region-tier ``comm_dtype`` on the two-building example.

The batch of ``trainscape bench`` (the example's design space, seeded) costed on one thread
by the C backend, once as given and once with ``cluster.tiers[2].comm_dtype = "bf16"`` (the
compressed collectives' path); prints configs/s of each, best of a few rounds.

    python bench/comm_dtype.py [-n 1000000]
"""

from __future__ import annotations

import argparse
import time

from trainscape import api
from trainscape import layout as L
from trainscape.cli.bench import bench_batch
from trainscape.spec.pack import comm_dtype_bytes


def rate(sys, mdl, job, cfg, repeat: int = 3) -> float:
    best = 0.0
    for _ in range(repeat):
        t0 = time.perf_counter()
        api.evaluate_columns(sys, mdl, job, cfg, backend="c", threads=1)
        best = max(best, cfg.shape[1] / (time.perf_counter() - t0))
    return best


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("-n", type=int, default=1_000_000)
    n = ap.parse_args().n
    sys, mdl, job, cfg = bench_batch(n)
    plain = rate(sys, mdl, job, cfg)
    comp = sys.copy()
    comp[L.SYS_TIER_BASE + 2 * L.N_TIER + L.TIER_COMM_DTYPE_BYTES] = comm_dtype_bytes("bf16")
    bf16 = rate(comp, mdl, job, cfg)
    print(f"C, 1 thread, {n} configs: comm_dtype none {plain / 1e6:.2f} M/s, "
          f"region bf16 {bf16 / 1e6:.2f} M/s")


if __name__ == "__main__":
    main()
