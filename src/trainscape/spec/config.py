"""One configuration of a job: the parallel degrees, schedule, recomputation, ZeRO stage and
placement order (``[config]`` of a scenario, one point of its ``[space]``), and the rules of
placement orders.

It sits below the scenario schema (:mod:`trainscape.spec.models`), which holds a
:class:`ConfigSpec`, and below packing (:mod:`trainscape.spec.pack`), which turns configs into
kernel columns without needing the rest of the schema.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, PrivateAttr, field_validator, model_validator

from .. import layout
from . import ranges as R
from .errors import ScenarioError, fail

ZERO_STAGES = (0, 1, 2, 3)
#: The default placement: Megatron-LM's rank order (RankGenerator, "tp-cp-ep-dp-pp").
DEFAULT_ORDER = "tp-cp-ep-dp-pp"

Schedule = Literal[layout.SCHEDULES]
Recompute = Literal[layout.RECOMPUTE]
Zero = Literal[ZERO_STAGES]


class _Spec(BaseModel):
    """Base of every input table: unknown keys are errors, types are checked strictly."""

    model_config = ConfigDict(extra="forbid", strict=True)


def parse_order(text: str) -> tuple[str, ...]:
    """Split ``"tp-cp-pp-dp"`` into dimension names; ``ValueError`` unless each is a distinct
    name from ``layout.DIMS``."""
    if not isinstance(text, str) or not text:
        raise ValueError("expected dimension names joined by '-'")
    names = tuple(p.strip() for p in text.split("-"))
    for n in names:
        if n not in layout.DIMS:
            raise ValueError(f"unknown dimension {n!r}")
    if len(set(names)) != len(names):
        raise ValueError("a dimension appears twice")
    return names


def complete_order(names: tuple[str, ...]) -> tuple[str, ...]:
    """The full placement (all of ``layout.DIMS``, innermost first) of a validated order.

    Rules (documented in the README): an order without ``ep`` gets ``ep`` just before ``dp``
    (expert parallelism inside data parallelism, as Megatron-LM's default places it); any
    other missing dimension must have degree 1 (checked by :meth:`ConfigSpec.check_order`),
    and is appended at the outer end in ``layout.DIMS`` order, where a degree of 1 makes its
    position irrelevant.
    """
    out = list(names)
    if "ep" not in out and "dp" in out:
        out.insert(out.index("dp"), "ep")
    out.extend(d for d in layout.DIMS if d not in out)
    return tuple(out)


_ORDER_ALLOWED = "distinct names from " + ", ".join(layout.DIMS) + " joined by '-'"


class ConfigSpec(_Spec):
    """One point of the design space. ``dp`` may be omitted: it is derived from the GPU count
    as ``gpus / (tp * cp * pp)``. ``sp`` defaults to ``tp > 1``."""

    tp: R.Degree = 1
    cp: R.Degree = 1
    pp: R.Degree = 1
    dp: R.Degree | None = None
    ep: R.Degree = 1
    mbs: R.Degree = 1
    vpp: R.Degree = 1
    schedule: Schedule = "1f1b"
    recompute: Recompute = "none"
    zero: Zero = 1
    sp: bool | None = None
    order: str = DEFAULT_ORDER
    tp_overlap: bool = True
    dp_overlap: bool = True
    #: whether ``sp`` was written (else it defaulted to ``tp > 1``): an error that sequence
    #: parallelism causes then names ``tp``, the field the user chose
    _sp_given: bool = PrivateAttr(default=True)

    @field_validator("order")
    @classmethod
    def _order_names(cls, value: str) -> str:
        try:
            parse_order(value)
        except ValueError as exc:
            raise fail("", f"not a placement order: {exc}", value, _ORDER_ALLOWED) from None
        return value

    @model_validator(mode="after")
    def _defaults(self) -> ConfigSpec:
        if self.sp is None:
            self.sp = self.tp > 1
            self._sp_given = False
        if self.dp is not None:
            self.check_order()
        return self

    def degree(self, dim: str) -> int:
        """User-facing degree of a dimension (``dp`` counts expert parallelism in it)."""
        return int(getattr(self, dim))

    def check_order(self) -> None:
        """An order may leave out ``ep`` and any dimension of degree 1, nothing else."""
        names = parse_order(self.order)
        for d in layout.DIMS:
            if d not in names and d != "ep" and self.degree(d) > 1:
                raise fail("order", f"not a permutation of the dimensions in use: {d} has "
                           f"degree {self.degree(d)} but is missing", self.order,
                           "every dimension of degree > 1 (ep may be left out)")

    def order_dims(self) -> tuple[str, ...]:
        """The full placement, innermost first (see :func:`complete_order`)."""
        return complete_order(parse_order(self.order))

    def resolved(self, gpus: int) -> ConfigSpec:
        """This config with ``dp`` derived from ``gpus`` when it was omitted."""
        if self.dp is not None:
            return self
        inner = self.tp * self.cp * self.pp
        if gpus % inner:
            raise ScenarioError.at(
                "config.dp", f"cannot be derived: tp*cp*pp = {inner} does not divide "
                f"cluster.gpus = {gpus}", None, "set config.dp, or degrees dividing the GPUs",
                show_got=False)
        data = self.model_dump()
        data["dp"] = gpus // inner
        out = ConfigSpec.model_validate(data)
        out._sp_given = self._sp_given
        return out

    def as_dict(self) -> dict[str, Any]:
        """Plain values with the full placement order spelled out."""
        data = self.model_dump()
        data["order"] = "-".join(self.order_dims())
        return data
