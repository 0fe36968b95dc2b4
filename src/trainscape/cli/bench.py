"""Throughput bench of the kernel backends, and the ``trainscape bench`` command.

The same seeded random batch of valid configurations of the Llama-3-405B example
(``examples/llama3-405b-2bldg.toml``: 16,384 GPUs, three network tiers) is costed by every
loaded backend after a warm-up (numba compile time excluded), on one thread and on all cores;
the figures are configurations per second, and ratios to the pure-Python reference.
``bench/throughput.py`` is the script form.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import numpy as np

from .. import layout as L

EXAMPLE = "llama3-405b-2bldg.toml"


def _example_path() -> Path | None:
    here = Path(__file__).resolve()
    for root in (here.parents[2], Path.cwd()):
        p = root / "examples" / EXAMPLE
        if p.exists():
            return p
    return None


def llama_blocks() -> tuple[np.ndarray, np.ndarray, np.ndarray, object]:
    """``(sys, mdl, job, scenario)`` of the Llama-3-405B example. Without the examples
    directory (an installed package) the same numbers are packed by hand, ``scenario`` None."""
    path = _example_path()
    if path is not None:
        from ..api import load
        from ..spec import pack

        sc = load(path)
        sys, mdl, job = pack(sc)
        return sys, mdl, job, sc
    # the example's numbers (H100 SXM preset, Llama 3 405B shape with 128 layer slots)
    sys = np.zeros(L.N_SYS)
    sys[L.SYS_GPUS] = 16384
    sys[L.SYS_N_TIERS] = 3
    sys[L.SYS_PEAK_FLOPS] = 989e12
    sys[L.SYS_HBM_BYTES] = 80e9
    sys[L.SYS_HBM_BANDWIDTH] = 3350e9
    sys[L.SYS_HBM_RESERVE_BYTES] = 4e9
    sys[L.SYS_GEMM_EFFICIENCY_MAX] = 0.8
    sys[L.SYS_GEMM_HALF_FLOPS] = 2e9
    sys[L.SYS_ATTENTION_EFFICIENCY] = 0.5
    sys[L.SYS_MEMORY_EFFICIENCY] = 0.8
    sys[L.SYS_LAYER_OVERHEAD_S] = 20e-6
    sys[L.SYS_STEP_OVERHEAD_S] = 30e-3
    # a bf16 job: linear layers on the 16-bit curve; the H100 preset's overlap constants
    sys[L.SYS_LINEAR_PEAK_FLOPS] = 989e12
    sys[L.SYS_LINEAR_EFFICIENCY_MAX] = 0.8
    sys[L.SYS_LINEAR_HALF_FLOPS] = 2e9
    sys[L.SYS_TP_OVERLAP_EXPOSED] = 0.125
    sys[L.SYS_TP_OVERLAP_SLOWDOWN] = 0.064
    sys[L.SYS_CP_OVERLAP_SLOWDOWN] = 0.03
    sys[L.SYS_ATTENTION_HALF_SEQ] = 209.0
    for i, (size, gbps, lat_us, eff, over) in enumerate(
            ((8, 450, 3.4, 0.8, 1), (1024, 50, 14, 0.85, 1), (2, 50, 64, 0.85, 8))):
        base = L.SYS_TIER_BASE + i * L.N_TIER
        sys[base:base + 5] = (size, gbps * 1e9, lat_us * 1e-6, eff, over)
    mdl = np.zeros(L.N_MODEL)
    mdl[[L.MDL_LAYERS, L.MDL_HIDDEN, L.MDL_FFN_HIDDEN, L.MDL_HEADS, L.MDL_KV_HEADS,
         L.MDL_HEAD_DIM, L.MDL_VOCAB, L.MDL_SWIGLU]] = (128, 16384, 53248, 128, 8, 128, 128256, 1)
    job = np.zeros(L.N_JOB)
    job[[L.JOB_SEQ_LEN, L.JOB_GLOBAL_BATCH, L.JOB_ACTIVATION_BYTES, L.JOB_PARAM_BYTES,
         L.JOB_GRAD_BYTES, L.JOB_OPTIMIZER_BYTES, L.JOB_OPTIMIZER_TRAFFIC_BYTES, L.JOB_COMM_BYTES,
         L.JOB_GRAD_COMM_BYTES, L.JOB_FLASH_ATTENTION, L.JOB_DISPATCH_BYTES,
         L.JOB_COMBINE_BYTES, L.JOB_LINEAR_INPUT_BYTES, L.JOB_LOGITS_EXTRA_BYTES,
         L.JOB_LINEAR_PARAM_COMM_BYTES, L.JOB_ZERO3_SHARD_PARAM_BYTES]] = (
             8192, 2048, 2, 2, 4, 12, 36, 2, 4, 1, 2, 2, 2, 4, 2, 2)
    return sys, mdl, job, None


def _random_configs(sys, mdl, job, n: int, seed: int) -> np.ndarray:
    """``n`` valid configs drawn (seeded) from a grid of the example's axes, without the
    design-space module: candidates are drawn, invalid ones dropped, until ``n`` remain."""
    from ..model.llm import config_error

    rng = np.random.Generator(np.random.PCG64(seed))
    gpus = int(sys[L.SYS_GPUS])
    cols: list[np.ndarray] = []
    while len(cols) < n:
        c = np.zeros(L.N_CFG, dtype=np.int32)
        c[L.CFG_TP] = rng.choice([1, 2, 4, 8])
        c[L.CFG_CP] = rng.choice([1, 2])
        c[L.CFG_PP] = rng.choice([1, 2, 4, 8, 16, 32])
        c[L.CFG_DP] = gpus // (c[L.CFG_TP] * c[L.CFG_CP] * c[L.CFG_PP])
        c[L.CFG_EP] = 1
        c[L.CFG_MBS] = rng.choice([1, 2])
        c[L.CFG_SCHEDULE] = rng.choice([L.SCHED_1F1B, L.SCHED_INTERLEAVED, L.SCHED_ZB_H1,
                                        L.SCHED_ZB_V])
        c[L.CFG_VPP] = rng.choice([2, 4]) if c[L.CFG_SCHEDULE] == L.SCHED_INTERLEAVED else 1
        c[L.CFG_RECOMPUTE] = rng.integers(0, 3)
        c[L.CFG_ZERO] = rng.choice([1, 3])
        c[L.CFG_SP] = rng.integers(0, 2)
        c[L.CFG_ORDER] = rng.integers(0, L.N_ORDERS)
        c[L.CFG_TP_OVERLAP] = rng.integers(0, 2)
        c[L.CFG_DP_OVERLAP] = rng.integers(0, 2)
        if config_error(sys, mdl, job, c.reshape(L.N_CFG, 1), 0) == 0:
            cols.append(c)
        if len(cols) >= 4096:  # enough distinct configs: repeat them to n
            break
    base = np.stack(cols, axis=1)
    idx = rng.integers(0, base.shape[1], size=n)
    return np.ascontiguousarray(base[:, idx])


def bench_batch(n: int, seed: int = 0):
    """``(sys, mdl, job, cfg)``: the example's blocks and ``n`` valid configs, reproducible for a
    seed (drawn from the scenario's design space when :mod:`trainscape.space` is there)."""
    sys, mdl, job, sc = llama_blocks()
    cfg = None
    if sc is not None:
        try:
            from ..space.design import design_space

            cfg = np.ascontiguousarray(design_space(sc).sample(n, seed=seed))
        except ImportError:
            cfg = None
    if cfg is None:
        cfg = _random_configs(sys, mdl, job, n, seed)
    return sys, mdl, job, cfg


def _rate(fn, n: int, min_time: float, repeat: int) -> float:
    """Best configs/s of ``fn`` over ``repeat`` rounds of at least ``min_time`` seconds."""
    best = 0.0
    for _ in range(repeat):
        calls = 0
        t0 = time.perf_counter()
        while True:
            fn()
            calls += 1
            dt = time.perf_counter() - t0
            if dt >= min_time:
                break
        best = max(best, calls * n / dt)
    return best


#: columns per call with ``memo=False``: below the 16,384 per worker from which the c and numba
#: batch drivers keep their memos of rows and (row, order) pairs
NO_MEMO_CHUNK = 8192


def _native_runner(name: str, n: int, seed: int, memo: bool):
    """``(run(threads), configs per run)``: the bench batch costed by backend ``name`` (warmed
    up), whole or in calls of :data:`NO_MEMO_CHUNK` columns."""
    from ..backends import evaluate_blocks

    sys, mdl, job, cfg = bench_batch(n, seed)
    size = cfg.shape[1] if memo else NO_MEMO_CHUNK
    parts = [np.ascontiguousarray(cfg[:, i:i + size]) for i in range(0, cfg.shape[1], size)]
    outs = [np.empty((L.N_OUT, c.shape[1])) for c in parts]

    def run_all(threads):
        for c, o in zip(parts, outs):
            evaluate_blocks(sys, mdl, job, c, backend=name, threads=threads, out=o)

    evaluate_blocks(sys, mdl, job, np.ascontiguousarray(cfg[:, :1000]), backend=name)
    run_all(1)
    return run_all, cfg.shape[1]


def _independent_worker(name, n, seed, memo, min_time, repeat, barrier, queue) -> None:
    run_all, count = _native_runner(name, n, seed, memo)
    barrier.wait()  # every process starts timing at once
    queue.put(_rate(lambda: run_all(1), count, min_time, repeat))


def independent_rate(name: str, procs: int, n: int, seed: int, memo: bool, min_time: float,
                     repeat: int) -> float:
    """Configs/s of ``procs`` separate processes, each costing the bench batch on one thread
    at the same time: the same work with nothing shared between the workers, so the most a
    run on ``procs`` threads can reach on this machine right now (on a shared or virtual
    machine that is often well below ``procs`` times one thread)."""
    import multiprocessing as mp

    ctx = mp.get_context("spawn")  # a fresh interpreter: no thread pools inherited
    barrier, queue = ctx.Barrier(procs), ctx.Queue()
    workers = [ctx.Process(target=_independent_worker,
                           args=(name, n, seed, memo, min_time, repeat, barrier, queue))
               for _ in range(procs)]
    for w in workers:
        w.start()
    try:
        rates = [queue.get(timeout=600) for _ in workers]
    finally:
        for w in workers:
            w.join(timeout=10)
            if w.is_alive():
                w.kill()
    return float(sum(rates))


def measure(n: int = 1_000_000, python_n: int = 2000, seed: int = 0, backends=None,
            min_time: float = 0.5, repeat: int = 3, threads_all: int | None = None,
            memo: bool = True, independent: bool = False) -> dict:
    """``{"c": {"1": rate, "all": rate}, "numba": {...}, "python": {...}}`` in configs/s for
    the loaded backends (python: one thread; its "all" is the same figure). ``memo=False``
    costs the batch in calls of :data:`NO_MEMO_CHUNK` columns, so every configuration is
    costed from scratch (what a batch that never repeats a core layout costs). With
    ``independent``, c and numba also report ``"procs"``: :func:`independent_rate` on as
    many processes as there are cores, the yardstick for the threaded "all"."""
    from ..backends import BACKENDS, available_backends, evaluate_blocks

    status = available_backends()
    names = [b for b in (backends or BACKENDS) if status[b][0]]
    all_cores = threads_all or (os.cpu_count() or 1)
    results: dict[str, dict[str, float]] = {}
    for name in names:
        if name == "python":
            sys, mdl, job, cfg = bench_batch(python_n, seed)
            evaluate_blocks(sys, mdl, job, cfg[:, :10].copy(), backend=name)  # warm-up
            r = _rate(lambda: evaluate_blocks(sys, mdl, job, cfg, backend=name), cfg.shape[1],
                      min_time, 1)
            results[name] = {"1": r, "all": r}
            continue
        run_all, count = _native_runner(name, n, seed, memo)
        rates = {}
        for key, threads in (("1", 1), ("all", all_cores)):
            run_all(threads)
            rates[key] = _rate(lambda t=threads: run_all(t), count, min_time, repeat)
        if independent:
            rates["procs"] = independent_rate(name, all_cores, n, seed, memo, min_time, repeat)
        results[name] = rates
    return results


def format_table(results: dict, n: int, cores: int, memo: bool = True) -> str:
    """A plain-text table: backend, configs/s on 1 thread and all cores, ratios to python,
    and (when measured) the independent-process yardstick of the all-cores figure."""
    ref = results.get("python", {}).get("1")
    procs = any("procs" in r for r in results.values())
    how = "" if memo else f", in calls of {NO_MEMO_CHUNK:,} (no memo)"
    head = (f"{'backend':<8} {'1 thread':>16} {'all cores':>16} {'x python (1)':>14} "
            f"{'x python (all)':>15} {'scaling':>8}")
    if procs:
        head += f" {f'{cores} processes':>16} {'of procs':>9}"
    lines = [f"Llama-3-405B example, {n:,} random valid configs{how}, {cores} cores", head]
    for name, r in results.items():
        one, every = r["1"], r["all"]
        x1 = f"{one / ref:,.0f}" if ref else "-"
        xa = f"{every / ref:,.0f}" if ref else "-"
        line = (f"{name:<8} {one:>16,.0f} {every:>16,.0f} {x1:>14} {xa:>15} "
                f"{every / one:>7.2f}x")
        if "procs" in r:
            line += f" {r['procs']:>16,.0f} {100 * every / r['procs']:>8.0f}%"
        lines.append(line)
    lines.append("configs/s; python is the pure-Python reference (one thread)")
    if procs:
        lines.append(f"{cores} processes: {cores} separate one-thread processes at once (nothing "
                     "shared), the most all cores can give on this machine now; of procs: "
                     "all cores / that")
    return "\n".join(lines)


def run(n: int, python_n: int, seed: int, as_json: bool, backends=None, memo: bool = True,
        independent: bool = True) -> str:
    res = measure(n=n, python_n=python_n, seed=seed, backends=backends, memo=memo,
                  independent=independent)
    if as_json:
        return json.dumps(res)
    return format_table(res, n, os.cpu_count() or 1, memo)


def _click_command():
    import click

    @click.command("bench")
    @click.option("-n", "--configs", "n", default=1_000_000, show_default=True,
                  help="Configurations in the batch (c and numba).")
    @click.option("--python-configs", "python_n", default=2000, show_default=True,
                  help="Configurations the pure-Python reference costs (it is slow).")
    @click.option("--seed", default=0, show_default=True, help="Seed of the random batch.")
    @click.option("--backend", "backends", multiple=True,
                  type=click.Choice(["c", "numba", "python"]),
                  help="Only these backends (repeatable; default: every loaded one).")
    @click.option("--json", "as_json", is_flag=True,
                  help='Print {"c": {"1": .., "all": ..}, ...} in configs/s.')
    @click.option("--no-memo", "no_memo", is_flag=True,
                  help=f"Cost the batch in calls of {NO_MEMO_CHUNK:,} columns, below the size "
                       "from which c and numba reuse repeated rows: every config from scratch.")
    @click.option("--independent/--no-independent", default=True, show_default=True,
                  help="Also cost the batch in one separate one-thread process per core at "
                       "once: the yardstick of the all-cores figure on this machine.")
    def bench(n: int, python_n: int, seed: int, backends: tuple[str, ...], as_json: bool,
              no_memo: bool, independent: bool):
        """Throughput of the kernel backends (configs/s, 1 thread and all cores) on a random
        batch of the Llama-3-405B example, with ratios to the pure-Python reference."""
        click.echo(run(n, python_n, seed, as_json, backends or None, memo=not no_memo,
                       independent=independent))

    return bench


command = _click_command()
