"""Megatron-Core pipeline layouts (``job.pipeline_layout``, :mod:`trainscape.spec.pipeline_layout`):
the grammar and Megatron-Core's rules (``pipeline_parallel_layer_layout.py``), the recipes'
layouts read as the splits they state, the model's limits said as errors, and a scenario with
a layout costing exactly what the same split stated as counts costs."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner
from hypothesis import given, settings
from hypothesis import strategies as st

import trainscape
from trainscape.api import pipeline_split
from trainscape.calibration.published import RECIPE_STAGE_LAYERS
from trainscape.cli import main
from trainscape.spec.errors import ScenarioError
from trainscape.spec.pipeline_layout import MAX_SYMBOLS, PipelineLayoutError, split, stages

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "deepseek-v3-mtp-h100.toml"
# the example's stated 7 / 8 x 6 / 6 split with its MTP block, as a layout string
EXAMPLE_LAYOUT = "Et*7|(t*8|)*6t*6mL"


def test_the_grammar_unrolls_groups_and_repeats_and_keeps_empty_stages():
    assert stages("Et*3|(tt|)*2,m|L") == ["Ettt", "tt", "tt", "m", "L"]
    assert stages(" E t | t , L ") == ["Et", "tL"]
    assert stages("E||t|L") == ["E", "", "t", "L"]
    assert stages("Et*0|L") == ["E", "L"]
    assert stages("E|*2t|L") == ["E", "", "t", "L"]  # a repeated separator: empty stages


@pytest.mark.parametrize("text, match", [
    ("", "expected a layout string"),
    ("Etx|L", "unknown symbols: 'x'"),
    ("E(tt)L", "parentheses"),
    ("E((t)*2)*2L", "parentheses"),
    ("Et*|L", "without a count"),
    ("Et*2000000|L", "repeats to more than"),
    ("(" + "t" * 10 + ")*200000", "repeats to more than"),
])
def test_what_does_not_parse_says_why(text, match):
    with pytest.raises(PipelineLayoutError, match=match):
        stages(text)


def test_a_layout_can_not_expand_past_the_guard():
    text = "(" + "t" * 1000 + "|)*999"  # each group under the guard, the whole over it
    with pytest.raises(PipelineLayoutError, match="expands to more than"):
        stages(text + "," + text)
    assert MAX_SYMBOLS == 1_000_000


@pytest.mark.parametrize("layout, pp, mtp, devices", [
    # Megatron-Bridge deepseek_v3, H100 performance config: PP 8 x VP 4
    ("Et|(tt|)*30mL", 8, 1, (7, 8, 8, 8, 8, 8, 8, 6)),
    # Megatron-Bridge deepseek_v3 recipe's default (B200): PP 16, and PP 8 x VP 2
    ("Et*4|(t*4|)*14tmL", 16, 1, (4,) * 15 + (1,)),
    ("Et*4|(t*4|)*14tmL", 8, 1, (8,) * 7 + (5,)),
    # NeMo 2.4 pretrain_deepseek_v3.py on PP 8 (no MTP slot)
    ("Et*8|(t*8|)*6t*5L", 8, 0, (8,) * 7 + (5,)),
])
def test_the_recipes_layouts_read_as_their_splits(layout, pp, mtp, devices):
    lay = split(layout, pp, 61, mtp)
    assert lay.device_layers == devices
    assert (lay.first, lay.last) == (devices[0], devices[-1])
    assert lay.pp * lay.vpp == len(stages(layout))


def test_a_split_says_what_each_device_holds():
    assert split("Et|(tt|)*30mL", 8, 61, 1).describe() == (
        "7 layers on the first device, 6 on the last, 8 on each of the 6 others")
    assert split("Et*3|(t*4|)*13t*3|t*2L", 16, 60, 0).describe() == (
        "3 layers on the first device, 2 on the last, 3-4 on each of the 14 others")
    assert split("Ett|tL", 2, 3).describe() == "2 layers on the first device, 1 on the last"


def test_the_published_reader_states_what_the_recipes_layouts_say():
    """Every layout string in RECIPE_STAGE_LAYERS gives the (first, last) counts its release's
    recipe runs (the counts the table held before it took the strings)."""
    before = {("dgxc_benchmarking", (25, 7, 1)): {(8, 1): (8, 5), (8, 2): (8, 5),
                                                  (16, 1): (4, 1)},
              ("nemo_perf_summary", (99,)): {(16, 1): (4, 1), (8, 2): (8, 5), (8, 4): (7, 6)}}
    mtp = {"dgxc_benchmarking": 0, "nemo_perf_summary": 1}
    for (source, model, release), table in RECIPE_STAGE_LAYERS.items():
        assert model == "deepseek-v3"
        for (pp, vpp), stated in table.items():
            if not isinstance(stated, str):
                continue
            lay = split(stated, pp, 61, mtp[source])
            assert lay.vpp == vpp
            assert (lay.first, lay.last) == before[(source, release)][(pp, vpp)]


@pytest.mark.parametrize("layout, pp, layers, mtp, match", [
    ("Et*4|t*4|L", 2, 8, 0, "3 stages do not divide over pp = 2"),
    ("tE|t|L", 3, 2, 0, "embedding 'E' must be given once, first"),
    ("Et|EtL", 2, 2, 0, "embedding 'E' must be given once, first"),
    ("Et|Lt", 2, 2, 0, "loss 'L' must be given once, last"),
    ("Et|tL", 2, 3, 0, "2 transformer layers 't' where the model has 3"),
    ("Et|tL", 2, 2, 1, "0 MTP blocks 'm' where the model has 1"),
    ("Et|mtL", 2, 2, 1, "transformer layers must come before the MTP blocks"),
    ("Et|t|m|mL", 2, 2, 2, "all be in one device's last stage"),
    # Megatron-Core's own documentation example: the MTP block has a device of its own
    ("Et*3|(tt|)*29,m|L", 16, 61, 1, "MTP blocks are on device 14, the loss on device 15"),
    ("E|t*4|t*4|L", 4, 8, 0, "device 0 holds no transformer layer"),
    ("Et|t*2|t*5|tL", 4, 9, 0, "middle devices hold 2 to 5 transformer layers"),
])
def test_what_megatron_or_the_model_cannot_run_says_why(layout, pp, layers, mtp, match):
    with pytest.raises(PipelineLayoutError, match=match):
        split(layout, pp, layers, mtp)


@settings(max_examples=60, deadline=None)
@given(pp=st.integers(2, 12), vpp=st.integers(1, 4), first=st.integers(1, 9),
       last=st.integers(1, 9), middle=st.integers(1, 9), mtp=st.integers(0, 2),
       extra=st.integers(0, 11))
def test_a_layout_built_from_counts_reads_back_as_those_counts(pp, vpp, first, last, middle,
                                                               mtp, extra):
    """Any layout whose middle devices are at most one layer apart: each device's layers spread
    over its stages (the MTP blocks and the loss in the last device's last stage) read back as
    the counts it was built from."""
    counts = [first] + [middle + (1 if d < extra % (pp - 1) else 0) for d in range(pp - 2)] \
        + [last]
    grid = [[0] * vpp for _ in range(pp)]  # grid[d][v]: layers of stage v * pp + d
    for d, c in enumerate(counts):
        for i in range(c):
            grid[d][i % vpp] += 1
    texts = []
    for v in range(vpp):
        for d in range(pp):
            text = "t" * grid[d][v]
            if v == 0 and d == 0:
                text = "E" + text
            if v == vpp - 1 and d == pp - 1:
                text += "m" * mtp + "L"
            texts.append(text)
    lay = split("|".join(texts), pp, sum(counts), mtp)
    assert lay.device_layers == tuple(counts) and lay.vpp == vpp


# ---- scenarios --------------------------------------------------------------------------------


def _layout_scenario(*overrides: str):
    return trainscape.load(EXAMPLE, ["job.pipeline_first_stage_layers=0",
                                     "job.pipeline_last_stage_layers=0",
                                     f"job.pipeline_layout={EXAMPLE_LAYOUT}", *overrides])


def test_a_layout_costs_what_the_same_split_stated_as_counts_costs():
    stated = trainscape.load(EXAMPLE)
    laid = _layout_scenario()
    assert (laid.job.pipeline_first_stage_layers, laid.job.pipeline_last_stage_layers) == (7, 6)
    assert pipeline_split(laid) == pipeline_split(stated)
    a, b = trainscape.evaluate(stated), trainscape.evaluate(laid)
    assert a.step_time_s == b.step_time_s and a.memory_gib == b.memory_gib
    # the same stages on another pipeline degree: read afresh, not the counts read for PP 8
    # (``raw_dump`` drops what the layout set)
    two = "Et*3|(t*4|)*14t*2mL"
    sc16 = _layout_scenario(f"job.pipeline_layout={two}", "config.pp=16", "config.dp=16",
                            "config.ep=32")
    assert (sc16.job.pipeline_first_stage_layers, sc16.job.pipeline_last_stage_layers) == (3, 2)
    sc8 = sc16.with_config({**sc16.config.model_dump(exclude_none=True), "pp": 8, "dp": 32,
                            "ep": 64, "vpp": 2, "schedule": "interleaved"})
    assert (sc8.job.pipeline_first_stage_layers, sc8.job.pipeline_last_stage_layers) == (7, 6)
    same = trainscape.load(EXAMPLE, ["config.vpp=2", "config.schedule=interleaved"])
    assert trainscape.evaluate(sc8).step_time_s == trainscape.evaluate(same).step_time_s


def test_a_layout_fixes_the_spaces_pipeline_degree():
    sc = _layout_scenario("space.pp=[8]")
    space = sc.design_space()
    assert space.size > 0
    assert set(np.unique(space.sample(50, seed=1)[2])) == {8}  # CFG_PP
    with pytest.raises(ScenarioError, match=r"^space\.pp: job\.pipeline_layout is laid out for "
                                            r"config\.pp = 8"):
        trainscape.load(EXAMPLE, ["job.pipeline_first_stage_layers=0",
                                  "job.pipeline_last_stage_layers=0",
                                  f"job.pipeline_layout={EXAMPLE_LAYOUT}"]).design_space()


def _cli(*sets: str):
    args = ["evaluate", str(EXAMPLE), "--set", "job.pipeline_first_stage_layers=0",
            "--set", "job.pipeline_last_stage_layers=0"]
    for s in sets:
        args += ["--set", s]
    return CliRunner().invoke(main, args)


@pytest.mark.parametrize("sets, prefix", [
    ((f"job.pipeline_layout={EXAMPLE_LAYOUT}", "config.vpp=2"),
     "config.vpp: job.pipeline_layout has 8 stages, 1 per device on pp = 8"),
    (("job.pipeline_layout=Et*7|(t*8|)*6t*6L",), "job.pipeline_layout: 0 MTP blocks"),
    (("job.pipeline_layout=Et*7|(t*8|)*6t*6mL|",), "job.pipeline_layout: 9 stages do not"),
    (("job.pipeline_layout=Et*7|(t*8|)*6t*6mL", "job.pipeline_last_stage_layers=5"),
     "job.pipeline_last_stage_layers: differs from job.pipeline_layout"),
    (("job.pipeline_layout=Et*7|(t*8|)*6t*6mL", "job.pipeline_edge_layers=1"),
     "job.pipeline_edge_layers: job.pipeline_layout states the split"),
    (("job.pipeline_layout=",), "job.pipeline_layout: "),
    (("job.pipeline_layout=E(t*61L",), "job.pipeline_layout: unbalanced"),
])
def test_bad_layouts_exit_2_naming_the_field(sets, prefix):
    res = _cli(*sets)
    assert res.exit_code == 2, res.output
    assert f"Error: {prefix}" in res.output


def test_a_layout_without_a_config_says_it_needs_one(tmp_path):
    text = EXAMPLE.read_text()
    cut = text[:text.index("\n[config]")] + text[text.index("\n[space]"):]
    cut = cut.replace("pipeline_first_stage_layers = 7",
                      f'pipeline_layout = "{EXAMPLE_LAYOUT}"')
    cut = cut.replace("pipeline_last_stage_layers = 6\n", "")
    path = tmp_path / "no-config.toml"
    path.write_text(cut)
    res = CliRunner().invoke(main, ["evaluate", str(path)])
    assert res.exit_code == 2
    assert "Error: job.pipeline_layout: a layout is laid out for one pipeline degree" in res.output
