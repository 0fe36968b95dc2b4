"""Human-readable output: rich tables for a costed configuration."""

from __future__ import annotations

import math
from typing import Any

from rich.console import Group
from rich.table import Table
from rich.text import Text

from . import layout as L

GIB = float(1 << 30)

_STATUS_STYLE = {"ok": "bold green", "out_of_memory": "bold red",
                 "invalid_config": "bold yellow"}
#: Each step-time breakdown column (``layout.BREAKDOWN_FIELDS``) as the terminal report names
#: it, and as a plot legend does, shorter (:mod:`trainscape.explore.plots`)
TERM_LABELS = {
    "compute_s": ("compute", "compute"),
    "tp_comm_s": ("tensor-parallel comm", "TP comm"),
    "cp_comm_s": ("context-parallel comm", "CP comm"),
    "ep_comm_s": ("expert-parallel comm", "EP comm"),
    "pp_comm_s": ("pipeline p2p", "PP p2p"),
    "bubble_s": ("pipeline bubble", "pipeline bubble"),
    "dp_comm_s": ("data-parallel comm", "DP comm (exposed)"),
    "optimizer_s": ("optimizer step", "optimizer"),
    "offload_s": ("activation offload (exposed)", "act. offload"),
    "overhead_s": ("step overhead (host)", "step overhead"),
}
_MEM_LABELS = {
    "mem_weights_gib": "weights",
    "mem_grads_gib": "gradients",
    "mem_optimizer_gib": "optimizer states",
    "mem_activations_gib": "activations",
    "mem_logits_gib": "logits",
    "mem_reserve_gib": "reserve",
}


def format_seconds(s: float) -> str:
    """Seconds with a unit that keeps 3-4 significant digits (``0.0123 -> 12.3 ms``)."""
    a = abs(s)
    if a == 0:
        return "0"
    if a >= 1:
        return f"{s:.3f} s"
    if a >= 1e-3:
        return f"{s * 1e3:.2f} ms"
    return f"{s * 1e6:.1f} µs"


def format_count(x: float) -> str:
    """Large counts with an SI suffix (``1.23e6 -> 1.23 M``)."""
    for div, suffix in ((1e12, " T"), (1e9, " G"), (1e6, " M"), (1e3, " k")):
        if abs(x) >= div:
            return f"{x / div:.3g}{suffix}"
    return f"{x:.3g}"


def config_line(config: dict[str, Any], recompute_layers: int = 0) -> str:
    """One-line summary of a configuration; ``recompute_layers`` (``job.recompute_layers``)
    names a block recompute's checkpointed layers per model chunk."""
    c = config
    degrees = " ".join(f"{k}{c[k]}" for k in ("tp", "cp", "pp", "dp", "ep") if k in c)
    sched = c.get("schedule", "")
    if c.get("vpp", 1) != 1:
        sched += f" vpp{c['vpp']}"
    recompute = f"recompute {c.get('recompute')}"
    if c.get("recompute") == "full" and recompute_layers > 0:
        recompute += f" (first {recompute_layers} layer{'s' if recompute_layers > 1 else ''} " \
                     "of each chunk)"
    parts = [degrees, f"mbs {c.get('mbs')}", sched, recompute,
             f"zero {c.get('zero')}", f"sp {'on' if c.get('sp') else 'off'}",
             f"order {c.get('order')}"]
    return " | ".join(parts)


def _bar(share: float, width: int = 20) -> str:
    n = max(0, min(width, round(share * width)))
    return "█" * n


def summary_table(result) -> Table:
    status = result.status
    fits = Text(status, style=_STATUS_STYLE.get(status, "bold"))
    if status == "ok":
        fits.append("  (fits in memory)", style="green")
    elif status == "out_of_memory":
        fits.append("  (does not fit in HBM)", style="red")
    t = Table(show_header=False, box=None, pad_edge=False)
    t.add_column(style="bold")
    t.add_column()
    t.add_row("status", fits)
    t.add_row("step time", format_seconds(result.step_time_s))
    t.add_row("throughput", f"{format_count(result.tokens_per_s)} tokens/s")
    t.add_row("MFU", f"{result.mfu * 100:.1f} %")
    t.add_row("model TFLOP/s per GPU", f"{result.model_tflops_per_gpu:.1f}")
    t.add_row("hardware TFLOP/s per GPU", f"{result.hw_tflops_per_gpu:.1f}")
    t.add_row("microbatches per step", str(result.microbatches))
    if result.cost_per_step_usd > 0:
        t.add_row("cost per step", f"{result.cost_per_step_usd:,.2f} USD "
                  f"({format_count(result.tokens_per_usd)} tokens/USD)")
    if result.tokens_per_joule > 0:
        t.add_row("energy efficiency", f"{result.tokens_per_joule:.3f} tokens/J")
    t.add_row("MFU convention", "model FLOPs (fwd + bwd, no recompute) / (step x GPUs x "
              "dense peak)", style="dim")
    return t


def breakdown_table(result) -> Table:
    t = Table(title="step time breakdown", title_justify="left")
    t.add_column("term")
    t.add_column("time", justify="right")
    t.add_column("share", justify="right")
    t.add_column("")
    step = result.step_time_s
    for name in L.BREAKDOWN_FIELDS:
        value = getattr(result, name)
        share = value / step if step > 0 else 0.0
        t.add_row(TERM_LABELS[name][0], format_seconds(value), f"{share * 100:.1f} %",
                  Text(_bar(share), style="cyan"))
    t.add_section()
    t.add_row("step", format_seconds(step), "100.0 %", "", style="bold")
    return t


def memory_table(result, capacity_gib: float | None = None, recompute_layers: int = 0) -> Table:
    """Memory per GPU in GiB (2**30 bytes) everywhere: the parts the job stores, their sum
    against the usable HBM (HBM less the reserve), the reserve, and the total against HBM.
    Under full recompute of every layer (``recompute_layers`` 0, the job's
    ``recompute_layers``) the activations row says what it holds."""
    t = Table(title="memory per GPU (GiB = 2^30 bytes)", title_justify="left")
    t.add_column("part", no_wrap=True)
    t.add_column("GiB", justify="right", no_wrap=True)
    t.add_column("share", justify="right", no_wrap=True)
    total = result.memory_gib
    reserve = result.mem_reserve_gib
    full = (result.config or {}).get("recompute") == "full" and not recompute_layers
    for name in L.MEMORY_FIELDS:
        if name == "mem_reserve_gib":
            continue
        value = getattr(result, name)
        share = value / total if total > 0 else 0.0
        label = _MEM_LABELS.get(name, name)
        if full and name == "mem_activations_gib":
            # model.llm.recompute_working_set: what full recompute holds besides the inputs
            label += " (layer inputs + the layer being rebuilt)"
        t.add_row(label, f"{value:.2f}", f"{share * 100:.1f} %")
    t.add_section()
    style = "bold green" if result.status == "ok" else "bold red"
    used = total - reserve
    if capacity_gib is not None:
        usable = capacity_gib - reserve
        t.add_row("job needs / usable HBM", f"{used:.2f} / {usable:.2f}",
                  f"{used / usable * 100:.0f} %" if usable > 0 else "", style=style)
        t.add_row("reserve (CUDA context, fragmentation)", f"{reserve:.2f}", "", style="dim")
        t.add_row("total / HBM", f"{total:.2f} / {capacity_gib:.2f}",
                  f"{total / capacity_gib * 100:.0f} %", style=style)
    else:
        t.add_row("reserve", f"{reserve:.2f}", "", style="dim")
        t.add_row("total", f"{total:.2f}", "", style=style)
    return t


def hbm_capacity_gib(scenario) -> float:
    """HBM per GPU in GiB, the capacity the kernels test memory against (the packed
    ``hbm_bytes``, :func:`trainscape.spec.pack.hbm_capacity_bytes`: ``hbm_gb`` is binary)."""
    from .spec.pack import effective_gpu, hbm_capacity_bytes

    return hbm_capacity_bytes(effective_gpu(scenario).hbm_gb) / GIB


#: the narrowest output width a command lays its tables out for (a smaller ``COLUMNS`` is
#: ignored: at a few characters a table prints a letter a line, at 0 nothing)
MIN_COLUMNS = 40
#: the width of piped output when ``COLUMNS`` does not set one
PIPED_COLUMNS = 160


def make_console(**kwargs):
    """A rich Console for command output: ``COLUMNS`` wide where the user sets it (at least
    :data:`MIN_COLUMNS`); else the terminal's width, or piped, wide enough
    (:data:`PIPED_COLUMNS`) that tables do not wrap inside values."""
    import os
    import sys

    from rich.console import Console

    if "width" not in kwargs:
        env = os.environ.get("COLUMNS", "").strip()
        if env.isdigit() and int(env) >= MIN_COLUMNS:
            kwargs["width"] = int(env)
        elif not sys.stdout.isatty():
            kwargs["width"] = PIPED_COLUMNS
        elif env:  # a terminal, and a COLUMNS rich would take as is: the terminal's own width
            try:
                columns = os.get_terminal_size(sys.stdout.fileno()).columns
                kwargs["width"] = max(MIN_COLUMNS, columns)
            except OSError:
                kwargs["width"] = 80
    return Console(**kwargs)


def sync_summary(scenario, result) -> dict[str, Any]:
    """``[job.sync]`` as costed: the strategy, DiLoCo's H, the cross-site element type (the
    gradient's when not given) and the user's convergence factor ``tokens_factor`` (tokens to
    reach the target relative to synchronous training). The factor is reported, never applied
    to the step time: ``step_time_x_tokens_factor_s`` is the step time weighted by it, the
    figure to compare strategies by for time to the same target."""
    sync = scenario.job.sync
    step = result.step_time_s
    return {
        "strategy": sync.strategy,
        "inner_steps": sync.inner_steps,
        "outer_dtype": sync.outer_dtype or scenario.job.grad_dtype,
        "tokens_factor": sync.tokens_factor,
        "step_time_x_tokens_factor_s": step * sync.tokens_factor if math.isfinite(step) else None,
    }


def sync_line(scenario, result) -> Text | None:
    """One line on ``[job.sync]`` when it is not the plain synchronous default."""
    sync = scenario.job.sync
    if sync.strategy == "synchronous" and sync.tokens_factor == 1.0 and sync.outer_dtype is None:
        return None
    info = sync_summary(scenario, result)
    text = f"sync: {info['strategy']}"
    if info["strategy"] == "diloco":
        text += f", H = {info['inner_steps']}"
    text += f", cross-site traffic in {info['outer_dtype']}"
    text += f"; tokens to target x{sync.tokens_factor:g}"
    text += " (user-given, not in the step time)"
    if info["step_time_x_tokens_factor_s"] is not None:
        text += f"; step time x factor = {format_seconds(info['step_time_x_tokens_factor_s'])}"
    return Text(text)


def pipeline_line(split: dict[str, Any] | None) -> Text | None:
    """One line on how the pipeline holds the model (``api.pipeline_split``); None without a
    pipeline."""
    if split is None:
        return None
    mtp = split["mtp_layers"]
    heads = f" + {mtp} MTP block{'s' if mtp > 1 else ''}" if mtp else ""

    def dense(key):
        # the model's leading dense layers among a device's (model.first_dense_layers)
        n = split.get(f"{key}_dense", 0.0)
        return f" ({n:.3g} dense)" if n > 0 else ""

    if split["loss_on_first_device"]:
        text = (f"pipeline: device 0 {split['first']} layers{dense('first')} + embedding{heads} "
                f"+ loss (V placement), the others up to {split['middle']}{dense('middle')}")
    else:
        middle = (f"middle devices up to {split['middle']}{dense('middle')}, "
                  if split["devices"] > 2 else "")
        text = (f"pipeline: first device {split['first']} layers{dense('first')} + embedding, "
                f"{middle}last device {split['last']}{dense('last')}{heads} + loss")
    return Text(text)


def render_result(result, scenario=None) -> Group:
    """Everything about one costed configuration, as a rich renderable."""
    head = Text()
    if result.scenario_name:
        head.append(result.scenario_name + "\n", style="bold")
    layers = scenario.job.recompute_layers if scenario is not None else 0
    head.append(config_line(result.config, layers), style="dim")
    parts: list[Any] = [head, summary_table(result)]
    line = sync_line(scenario, result) if scenario is not None else None
    if line is not None:
        parts.append(line)
    if result.status == "invalid_config":
        return Group(*parts)
    if scenario is not None:
        from .api import pipeline_split

        line = pipeline_line(pipeline_split(scenario, result.config))
        if line is not None:
            parts.append(line)
    capacity = None
    if scenario is not None:
        capacity = hbm_capacity_gib(scenario)
    parts += [breakdown_table(result), memory_table(result, capacity, layers)]
    return Group(*parts)
