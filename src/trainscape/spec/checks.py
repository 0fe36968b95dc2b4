"""Is a configuration valid for a scenario? The edge check behind ``[config]`` and ``--config``.

The one source of truth for configuration validity is the kernel's own check,
``trainscape.model.llm.config_error(sys, mdl, job, cfg, i)`` (0 = valid, otherwise an index into
``trainscape.model.llm.CONFIG_ERRORS`` of ``(config_field, message)``): the sweep flags exactly
the configurations this check rejects. This module packs the configuration, asks that function,
and turns a non-zero code into a located one-line error. Type, range and enum checks happen
earlier, in the pydantic models.
"""

from __future__ import annotations

from typing import Any

from .. import layout

#: A problem found: (dotted field path, problem, offending value, what is allowed or None).
Problem = tuple[str, str, Any, "str | None"]


def config_problem(scenario, config) -> Problem | None:
    """The first reason ``config`` (a resolved ConfigSpec) is invalid for ``scenario``."""
    from ..model.llm import config_error, config_error_message
    from .pack import pack_configs, pack_job, pack_model, pack_system

    cfg = pack_configs([config])
    code = int(config_error(pack_system(scenario), pack_model(scenario), pack_job(scenario),
                            cfg, 0))
    if code == 0:
        return None
    field, message = config_error_message(code)
    c = config.as_dict()
    context = " ".join(f"{k}={c[k]}" for k in ("tp", "cp", "pp", "dp", "ep", "mbs", "vpp"))
    problem = (f"{message}; here {context} schedule={c['schedule']} on "
               f"{scenario.cluster.gpus} GPUs")
    if field == "sp" and not getattr(config, "_sp_given", True):
        # sequence parallelism defaulted on with tp > 1: the user chose tp, not sp
        return ("config.tp", f"{problem} (sequence parallelism is on by default for tp > 1)",
                c["tp"], "a tp dividing seq_len / cp, or config.sp = false")
    if field in layout.CONFIG_FIELDS:
        return f"config.{field}", problem, c[field], None
    return field, problem, _value_at(scenario, field), None


def _value_at(scenario, path: str) -> Any:
    obj: Any = scenario
    for part in path.split("."):
        obj = getattr(obj, part, None)
    return obj
