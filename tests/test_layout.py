"""The layout is declared once (layout.py); the C header must be its faithful rendering."""

import re
import subprocess
import sys
from pathlib import Path

import pytest

from trainscape import layout as L
from trainscape.model.network import order_names, order_permutation

ROOT = Path(__file__).resolve().parents[1]


def test_committed_header_matches_layout():
    rc = subprocess.run([sys.executable, str(ROOT / "scripts" / "gen_layout.py"), "--check"])
    assert rc.returncode == 0


def test_header_enum_values_agree_with_python_indices():
    text = (ROOT / "csrc" / "trainscape_layout.h").read_text()
    values = {m[0]: int(m[1]) for m in re.findall(r"(TS_\w+) = (\d+)", text)}
    for _, fields, prefix in L.GROUPS:
        for i, f in enumerate(fields):
            assert values[L.c_name(prefix, f)] == i
    assert int(re.search(r"#define TS_N_SYS (\d+)", text)[1]) == L.N_SYS


@pytest.mark.parametrize("index", range(L.N_ORDERS))
def test_order_index_round_trips(index):
    perm = order_permutation(index)
    assert sorted(perm) == list(range(L.N_DIMS))
    assert L.order_index(perm) == index


def test_order_names_known_orders():
    assert order_names(L.order_from_names(["tp", "cp", "ep", "dp", "pp"])) == (
        "tp", "cp", "ep", "dp", "pp")
    assert L.order_from_names(["tp", "cp", "ep", "dp", "pp"]) == 0


def test_index_constants_match_field_lists():
    assert L.OUTPUT_FIELDS[L.OUT_MFU] == "mfu"
    assert L.CONFIG_FIELDS[L.CFG_DP_OVERLAP] == "dp_overlap"
    assert L.SYSTEM_FIELDS[L.SYS_LAYER_OVERHEAD_S] == "layer_overhead_s"
    assert L.MODEL_FIELDS[L.MDL_SHARED_EXPERTS] == "shared_experts"
    assert L.JOB_FIELDS[L.JOB_FLASH_ATTENTION] == "flash_attention"
    assert L.TIER_FIELDS[L.TIER_OVERSUBSCRIPTION] == "oversubscription"
    assert set(L.BREAKDOWN_FIELDS) <= set(L.OUTPUT_FIELDS)
    assert set(L.MEMORY_FIELDS) <= set(L.OUTPUT_FIELDS)


@pytest.mark.parametrize("index", range(L.N_ORDERS))
def test_placement_strides_single_pass_equals_per_position_decode(index):
    from trainscape.model.network import order_dim_at, placement_strides

    degrees = (2.0, 3.0, 5.0, 7.0, 11.0)  # distinct primes: every stride is unambiguous
    want = [0.0] * L.N_DIMS
    stride = 1.0
    for pos in range(L.N_DIMS):
        d = order_dim_at(index, pos)
        want[d] = stride
        stride *= degrees[d]
    assert placement_strides(index, *degrees) == tuple(want)
