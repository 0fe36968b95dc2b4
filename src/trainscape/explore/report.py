"""Reports of a sweep or search: terminal tables, results files (Parquet / CSV / JSON by
suffix, through pyarrow) and PNG plots (matplotlib, Agg backend)."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import numpy as np

from .. import layout as L

TABLE_SUFFIXES = (".parquet", ".csv", ".json")
BREAKDOWN_COLORS = ("#4c72b0", "#dd8452", "#55a868", "#c44e52", "#8172b3", "#937860",
                    "#da8bc3", "#8c8c8c")


# ---------------------------------------------------------------------------------------------
# Files
# ---------------------------------------------------------------------------------------------


def check_out_path(path: str | Path, option: str = "--out") -> Path:
    """``path`` if its suffix names a known format, else a one-line ScenarioError."""
    from ..spec.errors import ScenarioError

    p = Path(path)
    if p.suffix.lower() not in TABLE_SUFFIXES:
        raise ScenarioError.at(option, "unknown results format", str(path),
                               "a file ending in " + ", ".join(TABLE_SUFFIXES))
    return p


def write_records(records: list[dict[str, Any]], path: str | Path) -> Path:
    """Write rows (dicts with the same keys) as Parquet, CSV or JSON by the file's suffix."""
    p = check_out_path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    suffix = p.suffix.lower()
    if suffix == ".json":
        p.write_text(json.dumps(records, indent=1, default=_json_default) + "\n")
        return p
    import pyarrow as pa

    if records:
        table = pa.Table.from_pylist(records)
    else:
        table = pa.table({"kind": pa.array([], pa.string())})
    if suffix == ".parquet":
        import pyarrow.parquet as pq

        pq.write_table(table, p)
    else:
        import pyarrow.csv as pcsv

        pcsv.write_csv(table, p)
    return p


def read_records(path: str | Path) -> list[dict[str, Any]]:
    """Read back what :func:`write_records` wrote (tests, tools)."""
    p = Path(path)
    suffix = p.suffix.lower()
    if suffix == ".json":
        return json.loads(p.read_text())
    if suffix == ".parquet":
        import pyarrow.parquet as pq

        return pq.read_table(p).to_pylist()
    import pyarrow.csv as pcsv

    return pcsv.read_csv(p).to_pylist()


def _json_default(x):
    if isinstance(x, (np.integer,)):
        return int(x)
    if isinstance(x, (np.floating,)):
        return float(x)
    return str(x)


def hardware_columns(scenario=None) -> dict[str, Any]:
    """The hardware a result's rows were costed with, as columns
    (:func:`trainscape.explore.hardware_axes.scenario_hardware_values`); none without a
    scenario."""
    if scenario is None:
        return {}
    from .hardware_axes import scenario_hardware_values

    return scenario_hardware_values(scenario)


def with_hardware(records: list[dict[str, Any]], hw: dict[str, Any]) -> list[dict[str, Any]]:
    """Records with the hardware columns ``hw`` (:func:`hardware_columns`) in front."""
    return [{**hw, **r} for r in records]


def accuracy(res, scenario=None) -> dict[str, Any] | None:
    """How far the model was from published runs no fit saw, for ``scenario``'s GPU preset,
    stack and kind of model (:func:`trainscape.api.error_band`; ``{"band": ..., "text": ...}``),
    with the step-time interval around the best configuration found. None without a scenario
    or a feasible answer, and for a space with hardware axes, whose points each run on
    hardware of their own."""
    if scenario is None or len(res.top) == 0:
        return None
    from .hardware_axes import hardware_axes

    if hardware_axes(scenario):
        return None
    from ..calibration.bands import scenario_band

    band, why = scenario_band(scenario)
    if band is None:
        return {"band": None, "text": why}
    best = float(res.top.records()[0]["step_time_s"])
    return {"band": band.as_dict(best), "text": band.sentence(best)}


def result_summary(res, scenario=None) -> dict[str, Any]:
    """Plain-data summary of a sweep / search result (for ``--json``)."""
    out = {
        "scenario": res.scenario_name,
        "method": res.backend if res.backend in ("evolve", "beam", "evolve+beam") else "sweep",
        "backend": res.backend,
        "objective": res.objective,
        "space_size": res.space_size,
        "evaluated": res.evaluated,
        "feasible": res.feasible,
        "out_of_memory": res.out_of_memory,
        "invalid": res.invalid,
        "elapsed_s": res.elapsed_s,
        "configs_per_s": res.rate,
        "complete": res.complete,
    }
    hw = hardware_columns(scenario)
    out["top"] = with_hardware(res.top.records(), hw)
    out["pareto"] = with_hardware(res.front.records(), hw)
    out["best_by_order"] = with_hardware(res.by_order.records(), hw)
    for k, v in res.extra.items():
        if isinstance(v, (int, float, str, bool, list)) and k != "hbm":
            out[k] = v
    acc = accuracy(res, scenario)
    if acc is not None:
        out["error_band"] = acc
    return out


# ---------------------------------------------------------------------------------------------
# Terminal
# ---------------------------------------------------------------------------------------------


def _cfg_text(rec: dict[str, Any]) -> str:
    parts = [f"tp{rec['tp']}", f"cp{rec['cp']}", f"pp{rec['pp']}", f"dp{rec['dp']}"]
    if rec["ep"] > 1:
        parts.append(f"ep{rec['ep']}")
    parts.append(f"mbs{rec['mbs']}")
    sched = rec["schedule"] + (f"/v{rec['vpp']}" if rec["vpp"] > 1 else "")
    parts += [sched, f"rc:{rec['recompute']}", f"z{rec['zero']}"]
    if not rec["sp"] and rec["tp"] > 1:
        parts.append("no-sp")
    if not rec["tp_overlap"] and rec["tp"] > 1:
        parts.append("no-tp-ovl")
    if not rec["dp_overlap"]:
        parts.append("no-dp-ovl")
    parts.append(rec["order"])
    return " ".join(parts)


def _breakdown_text(rec: dict[str, Any]) -> str:
    step = rec["step_time_s"] or 1.0
    parts = []
    for name in L.BREAKDOWN_FIELDS:
        v = rec[name]
        if v > 0.005 * step:
            parts.append(f"{name[:-2].replace('_comm', '')} {v:.2f}")
    return " ".join(parts)


def top_table(rows, title: str, limit: int | None = None):
    """A rich table: rank, configuration, step time, MFU, memory and the breakdown (terms
    above 0.5% of the step, in seconds)."""
    from rich.table import Table

    t = Table(title=title, title_justify="left", show_lines=False, pad_edge=False, box=None)
    t.add_column("#", justify="right")
    # on a narrow terminal (or a pipe, 80 columns) the configuration wraps rather than
    # squeezing the breakdown to nothing
    t.add_column("configuration", overflow="fold", ratio=3)
    t.add_column("step s", justify="right", no_wrap=True)
    t.add_column("MFU", justify="right", no_wrap=True)
    t.add_column("GiB", justify="right", no_wrap=True)
    t.add_column("breakdown (s)", overflow="fold", min_width=22, ratio=2)
    for j, rec in enumerate(rows.records()[:limit]):
        t.add_row(str(j + 1), _cfg_text(rec), f"{rec['step_time_s']:.3f}",
                  f"{rec['mfu'] * 100:.1f}%", f"{rec['memory_gib']:.1f}", _breakdown_text(rec))
    return t


def print_result(res, console, scenario=None, top: int | None = None) -> None:
    """Top configurations with breakdowns, the Pareto front, the best per placement order."""
    if len(res.top) == 0:
        return
    console.print(top_table(res.top, f"Top {len(res.top)} by {res.objective}", top))
    console.print(top_table(res.front, f"Pareto front: step time vs memory per GPU "
                                       f"({len(res.front)} points)"))
    n = len(res.by_order)
    console.print(top_table(res.by_order, "Best per placement order (innermost first)"
                            + (f", first 15 of {n}" if n > 15 else ""), 15))
    acc = accuracy(res, scenario)
    if acc is not None:
        console.print(f"accuracy (best layout): {acc['text']}", soft_wrap=True)


def headline(res) -> str:
    what = "sweep" if res.backend not in ("evolve", "beam", "evolve+beam") else res.backend
    rate = f", {res.rate:,.0f} configs/s" if math.isfinite(res.rate) else ""
    return (f"{what}: {res.evaluated:,} of {res.space_size:,} configurations evaluated "
            f"({res.feasible:,} feasible, {res.out_of_memory:,} out of memory) in "
            f"{res.elapsed_s:.2f} s{rate} [{res.backend}]")


# ---------------------------------------------------------------------------------------------
# Plots
# ---------------------------------------------------------------------------------------------


def hbm_gib(scenario) -> float:
    """HBM per GPU in GiB as the model sees it (the packed system block)."""
    from ..spec.pack import pack_system

    return float(pack_system(scenario)[L.SYS_HBM_BYTES]) / 2**30


def _plt():
    import matplotlib

    matplotlib.use("Agg", force=True)
    import matplotlib.pyplot as plt

    return plt


from .plots import plot_breakdown, plot_orders, plot_pareto  # noqa: E402,F401


def write_report(res, out_dir: str | Path, scenario=None, results_name: str = "results.parquet"
                 ) -> dict[str, Path]:
    """A report folder: the results file (top-K, Pareto front, best per order), a JSON summary
    and three PNG plots. Returns ``{what: path}``."""
    d = Path(out_dir)
    d.mkdir(parents=True, exist_ok=True)
    hbm = hbm_gib(scenario) if scenario is not None else None
    recs = res.top.records("top") + res.front.records("pareto") + res.by_order.records("order")
    paths = {"results": write_records(recs, d / results_name)}
    summary = result_summary(res, scenario)
    (d / "summary.json").write_text(json.dumps(summary, indent=1, default=_json_default) + "\n")
    paths["summary"] = d / "summary.json"
    if len(res.top):
        from .plots import CAPTIONS, CLOUD_MAX

        paths["pareto_plot"] = plot_pareto(res, d / "pareto.png", hbm, scenario)
        paths["breakdown_plot"] = plot_breakdown(res, d / "breakdown.png")
        paths["orders_plot"] = plot_orders(res, d / "orders.png")
        (d / "README.txt").write_text(
            f"Report of {res.scenario_name}\n\n"
            + "\n\n".join(c.format(cloud=CLOUD_MAX) for c in CAPTIONS.values()) + "\n\n"
            "MFU: model FLOPs per step (forward + backward, no recomputation; Chowdhery et al. "
            "2022 App. B) / (step time x GPUs x dense peak of the job's dtype).\n")
        paths["captions"] = d / "README.txt"
        from .html import write_html

        paths["html"] = write_html(res, d, scenario, paths, headline(res), _cfg_text)
    return paths
