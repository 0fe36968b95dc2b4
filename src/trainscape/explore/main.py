"""``explore``: the main job. Sweep the design space when it fits the time budget, otherwise
search it (evolutionary + beam), then print the best configurations and write a report.
"""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np

from .results import SweepResult

#: The scenario ``trainscape explore`` runs without an argument: a Llama-3-405B-class model on
#: 16,384 H100 GPUs in two buildings, the setting of Llama 3 (Grattafiori et al., arXiv
#: 2407.21783, §3.3: 8K sequences, 2,048 sequences per step, [TP, CP, PP, DP] placement) on the
#: two-building network of ``examples/llama3-405b-2bldg.toml`` (cross-building links 8:1
#: oversubscribed).
DEFAULT_SCENARIO = {
    "name": "default: Llama-3-405B-class model on 16K H100 GPUs in two buildings",
    "model": {"preset": "llama3-405b"},
    # the 126 layers split as Llama 3 did (one layer fewer on the first and last stage), no
    # dropout
    "job": {"seq_len": 8192, "global_batch": 2048, "dtype": "bf16", "optimizer": "adam",
            "pipeline_edge_layers": 1, "dropout": False},
    "cluster": {
        "gpu": "h100-sxm-80gb",
        "gpus": 16384,
        "tiers": [
            {"name": "node", "size": 8, "bandwidth_GBps": 450, "latency_us": 3.4,
             "efficiency": 0.8},
            {"name": "building", "size": 1024, "bandwidth_GBps": 50, "latency_us": 14,
             "efficiency": 0.85, "oversubscription": 1},
            {"name": "region", "size": 2, "bandwidth_GBps": 50, "latency_us": 64,
             "efficiency": 0.85, "oversubscription": 8},
        ],
    },
    "space": {
        "tp": [1, 2, 4, 8],
        "cp": [1, 2],
        "pp": [1, 2, 4, 8, 16, 32],
        "mbs": [1, 2],
        "vpp": [1, 2, 4],
        "schedule": ["1f1b", "interleaved", "zb-h1", "zb-v"],
        "recompute": ["none", "selective", "full"],
        "zero": [1, 3],
        "order": "all",
    },
}

#: Assumed configurations/s per core when deciding sweep vs search, by sweep backend
#: (measured on this project's 2-core machine for the LLM model; conservative).
RATE_PER_CORE = {"c": 1.5e6, "numba": 3.0e5, "python": 3.0e3}


def default_scenario():
    from ..api import load

    return load(DEFAULT_SCENARIO)


def run_explore(scenario, *, time_budget_s: float = 20.0, top: int = 10,
                objective: str = "step_time_s", seed: int = 0, backend: str | None = None,
                budget: int | None = None, progress: bool = False,
                workers: int | None = None) -> SweepResult:
    """Sweep when ``size / rate <= time_budget_s``, else evolve + beam search merged."""
    from ..space import design_space
    from .search import default_budget, run_beam, run_evolve
    from .sweep import default_workers, run_sweep, sweep_backend

    space = design_space(scenario)
    space.check_nonempty()
    name = sweep_backend(backend)
    workers = workers or default_workers()
    est = space.size / (RATE_PER_CORE[name] * workers)
    if est <= time_budget_s:
        res = run_sweep(scenario, space=space, top=top, objective=objective, backend=name,
                        workers=workers, progress=progress)
        res.extra["mode"] = "sweep"
        return res
    t0 = time.perf_counter()
    b = budget or default_budget(space.size)
    ev = run_evolve(scenario, space=space, budget=b, seed=seed, top=top, objective=objective)
    bm = run_beam(scenario, space=space, budget=b, seed=seed, top=top, objective=objective)
    res = merge_results(ev, bm, top)
    res.elapsed_s = time.perf_counter() - t0
    res.extra["mode"] = "search"
    return res


def merge_results(a: SweepResult, b: SweepResult, k: int) -> SweepResult:
    """Union of two searches' findings (top-K, Pareto front, best per order re-reduced)."""
    from .results import Rows
    from .sweep import reduce_columns

    idx = np.concatenate([a.top.index, a.front.index, a.by_order.index,
                          b.top.index, b.front.index, b.by_order.index])
    cfg = np.concatenate([a.top.cfg, a.front.cfg, a.by_order.cfg,
                          b.top.cfg, b.front.cfg, b.by_order.cfg], axis=1)
    out = np.concatenate([a.top.out, a.front.out, a.by_order.out,
                          b.top.out, b.front.out, b.by_order.out], axis=1)
    _, first = np.unique(idx, return_index=True)
    idx, cfg, out = idx[first], cfg[:, first], out[:, first]
    from .results import objective_column

    col, obj_col, sign = objective_column(a.objective)
    red = reduce_columns(idx, cfg, out, obj_col, sign, k)
    pos = {int(x): j for j, x in enumerate(idx)}

    def pick(ids):
        sel = np.array([pos[int(x)] for x in ids], np.int64)
        return Rows(np.asarray(ids, np.int64), cfg[:, sel], out[:, sel])

    have = red.order_idx >= 0
    oi, ok = red.order_idx[have], red.order_key[have]
    return SweepResult(
        scenario_name=a.scenario_name, objective=a.objective, space_size=a.space_size,
        top=pick(red.topk_idx), front=pick(red.front_idx),
        by_order=pick(oi[np.lexsort((oi, ok))]),
        evaluated=a.evaluated + b.evaluated, feasible=a.feasible + b.feasible,
        out_of_memory=a.out_of_memory + b.out_of_memory, invalid=a.invalid + b.invalid,
        min_memory_gib=min(a.min_memory_gib, b.min_memory_gib),
        elapsed_s=a.elapsed_s + b.elapsed_s, backend="evolve+beam", workers=1,
        extra={"evolve_evaluated": a.evaluated, "beam_evaluated": b.evaluated},
    )


def default_report_dir(scenario) -> Path:
    import re

    slug = re.sub(r"[^A-Za-z0-9]+", "-", scenario.name or "scenario").strip("-").lower()
    if len(slug) > 96:  # a whole-word prefix, never a word cut in two
        slug = slug[:97].rsplit("-", 1)[0]
    return Path("trainscape-report") / (slug or "scenario")
