"""Resampling (Domingo-Ferrer & Mateo-Sanz 1999): invariants and unbiasedness."""

from __future__ import annotations

import numpy as np
import pytest

from tablesafe._errors import ParameterError
from tablesafe.mechanisms import binomial_resample, heer_bootstrap, quality_interval

TABLE = np.array([[15, 1, 3, 1], [20, 10, 10, 15], [3, 10, 0, 2], [12, 14, 7, 2]])


def meets(xp, x, s):
    n = x.sum()
    nz = x > 0
    return np.all(np.abs(xp[nz] - x[nz]) < s * np.sqrt(x[nz] * (1 - x[nz] / n))) and np.all(
        xp[~nz] == 0
    )


@pytest.mark.parametrize("s", [1.5, 2.0, 3.0])
def test_bootstrap_meets_the_quality_condition(s):
    rng = np.random.default_rng(1)
    for m in (1, 3):
        res = heer_bootstrap(TABLE, s, m, rng=rng)
        assert meets(res.table, TABLE, s)
        assert res.draws >= m
        if m == 1:
            assert res.table.sum() == TABLE.sum()
        assert res.table[2, 2] == 0


@pytest.mark.parametrize("s", [1.5, 2.0, 3.0])
def test_binomial_preserves_the_total_and_quality(s):
    rng = np.random.default_rng(2)
    for _ in range(50):
        res = binomial_resample(TABLE, s, rng=rng)
        assert res.table.sum() == TABLE.sum()
        assert meets(res.table, TABLE, s)
        assert res.table[2, 2] == 0


def test_binomial_preserves_row_margins():
    rng = np.random.default_rng(3)
    for _ in range(50):
        res = binomial_resample(TABLE, 2.0, preserve_axis=0, rng=rng)
        np.testing.assert_array_equal(res.table.sum(axis=1), TABLE.sum(axis=1))
        assert (res.table >= 0).all() and res.table[2, 2] == 0


def test_both_methods_are_unbiased():
    rng = np.random.default_rng(4)
    big = np.array([[40, 25, 10], [30, 60, 35]])
    boot = np.mean([heer_bootstrap(big, 3.0, rng=rng).table for _ in range(3000)], axis=0)
    binom = np.mean([binomial_resample(big, 3.0, rng=rng).table for _ in range(3000)], axis=0)
    # Standard error of a mean of 3000 draws of a cell of about 40: about 0.12.
    np.testing.assert_allclose(boot, big, atol=0.5)
    np.testing.assert_allclose(binom, big, atol=0.5)


def test_quality_interval():
    low, high = quality_interval(np.array([0, 1, 10]), 100, 2.0)
    assert low.tolist()[0] == high.tolist()[0] == 0
    # x = 10, n = 100: sigma = 3, |x' - 10| < 6 -> 5..15
    assert (low[2], high[2]) == (5, 15)


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda: heer_bootstrap([[1, -2], [3, 4]]), "non-negative"),
        (lambda: heer_bootstrap([[1.5, 2], [3, 4]]), "whole numbers"),
        (lambda: heer_bootstrap(TABLE, s=0), "S must be"),
        (lambda: heer_bootstrap(TABLE, m=2), "odd"),
        (lambda: binomial_resample(TABLE, s=-1), "S must be"),
        (lambda: binomial_resample(TABLE, preserve_axis=5), "preserve_axis"),
    ],
)
def test_bad_input(call, message):
    with pytest.raises(ParameterError, match=message):
        call()
