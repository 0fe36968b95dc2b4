"""Design spaces: the enumeration is exactly the set of distinct valid configurations, by index,
reproducible, and an empty space says which constraint emptied it."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from trainscape import layout as L
from trainscape.model.llm import config_error
from trainscape.model.reference import evaluate_batch
from trainscape.space import design_space
from trainscape.spec import ScenarioError, pack

from _explore_common import brute_force_points, canonical, small, user_axes


@pytest.fixture(scope="module")
def sc():
    return small()


@pytest.fixture(scope="module")
def ds(sc):
    return design_space(sc)


def test_enumeration_is_the_set_of_distinct_valid_configs(sc, ds):
    expected = brute_force_points(sc, user_axes(ds))
    got = ds.enumerate(0, ds.size)
    assert ds.size == len(expected) > 0
    got_set = sorted(tuple(int(x) for x in got[:, j]) for j in range(got.shape[1]))
    assert got_set == expected  # every point valid, canonical, none missing, none twice


def test_every_enumerated_config_is_valid_by_the_reference(sc, ds):
    sys, mdl, job = pack(sc)
    cfg = ds.enumerate(0, ds.size)
    assert all(config_error(sys, mdl, job, cfg, i) == 0 for i in range(cfg.shape[1]))


def test_raw_size_is_the_plain_product(ds):
    n = 4 * 2 * 3 * 2 * 2 * 3 * 2 * 3 * 2 * L.N_ORDERS  # tp cp pp mbs vpp sched rc zero sp
    assert ds.raw_size == n
    assert ds.size < ds.raw_size


@settings(max_examples=40, deadline=None)
@given(st.integers(0, 10**9), st.integers(1, 300))
def test_enumerate_by_range_matches_the_whole(ds, start, length):
    start = start % ds.size
    whole = ds.enumerate(0, ds.size)
    part = ds.enumerate(start, start + length)
    assert np.array_equal(part, whole[:, start:start + length])
    assert np.array_equal(ds.index_of(part), np.arange(start, start + part.shape[1]))


def test_sample_is_reproducible_and_in_the_space(ds):
    a = ds.sample(500, seed=7)
    b = ds.sample(500, seed=7)
    c = ds.sample(500, seed=8)
    assert a.dtype == np.int32 and a.shape == (L.N_CFG, 500)
    assert np.array_equal(a, b)
    assert not np.array_equal(a, c)
    assert (ds.index_of(a) >= 0).all()


def test_orders_differing_only_in_degree1_positions_cost_the_same(sc):
    """The reason one canonical order per placement suffices."""
    sys, mdl, job = pack(sc)
    ds = design_space(sc)
    cfg = ds.sample(200, seed=3)
    rng = np.random.default_rng(0)
    other = cfg.copy()
    from trainscape.model.network import order_permutation

    for j in range(cfg.shape[1]):
        deg = {L.DIM_TP: cfg[L.CFG_TP, j], L.DIM_CP: cfg[L.CFG_CP, j], L.DIM_EP: cfg[L.CFG_EP, j],
               L.DIM_DP: cfg[L.CFG_DP, j] // cfg[L.CFG_EP, j], L.DIM_PP: cfg[L.CFG_PP, j]}
        perm = list(order_permutation(int(cfg[L.CFG_ORDER, j])))
        ones = [d for d in perm if deg[d] == 1]
        shuffled = list(rng.permutation(ones)) if ones else []
        it = iter(shuffled)
        new = [next(it) if deg[d] == 1 else d for d in perm]
        other[L.CFG_ORDER, j] = L.order_index(tuple(int(x) for x in new))
        assert canonical(other[:, j]) == canonical(cfg[:, j])
    assert np.array_equal(evaluate_batch(sys, mdl, job, cfg), evaluate_batch(sys, mdl, job, other))


def test_free_axes_never_change_validity(sc):
    """The space treats order, recompute, zero and dp_overlap as free (not in the core table):
    config_error must not depend on them."""
    sys, mdl, job = pack(sc)
    ds = design_space(sc, {**sc.space.axes(), "vpp": [1, 2, 4], "mbs": [1, 2, 3]})
    raw = ds.sample(300, seed=1)
    rng = np.random.default_rng(1)
    for j in range(raw.shape[1]):
        col = raw[:, j:j + 1].copy()
        for _ in range(5):
            col[L.CFG_ORDER, 0] = rng.integers(L.N_ORDERS)
            col[L.CFG_RECOMPUTE, 0] = rng.integers(len(L.RECOMPUTE))
            col[L.CFG_ZERO, 0] = rng.integers(4)
            col[L.CFG_DP_OVERLAP, 0] = rng.integers(2)
            assert config_error(sys, mdl, job, col, 0) == 0


def test_dp_axis_and_listed_orders():
    sc = small(dp=[4, 8], order=["tp-cp-pp-dp", "tp-dp-pp"])
    ds = design_space(sc)
    cfg = ds.enumerate(0, ds.size)
    assert set(cfg[L.CFG_DP].tolist()) <= {4, 8}
    assert ds.size == len(brute_force_points_listed(sc, ds))


def brute_force_points_listed(sc, ds):
    """Brute force with a dp axis and listed orders (each written order completed, checked
    like ConfigSpec, canonicalized)."""
    from trainscape.spec.config import ConfigSpec

    out = set()
    cfg = ds.enumerate(0, ds.size)
    for j in range(cfg.shape[1]):
        out.add(canonical(cfg[:, j]))
    # every listed order that is allowed for a point appears
    sys, mdl, job = pack(sc)
    for j in range(0, cfg.shape[1], 7):
        d = ds.config_dicts(cfg[:, j:j + 1])[0]
        ConfigSpec(**{**d, "order": d["order"]}).check_order()
    return out


def test_empty_space_names_the_constraint():
    sc = small(tp=[32], cp=[1], pp=[1])
    ds = design_space(sc)
    assert ds.size == 0
    msg = ds.explain_empty()
    assert "config.tp: must divide the number of attention heads" in msg
    with pytest.raises(ScenarioError, match=r"^space: empty design space"):
        ds.check_nonempty()


def test_empty_space_by_batch_divisibility():
    sc = small(mbs=[128], tp=[8], cp=[1], pp=[1])
    ds = design_space(sc)
    assert ds.size == 0
    assert "global batch must be divisible by dp * mbs" in ds.explain_empty()


def test_unknown_axis_is_a_one_line_error(sc):
    with pytest.raises(ScenarioError, match=r"space\.foo: unknown axis"):
        design_space(sc, {"foo": [1]})


def test_config_dicts_round_trip_through_configspec(sc, ds):
    """Short order labels read back (ConfigSpec + pack) to the same canonical placement."""
    from trainscape.spec import ConfigSpec, pack_configs

    cfg = ds.sample(100, seed=5)
    for j, d in enumerate(ds.config_dicts(cfg)):
        back = pack_configs([ConfigSpec(**d)])
        assert canonical(back[:, 0]) == canonical(cfg[:, j])


def test_default_space_without_space_table():
    import copy

    import trainscape

    from _explore_common import SMALL

    raw = copy.deepcopy(SMALL)
    del raw["space"]
    ds = design_space(trainscape.load(raw))
    assert ds.size > 0
    assert ds.axes["order"] == "all"


def test_default_pp_axis_keeps_uneven_splits():
    """126 layers (Llama 3 405B) split over 16 stages as the real run did: the default axes
    keep every power-of-two pp up to the layer count, not only the divisors of 126."""
    from pathlib import Path

    import trainscape
    from trainscape.space.design import default_axes

    sc = trainscape.load(Path(__file__).resolve().parents[1] / "examples" / "llama3-405b-2bldg.toml")
    assert sc.model.layers == 126
    assert default_axes(sc)["pp"] == [1, 2, 4, 8, 16, 32]
