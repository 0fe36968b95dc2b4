"""Hit rates derived from a Zipf exponent of a table's row accesses (trainscape.dlrm.access):
the generalized harmonic number against a plain sum, the closed cases, and the scenario and
CSV fields that feed the kernels' hit rate."""

from __future__ import annotations

import copy

import numpy as np
import pytest

from trainscape import dlrm
from trainscape.dlrm import layout as D
from trainscape.dlrm.access import generalized_harmonic, zipf_cache_hit_rate
from trainscape.spec.errors import ScenarioError

from test_dlrm_constraints import raw_scenario


def plain_sum(n: int, alpha: float) -> float:
    return float(sum(k ** -alpha for k in range(1, n + 1)))


@pytest.mark.parametrize("n", [1, 10, 9_999, 10_000, 10_001, 250_000])
@pytest.mark.parametrize("alpha", [0.0, 0.5, 1.0, 1.3, 2.5])
def test_generalized_harmonic_is_the_sum(n, alpha):
    """Exact below 10,000 terms; past them the midpoint-rule tail stays within 1e-9."""
    assert generalized_harmonic(n, alpha) == pytest.approx(plain_sum(n, alpha), rel=1e-9)


def test_uniform_access_hits_the_cached_share():
    """alpha = 0: every row as likely as any other, so a cache of C of N rows hits C / N
    (floor of a fractional row count: 0.2 x 1,234 = 246.8 rows -> 246)."""
    assert zipf_cache_hit_rate(1000, 200, 0.0) == pytest.approx(0.2, rel=1e-15)
    assert zipf_cache_hit_rate(1234, 0.2 * 1234, 0.0) == pytest.approx(246 / 1234, rel=1e-15)
    assert zipf_cache_hit_rate(5, 10, 1.0) == 1.0  # the whole table cached
    assert zipf_cache_hit_rate(3, 0.6, 1.0) == 0.0  # not one row fits


def test_zipf_one_by_hand():
    """alpha = 1, 1,000 rows, 100 cached: H(100) / H(1000) = 5.1873775 / 7.4854709 = 0.6929928."""
    got = zipf_cache_hit_rate(1000, 100, 1.0)
    assert got == pytest.approx(plain_sum(100, 1.0) / plain_sum(1000, 1.0), rel=1e-12)
    assert got == pytest.approx(0.6929928, abs=1e-7)


def test_more_skew_more_hits_and_large_tables():
    """The hit rate of a 20 % cache rises with the skew; on 4e9 rows (tail by the integral)
    it matches the same ratio computed with a much longer exact head (the first 2e6 terms)."""
    rates = [zipf_cache_hit_rate(4e7, 8e6, a) for a in (0.0, 0.6, 0.9, 1.05, 1.5)]
    assert rates[0] == pytest.approx(0.2) and all(b > a for a, b in zip(rates, rates[1:]))
    n, c, a = 4e9, 8e8, 1.05
    k = 2_000_000
    head = np.sum(np.arange(k, 0, -1, dtype=np.float64) ** -a)

    def tail(m):
        return ((m + 0.5) ** (1 - a) - (k + 0.5) ** (1 - a)) / (1 - a)

    assert zipf_cache_hit_rate(n, c, a) == pytest.approx((head + tail(c)) / (head + tail(n)),
                                                         rel=1e-9)


def _load(raw):
    return dlrm.load(raw)


def test_scenario_fields_set_the_packed_hit_rates():
    """The job's zipf_alpha applies to every table without its own hit_rate or zipf_alpha; a
    table's hit_rate wins; a table's zipf_alpha overrides the job's; without any, the job's
    uvm_hit_rate. The cache holds job.uvm_cache_fraction (default 0.2) of each table's rows."""
    raw = raw_scenario(3)
    raw["job"]["zipf_alpha"] = 1.1
    raw["model"]["tables"][0]["hit_rate"] = 0.5
    raw["model"]["tables"][1]["zipf_alpha"] = 0.0
    sc = _load(raw)
    hit, rows = sc.tables[D.TAB_HIT_RATE], sc.tables[D.TAB_ROWS]
    assert hit[0] == 0.5
    assert hit[1] == pytest.approx(np.floor(0.2 * rows[1]) / rows[1], rel=1e-12)
    for t in range(2, len(hit)):
        assert hit[t] == pytest.approx(zipf_cache_hit_rate(rows[t], 0.2 * rows[t], 1.1),
                                       rel=1e-15)
    plain = _load(raw_scenario(3)).tables[D.TAB_HIT_RATE]
    assert np.all(plain == 0.9)


def test_csv_column_and_bad_values(tmp_path):
    raw = raw_scenario(3)
    csv = tmp_path / "t.csv"
    csv.write_text("table,rows,dim,pooling,zipf_alpha\nt0,100000,64,4,1.2\nt1,5000,32,2,\n")
    raw["model"].pop("tables")
    raw["model"]["tables_csv"] = str(csv)
    sc = dlrm.load(raw)
    assert sc.tables[D.TAB_HIT_RATE, 0] == pytest.approx(
        zipf_cache_hit_rate(100000, 20000, 1.2), rel=1e-15)
    assert sc.tables[D.TAB_HIT_RATE, 1] == 0.9
    bad = copy.deepcopy(raw_scenario(3))
    bad["model"]["tables"][0].update(hit_rate=0.5, zipf_alpha=1.0)
    with pytest.raises(ScenarioError, match=r"zipf_alpha: give hit_rate or zipf_alpha"):
        dlrm.load(bad)
    bad = copy.deepcopy(raw_scenario(3))
    bad["job"]["zipf_alpha"] = 11.0
    with pytest.raises(ScenarioError, match=r"job\.zipf_alpha"):
        dlrm.load(bad)
