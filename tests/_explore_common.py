"""Shared small scenarios and a brute-force reference sweep for the space / sweep / search
tests (no kernel, no enumeration code of trainscape.space: the raw cartesian product)."""

from __future__ import annotations

import itertools

import numpy as np

from trainscape import layout as L

SMALL = {
    "name": "small test scenario",
    "model": {"layers": 8, "hidden": 1024, "ffn_hidden": 4096, "heads": 16, "kv_heads": 4,
              "vocab": 32000},
    "job": {"seq_len": 2048, "global_batch": 64},
    "cluster": {
        "gpu": "h100-sxm-80gb",
        "gpus": 32,
        "tiers": [
            {"name": "node", "size": 8, "bandwidth_GBps": 450, "latency_us": 3},
            {"name": "dc", "size": 4, "bandwidth_GBps": 50, "latency_us": 10,
             "oversubscription": 2},
        ],
    },
    "space": {
        "tp": [1, 2, 4, 8],
        "cp": [1, 2],
        "pp": [1, 2, 4],
        "mbs": [1, 2],
        "vpp": [1, 2],
        "schedule": ["1f1b", "interleaved", "zb-h1"],
        "recompute": ["none", "full"],
        "zero": [0, 1, 3],
        "sp": [True, False],
        "order": "all",
    },
}


def small(**space_overrides):
    import copy

    import trainscape

    raw = copy.deepcopy(SMALL)
    raw["space"].update(space_overrides)
    return trainscape.load(raw)


def canonical(cfg_col) -> tuple:
    """A config column with its order canonicalized and sp / tp_overlap fixed for tp = 1
    (what makes two configurations the same point), as a tuple."""
    from trainscape.model.network import order_permutation

    c = [int(x) for x in cfg_col]
    tp, cp, pp, dp, ep = (c[L.CFG_TP], c[L.CFG_CP], c[L.CFG_PP], c[L.CFG_DP], c[L.CFG_EP])
    degrees = {L.DIM_TP: tp, L.DIM_CP: cp, L.DIM_EP: ep, L.DIM_DP: dp // ep, L.DIM_PP: pp}
    perm = order_permutation(c[L.CFG_ORDER])
    used = [d for d in perm if degrees[d] > 1]
    rest = [d for d in range(L.N_DIMS) if degrees[d] == 1]
    c[L.CFG_ORDER] = L.order_index(tuple(used + rest))
    return tuple(c)


def brute_force_points(scenario, axes: dict):
    """Every canonical valid configuration of the raw product of ``axes`` (user values; dp
    derived), by the reference's config_error, as a sorted list of tuples. tp = 1 keeps
    sp = False (when listed) and the first tp_overlap."""
    from trainscape.model.llm import config_error
    from trainscape.spec import pack

    sys, mdl, job = pack(scenario)
    gpus = scenario.cluster.gpus
    names = list(L.CONFIG_FIELDS)
    values = []
    for n in names:
        v = axes.get(n)
        if n == "dp":
            values.append([None])
        elif n == "order":
            values.append(list(range(L.N_ORDERS)))
        elif n == "schedule":
            values.append([L.SCHEDULES.index(x) for x in v])
        elif n == "recompute":
            values.append([L.RECOMPUTE.index(x) for x in v])
        else:
            values.append([int(x) for x in v])
    seen = set()
    col = np.zeros((L.N_CFG, 1), dtype=np.int32)
    for combo in itertools.product(*values):
        c = dict(zip(names, combo))
        inner = c["tp"] * c["cp"] * c["pp"]
        if gpus % inner:
            continue
        c["dp"] = gpus // inner
        if c["tp"] == 1:
            if 0 in values[names.index("sp")] and c["sp"] != 0:
                continue
            if c["tp_overlap"] != values[names.index("tp_overlap")][0]:
                continue
        for i, n in enumerate(names):
            col[i, 0] = c[n]
        if config_error(sys, mdl, job, col, 0) != 0:
            continue
        seen.add(canonical(col[:, 0]))
    return sorted(collapse_equivalent(seen, values[names.index("zero")],
                                      values[names.index("dp_overlap")]))


def collapse_equivalent(points, zeros, dp_overlaps) -> set:
    """One point per class of equivalent configurations (written out here from the rules,
    independently of trainscape.space.canonical): without a pipeline (pp = 1) the schedule and
    vpp change nothing but for DualPipe (1F1B kept, else the first schedule in
    layout.SCHEDULES order, with the smallest vpp); without a data-parallel group (cp * dp = 1)
    the ZeRO stage and dp_overlap change nothing (the first listed value kept)."""
    best: dict = {}
    for c in points:
        key = list(c)
        pref = []
        if c[L.CFG_PP] == 1:
            dual = c[L.CFG_SCHEDULE] == L.SCHEDULES.index("dualpipe")
            key[L.CFG_SCHEDULE] = -2 if dual else -1
            key[L.CFG_VPP] = 0
            first = -1 if L.SCHEDULES[c[L.CFG_SCHEDULE]] == "1f1b" else c[L.CFG_SCHEDULE]
            pref += [first, c[L.CFG_VPP]]
        if c[L.CFG_CP] * c[L.CFG_DP] == 1:
            key[L.CFG_ZERO] = -1
            key[L.CFG_DP_OVERLAP] = -1
            pref += [list(zeros).index(c[L.CFG_ZERO]),
                     list(dp_overlaps).index(c[L.CFG_DP_OVERLAP])]
        key = tuple(key)
        if key not in best or pref < best[key][0]:
            best[key] = (pref, c)
    return {c for _, c in best.values()}


def user_axes(space) -> dict:
    """The space's axes with defaults filled (as brute_force_points wants them)."""
    out = {}
    for n, v in space.axes.items():
        if n == "sp" and v is None:
            raise AssertionError("tests list sp explicitly")
        out[n] = v
    return out
