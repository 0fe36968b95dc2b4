"""Megatron-Core pipeline layouts (``--pipeline-model-parallel-layout``) read as the model's
stated pipeline split.

A layout names what each virtual pipeline stage holds, stage after stage, split by ``|``:
``E`` the embedding, ``t`` a transformer layer, ``m`` a multi-token prediction block, ``L``
the loss. ``x*n`` repeats a symbol, ``(...)*n`` a group (no nesting), commas are cosmetic, and
a stage may be empty. ``Et*3|(tt|)*29,m|L`` is 32 stages; on PP 16 it runs two virtual
stages per device, device ``d`` holding stages ``d`` and ``d + 16`` (Megatron-Core
``megatron/core/transformer/pipeline_parallel_layer_layout.py``, ``parse_str_to_list`` and
``validate_layer_layout``; the grammar and the rules are Megatron-Core's, the code is ours).

The cost model holds a pipeline as its first device's transformer layers, its last device's,
and the middle devices splitting the rest evenly (``job.pipeline_first_stage_layers`` /
``pipeline_last_stage_layers``, :func:`trainscape.model.pipeline.explicit_stage_layers`), with
the multi-token prediction blocks on the device holding the loss. :func:`split` reads a layout
into those two counts for one pipeline degree and says why when the model cannot hold it as
written: middle devices more than one layer apart, a device without a transformer layer
(``0`` means "split by rule"), or MTP blocks away from the loss.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

SYMBOLS = {"E": "embedding", "t": "transformer layer", "m": "MTP block", "L": "loss"}
#: the most symbols a layout may expand to (a guard against ``t*10**12``)
MAX_SYMBOLS = 1_000_000

_GROUP = re.compile(r"\(([^()]*)\)\*(\d+)")
_REPEAT = re.compile(r"([^()*])\*(\d+)")


class PipelineLayoutError(ValueError):
    """A layout that does not parse, breaks Megatron-Core's rules, or that the model cannot
    hold as written; the message says which and what is allowed."""


def _unroll(pattern: re.Pattern[str], text: str) -> str:
    def repeat(m: re.Match[str]) -> str:
        count = int(m.group(2))
        if len(m.group(1)) * count > MAX_SYMBOLS:
            raise PipelineLayoutError(
                f"{m.group(0)!r} repeats to more than {MAX_SYMBOLS:,} symbols")
        return m.group(1) * count

    out = pattern.sub(repeat, text)
    if len(out) > MAX_SYMBOLS:
        raise PipelineLayoutError(f"the layout expands to more than {MAX_SYMBOLS:,} symbols")
    return out


def stages(layout: str) -> list[str]:
    """The virtual pipeline stages of a layout string, each as its symbols in order."""
    if not isinstance(layout, str) or not layout.strip():
        raise PipelineLayoutError("expected a layout string such as 'Et*3|(tt|)*29,m|L'")
    text = "".join(layout.split()).replace(",", "")
    text = _unroll(_REPEAT, _unroll(_GROUP, text))
    bad = sorted(set(text) - set(SYMBOLS) - {"|"})
    if bad:
        where = "unbalanced or nested parentheses, or a '*' without a count" \
            if set(bad) & set("()*") else "unknown symbols"
        raise PipelineLayoutError(
            f"{where}: {' '.join(repr(c) for c in bad)} (symbols: "
            + ", ".join(f"{k} {v}" for k, v in SYMBOLS.items())
            + "; x*n repeats x, (...)*n a group, | ends a stage)")
    return text.split("|")


@dataclass(frozen=True)
class PipelineLayout:
    """A layout on ``pp`` devices: ``vpp`` stages each, the transformer layers of every
    device, and the split the model holds (first and last device's layers)."""

    pp: int
    vpp: int
    device_layers: tuple[int, ...]
    mtp_layers: int

    @property
    def first(self) -> int:
        return self.device_layers[0]

    @property
    def last(self) -> int:
        return self.device_layers[-1]

    def describe(self) -> str:
        """``"7 layers on the first device, 6 on the last, 8 on each of the 6 others"``."""
        text = f"{self.first} layers on the first device, {self.last} on the last"
        mid = self.device_layers[1:-1]
        if not mid:
            return text
        each = f"{min(mid)}" if min(mid) == max(mid) else f"{min(mid)}-{max(mid)}"
        return f"{text}, {each} on each of the {len(mid)} others"


def _count(n: int, what: str) -> str:
    return f"{n} {what}" if n == 1 else f"{n} {what}s"


def split(layout: str, pp: int, layers: int, mtp_layers: int = 0) -> PipelineLayout:
    """Read ``layout`` on ``pp`` devices for a model of ``layers`` transformer layers and
    ``mtp_layers`` MTP blocks: Megatron-Core's checks (the embedding first and the loss last,
    each once; every layer and MTP block placed; MTP blocks after the last layer, together,
    in a device's last stage), then the model's (see the module's doc)."""
    st = stages(layout)
    if pp < 1 or len(st) % pp:
        raise PipelineLayoutError(f"{len(st)} stages do not divide over pp = {pp} devices "
                                  "(a layout holds pp x vpp stages)")
    vpp = len(st) // pp
    flat = "".join(st)
    if not flat.startswith("E") or flat.count("E") != 1:
        raise PipelineLayoutError("the embedding 'E' must be given once, first")
    if not flat.endswith("L") or flat.count("L") != 1:
        raise PipelineLayoutError("the loss 'L' must be given once, last")
    if flat.count("t") != layers:
        raise PipelineLayoutError(f"{_count(flat.count('t'), 'transformer layer')} 't' where "
                                  f"the model has {layers} (model.layers)")
    if flat.count("m") != mtp_layers:
        raise PipelineLayoutError(f"{_count(flat.count('m'), 'MTP block')} 'm' where the model "
                                  f"has {mtp_layers} (model.mtp_layers)")
    if "m" in flat and "t" in flat[flat.index("m"):]:
        raise PipelineLayoutError("transformer layers must come before the MTP blocks")
    # device d holds stages d, d + pp, d + 2 pp, ...
    held = [[st[v * pp + d] for v in range(vpp)] for d in range(pp)]
    if mtp_layers:
        home = [d for d in range(pp) if any("m" in s for s in held[d])]
        d = home[0]
        if len(home) > 1 or held[d][-1].count("m") != mtp_layers:
            raise PipelineLayoutError("the MTP blocks must all be in one device's last stage "
                                      "(Megatron-Core validate_layer_layout)")
        if d != pp - 1:
            raise PipelineLayoutError(
                f"the MTP blocks are on device {d}, the loss on device {pp - 1}: the model "
                "costs MTP blocks on the device holding the loss (a standalone MTP stage is "
                "not modelled)")
    counts = tuple(sum(s.count("t") for s in h) for h in held)
    if pp > 1:
        empty = [d for d, c in enumerate(counts) if c == 0]
        if empty:
            raise PipelineLayoutError(
                f"device {empty[0]} holds no transformer layer: not modelled (the model "
                "states a split as the first and last devices' layer counts, 0 meaning "
                "'split by rule')")
        middle = counts[1:-1]
        if middle and max(middle) - min(middle) > 1:
            raise PipelineLayoutError(
                f"the middle devices hold {min(middle)} to {max(middle)} transformer layers: "
                "the model splits the layers between the first and last devices evenly "
                "(at most one apart)")
    return PipelineLayout(pp=pp, vpp=vpp, device_layers=counts, mtp_layers=mtp_layers)
