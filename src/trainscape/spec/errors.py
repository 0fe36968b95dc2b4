"""One error type for bad scenario input, with a one-line message naming the field path.

Every problem found at the edge (file, TOML syntax, unknown key, wrong type, bad value, invalid
configuration) becomes a :class:`ScenarioError` whose message reads::

    <field.path>: <problem> (got <value>; allowed: <what is allowed>)

Field paths are dotted, with list items in brackets: ``cluster.tiers[1].bandwidth_GBps``.
"""

from __future__ import annotations

import types
import typing
from collections.abc import Sequence
from typing import Any

from pydantic import BaseModel, ValidationError
from pydantic_core import PydanticCustomError

#: pydantic error type used for the project's own checks inside validators; its context carries
#: ``field`` (path relative to the model that raised it), ``problem``, ``got`` and ``allowed``.
SCENARIO_ERROR_TYPE = "scenario"


def format_value(value: Any, limit: int = 60) -> str:
    """A short, one-line rendering of a bad value for an error message."""
    if isinstance(value, BaseModel):
        value = value.model_dump(exclude_none=True)
    text = repr(value) if isinstance(value, str) else str(value)
    if isinstance(value, bool):
        text = "true" if value else "false"
    text = " ".join(text.split())
    if len(text) > limit:
        text = text[: limit - 3] + "..."
    return text


def format_path(loc: Sequence[Any]) -> str:
    """``("cluster", "tiers", 1, "bandwidth_GBps") -> "cluster.tiers[1].bandwidth_GBps"``."""
    out = ""
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        elif part != "":
            out += ("." if out else "") + str(part)
    return out or "<scenario>"


def join_path(*parts: str) -> str:
    """Join dotted path fragments, skipping empty ones (``"cluster", "tiers[0]"``)."""
    out = ""
    for p in parts:
        if not p:
            continue
        out += p if (not out or p.startswith("[")) else "." + p
    return out


def one_line(path: str, problem: str, got: Any = None, allowed: str | None = None,
             show_got: bool = True) -> str:
    """Compose the one-line message ``path: problem (got value; allowed: ...)``."""
    details = []
    if show_got:
        details.append(f"got {format_value(got)}")
    if allowed:
        details.append(f"allowed: {allowed}")
    msg = f"{path}: {problem}"
    if details:
        msg += " (" + "; ".join(details) + ")"
    return " ".join(msg.split())


class ScenarioError(ValueError):
    """Bad scenario input. ``str(err)`` is one line naming the field path.

    ``path`` is the dotted field path, ``messages`` every problem found (the first one is the
    message).
    """

    def __init__(self, message: str, path: str = "", messages: Sequence[str] = (),
                 problem: str | None = None, got_text: str | None = None,
                 allowed: str | None = None):
        message = " ".join(str(message).split())
        super().__init__(message)
        self.path = path
        self.messages = list(messages) or [message]
        self.problem = problem if problem is not None else message
        self.got_text = got_text
        self.allowed = allowed

    @classmethod
    def at(cls, path: str, problem: str, got: Any = None, allowed: str | None = None,
           show_got: bool = True) -> ScenarioError:
        return cls(one_line(path, problem, got, allowed, show_got), path=path, problem=problem,
                   got_text=format_value(got) if show_got else None, allowed=allowed)

    def as_pydantic(self) -> PydanticCustomError:
        """The same problem as an error raised inside a pydantic validator at the root."""
        return PydanticCustomError(
            SCENARIO_ERROR_TYPE, "{problem}",
            {"field": self.path, "problem": self.problem, "got": self.got_text,
             "allowed": self.allowed})


def fail(field: str, problem: str, got: Any = None, allowed: str | None = None,
         show_got: bool = True) -> PydanticCustomError:
    """An error for use inside a pydantic validator: ``raise fail("tp", "must divide heads")``.

    ``field`` is the path relative to the model whose validator raises it.
    """
    return PydanticCustomError(
        SCENARIO_ERROR_TYPE,
        "{problem}",
        {"field": field, "problem": problem, "got": format_value(got) if show_got else None,
         "allowed": allowed or None},
    )


# --------------------------------------------------------------------------------------------
# pydantic -> one line
# --------------------------------------------------------------------------------------------

_PROBLEMS = {
    "int_type": "expected an integer",
    "int_parsing": "expected an integer",
    "int_from_float": "expected an integer",
    "float_type": "expected a number",
    "float_parsing": "expected a number",
    "bool_type": "expected true or false",
    "bool_parsing": "expected true or false",
    "string_type": "expected a string",
    "list_type": "expected a list",
    "dict_type": "expected a table",
    "model_type": "expected a table",
    "model_attributes_type": "expected a table",
    "missing": "missing required field",
    "extra_forbidden": "unknown key",
    "literal_error": "not one of the allowed values",
    "enum": "not one of the allowed values",
    "too_short": "too few items",
    "too_long": "too many items",
    "finite_number": "must be a finite number",
}

_ALLOWED = {
    "int_type": "an integer",
    "int_parsing": "an integer",
    "int_from_float": "an integer",
    "float_type": "a number",
    "float_parsing": "a number",
    "bool_type": "true, false",
    "bool_parsing": "true, false",
    "string_type": "a string",
    "list_type": "a list",
    "dict_type": "a table",
    "model_type": "a table",
    "model_attributes_type": "a table",
}


def _unwrap(annotation: Any) -> list[Any]:
    """The concrete types inside Optional/Union/list/dict/tuple/Annotated annotations."""
    origin = typing.get_origin(annotation)
    if origin is None:
        return [annotation]
    if origin is typing.Annotated:
        return _unwrap(typing.get_args(annotation)[0])
    out: list[Any] = []
    args = typing.get_args(annotation)
    if origin in (typing.Union, types.UnionType):
        for a in args:
            out.extend(_unwrap(a))
    elif origin in (list, tuple, Sequence, set, frozenset):
        for a in args:
            if a is not Ellipsis:
                out.extend(_unwrap(a))
    elif origin is dict:
        out.extend(_unwrap(args[1]) if len(args) == 2 else [])
    elif origin is typing.Literal:
        out.append(annotation)
    return out


def model_at(root: type[BaseModel], loc: Sequence[Any]) -> type[BaseModel] | None:
    """The pydantic model class that holds the field at ``loc`` (the parent of the last part)."""
    current: type[BaseModel] | None = root
    for part in loc[:-1]:
        if current is None:
            return None
        if isinstance(part, int):
            continue  # list index: same element model
        field = current.model_fields.get(part)
        if field is None:
            return None
        models = [t for t in _unwrap(field.annotation)
                  if isinstance(t, type) and issubclass(t, BaseModel)]
        current = models[0] if models else None
    return current


def _allowed_from_ctx(err: dict) -> str | None:
    kind = err["type"]
    ctx = err.get("ctx") or {}
    if kind in ("literal_error", "enum") and "expected" in ctx:
        return str(ctx["expected"]).replace("'", "").replace(" or ", ", ")
    for key, sym in (("gt", ">"), ("ge", ">="), ("lt", "<"), ("le", "<=")):
        if kind.startswith(("greater_than", "less_than")) and key in ctx:
            return f"{sym} {ctx[key]}"
    if kind in ("too_short", "too_long"):
        lo, hi = ctx.get("min_length"), ctx.get("max_length")
        if lo is not None and hi is not None:
            return f"{lo} to {hi} items"
        if lo is not None:
            return f"at least {lo} items"
        if hi is not None:
            return f"at most {hi} items"
    return _ALLOWED.get(kind)


def _problem_for(err: dict) -> str:
    kind = err["type"]
    if kind in _PROBLEMS:
        return _PROBLEMS[kind]
    if kind.startswith("greater_than") or kind.startswith("less_than"):
        return "out of range"
    msg = str(err.get("msg", kind))
    for prefix in ("Value error, ", "Assertion failed, "):
        if msg.startswith(prefix):
            msg = msg[len(prefix):]
    return msg[:1].lower() + msg[1:]


def _clean_loc(loc: Sequence[Any]) -> list[Any]:
    """Drop pydantic's union-member and function tags from a location."""
    out = []
    for part in loc:
        if isinstance(part, str) and (
            part.startswith(("function-", "literal[", "list[", "dict[", "tuple["))
            or part in ("int", "float", "str", "bool")
            or "[" in part
        ):
            continue
        out.append(part)
    return out


def _message_for(err: dict, root: type[BaseModel] | None, prefix: str) -> tuple[str, str]:
    loc = _clean_loc(err.get("loc", ()))
    kind = err["type"]
    ctx = err.get("ctx") or {}
    if kind == SCENARIO_ERROR_TYPE:
        path = join_path(prefix, format_path(loc) if loc else "", ctx.get("field") or "")
        got = ctx.get("got")
        details = []
        if got is not None:
            details.append(f"got {got}")
        if ctx.get("allowed"):
            details.append(f"allowed: {ctx['allowed']}")
        msg = f"{path}: {ctx.get('problem', err.get('msg'))}"
        if details:
            msg += " (" + "; ".join(details) + ")"
        return path, " ".join(msg.split())
    path = join_path(prefix, format_path(loc))
    allowed = _allowed_from_ctx(err)
    if (kind.startswith(("greater_than", "less_than")) or kind == "finite_number") \
            and root is not None:
        allowed = _range_of(root, loc) or allowed
    if kind == "extra_forbidden" and root is not None:
        owner = model_at(root, loc)
        if owner is not None:
            allowed = ", ".join(owner.model_fields)
    if kind == "missing":
        return path, one_line(path, _problem_for(err), show_got=False, allowed=allowed)
    return path, one_line(path, _problem_for(err), err.get("input"), allowed)


def _num(x: Any) -> str:
    return f"{x:g}" if isinstance(x, float) else str(x)


def _range_text(annotation: Any, info: Any = None) -> str | None:
    """``"1 to 16777216"``, ``"> 0 to 1e+07"``: both bounds of a ranged field, from the
    ``Field(ge=..., le=...)`` metadata of the field or of the annotation it holds."""
    def bounds(items):
        return [m for m in items or [] if any(getattr(m, k, None) is not None
                                                for k in ("ge", "gt", "le", "lt"))]

    metas = bounds(getattr(info, "metadata", None))
    stack = [annotation]
    while stack and not metas:
        a = stack.pop()
        args = typing.get_args(a)
        if typing.get_origin(a) is typing.Annotated:
            for m in args[1:]:
                metas.extend(bounds(getattr(m, "metadata", None)))
        stack.extend(x for x in args if x is not type(None))
    lo = hi = None
    for m in metas:
        for key, fmt in (("ge", "{}"), ("gt", "> {}"), ("le", "{}"), ("lt", "< {}")):
            v = getattr(m, key, None)
            if v is not None:
                if key in ("ge", "gt"):
                    lo = fmt.format(_num(v))
                else:
                    hi = fmt.format(_num(v))
    if lo is None and hi is None:
        return None
    if lo is None:
        return f"<= {hi}" if not hi.startswith("<") else hi
    if hi is None:
        return f">= {lo}" if not lo.startswith(">") else lo
    return f"{lo} to {hi}"


def _range_of(root: type[BaseModel], loc: Sequence[Any]) -> str | None:
    """Both bounds of the ranged field at ``loc`` (None when unknown)."""
    for upto in reversed([i for i, p in enumerate(loc) if isinstance(p, str)]):
        owner = model_at(root, list(loc[: upto + 1]))
        info = owner.model_fields.get(loc[upto]) if owner is not None else None
        if info is not None:  # (a dict key such as peak_tflops.bf16: its field's range)
            return _range_text(info.annotation, info)
    return None


def from_validation_error(exc: ValidationError, root: type[BaseModel] | None = None,
                          prefix: str = "") -> ScenarioError:
    """Turn a pydantic ``ValidationError`` into a :class:`ScenarioError` (first problem first)."""
    pairs = [_message_for(e, root, prefix) for e in exc.errors(include_url=False)]
    path, first = pairs[0]
    return ScenarioError(first, path=path, messages=[m for _, m in pairs])
