"""Required bandwidth: for one layout, the bandwidth each network tier must deliver for the
step to stay within ``x`` % of its time at the scenario's bandwidths ("what does this link need
to be?").

The model's step time does not increase when a tier's bandwidth grows (every collective's
time is a latency term plus bytes over the bottleneck bandwidth, and the cheapest algorithm is
taken), so for tier ``i`` the set of bandwidths that keep ``step <= (1 + x) * step_0`` is an
interval ``[B_i*, inf)``. :func:`required_bandwidth` finds ``B_i*`` by bisection on
``log B`` (the other tiers kept at their values) to a relative precision of ``rtol``:
``B_i*`` is the smallest bandwidth found that still meets the bound, so ``step(B_i*) <= (1 +
x) step_0`` and ``step(B_i* / (1 + rtol)) > (1 + x) step_0``. A tier whose traffic is not on the
critical path at all (or hidden by overlap) meets the bound down to ``floor`` x its bandwidth:
its required bandwidth is reported as ``0`` ("any"). Tiers are costed on the packed system
block (``layout.TIER_BANDWIDTH`` in bytes/s), so every backend answers the same.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from .. import layout as L


@dataclass(frozen=True)
class TierRequirement:
    """What one tier must deliver: ``required_GBps`` (0: any bandwidth), the scenario's
    ``bandwidth_GBps``, the step time there and at the requirement."""

    tier: int
    name: str
    bandwidth_GBps: float
    required_GBps: float
    step_at_required_s: float

    @property
    def headroom(self) -> float:
        """How many times the requirement the tier has (inf when any bandwidth will do)."""
        return self.bandwidth_GBps / self.required_GBps if self.required_GBps > 0 else math.inf

    def to_dict(self) -> dict:
        return {"tier": self.tier, "name": self.name, "bandwidth_GBps": self.bandwidth_GBps,
                "required_GBps": self.required_GBps,
                "step_at_required_s": self.step_at_required_s}


def _step(sys, mdl, job, cfg, backend) -> float:
    from ..backends import evaluate_blocks

    out = evaluate_blocks(sys, mdl, job, cfg, backend=backend)
    return float(out[L.OUT_STEP_TIME_S, 0])


def tier_bandwidth_index(tier: int) -> int:
    """Index of tier ``tier``'s bandwidth in the packed system block."""
    return L.SYS_TIER_BASE + tier * L.N_TIER + L.TIER_BANDWIDTH


def required_bandwidth(scenario, slowdown_pct: float = 5.0, *, config=None,
                       backend: str | None = None, rtol: float = 1e-4,
                       floor: float = 1e-6) -> tuple[float, list[TierRequirement]]:
    """``(step_0, [TierRequirement per tier])`` for the scenario's ``[config]`` (or ``config``):
    per tier the bandwidth below which the step slows by more than ``slowdown_pct`` %."""
    from ..api import _as_config
    from ..spec.errors import ScenarioError
    from ..spec.pack import pack, pack_configs

    if not (isinstance(slowdown_pct, (int, float)) and math.isfinite(slowdown_pct)
            and slowdown_pct > 0):
        raise ScenarioError.at("--slowdown", "must be a positive percentage", slowdown_pct,
                               "> 0, e.g. 5")
    sc = _as_config(scenario, config)
    sys, mdl, job = pack(sc)
    cfg = pack_configs([sc.config])
    step0 = _step(sys, mdl, job, cfg, backend)
    if not math.isfinite(step0):
        raise ScenarioError.at("config", "the configuration is not valid here", None,
                               show_got=False)
    bound = step0 * (1.0 + slowdown_pct / 100.0)
    out = []
    tiers = sc.cluster.tiers
    if sc.cluster.sites is not None:
        from ..spec.sites import paced_tiers

        # the tiers inside the sites as packed; the site links differ per pair and are not
        # one bandwidth (vary them with --set cluster.links[i].bandwidth_GBps)
        tiers = paced_tiers(sc.cluster)
    for i, tier in enumerate(tiers):
        k = tier_bandwidth_index(i)
        b0 = float(sys[k])
        s = sys.copy()

        def step_at(b, s=s, k=k):
            s[k] = b
            return _step(s, mdl, job, cfg, backend)

        lo = b0 * floor
        at_lo = step_at(lo)
        if at_lo <= bound:  # not on the critical path: any bandwidth will do
            out.append(TierRequirement(i, tier.name, tier.bandwidth_GBps, 0.0, at_lo))
            continue
        hi = b0  # meets the bound (step_0 <= bound); lo does not
        while hi / lo > 1.0 + rtol:
            mid = math.sqrt(lo * hi)
            if step_at(mid) <= bound:
                hi = mid
            else:
                lo = mid
        out.append(TierRequirement(i, tier.name, tier.bandwidth_GBps, hi / 1e9, step_at(hi)))
    return step0, out


def requirements_table(step0: float, reqs: list[TierRequirement], slowdown_pct: float,
                       title: str):
    """A rich table of the requirements (no wrapping inside numbers)."""
    from rich.table import Table

    t = Table(title=title, title_justify="left", box=None, pad_edge=False)
    t.add_column("tier", no_wrap=True)
    t.add_column("has GB/s", justify="right", no_wrap=True)
    t.add_column(f"needs GB/s (step <= +{slowdown_pct:g}%)", justify="right", no_wrap=True)
    t.add_column("headroom", justify="right", no_wrap=True)
    t.add_column("step at need (s)", justify="right", no_wrap=True)
    for r in reqs:
        need = "any" if r.required_GBps == 0 else f"{r.required_GBps:,.2f}"
        head = "-" if r.required_GBps == 0 else f"{r.headroom:.2f}x"
        t.add_row(f"{r.tier} {r.name}", f"{r.bandwidth_GBps:,.1f}", need, head,
                  f"{r.step_at_required_s:.4f}")
    return t


__all__ = ["TierRequirement", "required_bandwidth", "requirements_table",
           "tier_bandwidth_index"]
