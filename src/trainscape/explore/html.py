"""``report.html``: one self-contained file (plots embedded as base64 PNG) with the headline,
the top configurations, the Pareto front, the best per placement order and each plot with its
caption -- the report folder's content readable in a browser, nothing to fetch."""

from __future__ import annotations

import base64
import html
from pathlib import Path

from .. import layout as L

_COLS = (("step_time_s", "step s", "{:.3f}"), ("mfu", "MFU", "{:.1%}"),
         ("memory_gib", "GiB/GPU", "{:.1f}"), ("tokens_per_s", "tokens/s", "{:,.0f}"),
         ("cost_per_step_usd", "$/step", "{:.2f}"), ("tokens_per_joule", "tokens/J", "{:.3f}"))


def _table(title: str, records: list[dict], cfg_text) -> str:
    head = "".join(f"<th>{h}</th>" for _, h, _ in _COLS)
    terms = "".join(f"<th>{n[:-2].replace('_comm', ' comm')}</th>" for n in L.BREAKDOWN_FIELDS)
    rows = []
    for i, r in enumerate(records):
        cells = "".join(f"<td>{f.format(r[k])}</td>" for k, _, f in _COLS)
        br = "".join(f"<td>{r[n]:.3f}</td>" for n in L.BREAKDOWN_FIELDS)
        rows.append(f"<tr><td>{i + 1}</td><td class='cfg'>{html.escape(cfg_text(r))}</td>"
                    f"{cells}{br}</tr>")
    return (f"<h2>{html.escape(title)}</h2><table><tr><th>#</th><th>configuration</th>{head}"
            f"{terms}</tr>{''.join(rows)}</table>")


def write_html(res, out_dir: Path, scenario, paths: dict, headline: str, cfg_text) -> Path:
    """Write ``report.html`` into ``out_dir``; returns its path. ``headline`` is the report's
    one-line summary, ``cfg_text`` renders a configuration record (both from
    :mod:`.report`, which calls this)."""
    from .plots import CAPTIONS, CLOUD_MAX

    parts = [f"<h1>{html.escape(res.scenario_name)}</h1><p>{html.escape(headline)}</p>",
             "<p>MFU: model FLOPs per step (forward + backward, no recomputation) / (step time "
             "x GPUs x dense peak of the job's dtype). Times in seconds per step, memory in "
             "GiB (2<sup>30</sup> bytes) per GPU, breakdown terms in seconds.</p>",
             _table(f"Top {len(res.top)} by {res.objective}", res.top.records(), cfg_text),
             _table(f"Pareto front: step time vs memory ({len(res.front)})",
                    res.front.records(), cfg_text),
             _table("Best per placement order", res.by_order.records()[:30], cfg_text)]
    for key, name in (("pareto_plot", "pareto"), ("breakdown_plot", "breakdown"),
                      ("orders_plot", "orders")):
        p = paths.get(key)
        if p is None:
            continue
        data = base64.b64encode(Path(p).read_bytes()).decode("ascii")
        parts.append(f"<figure><img alt='{name}' src='data:image/png;base64,{data}'>"
                     f"<figcaption>{html.escape(CAPTIONS[name].format(cloud=CLOUD_MAX))}"
                     "</figcaption></figure>")
    style = ("body{font-family:sans-serif;max-width:1400px;margin:1em auto;padding:0 1em}"
             "table{border-collapse:collapse;font-size:13px;margin-bottom:1em}"
             "td,th{border:1px solid #ccc;padding:2px 6px;text-align:right;white-space:nowrap}"
             "td.cfg{text-align:left}img{max-width:100%}figcaption{font-size:13px;color:#444}")
    out = Path(out_dir) / "report.html"
    out.write_text(f"<!doctype html><html><head><meta charset='utf-8'><title>"
                   f"{html.escape(res.scenario_name)}</title><style>{style}</style></head>"
                   f"<body>{''.join(parts)}</body></html>\n")
    return out


__all__ = ["write_html"]
