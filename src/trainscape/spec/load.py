"""Read scenario files, apply ``--set path=value`` overrides, validate.

Order of work: read the file (TOML, or JSON by suffix) -> apply overrides that pick presets
(``*.preset``, ``cluster.gpu``) -> merge presets -> apply the other overrides (so they can
reach into preset values, e.g. ``cluster.tiers[1].bandwidth_GBps``) -> validate.
"""

from __future__ import annotations

import copy
import json
import re
import sys
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from .errors import ScenarioError, format_path
from .models import Scenario, expand_presets, validate  # noqa: F401 (validate: re-exported)
from .readers import finite_depth, parse_guarded, read_text

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

#: Deepest nesting of tables/lists a scenario may use (a real one uses 4).
MAX_NESTING = 32

_TOKEN = re.compile(r"([A-Za-z_][A-Za-z0-9_\-]*)|\[(\d+)\]")


def parse_path(path: str) -> list[str | int]:
    """``"cluster.tiers[2].bandwidth_GBps" -> ["cluster", "tiers", 2, "bandwidth_GBps"]``."""
    parts: list[str | int] = []
    pos = 0
    text = path.strip()
    while pos < len(text):
        if text[pos] == "." and parts:
            pos += 1
        m = _TOKEN.match(text, pos)
        if not m:
            raise ScenarioError.at("--set", "not a field path", path,
                                   "dotted names with [index], e.g. cluster.tiers[1].size")
        parts.append(m.group(1) if m.group(1) is not None else int(m.group(2)))
        pos = m.end()
    if not parts or not isinstance(parts[0], str):
        raise ScenarioError.at("--set", "not a field path", path,
                               "dotted names with [index], e.g. cluster.tiers[1].size")
    return parts


def parse_scalar(text: str) -> Any:
    """A value as TOML reads it (``8``, ``1e3``, ``true``, ``"x"``, ``[1, 2]``); a bare word
    that TOML would reject (``interleaved``, ``tp-cp-pp-dp``) is taken as a string."""
    text = text.strip()
    try:
        value = tomllib.loads(f"v = {text}")["v"]
    except tomllib.TOMLDecodeError:
        return text
    except RecursionError:
        value = None
    if value is None or not finite_depth(value, MAX_NESTING):
        raise ScenarioError.at("--set", "value nested too deeply", text[:40],
                               f"at most {MAX_NESTING} levels of lists or tables")
    return value


def parse_override(item: str) -> tuple[list[str | int], Any]:
    """``"job.global_batch=4096" -> (["job", "global_batch"], 4096)``."""
    if "=" not in item:
        raise ScenarioError.at("--set", "expected path=value", item,
                               "e.g. job.global_batch=4096")
    path, value = item.split("=", 1)
    if not value.strip():
        raise ScenarioError.at(path.strip() or "--set", "empty value", item, "a TOML value")
    return parse_path(path), parse_scalar(value)


def parse_assignments(text: str) -> dict[str, Any]:
    """``"tp=8,pp=16,schedule=interleaved" -> {"tp": 8, "pp": 16, "schedule": "interleaved"}``
    (the ``--config`` option)."""
    out: dict[str, Any] = {}
    for item in filter(None, (p.strip() for p in text.split(","))):
        if "=" not in item:
            raise ScenarioError.at("--config", "expected key=value pairs separated by commas",
                                   item, "e.g. tp=8,pp=16,schedule=interleaved")
        key, value = item.split("=", 1)
        out[key.strip()] = parse_scalar(value)
    return out


def set_path(raw: dict, path: list[str | int], value: Any) -> None:
    """Assign ``value`` at ``path`` in nested dicts/lists, creating missing tables."""
    obj: Any = raw
    for depth, part in enumerate(path[:-1]):
        here = format_path(path[: depth + 1])
        nxt = path[depth + 1]
        if isinstance(part, int):
            if not isinstance(obj, list) or not 0 <= part < len(obj):
                n = len(obj) if isinstance(obj, list) else 0
                raise ScenarioError.at(here, "no such item", part,
                                       f"index 0 to {n - 1}" if n else "no items here")
            obj = obj[part]
        else:
            if not isinstance(obj, dict):
                raise ScenarioError.at(here, "parent is not a table", obj, "a table")
            if part not in obj or obj[part] is None:
                obj[part] = [] if isinstance(nxt, int) else {}
            obj = obj[part]
    last = path[-1]
    here = format_path(path)
    if isinstance(last, int):
        if not isinstance(obj, list) or not 0 <= last < len(obj):
            n = len(obj) if isinstance(obj, list) else 0
            raise ScenarioError.at(here, "no such item", last,
                                   f"index 0 to {n - 1}" if n else "no items here")
        obj[last] = value
    else:
        if not isinstance(obj, dict):
            raise ScenarioError.at(format_path(path[:-1]), "parent is not a table", obj,
                                   "a table")
        obj[last] = value


def _selects_preset(path: list[str | int]) -> bool:
    return path[-1] == "preset" or path == ["cluster", "gpu"]


def _fill_gpu_tables(raw: dict, paths: list[list[str | int]]) -> None:
    """Copy the GPU preset's nested tables (``peak_tflops``) that ``paths`` reach into, so an
    override like ``cluster.gpu.peak_tflops.fp8=...`` edits the preset's table instead of
    replacing it (no fitted constant is a table, so the stock values are the resolved ones)."""
    gpu = raw.get("cluster", {}).get("gpu") if isinstance(raw.get("cluster"), dict) else None
    if not paths or not isinstance(gpu, dict) or not isinstance(gpu.get("preset"), str):
        return
    from .. import presets

    try:
        stock = presets.get("gpu", gpu["preset"])
    except presets.UnknownPreset:
        return  # validation reports it with its path
    for path in paths:
        key = path[2]
        if key not in gpu and isinstance(stock.get(key), dict):
            gpu[key] = stock[key]


def apply_overrides(raw: Mapping, overrides: Iterable[str | tuple[str, Any]]) -> dict:
    """Presets merged and ``overrides`` applied to a raw scenario dict (a new dict).

    Each override is ``"path=value"`` (value parsed as TOML) or a ``(path, value)`` pair.
    """
    parsed = []
    for item in overrides:
        if isinstance(item, str):
            parsed.append(parse_override(item))
        else:
            path, value = item
            parsed.append((parse_path(path), value))
    out = copy.deepcopy(dict(raw))
    cluster = out.get("cluster")
    if (isinstance(cluster, dict) and isinstance(cluster.get("gpu"), str)
            and any(p[:2] == ["cluster", "gpu"] and len(p) > 2 for p, _ in parsed)):
        cluster["gpu"] = {"preset": cluster["gpu"]}  # so cluster.gpu.<field>=... can reach it
    for path, value in parsed:
        if _selects_preset(path):
            set_path(out, path, value)
    # GPU constants resolve at validation, after the overrides (job.dtype, job.stack, ...)
    out = expand_presets(out, resolve_gpu=False)
    _fill_gpu_tables(out, [p for p, _ in parsed if p[:2] == ["cluster", "gpu"] and len(p) > 3])
    for path, value in parsed:
        if not _selects_preset(path):
            set_path(out, path, value)
    return out


def read_raw(path: str | Path) -> dict:
    """The raw dict of a scenario file (TOML, or JSON by suffix ``.json``): a regular file of
    at most ``readers.MAX_SCENARIO_BYTES``, nested at most ``MAX_NESTING`` levels."""
    p = Path(path)
    text = read_text(p, "scenario file")
    if p.suffix.lower() == ".json":
        try:
            data = parse_guarded(json.loads, text, str(path), "the JSON")
        except json.JSONDecodeError as exc:
            raise ScenarioError.at(str(path), f"invalid JSON: {exc.msg} (at line {exc.lineno}, "
                                   f"column {exc.colno})", None, show_got=False) from None
        if not isinstance(data, dict):
            raise ScenarioError.at(str(path), "expected a JSON object at the top level",
                                   type(data).__name__, "an object", show_got=True)
    else:
        try:
            data = parse_guarded(tomllib.loads, text, str(path), "the TOML")
        except tomllib.TOMLDecodeError as exc:
            raise ScenarioError.at(str(path), f"invalid TOML: {exc}", None,
                                   show_got=False) from None
    if not finite_depth(data, MAX_NESTING):
        raise ScenarioError.at(str(path), "tables or lists nested too deeply", None,
                               f"at most {MAX_NESTING} levels", show_got=False)
    return data


def load_scenario(source: str | Path | Mapping, overrides: Iterable[str] = ()) -> Scenario:
    """Read (or take) a raw scenario, merge presets, apply overrides, validate."""
    if isinstance(source, Mapping):
        raw = dict(source)
        default_name = ""
    else:
        raw = read_raw(source)
        default_name = Path(source).stem
    raw = apply_overrides(raw, overrides)
    if not raw.get("name") and default_name:
        raw["name"] = default_name
    return validate(raw)
