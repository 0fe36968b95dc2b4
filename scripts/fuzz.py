#!/usr/bin/env python
"""Long-running fuzzer of the reliability contract (issue 14).

    python scripts/fuzz.py --minutes 10 [--kinds llm,dlrm,cli,runs] [--timeout 30]

Draws cases from the hypothesis strategies of ``tests/fuzzkit.py`` (mutated LLM and DLRM
scenarios, fuzzed command lines, published-run files for ``validate --runs``), runs each through the CLI in-process and checks the contract
(exit 2 with one located message, or exit 0 with finite output, within ``--timeout`` seconds).
A case that breaks it is saved as ``tests/fuzz_regressions/<kind>-<hash>.json`` (once per
distinct violation message), which ``tests/test_fuzz.py::test_saved_regressions`` replays.
Prints the counts at the end: cases run per kind, exit codes, violations found.
"""

from __future__ import annotations

import argparse
import collections
import sys
import time
import warnings
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[1])
    ap.add_argument("--minutes", type=float, default=5.0)
    ap.add_argument("--kinds", default="llm,dlrm,cli,runs")
    ap.add_argument("--timeout", type=float, default=30.0, help="seconds a case may take")
    ap.add_argument("--chunk", type=int, default=200, help="examples per hypothesis run")
    args = ap.parse_args()

    from hypothesis import HealthCheck, given, settings
    from hypothesis.errors import NonInteractiveExampleWarning

    import fuzzkit as F

    warnings.simplefilter("ignore", NonInteractiveExampleWarning)
    llm, dlrm, cli = F.strategies()
    strategies = {"llm": llm, "dlrm": dlrm, "cli": cli, "runs": F.runs_strategy()}
    kinds = [k for k in args.kinds.split(",") if k]
    end = time.monotonic() + 60.0 * args.minutes
    runs = collections.Counter()
    codes = collections.Counter()
    violations = collections.Counter()
    seen: set[str] = set()
    saved: list[Path] = []

    def make(kind):
        @settings(max_examples=args.chunk, deadline=None, derandomize=False, database=None,
                  suppress_health_check=list(HealthCheck))
        @given(strategies[kind])
        def body(case):
            if time.monotonic() > end:
                return  # (the rest of this chunk is drawn and skipped; the loop then ends)
            code, out, err, violation = F.run_case(case, timeout=args.timeout)
            runs[kind] += 1
            codes[code] += 1
            if violation is not None:
                key = f"{kind}: {violation[:70]}"
                violations[key] += 1
                if key not in seen:
                    seen.add(key)
                    path = F.save_regression(kind, case, violation)
                    saved.append(path)
                    print(f"NEW {key} -> {path.relative_to(ROOT)}", flush=True)

        return body

    bodies = {k: make(k) for k in kinds}
    t0 = time.monotonic()
    i = 0
    while time.monotonic() < end:
        kind = kinds[i % len(kinds)]
        i += 1
        bodies[kind]()
        done = sum(runs.values())
        print(f"[{time.monotonic() - t0:6.0f} s] {done} cases ({dict(runs)}), "
              f"{sum(violations.values())} violations", flush=True)
    total = sum(runs.values())
    print(f"cases run: {total} ({', '.join(f'{k} {v}' for k, v in runs.items())}) in "
          f"{time.monotonic() - t0:.0f} s")
    print(f"exit codes: {dict(codes)}  (-1 = over the time limit)")
    print(f"violations: {sum(violations.values())}, distinct: {len(violations)}")
    for key, n in violations.most_common():
        print(f"  {n:6d}  {key}")
    print(f"saved: {len(saved)} new regression file(s)")
    return 1 if violations else 0


if __name__ == "__main__":
    sys.exit(main())
