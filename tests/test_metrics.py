"""Risk and utility measures against hand computations."""

from __future__ import annotations

import math

import pytest

from tablesafe._errors import ParameterError
from tablesafe.mechanisms import dp_geometric, drop_add_q
from tablesafe.metrics import (
    chi_square_independence,
    ci_overlap,
    entropy_risk,
    exact_disclosure_probability,
    hellinger_distance,
    hellinger_utility,
    mean_absolute_deviation,
    modified_hellinger_distance,
    percent_perturbed,
    relative_absolute_difference,
)


def rm_by_hand(a, b):
    """The formula of seed 000 written out term by term, for small vectors."""
    n = sum(a)
    if sum(b) != n:
        m = sum(b)
        a, b = [x * m for x in a], [x * n for x in b]
        n = sum(a)
    ha = -sum(x / n * math.log(x / n) for x in a if x > 0)
    mins = [min(x, y) for x, y in zip(a, b, strict=True)]
    rest = n - sum(mins)
    h = 0.0
    for x, y, m in zip(a, b, mins, strict=True):
        if m > 0:
            h -= m / n * math.log(m / y)
        if x - m > 0:
            h -= (x - m) / n * math.log((x - m) / rest)
        if y - m > 0:
            h -= (y - m) / n * math.log((y - m) / y)
    return 1 - h / ha


def test_percent_perturbed():
    assert percent_perturbed([1, 2, 3], [1, 3, 3]) == pytest.approx(100 / 3)


def test_rm_hand_computed_values():
    # a = (1, 3), b = (3, 1): H(a|b) = 0.25 ln 3 + 0.5 ln(3/2); H(a) = 0.5623.
    h = 0.25 * math.log(3) + 0.5 * math.log(3 / 2)
    ha = -(0.25 * math.log(0.25) + 0.75 * math.log(0.75))
    assert entropy_risk([1, 3], [3, 1]) == pytest.approx(1 - h / ha)
    assert entropy_risk([2, 2], [2, 2]) == pytest.approx(1.0)


@pytest.mark.parametrize(
    ("a", "b"),
    [
        ([0, 4, 5, 1], [1, 3, 5, 1]),
        ([1, 3], [2, 4]),
        ([5, 0, 0, 7], [4, 1, 0, 9]),
        ([3, 3, 3], [0, 9, 0]),
    ],
    ids=["zeros", "unequal-totals", "zeros-unequal", "all-moved"],
)
def test_rm_matches_the_formula(a, b):
    assert entropy_risk(a, b) == pytest.approx(rm_by_hand(a, b))


def test_hellinger_measures():
    assert hellinger_distance([4, 9], [9, 4]) == pytest.approx(1.0)
    assert modified_hellinger_distance([4, -1], [1, 1]) == pytest.approx(math.sqrt(2.5))
    assert hellinger_utility([4, 9], [4, 9]) == 1.0
    assert hellinger_utility([4, 9], [9, 4]) == pytest.approx(1 - 1 / math.sqrt(13))
    with pytest.raises(ParameterError):
        hellinger_distance([-1, 2], [1, 1])


def test_deviations():
    assert mean_absolute_deviation([1, 2, 3], [2, 2, 1]) == pytest.approx(1.0)
    assert relative_absolute_difference([10, 10], [11, 8]) == pytest.approx(15.0)


def test_chi_square():
    stat, p = chi_square_independence([[10, 20], [20, 10]])
    assert stat == pytest.approx(60 * (10 * 10 - 20 * 20) ** 2 / (30 * 30 * 30 * 30))
    assert 0 < p < 0.05
    with pytest.raises(ParameterError):
        chi_square_independence([1, 2, 3])


def test_ci_overlap():
    assert ci_overlap([0], [10], [5], [25]).tolist() == [0.375]


def test_exact_disclosure_probability():
    # Without perturbation a published 1 is a true 1.
    from tablesafe.ptable._ptable import PTable

    none = PTable.from_rows("none", [([0], [1.0])])
    assert exact_disclosure_probability(none, 1) == 1.0
    # Cell-wise Q with q = 1 at count 1: a published 1 came from 0? No (zeros stay);
    # from 1 (1/3) or 2 (1/3), with a uniform prior.
    q = drop_add_q()
    assert exact_disclosure_probability(q, 1) == pytest.approx(0.5)
    assert exact_disclosure_probability(dp_geometric(2), 1) < 0.9
