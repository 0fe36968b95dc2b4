"""The reliability contract as code: run one CLI invocation and say whether it kept the
contract; build invalid and extreme scenarios from the examples.

Used by ``tests/test_reliability_battery.py`` (fixed cases), ``tests/test_fuzz.py``
(hypothesis) and ``scripts/fuzz.py`` (long runs that save new failures under
``tests/fuzz_regressions/``).

The contract (README, "Reliability contract"): every invocation ends with

* exit status 2 and one line on stderr, ``Error: <field path or option>: <problem> ...``,
  and no traceback; or
* exit status 0 with no NaN / Infinity anywhere in its output (JSON parsed and walked).

Anything else -- another exit status, an exception escaping, a non-finite number, a run past
the time limit -- is a violation, returned as a one-line description.
"""

from __future__ import annotations

import copy
import json
import math
import os
import re
import signal
import tempfile
import tomllib
from contextlib import contextmanager
from pathlib import Path

from click.testing import CliRunner

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = ROOT / "examples"
REGRESSIONS = Path(__file__).resolve().parent / "fuzz_regressions"

#: The LLM examples and a small DLRM scenario (8 of the Criteo tables inline), as raw dicts;
#: the two-building example also with the settings no example file carries (Streaming DiLoCo,
#: activation offload, a compressed region tier, a legacy attention kernel, recompute modules,
#: a board power limit), and the MoE example with the block-checkpointing recompute modules,
#: PyTorch eager element-wise kernels on its H100s (and their head-dim attention constant),
#: biased experts added in an eager loop (and the host's time per op)
#: and the PyTorch FSDP stack with its stage kept unsharded under PP and its grouped expert
#: GEMMs, so their fields are mutated too, with a multi-token prediction block; GPT-OSS carries
#: the sliding-window fields, DeepSeek-V3 the stated first / last pipeline stage layers, and the
#: same split as a Megatron-Core pipeline layout string (its leading dense layers stated);
#: Llama 3 once more with FSDP in two replica groups (hybrid sharding).
LLM_BASES = ("gpt3-175b-a100.toml", "mixtral-8x7b-moe.toml", "llama3-405b-2bldg.toml",
             "three-region.toml", "llama3-405b-2bldg.toml+settings",
             "mixtral-8x7b-moe.toml+modules", "gpt-oss-120b-sliding-window.toml",
             "deepseek-v3-mtp-h100.toml", "deepseek-v3-mtp-h100.toml+layout",
             "llama3-405b-2bldg.toml+hsdp")

_NONFINITE_TEXT = re.compile(r"\b(NaN|nan|-?Infinity|-?inf)\b")


def llm_base(i: int = 0) -> dict:
    name = LLM_BASES[i % len(LLM_BASES)]
    raw = tomllib.loads((EXAMPLES / name.split("+")[0]).read_text())
    if name.endswith("+modules"):
        # the checkpointing recompute modules on an MoE model (its config runs selective)
        raw["job"]["recompute_modules"] = ["mlp", "moe", "shared_experts", "layernorm"]
        # a multi-token prediction block (an MoE layer and an output-head pass on the last stage)
        raw["model"]["mtp_layers"] = 1
        # PyTorch eager element-wise kernels, streamed at a GPU's own stock efficiency
        raw["job"]["elementwise"] = "eager"
        raw["cluster"]["gpu"] = {"preset": "h100-sxm-80gb", "stream_memory_efficiency": 0.85,
                                 "attention_head_dim_half": 36.2, "host_op_us": 27.5}
        # biased experts, their bias added per expert in eager PyTorch on a Grace-speed host
        raw["model"]["expert_bias"] = True
        raw["job"]["expert_bias"] = "eager"
        # the PyTorch stack (its TP collectives' copies) with FSDP2 kept unsharded under PP
        raw["job"]["stack"] = "pytorch-fsdp"
        raw["job"]["fsdp_pp_unsharded"] = True
        # its experts' grouped GEMM kernels (the stack's default, stated so it is mutated)
        raw["job"]["expert_gemm"] = "grouped"
        raw["config"]["zero"] = 3
    if name.endswith("+layout"):
        # the example's 7 / 8 x 6 / 6 split and MTP block as the layout string (its space
        # keeping the layout's pipeline degree, without the stated-count hardware axes)
        for key in ("pipeline_first_stage_layers", "pipeline_last_stage_layers"):
            raw["job"].pop(key)
            raw["space"].pop(f"job.{key}", None)
        raw["job"]["pipeline_layout"] = "Et*7|(t*8|)*6t*6mL"
        raw["space"]["pp"] = [8]
        # its three leading dense layers (the preset's), stated so they are mutated
        raw["model"]["first_dense_layers"] = 3
    if name.endswith("+hsdp"):
        # ZeRO-3 in two replica groups of the data-parallel ranks (PyTorch HSDP)
        raw["job"]["dp_replicas"] = 2
        raw["config"]["zero"] = 3
    if name.endswith("+settings"):
        raw["job"]["sync"] = {"strategy": "diloco", "inner_steps": 32, "fragments": 4,
                              "overlap_steps": 1, "outer_dtype": "bf16"}
        raw["job"]["offload_activations"] = 0.5
        raw["job"]["attention_kernel"] = "legacy"
        raw["job"]["stack"] = "megatron-lm"
        raw["job"]["recompute_modules"] = ["layernorm", "moe_act", "mlp"]
        raw["cluster"]["host_to_device_GBps"] = 32.0
        raw["cluster"]["tiers"][2]["comm_dtype"] = "fp8"
        raw["config"]["zero"] = 1
        raw["config"]["order"] = "tp-cp-pp-ep-dp"
        # a power-limited GPU (the preset's constants, a board limit below its 700 W)
        raw["cluster"]["gpu"] = {"preset": raw["cluster"]["gpu"], "power_limit_w": 550.0,
                                 "power_clock_exponent": 3.31}
    return raw


def dlrm_base() -> dict:
    from trainscape.dlrm.spec import read_tables_csv

    raw = tomllib.loads((EXAMPLES / "dlrm" / "criteo_1tb_8gpu.toml").read_text())
    tables = read_tables_csv(EXAMPLES / "dlrm" / "criteo_1tb_tables.csv", None)[:8]
    raw["model"].pop("tables_csv")
    raw["model"]["tables"] = tables
    raw["planner"] = {"method": "greedy"}
    return raw


class Timeout(Exception):
    pass


@contextmanager
def time_limit(seconds: float):
    """SIGALRM-based limit for an in-process run (main thread, POSIX)."""
    if seconds is None or not hasattr(signal, "setitimer"):
        yield
        return

    def on_alarm(signum, frame):
        raise Timeout()

    old = signal.signal(signal.SIGALRM, on_alarm)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)


def _nonfinite_in(value) -> bool:
    stack = [value]
    while stack:
        v = stack.pop()
        if isinstance(v, float) and not math.isfinite(v):
            return True
        if isinstance(v, dict):
            stack.extend(v.values())
        elif isinstance(v, list):
            stack.extend(v)
    return False


def check_result(exit_code: int, stdout: str, stderr: str, exception=None) -> str | None:
    """None when the run kept the contract, else what it broke (one line)."""
    if exception is not None and not isinstance(exception, SystemExit):
        return f"exception {type(exception).__name__}: {str(exception)[:200]}"
    if "Traceback" in stdout or "Traceback" in stderr:
        return "traceback in output"
    if exit_code == 2:
        lines = [ln for ln in stderr.strip().splitlines() if ln.strip()]
        if not lines:
            return "exit 2 without a message"
        last = lines[-1]
        # our own errors: "Error: path: problem"; click's: "Error: Invalid value for '--x': ..."
        # or "Error: No such option: --x" (usage lines above it are click's standard output)
        if not last.startswith("Error: ") or ":" not in last[len("Error: "):]:
            return f"exit 2 but the message is not one 'Error: <where>: <problem>' line: {last!r}"
        return None
    if exit_code != 0:
        return f"exit status {exit_code}: {(stderr.strip().splitlines() or [''])[-1][:200]}"
    text = stdout.strip()
    if text.startswith(("{", "[")):
        try:
            data = json.loads(text)
        except json.JSONDecodeError:
            return "stdout is not valid JSON"
        if _nonfinite_in(data):
            return "NaN or Infinity in the JSON output"
    elif _NONFINITE_TEXT.search(stdout):
        return "nan or inf in the text output"
    return None


def run_cli(args: list[str], timeout: float | None = 30.0, cwd: str | None = None):
    """Run ``trainscape ARGS`` in-process; returns (exit_code, stdout, stderr, violation)."""
    from trainscape.cli import main

    runner = CliRunner()
    here = os.getcwd()
    try:
        if cwd:
            os.chdir(cwd)
        with time_limit(timeout):
            res = runner.invoke(main, args, catch_exceptions=True)
    except Timeout:
        return -1, "", "", f"no answer within {timeout} s (hang or runaway work)"
    finally:
        os.chdir(here)
    if isinstance(res.exception, Timeout):
        return -1, "", "", f"no answer within {timeout} s (hang or runaway work)"
    stderr = res.stderr if hasattr(res, "stderr") else ""
    stdout = res.stdout
    return res.exit_code, stdout, stderr, check_result(res.exit_code, stdout, stderr,
                                                         res.exception)


# --------------------------------------------------------------------------------------------
# Scenario mutations
# --------------------------------------------------------------------------------------------

#: Values a hand-written or generated scenario gets wrong: out of range, non-finite, subnormal,
#: past int32 / int64, wrong types.
EXTREME_VALUES = (
    0, -1, 1, 3, 2**31 - 1, 2**31, 2**32, 2**53 + 1, 2**63, 2**64, 10**30,
    0.0, -0.0, 1.5, 1e-6, 9.99e-7, 1e-300, 5e-324, 1e-310, 1e6, 1e7, 1.0000001e7, 1e18, 1e300,
    1e308, -1e308, float("nan"), float("inf"), float("-inf"),
    "", "x", "8", "1e308", "nan", True, False, [], [1], [0, -1], {}, {"a": 1},
    # pipeline layouts (job.pipeline_layout): huge repeats, nesting, empty stages, no stages
    "Et*99999999999999999999L", "((t)*9)*9", "E|*9999999L", "|", "EL", "E" + "|" * 64 + "L",
)


def leaf_paths(raw, prefix=()) -> list[tuple]:
    """Every path to a scalar or list leaf of a raw scenario dict."""
    out = []
    if isinstance(raw, dict):
        for k, v in raw.items():
            out.extend(leaf_paths(v, prefix + (k,)))
    elif isinstance(raw, list) and raw and isinstance(raw[0], dict):
        for i, v in enumerate(raw):
            out.extend(leaf_paths(v, prefix + (i,)))
    else:
        out.append(prefix)
    return out


def set_at(raw: dict, path: tuple, value) -> dict:
    out = copy.deepcopy(raw)
    obj = out
    for p in path[:-1]:
        obj = obj[p]
    if value is _DELETE:
        if isinstance(obj, dict):
            obj.pop(path[-1], None)
    else:
        obj[path[-1]] = value
    return out


_DELETE = object()
DELETE = _DELETE


def dump_json(raw: dict) -> str:
    """JSON with NaN / Infinity written as Python's json does (json.loads reads them back)."""
    return json.dumps(raw, allow_nan=True)


def write_scenario(raw: dict, directory: str, name: str = "s.json") -> str:
    path = Path(directory) / name
    path.write_text(dump_json(raw))
    return str(path)


#: The command run for each kind of scenario: fast, with JSON output so it can be checked.
LLM_COMMANDS = (["evaluate", "{path}", "--json"],
                ["search", "{path}", "--budget", "200", "--top", "3", "--json"])
DLRM_COMMANDS = (["shard", "{path}", "--json", "--method", "greedy"],
                 ["shard", "{path}", "--json", "--method", "evolve", "--iterations", "200",
                  "--time-limit", "5"])


def run_scenario(raw: dict, command: list[str], timeout: float = 30.0):
    """Write ``raw`` as JSON and run ``command`` on it; returns run_cli's tuple."""
    with tempfile.TemporaryDirectory() as d:
        path = write_scenario(raw, d)
        args = [a.replace("{path}", path) for a in command]
        return run_cli(args, timeout=timeout, cwd=d)


def save_regression(kind: str, case: dict, violation: str) -> Path:
    """Store a failing case as ``tests/fuzz_regressions/<kind>-<hash>.json``."""
    import hashlib

    REGRESSIONS.mkdir(exist_ok=True)
    body = dump_json(case)
    digest = hashlib.sha1(body.encode()).hexdigest()[:12]
    path = REGRESSIONS / f"{kind}-{digest}.json"
    path.write_text(json.dumps({"kind": kind, "violation": violation, "case": case},
                               allow_nan=True, indent=1) + "\n")
    return path


# --------------------------------------------------------------------------------------------
# hypothesis strategies (imported lazily: scripts/fuzz.py drives them too)
# --------------------------------------------------------------------------------------------


def strategies():
    """``(llm_case, dlrm_case, cli_case)`` hypothesis strategies.

    A case is a dict ``{"command": [...], "scenario": raw or None}``: a base scenario with 1 to
    3 fields replaced by an extreme value (or deleted), run by a fast command with JSON output;
    or an argument list for a command on an example file with fuzzed options and values."""
    from hypothesis import strategies as st

    def value():
        return st.one_of(
            st.sampled_from(EXTREME_VALUES),
            st.floats(allow_nan=True, allow_infinity=True),
            st.integers(min_value=-2**70, max_value=2**70),
            st.sampled_from([2**k for k in (15, 16, 17, 23, 24, 25, 30, 31, 32, 40, 41, 53)]),
            st.text(max_size=4),
            st.booleans(),
            st.just(DELETE),
        )

    def scaled(raw, path):
        """The field's own value times a factor: in-range neighbours and range edges."""
        obj = raw
        for p in path:
            obj = obj[p]
        if isinstance(obj, bool) or not isinstance(obj, (int, float)):
            return value()
        factors = st.sampled_from([0, 1e-300, 1e-9, 1e-3, 0.5, 0.999, 1.001, 2, 1e3, 1e9,
                                   1e300])
        if isinstance(obj, int):
            return factors.map(lambda f: int(min(obj * f, 2**70)))
        return factors.map(lambda f: obj * f)

    def mutated(base):
        paths = leaf_paths(base)

        @st.composite
        def build(draw):
            raw = base
            for _ in range(draw(st.integers(1, 3))):
                path = draw(st.sampled_from(paths))
                v = draw(st.one_of(value(), scaled(base, path)))
                raw = set_at(raw, path, v)
            return raw

        return build()

    llm_bases = [llm_base(i) for i in range(len(LLM_BASES))]
    llm = st.builds(lambda raw, cmd: {"command": list(cmd), "scenario": raw},
                    st.one_of(*[mutated(b) for b in llm_bases]),
                    st.sampled_from(LLM_COMMANDS[:1]))
    dlrm = st.builds(lambda raw, cmd: {"command": list(cmd), "scenario": raw},
                     mutated(dlrm_base()), st.sampled_from(DLRM_COMMANDS[:1]))

    option_values = st.one_of(
        st.sampled_from(["0", "-1", "1", "nan", "inf", "-inf", "1e10", "1e308", "18446744073709551616",
                         "", "x", "1.5", "tp=3", "tp=x,pp=", "dp=4294967296", "=", "a=b=c",
                         "cluster.gpus=0", "cluster.tiers[7].size=1", "job.seq_len=nan",
                         "x.xlsx", "x.json", "x.csv", "/dev/zero", "beam", "evolve"]),
        st.text(max_size=6))
    gpt3 = str(EXAMPLES / "gpt3-175b-a100.toml")
    dlrm8 = "{dlrm}"
    commands = {
        "evaluate": ([gpt3], ["--config", "--set", "--json"], []),
        "search": ([gpt3], ["--method", "--budget", "--seed", "--width", "--top", "--objective",
                            "--set", "--json", "--out", "--multi-objective"],
                   ["--budget", "50", "--json"]),
        "sweep": ([gpt3], ["--top", "--objective", "--threads", "--set", "--json", "--out",
                           "--backend"], ["--no-progress", "--json", "--set",
                                          "space.tp=[8]", "--set", "space.pp=[8]"]),
        "shard": ([dlrm8], ["--method", "--iterations", "--seed", "--beam-width", "--json",
                            "--out", "--plot", "--time-limit", "--backend"],
                  ["--method", "greedy", "--json"]),
        "explore": ([gpt3], ["--time-budget", "--seed", "--top", "--objective", "--set"],
                    ["--time-budget", "0.5", "--out-dir", "report"]),
        # a user's runs file (the shipped example), with fuzzed options beside it
        "validate": ([], ["--runs", "--source", "--backend", "--plot", "--json",
                          "--keep-going"],
                     ["--runs", str(EXAMPLES / "published-runs.csv"), "--json"]),
    }
    flags = {"--json", "--multi-objective", "--keep-going"}

    @st.composite
    def cli(draw):
        name = draw(st.sampled_from(sorted(commands)))
        pos, opts, tail = commands[name]
        args = [name, *pos]
        for _ in range(draw(st.integers(0, 3))):
            opt = draw(st.sampled_from(opts))
            args.append(opt)
            if opt not in flags:
                args.append(draw(option_values))
        return {"command": args + tail, "scenario": None}

    return llm, dlrm, cli()


#: a published run with the required columns of a runs file (``trainscape validate --runs``)
RUNS_BASE_ROW = {"case": "fuzz_llama3-8b_8", "gpu": "h100-sxm-80gb", "framework": "NeMo 25.04",
                 "dtype": "bf16", "model": "llama3-8b", "layers": "32", "hidden": "4096",
                 "heads": "32", "vocab": "128256", "mlp": "swiglu", "gpus": "8", "tp": "1",
                 "cp": "2", "seq_len": "8192", "global_batch": "128",
                 "metric": "tokens_per_s_per_gpu", "value": "15000", "kv_heads": "8",
                 "ffn_hidden": "14336"}
#: :data:`RUNS_BASE_ROW` with its shape left to the model preset its ``model`` names
RUNS_PRESET_ROW = {**RUNS_BASE_ROW, "case": "fuzz_preset_8", "model": "Meta-Llama-3.1-8B",
                   **{c: "" for c in ("layers", "hidden", "heads", "vocab", "mlp", "kv_heads",
                                      "ffn_hidden")}}
#: shipped calibration rows that seed the runs strategy beside :data:`RUNS_BASE_ROW` (MoE FP8
#: NeMo, MaxText, FSDP)
RUNS_SEED_CASES = ("nemo2606_qwen3-30b-a3b_fp8_16", "dgxc_v2502_maxtext_llama3-70b_fp8_512",
                   "mpt_h100_bf16_7b_s2048_g512")
RUNS_COMMAND = ["validate", "--runs", "{runs}", "--json", "--backend", "c"]


def runs_strategy():
    """Runs files for ``trainscape validate --runs``: one or two published-run rows (a
    minimal row or a shipped calibration row) with 1 to 3 cells replaced by an extreme or
    malformed text, or their column dropped."""
    import csv as _csv
    import io

    from hypothesis import strategies as st

    from trainscape.calibration.published import PUBLISHED_FILES, read_rows
    from trainscape.calibration.runs_file import OPTIONAL, REQUIRED

    shipped = {r["case"]: r for f, _ in PUBLISHED_FILES.values() for r in read_rows(f)}
    bases = [RUNS_BASE_ROW, RUNS_PRESET_ROW] + [shipped[c] for c in RUNS_SEED_CASES]
    columns = list(REQUIRED + OPTIONAL)
    cell = st.one_of(
        st.sampled_from(["", "0", "-1", "1", "2", "nan", "inf", "-inf", "1e308", "1e-320",
                         "1.5", "x", "2147483648", "18446744073709551616", "true", "yes",
                         "full", "selective", "3 (FSDP)", "fp8", "gelu", "b200",
                         "h200-141gb", "interleaved", "step_time_s", "model_tflops_per_gpu", "hw_tflops_per_gpu", "mfu_pct",
                         "hfu_pct", "100", "100.5", "MXFP8", "bf16-mixed", "NVFP4",
                         "max_reserved",
                         '"', ",", "\n", "-", "n/a", "H100", "NVIDIA H200", "a100", "BF16",
                         "SwiGLU", "on", "AC", "none", "DeepSeek-V3", "Mixtral 8x7B",
                         "meta-llama/Llama-3.1-70B (FP8)", "llama3-405b", "/",
                         "gb300", "b300", "GB300 NVL72",
                         "none; cpu_offloading_num_layers=20",
                         "cpu_offloading_num_layers=0",
                         "full; cpu_offloading_num_layers=18446744073709551616"]),
        st.text(max_size=5), st.just(DELETE))

    @st.composite
    def build(draw):
        rows = [dict(draw(st.sampled_from(bases)))
                for _ in range(draw(st.integers(1, 2)))]
        for i, row in enumerate(rows):
            row["case"] = f"{row['case']}_{i}"
        dropped = set()
        for _ in range(draw(st.integers(1, 3))):
            row = rows[draw(st.integers(0, len(rows) - 1))]
            column = draw(st.sampled_from(columns))
            value = draw(cell)
            if value is DELETE:
                dropped.add(column)
            else:
                row[column] = value
        header = [c for c in columns if c not in dropped]
        out = io.StringIO()
        writer = _csv.DictWriter(out, fieldnames=header, extrasaction="ignore")
        writer.writeheader()
        writer.writerows(rows)
        command = list(RUNS_COMMAND) + (["--keep-going"] if draw(st.booleans()) else [])
        return {"command": command, "scenario": None, "runs": out.getvalue()}

    return build()


def run_case(case: dict, timeout: float = 30.0):
    """Run a case from :func:`strategies` or :func:`runs_strategy` (or a saved regression);
    returns run_cli's tuple."""
    with tempfile.TemporaryDirectory() as d:
        dl = write_scenario(dlrm_base(), d, "dlrm.json")
        if case.get("scenario") is not None:
            path = write_scenario(case["scenario"], d)
        else:
            path = ""
        runs = ""
        if case.get("runs") is not None:
            runs = str(Path(d) / "runs.csv")
            Path(runs).write_text(case["runs"])
        args = [a.replace("{path}", path).replace("{dlrm}", dl).replace("{runs}", runs)
                for a in case["command"]]
        return run_cli(args, timeout=timeout, cwd=d)
