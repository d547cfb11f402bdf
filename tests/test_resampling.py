"""Resampling (Domingo-Ferrer & Mateo-Sanz 1999, seed 001): invariants, unbiasedness, risk, cost."""

from __future__ import annotations

import numpy as np
import pytest
from scipy import stats

from tablesafe._errors import ComputationError, ParameterError
from tablesafe.mechanisms import (
    PAPER_TABLE_1,
    binomial_resample,
    bootstrap_acceptance,
    expected_binomial_draws,
    expected_bootstrap_tables,
    heer_bootstrap,
    optimal_m,
    quality_interval,
    resampling_disclosure_probability,
)

TABLE = np.array([[15, 1, 3, 1], [20, 10, 10, 15], [3, 10, 0, 2], [12, 14, 7, 2]])


def meets(released, x, s):
    n = x.sum()
    nz = x > 0
    sigma = np.sqrt(x[nz] * (1 - x[nz] / n))
    return bool(np.all(np.abs(released[nz] - x[nz]) < s * sigma) and np.all(released[~nz] == 0))


def test_quality_interval_is_the_strict_condition():
    x = np.arange(0, 60)
    for s in (1.5, 2.0, 3.0):
        low, high = quality_interval(x, 100, s)
        for xi, lo, hi in zip(x, low, high, strict=True):
            if xi == 0:
                assert lo == hi == 0
                continue
            bound = s * np.sqrt(xi * (1 - xi / 100))
            allowed = [v for v in range(0, 200) if abs(v - xi) < bound]
            assert (lo, hi) == (min(allowed), max(allowed))
    # x = 10, n = 100, S = 2: sigma = 3, |x' - 10| < 6 -> 5..15.
    low, high = quality_interval(np.array([10]), 100, 2.0)
    assert (low[0], high[0]) == (5, 15)


@pytest.mark.parametrize("s", [1.5, 2.0, 3.0])
@pytest.mark.parametrize("m", [1, 3, 5])
def test_bootstrap_meets_the_quality_condition(s, m):
    rng = np.random.default_rng(1)
    for _ in range(5):
        res = heer_bootstrap(TABLE, s, m, rng=rng)
        assert meets(res.table, TABLE, s)
        assert res.tables_drawn >= m and res.tables_drawn % m == 0
        assert res.table[2, 2] == 0
        if m == 1:
            assert res.table.sum() == TABLE.sum()
        assert res.table.dtype.kind == "i"


def test_bootstrap_unrounded_average():
    res = heer_bootstrap(TABLE, 2.0, 3, round_average=False, rng=2)
    assert res.table.dtype.kind == "f"
    assert np.allclose(res.table * 3, np.round(res.table * 3))
    assert meets(res.table, TABLE, 2.0)


@pytest.mark.parametrize("s", [1.5, 2.0, 3.0])
def test_binomial_preserves_the_total_and_quality(s):
    rng = np.random.default_rng(2)
    for _ in range(50):
        res = binomial_resample(TABLE, s, rng=rng)
        assert res.table.sum() == TABLE.sum()
        assert meets(res.table, TABLE, s)
        assert res.table[2, 2] == 0


@pytest.mark.parametrize("axis", [0, 1])
def test_binomial_preserves_one_dimensions_margins(axis):
    rng = np.random.default_rng(3)
    for _ in range(50):
        res = binomial_resample(TABLE, 2.0, preserve_axis=axis, rng=rng)
        other = 1 - axis
        np.testing.assert_array_equal(res.table.sum(axis=other), TABLE.sum(axis=other))
        assert (res.table >= 0).all() and res.table[2, 2] == 0
        # Each slice meets the condition with its own total.
        for i in range(TABLE.shape[axis]):
            assert meets(np.take(res.table, i, axis), np.take(TABLE, i, axis), 2.0)


def test_binomial_three_way_margins_of_one_dimension():
    rng = np.random.default_rng(4)
    table = rng.poisson(6, (3, 4, 2))
    res = binomial_resample(table, 2.0, preserve_axis=2, rng=rng)
    np.testing.assert_array_equal(res.table.sum(axis=(0, 1)), table.sum(axis=(0, 1)))
    assert (res.table[table == 0] == 0).all()


def test_compensation_restores_the_total_on_many_small_cells():
    # Many small cells: the perturbation stage misses n by a lot, compensation restores it.
    table = np.ones((10, 10), dtype=int) * 3
    res = binomial_resample(table, 3.0, rng=5)
    assert res.table.sum() == 300
    assert res.compensation_units > 0
    assert meets(res.table, table, 3.0)


def test_both_methods_are_unbiased():
    rng = np.random.default_rng(4)
    big = np.array([[40, 25, 10], [30, 60, 35]])
    n = 2000
    boot = np.array([heer_bootstrap(big, 3.0, rng=rng).table for _ in range(n)])
    binom = np.array([binomial_resample(big, 3.0, rng=rng).table for _ in range(n)])
    sd = np.sqrt(big * (1 - big / big.sum()))
    for draws in (boot, binom):
        z = (draws.mean(axis=0) - big) / (sd / np.sqrt(n))
        # Loose: |z| < 4 for every cell (a bias of a tenth of a count would show).
        assert np.all(np.abs(z) < 4)


def test_bootstrap_m1_is_a_truncated_multinomial_cell():
    # The released value of one cell follows Binomial(n, x/n) restricted to the cells'
    # joint condition; for a 2-cell table the condition on one cell is the condition on both.
    table = np.array([30, 70])
    rng = np.random.default_rng(6)
    vals = np.array([heer_bootstrap(table, 1.5, rng=rng).table[0] for _ in range(4000)])
    low, high = quality_interval(np.array([30]), 100, 1.5)
    support = np.arange(low[0], high[0] + 1)
    p = stats.binom.pmf(support, 100, 0.3)
    p /= p.sum()
    observed = np.array([(vals == v).sum() for v in support])
    chi2 = ((observed - 4000 * p) ** 2 / (4000 * p)).sum()
    assert stats.chi2.sf(chi2, len(support) - 1) > 1e-3


def test_exact_disclosure_against_table_1():
    # Uniform prior on the original count 1..200, n = 10,000; docs/resampling.md has all 27.
    for (m, s), paper in PAPER_TABLE_1.items():
        if s != 3.0 and m != 1:
            continue
        ours = [resampling_disclosure_probability(k, s, m) for k in (1, 2, 3)]
        assert ours == pytest.approx(paper, abs=0.0051)


def test_exact_disclosure_m1_closed_form():
    # With a huge S the quality condition never binds: for large n the release is
    # Poisson(x), and P(X=1 | X'=1) = e^-1 / sum_x x e^-x = (1 - e^-1)^2.
    p = resampling_disclosure_probability(1, 50.0, 1, n=100_000, x_max=150)
    assert p == pytest.approx((1 - np.exp(-1)) ** 2, abs=2e-3)


def test_optimal_m_grows_with_the_table_size():
    # Section 4.1: M = 3 near IJ = 50 and M = 5 near IJ = 100 (with S = 1.5).
    rng = np.random.default_rng(0)
    sizes = {ij: rng.integers(20, 200, ij) for ij in (10, 50, 100, 1000)}
    ms = {ij: optimal_m(t, 1.5) for ij, t in sizes.items()}
    assert ms[50] == 3 and ms[100] == 5
    assert ms[10] <= ms[50] <= ms[100] <= ms[1000]


def test_expected_costs():
    table = np.full(20, 50)
    # Bootstrap attempts grow like 1 / acceptance; binomial draws stay near one per cell.
    assert expected_bootstrap_tables(table, 2.0) == pytest.approx(
        1 / bootstrap_acceptance(table, 2.0)
    )
    assert 20 <= expected_binomial_draws(table, 2.0) < 22
    assert expected_bootstrap_tables(table, 2.0) > expected_bootstrap_tables(table[:5], 2.0)


def test_cost_counts_match_expectation():
    table = np.full(30, 40)
    rng = np.random.default_rng(8)
    drawn = [heer_bootstrap(table, 2.0, rng=rng).tables_drawn for _ in range(300)]
    expected = expected_bootstrap_tables(table, 2.0)
    # Geometric number of attempts: mean within 4 standard errors.
    se = np.sqrt(expected * (expected - 1) / 300)
    assert abs(np.mean(drawn) - expected) < 4 * se + 0.05


def test_published_parameters():
    res = heer_bootstrap(TABLE, 2.0, 3, rng=1)
    pub = res.published()
    assert pub["M"] == 3 and pub["S"] == 2.0 and pub["preserved"] == "none"
    assert "tables_drawn" not in pub
    res = binomial_resample(TABLE, 2.0, preserve_axis=0, rng=1)
    assert res.published()["preserved"] == "margins of axis 0"


def test_impossible_condition_gives_up():
    with pytest.raises(ComputationError, match="raise S"):
        heer_bootstrap(np.full(200, 5), 0.05, rng=1, max_tables=50)


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda: heer_bootstrap([[1, -2], [3, 4]]), "non-negative"),
        (lambda: heer_bootstrap([[1.5, 2], [3, 4]]), "whole numbers"),
        (lambda: heer_bootstrap([[0, 0], [0, 0]]), "all zeros"),
        (lambda: heer_bootstrap(TABLE, s=0), "S must be"),
        (lambda: heer_bootstrap(TABLE, s=-1.0), "S must be"),
        (lambda: heer_bootstrap(TABLE, m=2), "odd"),
        (lambda: heer_bootstrap(TABLE, m=0), "odd"),
        (lambda: binomial_resample(TABLE, s=0), "S must be"),
        (lambda: binomial_resample([[np.nan, 1]]), "missing"),
        (lambda: binomial_resample(TABLE, preserve_axis=5), "preserve_axis"),
        (lambda: resampling_disclosure_probability(0, 2.0), "k must be"),
        (lambda: quality_interval([1, 2], 10, 0), "S must be"),
    ],
)
def test_bad_input(call, message):
    with pytest.raises(ParameterError, match=message):
        call()


def test_the_old_name_is_a_deprecated_alias():
    from tablesafe.mechanisms import exact_disclosure_probability

    with pytest.warns(DeprecationWarning, match="resampling_disclosure_probability"):
        old = exact_disclosure_probability(1, 2.0, 1)
    assert old == resampling_disclosure_probability(1, 2.0, 1)
