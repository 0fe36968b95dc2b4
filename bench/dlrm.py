"""DLRM benchmarks: full-plan evaluations/s per backend, O(1) move scores/s, planning time and
plan quality (step vs lower bound and vs each greedy baseline).

    PYTHONPATH=src python bench/dlrm.py [--json] [--quick] [--cold]

Planning time is the warm figure: the best of the runs after a first one in this process (that
first call loads the planner's numba code from the disk cache, or compiles it when the cache is
cold; its time is reported apart). ``--cold`` also plans each case once in a fresh process with
an empty numba cache: the first run after an install or a source change.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import numpy as np

from trainscape import dlrm
from trainscape.dlrm import layout as D
from trainscape.dlrm import bounds, planner

ROOT = Path(__file__).resolve().parents[1]
CASES = {"criteo_64": ROOT / "examples/dlrm/criteo_1tb_64gpu.toml",
         "synthetic_856_128": ROOT / "examples/dlrm/synthetic_856_128gpu.toml"}


def _rate(fn, n_items, min_time=1.0):
    fn()  # warm-up (compile, caches)
    reps, t0 = 0, time.perf_counter()
    while True:
        fn()
        reps += 1
        dt = time.perf_counter() - t0
        if dt >= min_time:
            return n_items * reps / dt


def random_plans(sc, n, seed=0):
    """Realistic plans: the greedy plan with random table-wise moves."""
    base = planner.greedy(sc, "cost")
    rng = np.random.default_rng(seed)
    plans = np.repeat(base[None], n, axis=0)
    tw = np.flatnonzero(base[D.PL_KIND] == D.SH_TW)
    if len(tw):
        rows = rng.integers(0, len(tw), n)
        plans[np.arange(n), D.PL_RANK, tw[rows]] = rng.integers(0, sc.world, n)
    return plans


def bench_eval(sc, quick):
    n = 20000 if sc.n_tables < 100 else 2000
    plans = random_plans(sc, n)
    out = {}
    mt = 0.5 if quick else 1.5
    if dlrm.native_available():
        out["c_1thread"] = _rate(lambda: dlrm.evaluate_plans(sc, plans, backend="c"), n, mt)
        out["c_2threads"] = _rate(lambda: dlrm.evaluate_plans(sc, plans, backend="c",
                                                              threads=2), n, mt)
    out["numba"] = _rate(lambda: dlrm.evaluate_plans(sc, plans, backend="numba"), n, mt)
    small = plans[:50]
    out["python"] = _rate(lambda: dlrm.evaluate_plans(sc, small, backend="python"), 50, mt)
    return out


def bench_moves(sc, quick):
    """O(1) candidate scores/s on one core per scorer: a batch of candidates drawn as the
    planner's hill climb draws them (``incremental.planner_candidates``: 25% swaps of two
    table-wise tables, 5% memory-tier changes, the rest moves to another rank, half of the
    tables taken off a bottleneck rank), scored from the planner's state by numba's
    ``incremental.score_batch`` and by the C kernel ``dl_score_moves``, repeated; best of three
    timings each."""
    from trainscape.dlrm import incremental as inc

    plan = planner.greedy(sc, "cost")
    plan[D.PL_KIND] = np.where(plan[D.PL_KIND] == D.SH_CW, D.SH_TW, plan[D.PL_KIND])
    plan[D.PL_SHARDS] = 1
    movable = np.flatnonzero(plan[D.PL_KIND] == D.SH_TW).astype(np.int64)
    if len(movable) == 0:
        return None
    tables = np.ascontiguousarray(sc.tables)
    st, tdim, tpool, prank, ptier = inc.prepare(sc.sys, sc.job, tables, plan)
    c, rk, fac, did, n_dom, dsum, tv, ti, nb_v, nb_i, tt, rec, rmask, _ = st
    cand = inc.planner_candidates(ti, c, plan, movable, 100_000, 1)
    out = np.empty(len(cand))
    args = (c, rk, fac, did, dsum, tv, ti, nb_v, nb_i, tt, tdim, tpool, prank, ptier, cand, out)
    reps = 20 if quick else 100
    res = {}
    inc.score_random(*args, 1)  # compile / warm
    best = 0.0
    for _ in range(3):
        t0 = time.perf_counter()
        inc.score_random(*args, reps)
        best = max(best, reps * len(cand) / (time.perf_counter() - t0))
    res["numba"] = best
    if dlrm.native_available():
        from trainscape.native import dlrm as native

        out_c = np.empty(len(cand))
        native.score_moves(st, tdim, tpool, prank, ptier, cand, out_c)
        if not np.array_equal(out_c, out):
            raise AssertionError("C and numba move scores differ")
        best = 0.0
        for _ in range(3):
            t0 = time.perf_counter()
            for _ in range(reps):
                native.score_moves(st, tdim, tpool, prank, ptier, cand, out_c)
            best = max(best, reps * len(cand) / (time.perf_counter() - t0))
        res["c"] = best
    return res


def bench_plan(sc, quick):
    """Per method: the first call in this process (numba's disk-cache load or compile inside)
    and then ``warm`` more runs of the same (seeded, so the same plan); planning_s is the best
    warm run, planning_s_range the warm runs' range."""
    res = {}
    warm = 1 if quick else 2
    for m in ("greedy", "beam", "evolve"):
        it = sc.spec.planner.iterations if not quick else 100_000
        first = planner.plan(sc, m, iterations=it)
        runs = [planner.plan(sc, m, iterations=it) for _ in range(warm)]
        if any(not np.array_equal(x.plan, first.plan) for x in runs):
            raise AssertionError(f"{m}: a warm run planned differently")
        r = min(runs, key=lambda x: x.elapsed_s)
        times = [x.elapsed_s for x in runs]
        res[m] = {"step_time_s": r.step_time_s, "planning_s": r.elapsed_s,
                  "planning_s_range": [min(times), max(times)],
                  "planning_first_call_s": first.elapsed_s,
                  "gap_to_even_spread": r.step_time_s / bounds.even_spread_bound(sc) - 1.0,
                  "gap_to_lower_bound": r.step_time_s / r.lower_bound_s - 1.0,
                  "vs_best_greedy": r.step_time_s / min(r.baselines.values()) - 1.0,
                  "moves_scored": r.moves_scored, "status": r.result["status"]}
    res["lower_bound_s"] = r.lower_bound_s
    res["bound_parts_s"] = bounds.lower_bound_parts(sc)
    res["greedy_baselines_s"] = r.baselines
    return res


def bench_cold(path, quick):
    """Seconds of the evolve planner's first call in a fresh process with empty numba caches
    (compile included): what the first run after an install or a source change costs."""
    import os
    import subprocess
    import sys
    import tempfile

    code = ("import sys, json; from trainscape import dlrm; from trainscape.dlrm import planner;"
            "sc = dlrm.load(sys.argv[1]); it = int(sys.argv[2]) or sc.spec.planner.iterations;"
            "r = planner.plan(sc, 'evolve', iterations=it); print(json.dumps(r.elapsed_s))")
    with tempfile.TemporaryDirectory() as tmp:
        env = dict(os.environ, NUMBA_CACHE_DIR=tmp, TRAINSCAPE_CACHE_DIR=tmp)
        out = subprocess.run([sys.executable, "-c", code, str(path),
                              str(100_000 if quick else 0)], env=env, check=True,
                             capture_output=True, text=True)
    return float(out.stdout.strip().splitlines()[-1])


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--cold", action="store_true",
                    help="also plan each case in a fresh process with empty numba caches")
    args = ap.parse_args()
    report = {}
    for name, path in CASES.items():
        sc = dlrm.load(path)
        report[name] = {"tables": sc.n_tables, "ranks": sc.world,
                        "evaluations_per_s": bench_eval(sc, args.quick),
                        "move_scores_per_s": bench_moves(sc, args.quick),
                        "planning": bench_plan(sc, args.quick)}
        if args.cold:
            report[name]["planning"]["evolve"]["planning_cold_cache_s"] = bench_cold(
                path, args.quick)
        if not args.json:
            r = report[name]
            print(f"== {name}: {sc.n_tables} tables on {sc.world} ranks")
            for k, v in r["evaluations_per_s"].items():
                print(f"  full plan evaluations/s  {k:12s} {v:14,.0f}")
            for k, v in (r["move_scores_per_s"] or {}).items():
                print(f"  O(1) move/swap scores/s (1 core) {k:5s} {v:14,.0f}")
            p = r["planning"]
            bp = p["bound_parts_s"]
            print(f"  lower bound {p['lower_bound_s'] * 1e3:.4f} ms (sum {bp['sum_bound_s'] * 1e3:.4f},"
                  f" rank {bp['rank_bound_s'] * 1e3:.4f}, table {bp['table_bound_s'] * 1e3:.4f};"
                  f" even-spread estimate "
                  f"{bp['even_spread_s'] * 1e3:.4f}); greedy "
                  + ", ".join(f"{k} {v * 1e3:.4f}" for k, v in p["greedy_baselines_s"].items()))
            for m in ("greedy", "beam", "evolve"):
                q = p[m]
                lo, hi = q["planning_s_range"]
                cold = (f", {q['planning_cold_cache_s']:.2f} s with empty numba caches"
                        if "planning_cold_cache_s" in q else "")
                print(f"  {m:7s} step {q['step_time_s'] * 1e3:.4f} ms  gap "
                      f"{100 * q['gap_to_lower_bound']:5.1f}%  vs best greedy "
                      f"{100 * q['vs_best_greedy']:+5.1f}%  (vs even-spread "
                      f"{100 * q['gap_to_even_spread']:+5.1f}%) in {q['planning_s']:.2f} s warm"
                      f" ({lo:.2f}-{hi:.2f}; first call {q['planning_first_call_s']:.2f} s"
                      f"{cold})")
    if args.json:
        print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
