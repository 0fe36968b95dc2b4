"""Equivalent layouts collapse to one canonical form: the settings a rule of
:mod:`trainscape.space.canonical` collapses change no output of the model (so collapsing loses
nothing), and the top-K lists of the example scenarios hold no two equivalent layouts."""

from __future__ import annotations

import itertools
from pathlib import Path

import numpy as np
import pytest

import trainscape
from trainscape import layout as L
from trainscape.backends import evaluate_blocks
from trainscape.model.llm import config_error
from trainscape.space import design_space
from trainscape.space.canonical import canonical_config
from trainscape.spec import pack

from _explore_common import small

EXAMPLES = sorted(Path(__file__).resolve().parents[1].glob("examples/*.toml"))


def _variants(ds, cfg, blocks):
    """Every valid configuration a canonical one stands for: at pp = 1 each listed schedule
    and vpp, without a data-parallel group each listed ZeRO stage and dp_overlap."""
    sys, mdl, job = blocks
    scheds = [L.SCHEDULES.index(s) for s in ds.axes["schedule"]] + [L.SCHED_GPIPE,
                                                                     L.SCHED_ZB_V]
    vpps = sorted(set(ds.axes["vpp"]) | {1, 2})
    zeros = [0, 1, 2, 3]
    src, var = [], []
    for j in range(cfg.shape[1]):
        c = cfg[:, j]
        pp1 = c[L.CFG_PP] == 1
        single = c[L.CFG_CP] * c[L.CFG_DP] == 1
        if not (pp1 or single):
            continue
        for s, v, z, d in itertools.product(scheds if pp1 else [c[L.CFG_SCHEDULE]],
                                            vpps if pp1 else [c[L.CFG_VPP]],
                                            zeros if single else [c[L.CFG_ZERO]],
                                            (0, 1) if single else [c[L.CFG_DP_OVERLAP]]):
            x = c.copy()
            x[L.CFG_SCHEDULE], x[L.CFG_VPP], x[L.CFG_ZERO], x[L.CFG_DP_OVERLAP] = s, v, z, d
            col = x[:, None]
            if config_error(sys, mdl, job, col, 0) == 0 and not np.array_equal(x, c):
                src.append(j)
                var.append(x)
    return np.array(src, dtype=np.int64), (np.stack(var, axis=1) if var
                                           else np.zeros((L.N_CFG, 0), np.int32))


@pytest.mark.parametrize("path", [*EXAMPLES, "small"], ids=lambda p: Path(str(p)).stem)
def test_collapsed_settings_change_no_output(path):
    """Every configuration a space collapses costs exactly what its canonical form costs, on
    every output column (the reference, so the spec itself is checked)."""
    sc = small() if path == "small" else trainscape.load(path)
    blocks = pack(sc)
    ds = design_space(sc)
    cfg = ds.enumerate(0, ds.size)
    src, var = _variants(ds, cfg, blocks)
    assert var.shape[1] > 0  # each scenario has pp = 1 (and small a cp*dp = 1) rows
    if var.shape[1] > 4000:  # the reference is slow: a fixed spread of them
        pick = np.linspace(0, var.shape[1] - 1, 4000).astype(np.int64)
        src, var = src[pick], var[:, pick]
    a = evaluate_blocks(*blocks, cfg[:, src], backend="python")
    b = evaluate_blocks(*blocks, var, backend="python")
    assert np.array_equal(a, b)
    # and the space finds each variant of listed values under its canonical configuration
    listed = np.isin(var[L.CFG_SCHEDULE], [L.SCHEDULES.index(s) for s in ds.axes["schedule"]])
    listed &= np.isin(var[L.CFG_VPP], ds.axes["vpp"]) & np.isin(var[L.CFG_ZERO], ds.zero)
    listed &= np.isin(var[L.CFG_DP_OVERLAP], ds.dp_overlap)
    assert listed.any()
    assert np.array_equal(ds.index_of(var[:, listed]), src[listed])


def test_dualpipe_stays_apart_at_pp1():
    """DualPipe keeps two parameter copies even without a pipeline: not equivalent to 1F1B, so
    the space keeps both."""
    sc = small(schedule=["1f1b", "dualpipe"], vpp=[1], tp=[8], cp=[1], pp=[1])
    ds = design_space(sc)
    cfg = ds.enumerate(0, ds.size)
    assert set(cfg[L.CFG_SCHEDULE].tolist()) == {L.SCHED_1F1B, L.SCHED_DUALPIPE}
    one = cfg[:, cfg[L.CFG_SCHEDULE] == L.SCHED_1F1B]
    dual = one.copy()
    dual[L.CFG_SCHEDULE] = L.SCHED_DUALPIPE
    a = evaluate_blocks(*pack(sc), one, backend="python")
    b = evaluate_blocks(*pack(sc), dual, backend="python")
    assert (b[L.OUT_MEM_WEIGHTS_GIB] > a[L.OUT_MEM_WEIGHTS_GIB]).all()


def test_single_rows_keep_the_first_listed_zero():
    sc = small(zero=[3, 0, 1], tp=[8], pp=[4], cp=[1])  # 32 GPUs: dp = 1
    ds = design_space(sc)
    cfg = ds.enumerate(0, ds.size)
    assert ds.size > 0 and set(cfg[L.CFG_ZERO].tolist()) == {3}
    assert len(set(cfg[L.CFG_DP_OVERLAP].tolist())) == 1


@pytest.mark.parametrize("backend", ["c", "numba"])
@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.stem)
def test_top_k_of_the_examples_has_no_equivalent_duplicates(path, backend):
    from trainscape.native import sweep as kernel_c
    from trainscape.explore.sweep import run_sweep

    if backend == "c" and not kernel_c.available():
        pytest.skip(f"C sweep kernel not built: {kernel_c.why_not()}")
    sc = trainscape.load(path)
    res = run_sweep(sc, top=200, backend=backend, workers=2)
    for rows in (res.top, res.front):
        assert len(rows) > 0
        canon = canonical_config(rows.cfg, int(res_zero(sc)), 1,
                                 [L.SCHEDULES.index(s) for s in design_space(sc).axes["schedule"]])
        keys = {tuple(canon[:, j].tolist()) for j in range(canon.shape[1])}
        assert len(keys) == len(rows)  # pairwise distinct after canonicalization


def res_zero(sc):
    return design_space(sc).zero[0]
