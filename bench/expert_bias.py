"""C throughput with and without Megatron-Core's eager expert-bias add on the GPT-OSS example.

The example's design space (seeded) costed on one thread by the C backend, once with the
experts' bias added in the eager per-expert loop (``job.expert_bias = "eager"``, what the
example runs on Megatron-Core) and once fused (``"fused"``, the term off); prints configs/s of
each, best of a few rounds.

    python bench/expert_bias.py [-n 500000]
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np
from comm_dtype import rate  # the sibling bench's best-of-rounds one-thread C rate

from trainscape import layout as L
from trainscape.space.design import design_space
from trainscape.spec import load_scenario, pack

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "gpt-oss-120b-sliding-window.toml"


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("-n", type=int, default=500_000)
    n = ap.parse_args().n
    sc = load_scenario(EXAMPLE)
    sys, mdl, job = pack(sc)
    cfg = np.ascontiguousarray(design_space(sc).sample(n, seed=0))
    assert job[L.JOB_EAGER_EXPERT_BIAS] == 1.0
    eager = rate(sys, mdl, job, cfg)
    fused_job = job.copy()
    fused_job[L.JOB_EAGER_EXPERT_BIAS] = 0.0
    fused = rate(sys, mdl, fused_job, cfg)
    print(f"C, 1 thread, {cfg.shape[1]} GPT-OSS 120B configs: expert bias fused "
          f"{fused / 1e6:.2f} M/s, eager {eager / 1e6:.2f} M/s")


if __name__ == "__main__":
    main()
